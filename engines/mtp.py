"""MTP-K1 engine: the checkpoint's MTP head drafts one token, the target verifies two positions."""

from __future__ import annotations

import time
from typing import Iterator, Sequence

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from .bundle import ModelBundle
from .fallback import FallbackWatch
from .mtp_head import MTPHead
from .raw import PREFILL_CHUNK, decode
from .sampling import Rng, choose, log_probs, resolve
from .speculative import prefill_capture, verify_one
from .target import commit, forward_tree
from .tree import TreeLayout
from .types import CancelToken, FallbackRule, SamplingParams, StepResult

_VERIFY = TreeLayout.chain(2)


class MTPEngine:
    name = "mtp"

    def __init__(self, bundle: ModelBundle, head: MTPHead):
        self.bundle = bundle
        self.head = head

    def _draft_logits(self, next_tokens: mx.array, hidden: mx.array, head_cache: KVCache) -> mx.array:
        """Append head rows (hidden[t], x[t+1]) to the head cache; logits of the last row."""
        out = None
        for start in range(0, next_tokens.shape[0], PREFILL_CHUNK):
            rows = slice(start, start + PREFILL_CHUNK)
            embeds = self.bundle.embed_tokens(next_tokens[rows])[None]
            out = self.head(embeds, hidden[rows][None], head_cache)
            if next_tokens.shape[0] > PREFILL_CHUNK:
                mx.eval(out, head_cache.state)
        return self.bundle.lm_head(out[0, -1])

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        cancel: CancelToken,
        fallback: FallbackRule | None = None,
    ) -> Iterator[StepResult]:
        bundle = self.bundle
        cfg = resolve(params, bundle.generation)
        rng = Rng(params.seed)
        cache = bundle.make_cache()
        head_cache = KVCache()
        started = time.perf_counter()

        prefilled = prefill_capture(bundle, cache, prompt_ids)
        pending = choose(bundle.lm_head(prefilled.hidden[-1:]), cfg, rng)
        prompt = mx.array([int(t) for t in prompt_ids], dtype=mx.uint32)
        draft_logits = self._draft_logits(mx.concatenate([prompt[1:], pending.astype(mx.uint32)]), prefilled.hidden, head_cache)
        token = int(pending.item())
        now = time.perf_counter()
        yield StepResult(tokens=[token], seconds=now - started, engine=self.name)
        started = now

        watch = FallbackWatch(fallback)
        while not cancel.cancelled:
            if watch.tripped:
                yield from decode(bundle, cache, token, cfg, rng, cancel, engine="raw")
                return
            if cfg.greedy:
                draft_lp, draft = None, mx.argmax(draft_logits)
            else:
                draft_lp = log_probs(draft_logits, cfg)
                draft = rng.categorical(draft_lp)
            mx.async_eval(draft)  # the device runs the head while the host builds the verify graph
            verify_ids = mx.stack([mx.array(token, dtype=mx.uint32), draft.astype(mx.uint32)])
            out = forward_tree(bundle, verify_ids, _VERIFY, cache)
            verdict = verify_one(draft, draft_lp, bundle.lm_head(out.hidden), cfg, rng)
            accepted, drafted, bonus = (int(v) for v in mx.stack([verdict.accepted.astype(mx.int64), draft.astype(mx.int64), verdict.bonus.astype(mx.int64)]).tolist())

            path = [0, 1] if accepted else [0]
            commit(bundle, cache, out, path)
            emitted = [drafted, bonus] if accepted else [bonus]
            draft_logits = self._draft_logits(mx.array(emitted, dtype=mx.uint32), out.hidden[: len(path)], head_cache)
            now = time.perf_counter()
            yield StepResult(
                tokens=emitted, drafted=1, accepted=accepted, seconds=now - started,
                engine=self.name, accepted_positions=[bool(accepted)],
            )
            started = now
            token = bonus
            watch.record(accepted)
