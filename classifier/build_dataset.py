"""Build the labelled prompt set: `python -m classifier.build_dataset [--cache DIR] [--out FILE]`.

Downloads the sources of shared DATA.md into a cache outside the repository (once), harvests
material from them, fills the prompt templates, adds real third-party prompts (VerilogEval task
descriptions; bigcode-eval's few-shot gsm8k, CoNaLa and Concode questions) and the hand-written
prompts, and writes classifier/data/prompts.jsonl plus manifest.json.

The held-out split is grouped: all fills of one template that share its ask phrasing (and both
descriptions of one Verilog task) land on the same side, so test prompts are phrased in ways the
training set never saw, even where the same kind of request is in both.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import platform
import random
from pathlib import Path

from classifier.dataset.common import Template, take_phrasing_key
from classifier.dataset import handwritten, templates_code, templates_prose, templates_structured
from classifier.dataset.corpus import harvest
from classifier.dataset.sources import fetch_all, write_manifest

DATA_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_CACHE = Path("/tmp/switchyard-classifier-sources")
SEED = 20261121
TEST_FOLDS = 5  # one fold of five is held out: ~20 %


class TemplateInsertError(ValueError):
    """A template cannot be added to an existing prompt set without a full rebuild."""


def all_templates() -> list[Template]:
    """Every template in the order a full build fills them."""
    return [t for module in (templates_code, templates_prose, templates_structured) for t in module.TEMPLATES]


def template_fills(template: Template, corpus, seed: int = SEED) -> list[tuple[str, dict, str, str]]:
    """(label, prompt, source, group) of each fill; one rng per template, so templates are independent."""
    rng = random.Random(f"{seed}:{template.id}")
    take_phrasing_key()
    fills = []
    for _ in range(template.count):
        prompt = template.make(rng, corpus)
        fills.append((template.label, prompt, "template:" + template.id, f"{template.id}#{take_phrasing_key()}"))
    return fills


def insert_templates(records: list[dict], ids: list[str], seed: int = SEED) -> list[dict]:
    """`records` with the fills of the named templates inserted where a full build puts them.

    For templates that use no corpus material (they are called with corpus=None): their records
    are exactly those a full build writes, so they can be added while the Debian archive serves
    other package versions than the set was harvested from (a full rebuild would change every
    corpus-based record). Raises TemplateInsertError for an unknown or already present template,
    or one that needs the corpus.
    """
    order = [t.id for t in all_templates()]
    present = {r["source"] for r in records}
    out = list(records)
    for template_id in ids:
        if template_id not in order:
            raise TemplateInsertError(f"unknown template {template_id!r}")
        if "template:" + template_id in present:
            raise TemplateInsertError(f"template {template_id!r} is already in the set")
        template = all_templates()[order.index(template_id)]
        try:
            fills = template_fills(template, None, seed)
        except (AttributeError, TypeError) as exc:  # it reached for corpus material
            raise TemplateInsertError(f"template {template_id!r} needs the corpus: rebuild the whole set") from exc
        seen = {json.dumps({k: v for k, v in r.items() if k not in _META}, sort_keys=True, ensure_ascii=False) for r in out}
        new = []
        for label, prompt, source, group in fills:
            key = json.dumps(prompt, sort_keys=True, ensure_ascii=False)
            if key not in seen:
                seen.add(key)
                new.append({**prompt, "label": label, "source": source, "group": group})
        assign_split(new)
        # after the last record of the nearest earlier template that is present (else first)
        earlier = {"template:" + t for t in order[: order.index(template_id)]}
        at = max((i + 1 for i, r in enumerate(out) if r["source"] in earlier), default=0)
        out[at:at] = new
        present.add("template:" + template_id)
    return out


_META = ("label", "source", "group", "split")


def generate(corpus, seed: int = SEED) -> list[dict]:
    records: list[dict] = []
    seen: set[str] = set()

    def add(label: str, prompt: dict, source: str, group: str) -> None:
        key = json.dumps(prompt, sort_keys=True, ensure_ascii=False)
        if key in seen:
            return
        seen.add(key)
        records.append({**prompt, "label": label, "source": source, "group": group})

    for template in all_templates():
        for label, prompt, source, group in template_fills(template, corpus, seed):
            add(label, prompt, source, group)
    rng = random.Random(f"{seed}:verilog")
    for group, prompt in templates_code.verilog_prompts(rng, corpus):
        add("code", prompt, "nvidia-bigcode-eval:VerilogDescription", group)
    for label, group, prompt in templates_code.few_shot_prompts(corpus):
        add(label, prompt, "nvidia-bigcode-eval:few_shot", group)
    for index, (label, text) in enumerate(handwritten.handwritten_prompts()):
        add(label, {"text": text}, "handwritten", f"hand:{index}")
    return records


def assign_split(records: list[dict]) -> None:
    """Whole groups go to test when a hash of the group name falls in one bucket of TEST_FOLDS.

    Hashing (rather than a shuffled K-fold) keeps every existing group on its side when prompts
    are added, so the held-out set only grows; with ~700 small groups per-class shares stay near 20 %.
    """
    for record in records:
        digest = hashlib.sha256(f"{SEED}:{record['group']}".encode()).digest()
        record["split"] = "test" if int.from_bytes(digest[:8], "big") % TEST_FOLDS == 0 else "train"


def summary(records: list[dict]) -> dict:
    counts = collections.Counter((r["split"], r["label"]) for r in records)
    return {
        "total": len(records),
        "by_split_and_label": {f"{split}/{label}": n for (split, label), n in sorted(counts.items())},
        "by_source_kind": dict(collections.Counter(r["source"].split(":")[0] for r in records)),
        "multi_turn": sum("messages" in r for r in records),
        "groups": len({r["group"] for r in records}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="download/unpack directory (outside the repo)")
    parser.add_argument("--out", type=Path, default=DATA_DIR / "prompts.jsonl")
    parser.add_argument("--add-templates", nargs="+", metavar="ID",
                        help="insert these corpus-free templates into --out without a full rebuild")  # fmt: skip
    args = parser.parse_args(argv)
    if args.add_templates:
        records = [json.loads(line) for line in args.out.open(encoding="utf-8")]
        records = insert_templates(records, args.add_templates)
        args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        manifest_path = args.out.parent / "manifest.json"
        if manifest_path.exists():  # the sources are unchanged; only the set's counts move
            manifest = json.loads(manifest_path.read_text())
            manifest["dataset"] = summary(records)
            manifest_path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
        print(json.dumps(summary(records), indent=2))
        return 0
    fetched = fetch_all(args.cache)
    corpus = harvest(fetched, seed=SEED)
    records = generate(corpus)
    assign_split(records)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    stats = summary(records)
    stdlib = {"name": "python-stdlib", "version": platform.python_version(), "licence": "PSF-2.0",
              "note": "functions harvested from the running interpreter's stdlib (its version shapes the set)"}  # fmt: skip
    write_manifest(fetched, args.out.parent / "manifest.json", {"interpreter": stdlib, "dataset": stats, "seed": SEED})
    print(json.dumps(stats, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
