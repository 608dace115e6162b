"""MTP-K1 engine: the checkpoint's MTP head drafts one token, the target verifies two positions."""

from __future__ import annotations

from typing import Iterator, Sequence

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from contracts.engine import CancelToken, FallbackRule, StepResult
from contracts.sampling import SamplingParams

from .bundle import ModelBundle
from .mtp_head import MTPHead
from .prefill import chunk_slices
from .sampling import Rng, SamplerConfig, log_probs
from .speculative import Cycle, speculative_generate, verify_one
from .target import commit, forward_tree
from .tree import TreeLayout

_VERIFY = TreeLayout.chain(2)


class MTPEngine:
    name = "mtp"

    def __init__(self, bundle: ModelBundle, head: MTPHead):
        self.bundle = bundle
        self.head = head

    def _draft_logits(self, next_tokens: mx.array, hidden: mx.array, head_cache: KVCache) -> mx.array:
        """Append head rows (hidden[t], x[t+1]) to the head cache; logits of the last row."""
        out = None
        slices = chunk_slices(next_tokens.shape[0])
        for rows in slices:
            embeds = self.bundle.embed_tokens(next_tokens[rows])[None]
            out = self.head(embeds, hidden[rows][None], head_cache)
            if len(slices) > 1:
                mx.eval(out, head_cache.state)
        return self.bundle.lm_head(out[0, -1])

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        cancel: CancelToken,
        fallback: FallbackRule | None = None,
    ) -> Iterator[StepResult]:
        def start(cache, prefilled, first, cfg, rng):
            return _MTPDrafting(self, cache, prompt_ids, prefilled.hidden, first, cfg, rng)

        return speculative_generate(self.name, self.bundle, prompt_ids, params, cancel, fallback, start)


class _MTPDrafting:
    """One request: the head's own KV cache and the logits of its next draft."""

    def __init__(self, engine: MTPEngine, cache: list, prompt_ids: Sequence[int], hidden: mx.array,
                 first: mx.array, cfg: SamplerConfig, rng: Rng):
        self.engine, self.cache, self.cfg, self.rng = engine, cache, cfg, rng
        self.head_cache = KVCache()
        prompt = mx.array([int(t) for t in prompt_ids], dtype=mx.uint32)
        # head rows 0..n-1 pair H[t] with x[t+1]; the first generated token closes the last row
        self.draft_logits = engine._draft_logits(mx.concatenate([prompt[1:], first.astype(mx.uint32)]), hidden, self.head_cache)

    def cycle(self, pending: int) -> Cycle:
        bundle, cfg, rng = self.engine.bundle, self.cfg, self.rng
        if cfg.greedy:
            draft_lp, draft = None, mx.argmax(self.draft_logits)
        else:
            draft_lp = log_probs(self.draft_logits, cfg)
            draft = rng.categorical(draft_lp)
        mx.async_eval(draft)  # the device runs the head while the host builds the verify graph
        verify_ids = mx.stack([mx.array(pending, dtype=mx.uint32), draft.astype(mx.uint32)])
        out = forward_tree(bundle, verify_ids, _VERIFY, self.cache)
        verdict = verify_one(draft, draft_lp, bundle.lm_head(out.hidden), cfg, rng)
        # the cycle's one host sync
        accepted, drafted, bonus = (int(v) for v in mx.stack(
            [verdict.accepted.astype(mx.int64), draft.astype(mx.int64), verdict.bonus.astype(mx.int64)]).tolist())
        path = [0, 1] if accepted else [0]
        commit(bundle, self.cache, out, path)
        emitted = [drafted, bonus] if accepted else [bonus]
        self.draft_logits = self.engine._draft_logits(mx.array(emitted, dtype=mx.uint32), out.hidden[: len(path)], self.head_cache)
        mx.async_eval(self.draft_logits)  # the next draft runs while the caller handles these tokens
        return Cycle(emitted, drafted=1, accepted=accepted, accepted_positions=[bool(accepted)])
