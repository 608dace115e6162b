"""A small deterministic corpus for the training smoke runs: this interpreter's standard-library
sources (code), their docstrings (prose), generated JSON records (structured) and docstring
question/answer chats, each domain with a held-out file, in the layout training/build_corpus.py writes."""

from __future__ import annotations

import ast
import json
import random
import sysconfig
from pathlib import Path

HELDOUT_EVERY = 50


def chatml(request: str, answer: str) -> str:
    return f"<|im_start|>user\n{request}<|im_end|>\n<|im_start|>assistant\n{answer}<|im_end|>\n"


def write_corpus(out: Path, code_mb: float = 3.0, records: int = 3000) -> dict[str, int]:
    """<domain>.jsonl and <domain>.heldout.jsonl in `out`; returns the training documents per domain."""
    out.mkdir(parents=True, exist_ok=True)
    docs: dict[str, list[str]] = {"code": [], "prose": [], "structured": [], "chat": []}
    used = 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        if used > code_mb * (1 << 20):
            break
        text = path.read_text(errors="replace")
        used += len(text)
        docs["code"].append(text)
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Module)):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 80:
                    docs["prose"].append(doc)
                    if isinstance(node, ast.FunctionDef):
                        docs["chat"].append(chatml(f"What does `{node.name}` do?", doc.split("\n\n")[0]))
    rng = random.Random(0)
    for i in range(records):
        record = {"id": i, "name": rng.choice(["apple", "pear", "plum", "fig"]) + str(rng.randint(0, 99)),
                  "price": round(rng.random() * 10, 2), "tags": rng.sample(["a", "b", "c", "d", "e"], 2)}
        docs["structured"].append(json.dumps(record, indent=1))
    counts = {}
    for domain, texts in docs.items():
        train = [t for i, t in enumerate(texts) if i % HELDOUT_EVERY]
        for name, rows in ((domain, train), (f"{domain}.heldout", texts[::HELDOUT_EVERY])):
            with (out / f"{name}.jsonl").open("w") as handle:
                handle.writelines(json.dumps({"text": t}) + "\n" for t in rows)
        counts[domain] = len(train)
    return counts


if __name__ == "__main__":
    import sys

    print(write_corpus(Path(sys.argv[1])))
