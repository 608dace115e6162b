"""Instruction-shaped ChatML examples derived from the corpus documents.

Each builder turns real corpus material into (request, answer) pairs whose answer is taken from the
document itself (docstring -> function, heading -> paragraph, CSV -> JSON/SQL, YAML -> JSON, ...),
so the model learns to answer chat requests on topic. Deterministic (seeded RNG, sorted input).
"""

from __future__ import annotations

import ast
import csv
import io
import json
import random
import re
from collections.abc import Callable, Iterator

import yaml

CHAT_CAP_BYTES = 14 << 20
MAX_PER_BUILDER = 12000


def chatml(request: str, answer: str) -> str:
    return f"<|im_start|>user\n{request}<|im_end|>\n<|im_start|>assistant\n{answer}<|im_end|>\n"


def fenced(lang: str, body: str) -> str:
    return f"```{lang}\n{body.rstrip()}\n```"


def first_sentence(text: str) -> str:
    text = " ".join(text.split())
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    return (match.group(1) if match else text)[:300]


def python_functions(docs: list[dict], rng: random.Random) -> Iterator[tuple[str, str]]:
    ask = [
        "Write a Python function `{sig}` that {what}",
        "Implement `{name}` in Python. It should do this: {doc}",
        "Can you write a Python function called {name}? {doc}",
        "I need a Python helper `{sig}`. {doc}",
        "Python: {doc} Write the function `{name}`.",
    ]
    explain = [
        "What does this Python function do?\n\n{code}",
        "Explain this code briefly:\n\n{code}",
        "Write a docstring summary for this function:\n\n{code}",
    ]
    for doc in docs:
        if not doc["path"].endswith(".py"):
            continue
        try:
            tree = ast.parse(doc["text"])
        except (SyntaxError, ValueError):
            continue
        lines = doc["text"].splitlines()
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("__"):
                continue
            docstring = ast.get_docstring(node)
            if not docstring or node.end_lineno is None or node.end_lineno - node.lineno > 40:
                continue
            source = "\n".join(lines[node.lineno - 1 - len(node.decorator_list):node.end_lineno])
            indent = len(source) - len(source.lstrip(" "))
            source = "\n".join(line[indent:] for line in source.splitlines())
            summary = first_sentence(docstring)
            if len(summary) < 12:
                continue
            sig = f"{node.name}({', '.join(a.arg for a in node.args.args)})"
            what = summary[0].lower() + summary[1:]
            if rng.random() < 0.8:
                request = rng.choice(ask).format(sig=sig, name=node.name, doc=summary, what=what)
                yield request, fenced("python", source)
            else:
                body = "\n".join(line for line in source.splitlines())
                yield rng.choice(explain).format(code=fenced("python", body)), summary


def brace_functions(docs: list[dict], rng: random.Random, suffix: str, lang: str, comment: str,
                    keyword: str) -> Iterator[tuple[str, str]]:
    """Doc-commented top-level functions of brace languages (Go `//`, Rust `///`)."""
    pattern = re.compile(rf"((?:^{re.escape(comment)}[^\n]*\n)+)(^(?:pub )?{keyword} [^\n]*\{{\n(?:.*\n)*?^\}}\n)",
                         re.MULTILINE)
    ask = ["Write a {lang} function: {doc}", "In {lang}, implement `{name}`. {doc}",
           "Show me {lang} code for this: {doc}", "{doc} Write it in {lang}."]
    for doc in docs:
        if not doc["path"].endswith(suffix):
            continue
        for match in pattern.finditer(doc["text"]):
            body = match.group(2)
            if body.count("\n") > 40:
                continue
            comment_text = " ".join(line.lstrip("/ ").strip() for line in match.group(1).splitlines())
            name = re.search(rf"{keyword} (?:\([^)]*\) )?(\w+)", body)
            summary = first_sentence(comment_text)
            if name is None or len(summary) < 12:
                continue
            request = rng.choice(ask).format(lang=lang, name=name.group(1), doc=summary)
            yield request, fenced(lang.lower(), match.group(1) + body)


RST_UNDERLINE = re.compile(r"^([^\n]{4,80})\n([=\-~^*#\"'+])\2{3,}\n\n((?:[^\n]+\n)+)", re.MULTILINE)


def rst_sections(docs: list[dict], rng: random.Random) -> Iterator[tuple[str, str]]:
    ask = ["Explain {topic}.", "What is {topic}?", "Write a short paragraph about {topic}.",
           "Tell me about {topic}.", "Describe {topic} in a few sentences.", "Can you explain {topic} to me?"]
    for doc in docs:
        for match in RST_UNDERLINE.finditer(doc["text"]):
            heading, paragraph = match.group(1).strip(), match.group(3).strip()
            if len(match.group(0).splitlines()[1]) < len(match.group(1)):
                continue  # rst: the underline is at least as long as the heading
            if paragraph.startswith((".. ", ":", "*", "-", "|", "+", "=")) or len(paragraph) < 120:
                continue
            topic = heading.strip("`*:")
            yield rng.choice(ask).format(topic=topic), " ".join(paragraph.split())


def csv_tables(docs: list[dict], rng: random.Random) -> Iterator[tuple[str, str]]:
    for doc in docs:
        if doc["src"] != "pydataset-csv":
            continue
        rows = list(csv.reader(io.StringIO(doc["text"])))
        if len(rows) < 4 or len(rows[0]) > 8:
            continue
        header = [h.strip() or "id" for h in rows[0]]
        body = rows[1:1 + rng.randint(2, 5)]
        if any(len(r) != len(header) for r in body):
            continue
        table = "\n".join(",".join(r) for r in [rows[0]] + body)
        name = re.sub(r"\W+", "_", doc["path"].rsplit("/", 1)[-1].removesuffix(".csv")).lower()
        if rng.random() < 0.6:
            objects = [{h: parse_scalar(v) for h, v in zip(header, r)} for r in body]
            request = rng.choice(["Convert this CSV to JSON:\n\n{t}", "Give me these rows as JSON.\n\n{t}",
                                  "Turn the following table into a JSON array of objects:\n{t}"]).format(t=table)
            yield request, fenced("json", json.dumps(objects, indent=2))
        else:
            columns = ",\n".join(f"  {sql_name(h)} {sql_type(body, i)}" for i, h in enumerate(header))
            values = ",\n".join("  (" + ", ".join(sql_value(v) for v in r) + ")" for r in body)
            sql = f"CREATE TABLE {name} (\n{columns}\n);\n\nINSERT INTO {name} VALUES\n{values};"
            request = rng.choice(["Write SQL to create a table named {n} holding this data:\n\n{t}",
                                  "Generate CREATE TABLE and INSERT statements for this CSV ({n}):\n{t}"]
                                 ).format(n=name, t=table)
            yield request, fenced("sql", sql)


def parse_scalar(value: str) -> object:
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value.strip('"')


def sql_name(header: str) -> str:
    name = re.sub(r"\W+", "_", header.strip('"')).strip("_").lower() or "col"
    return name if not name[0].isdigit() else f"c_{name}"


def sql_type(rows: list[list[str]], index: int) -> str:
    values = [parse_scalar(r[index]) for r in rows]
    if all(isinstance(v, int) for v in values):
        return "INTEGER"
    if all(isinstance(v, (int, float)) for v in values):
        return "REAL"
    return "TEXT"


def sql_value(value: str) -> str:
    parsed = parse_scalar(value)
    if isinstance(parsed, (int, float)):
        return str(parsed)
    return "'" + str(parsed).replace("'", "''") + "'"


def yaml_documents(docs: list[dict], rng: random.Random) -> Iterator[tuple[str, str]]:
    for doc in docs:
        if not doc["path"].endswith((".yml", ".yaml")) or len(doc["text"]) > 1500:
            continue
        try:
            data = yaml.safe_load(doc["text"])
            as_json = json.dumps(data, indent=2, ensure_ascii=False)
        except Exception:  # noqa: BLE001 - arbitrary YAML from packages; skip what does not convert
            continue
        if not isinstance(data, (dict, list)) or not data:
            continue
        if rng.random() < 0.7:
            request = rng.choice(["Convert this YAML to JSON:\n\n{y}", "Show this YAML as JSON.\n\n{y}",
                                  "Rewrite the following config as JSON:\n{y}"]).format(y=fenced("yaml", doc["text"]))
            yield request, fenced("json", as_json)
        else:
            request = rng.choice(["Convert this JSON to YAML:\n\n{j}", "Give me this as YAML:\n{j}"]).format(
                j=fenced("json", as_json))
            yield request, fenced("yaml", yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


def iso_records(docs: list[dict], rng: random.Random) -> Iterator[tuple[str, str]]:
    for doc in docs:
        if doc["src"] != "iso-codes":
            continue
        try:
            data = json.loads(doc["text"])
        except json.JSONDecodeError:
            continue
        standard = next(iter(data))
        for record in data[standard]:
            name = record.get("name") if isinstance(record, dict) else None
            if not name:
                continue
            request = rng.choice(["Give the ISO {s} record for {n} as JSON.", "What is the {s} entry for {n}? Answer in JSON.",
                                  "{n}: show its ISO {s} codes as a JSON object."]).format(s=standard.replace("_", " "), n=name)
            yield request, fenced("json", json.dumps(record, indent=2, ensure_ascii=False))


def prose_continuations(docs: list[dict], rng: random.Random) -> Iterator[tuple[str, str]]:
    for doc in docs:
        if doc["src"] not in ("shakespeare", "fortunes", "jargon", "git-doc", "perl-doc"):
            continue
        paragraphs = [p.strip() for p in doc["text"].split("\n\n") if 80 < len(p.strip()) < 1200]
        for first, second in zip(paragraphs[::2], paragraphs[1::2]):
            if doc["src"] == "fortunes":
                yield rng.choice(["Tell me a fortune.", "Give me a quote.", "Say something wise."]), first
            else:
                request = rng.choice(["Continue this text:\n\n{p}", "What comes next?\n\n{p}",
                                      "Write the next paragraph after this one:\n{p}"]).format(p=first)
                yield request, second


def build_chat_examples(docs_by_domain: dict[str, list[dict]]) -> list[dict]:
    rng = random.Random(1234)
    code, prose, structured = docs_by_domain["code"], docs_by_domain["prose"], docs_by_domain["structured"]
    builders: list[tuple[str, Callable[[], Iterator[tuple[str, str]]]]] = [
        ("chat-python", lambda: python_functions(code, rng)),
        ("chat-go", lambda: brace_functions(code, rng, ".go", "Go", "//", "func")),
        ("chat-rust", lambda: brace_functions(code, rng, ".rs", "Rust", "///", "fn")),
        ("chat-rst", lambda: rst_sections(prose, rng)),
        ("chat-csv", lambda: csv_tables(structured, rng)),
        ("chat-yaml", lambda: yaml_documents(structured, rng)),
        ("chat-iso", lambda: iso_records(structured, rng)),
        ("chat-prose", lambda: prose_continuations(prose, rng)),
    ]
    per_builder: dict[str, list[dict]] = {}
    for name, make in builders:
        rows = []
        for index, (request, answer) in enumerate(make()):
            rows.append({"src": name, "path": str(index), "text": chatml(request, answer)})
        rng.shuffle(rows)
        per_builder[name] = rows[:MAX_PER_BUILDER if name != "chat-prose" else MAX_PER_BUILDER // 3]
        print(f"chat       {name:20s} {len(per_builder[name]):6d} of {len(rows)}", flush=True)
    merged = [row for rows in per_builder.values() for row in rows]
    rng.shuffle(merged)
    out, used = [], 0
    for row in merged:
        used += len(row["text"].encode())
        if used > CHAT_CAP_BYTES:
            break
        out.append(row)
    return out
