"""Read the shipped prompt set (classifier/data/prompts.jsonl) into RequestText + label lists."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from contracts.request_text import RequestText, from_messages

DEFAULT_DATASET = Path(__file__).resolve().parent / "data" / "prompts.jsonl"


@dataclass(frozen=True)
class LabelledSet:
    requests: list[RequestText]
    labels: list[str]
    groups: list[str]


def record_request(record: dict) -> RequestText:
    if "messages" in record:
        return from_messages(record["messages"], record.get("response_format"))
    return RequestText(user=record["text"])


def load_split(split: str, path: Path = DEFAULT_DATASET) -> LabelledSet:
    """split: "train", "test" or "all"."""
    requests, labels, groups = [], [], []
    with path.open() as handle:
        for line in handle:
            record = json.loads(line)
            if split != "all" and record["split"] != split:
                continue
            requests.append(record_request(record))
            labels.append(record["label"])
            groups.append(record["group"])
    return LabelledSet(requests, labels, groups)
