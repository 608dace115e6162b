"""Texts' embeddings from the target itself: the mean of each text's final-norm hidden states over its tokens.

The one model is generative; clients that index documents (RAG in chat UIs, coding agents' codebase search,
LangChain / LlamaIndex pointed at one base URL) ask it for embeddings as they ask Ollama or llama.cpp for a
generative model's. Mean pooling is what reads best from a model not trained to embed (its last token only
predicts the next one). Nothing is cached (the prefix cache holds chat prompts, which embeddings never are).

On a GPU short texts share one forward: right-padded to the longest of them, which changes none of their rows
(attention and the GatedDeltaNet recurrence are causal; the padding rows come after and are left out of the
mean). A forward of a few rows there costs about what one of many rows does (reading the weights, launching the
kernels), so a batch of texts costs about one text's forward. A text longer than a batch's budget, and every
text on the CPU, runs alone through the one prefill, in its pieces.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence

import mlx.core as mx
import numpy as np

from contracts.engine import Pause

from .bundle import ModelBundle
from .prefill import PREFILL_CHUNK, prefill_stepwise

# padded rows (texts x longest) one shared forward holds at most; None: PREFILL_CHUNK on a GPU (Metal, CUDA),
# where a forward of a few rows is bound by reading the weights and a batch costs about one text's forward
# (H200: 6.6-9.5x the texts per second, bench.embeddings_throughput), and 1 on the CPU, where a forward costs
# its rows and the padding is pure loss (0.81x for queries, 1.15x for passages on this 2-core box)
BATCH_ROWS: int | None = None
PAD = 0   # any id: padding rows come after a text's own and are not read


def shared_rows() -> int:
    """Padded rows one shared forward may hold on this device (1: every text alone)."""
    if BATCH_ROWS is not None:
        return BATCH_ROWS
    return PREFILL_CHUNK if mx.default_device().type == mx.gpu else 1


def mean_hidden(bundle: ModelBundle, ids: Sequence[int]) -> Generator[Pause, None, np.ndarray]:
    """One text's float32 mean final hidden state (not normalised: OpenAI's and Ollama's /api/embed return
    unit vectors, Ollama's older /api/embeddings the mean as it is), through the one prefill on a fresh cache,
    pausing between its pieces as a long prompt's prefill does."""
    if not ids:
        raise ValueError("nothing to embed")
    out, _, _ = yield from prefill_stepwise(bundle, bundle.make_cache(), ids)
    pooled = out.hidden.astype(mx.float32).mean(axis=0)
    mx.eval(pooled)
    return np.array(pooled, dtype=np.float32)


def _batched_means(bundle: ModelBundle, texts: list[Sequence[int]]) -> list[np.ndarray]:
    """Each text's mean final hidden state from one forward of them all, right-padded."""
    width = max(len(t) for t in texts)
    tokens = mx.array([list(t) + [PAD] * (width - len(t)) for t in texts], dtype=mx.uint32)
    hidden = bundle.decoder(tokens).astype(mx.float32)   # (texts, width, H), final norm applied; no cache
    lengths = mx.array([len(t) for t in texts])
    kept = (mx.arange(width)[None, :] < lengths[:, None]).astype(mx.float32)
    means = (hidden * kept[..., None]).sum(axis=1) / lengths[:, None].astype(mx.float32)
    mx.eval(means)
    return list(np.array(means, dtype=np.float32))


def _batches(inputs: Sequence[Sequence[int]], rows: int) -> list[list[int]]:
    """Input indices grouped shortest first, each group's texts x longest within `rows` (a longer text alone)."""
    groups: list[list[int]] = []
    for index in sorted(range(len(inputs)), key=lambda i: len(inputs[i])):
        # ascending lengths: this text is the group's longest once added
        if groups and (len(groups[-1]) + 1) * len(inputs[index]) <= rows:
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups


def embeddings(bundle: ModelBundle, inputs: Sequence[Sequence[int]]) -> Iterator[Pause | dict[int, np.ndarray]]:
    """Every input's mean final hidden state (each non-empty), by its index, a batch at a time: after each
    forward a Pause (the round did a prefill's work, which the worker keeps out of the decode latency it
    measures), then that forward's vectors."""
    for group in _batches(inputs, shared_rows()):
        if len(group) == 1:
            vectors = [(yield from mean_hidden(bundle, inputs[group[0]]))]
        else:
            vectors = _batched_means(bundle, [inputs[i] for i in group])
        yield Pause(len(group), len(inputs))
        yield dict(zip(group, vectors))
