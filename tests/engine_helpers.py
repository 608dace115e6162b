"""Shared helpers for engine tests: run an engine to N tokens, prompts, TV-distance bounds."""

from __future__ import annotations

import math
from collections import Counter
from typing import Sequence

from contracts.engine import CancelToken
from contracts.sampling import SamplingParams

PROMPTS = [
    "def fibonacci(n):\n    ", "The history of the city begins", '{"name": "switchyard", "version": ',
    "SELECT id, name FROM users WHERE", "Once upon a time there was a", "import numpy as np\nx = ",
    "Dear Sir or Madam,\n\nI am writing", "- name: install nginx\n  apt:", "id,name,price\n1,apple,0.5\n",
    "fn main() {\n    let", "The quick brown fox", "<config>\n  <server port=", "# Summary\n\nThis report",
    "for i in range(10):", "Question: what is the capital of France?\nAnswer:", "class Stack:\n    def",
    "In 1905 Einstein published", "key: value\nlist:\n  - a\n  -", "<?xml version=\"1.0\"?>", "return x + y;",
    "It was a dark and stormy night", "CREATE TABLE orders (",
]


def encode(bundle, text: str) -> list[int]:
    return bundle.tokenizer.encode(text, add_special_tokens=False)


def run_engine(engine, prompt_ids: Sequence[int], n: int, params: SamplingParams, **kwargs):
    """First n emitted tokens plus the per-step results."""
    cancel = CancelToken()
    tokens: list[int] = []
    steps = []
    gen = engine.generate(list(prompt_ids), params, cancel, **kwargs)
    for step in gen:
        tokens += step.tokens
        steps.append(step)
        if len(tokens) >= n:
            break
    gen.close()
    return tokens[:n], steps


def tv_distance(samples: Counter, exact: dict, n: int) -> float:
    keys = set(samples) | set(exact)
    return 0.5 * sum(abs(samples.get(k, 0) / n - exact.get(k, 0.0)) for k in keys)


def tv_bound(support: int, n: int, delta: float = 1e-6) -> float:
    """P(TV > eps) <= 2^m exp(-n eps^2 / 2) for an m-outcome empirical distribution (L1/2 bound)."""
    return math.sqrt(2.0 * (support * math.log(2.0) + math.log(1.0 / delta)) / n)
