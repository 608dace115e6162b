"""Build the real-prompt set: `python -m classifier.build_real_dataset [--cache DIR] [--out FILE]`.

Downloads the pinned packages of `classifier.dataset.real_sources` into a cache outside the
repository (once), harvests their prompts, labels them by the documented rules and writes
classifier/data/real_prompts.jsonl (one record per prompt, with `source`, `group`, `label_rule`)
plus real_manifest.json (name, version, sha256, licence of every package; counts per source).
Deterministic given the same package versions.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

from classifier.build_dataset import DATA_DIR, DEFAULT_CACHE
from classifier.dataset.real_sources import build
from classifier.dataset.sources import write_manifest

REAL_DATASET = DATA_DIR / "real_prompts.jsonl"


def summary(records: list[dict]) -> dict:
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for record in records:
        counts[record["source"]][record["label"]] += 1
    return {"total": len(records), "by_source": {name: dict(sorted(c.items())) for name, c in sorted(counts.items())}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cache", type=Path, default=DEFAULT_CACHE, help="download/unpack directory (outside the repo)"
    )
    parser.add_argument("--out", type=Path, default=REAL_DATASET)
    args = parser.parse_args(argv)
    records, fetched = build(args.cache)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    stats = summary(records)
    write_manifest(fetched, args.out.with_name("real_manifest.json"), {"dataset": stats})
    print(json.dumps(stats, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
