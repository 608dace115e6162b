"""Read the shipped prompt set (classifier/data/prompts.jsonl) into RequestText + label lists."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from contracts.errors import InvalidRequestError
from contracts.names import CLASSES as LABELS
from contracts.request_text import RequestText, from_record

DEFAULT_DATASET = Path(__file__).resolve().parent / "data" / "prompts.jsonl"
REAL_DATASET = Path(__file__).resolve().parent / "data" / "real_prompts.jsonl"


@dataclass(frozen=True)
class LabelledSet:
    requests: list[RequestText]
    labels: list[str]
    groups: list[str]
    sources: list[str] = field(default_factory=list)

    def subset(self, keep: list[bool]) -> "LabelledSet":
        pick = [i for i, k in enumerate(keep) if k]
        sources = [self.sources[i] for i in pick] if self.sources else []
        return LabelledSet([self.requests[i] for i in pick], [self.labels[i] for i in pick],
                           [self.groups[i] for i in pick], sources)  # fmt: skip

    def __add__(self, other: "LabelledSet") -> "LabelledSet":
        return LabelledSet(self.requests + other.requests, self.labels + other.labels,
                           self.groups + other.groups, self.sources + other.sources)  # fmt: skip


def load_split(split: str, path: Path = DEFAULT_DATASET) -> LabelledSet:
    """split: "train", "test" or "all" (records without a `split` field belong to "all" only)."""
    requests, labels, groups, sources = [], [], [], []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            if split != "all" and record.get("split") != split:
                continue
            requests.append(from_record(record))
            labels.append(record["label"])
            groups.append(record.get("group", ""))
            sources.append(record.get("source", ""))
    return LabelledSet(requests, labels, groups, sources)


def read_labelled_jsonl(path: Path) -> LabelledSet:
    """Any user's labelled JSONL: one {"text" | "messages", "label"} object per line.

    Raises InvalidRequestError naming the line for anything that is not such an object, so a
    user measuring the classifier on their own traffic learns which line to fix.
    """
    requests, labels = [], []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidRequestError(f"line {number}: not valid JSON: {exc.msg}") from exc
            if not isinstance(record, dict) or record.get("label") not in LABELS:
                raise InvalidRequestError(f"line {number}: expected an object with `label` in {list(LABELS)}")
            if not isinstance(record.get("text"), str) and not isinstance(record.get("messages"), list):
                raise InvalidRequestError(f"line {number}: expected a `text` string or a `messages` list")
            requests.append(from_record(record))
            labels.append(record["label"])
    if not labels:
        raise InvalidRequestError(f"{path}: no labelled lines")
    return LabelledSet(requests, labels, [""] * len(labels), [""] * len(labels))
