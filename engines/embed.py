"""A text's embedding from the target itself: the mean of its final-norm hidden states over the text's tokens.

The one model is generative; clients that index documents (RAG in chat UIs, coding agents' codebase search,
LangChain / LlamaIndex pointed at one base URL) ask it for embeddings as they ask Ollama or llama.cpp for a
generative model's. Mean pooling is what reads best from a model not trained to embed (its last token only
predicts the next one). The text runs through the one prefill on a fresh cache, pausing between pieces as a
generation's prompt does; nothing is cached (the prefix cache holds chat prompts, which embeddings never are).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

import mlx.core as mx
import numpy as np

from contracts.engine import Pause

from .bundle import ModelBundle
from .prefill import prefill_stepwise


def mean_hidden(bundle: ModelBundle, ids: Sequence[int]) -> Generator[Pause, None, np.ndarray]:
    """The float32 mean over `ids` (non-empty) of the target's final hidden states, not normalised (the APIs
    differ: OpenAI's and Ollama's /api/embed are unit vectors, Ollama's older /api/embeddings is not)."""
    if not ids:
        raise ValueError("nothing to embed")
    out, _, _ = yield from prefill_stepwise(bundle, bundle.make_cache(), ids)
    pooled = out.hidden.astype(mx.float32).mean(axis=0)
    mx.eval(pooled)
    return np.array(pooled, dtype=np.float32)
