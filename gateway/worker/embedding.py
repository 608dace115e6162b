"""What the worker thread runs for one embedding request: each input's vector in turn (built by gateway/http).

A batch of documents (an indexer sends tens to thousands) shares the worker with the streams beside it: one
input, or one piece of a long one, per round, as a long prompt's prefill does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from contracts.engine import Backend, Pause


@dataclass(frozen=True)
class Embedded:
    """One input's embedding (the mean hidden state, not normalised) and its token count."""

    index: int
    vector: np.ndarray
    tokens: int


def embed_inputs(backend: Backend, inputs: Sequence[Sequence[int]]) -> Iterator[Embedded | Pause]:
    """Every input's token ids (non-empty, checked against the context by the caller) embedded, in order."""
    for index, ids in enumerate(inputs):
        vector = yield from backend.embed(ids)
        # the forward just ran in this round: a prefill's work, which the scheduler keeps out of the decode
        # rounds it measures the streams' per-token latency on; the vector goes out next round
        yield Pause(len(ids), len(ids))
        yield Embedded(index, vector, len(ids))
