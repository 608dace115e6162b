"""A prompt's own log-probabilities (a text completion's echo with logprobs, as lm-eval's loglikelihood tasks
ask): the target run over the prompt on a fresh cache, in bounded pieces, each row's logits scoring the next
prompt token. One more prefill of the prompt, with no cache reused: what echo with logprobs costs."""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from contracts.chat import PromptLogprobs

from .bundle import ModelBundle
from .prefill import chunk_slices
from .processing import token_logprobs
from .text import TokenBytes

# rows per forward: each piece's logits are rows x vocabulary floats (512 x 152k x 4 bytes: ~300 MB)
SCORE_CHUNK = 512


def prompt_logprobs(bundle: ModelBundle, ids: Sequence[int], top: int) -> PromptLogprobs:
    """Every prompt token after the first, scored under the target's distribution (no penalties, no
    constraint: the prompt is given, not sampled), with its rank and `top` alternatives each."""
    tokens = [int(t) for t in ids]
    cache = bundle.make_cache()
    scored = []
    for rows in chunk_slices(len(tokens) - 1, size=SCORE_CHUNK):
        piece = mx.array(tokens[rows.start:rows.stop], dtype=mx.uint32)[None]
        logits = bundle.model(piece, cache=cache)[0]
        scored += token_logprobs(bundle.tokenizer, logits, tokens[rows.start + 1:rows.stop + 1], top,
                                 ranked=True)
    first = tokens[0]
    return PromptLogprobs(bundle.tokenizer.decode([first]), TokenBytes(bundle.tokenizer)(first), tuple(scored))
