"""MTP-K1 engine: the checkpoint's MTP head drafts one token, the target verifies two positions.

Pipelined (`launch`/`land`, engines/speculative.py): the verdict never leaves the device. The head
always takes two rows, (H[0], accepted ? draft : bonus) and (H[1], bonus); the second is a hole when
the draft was rejected, and the next draft reads row `accepted`. Target and head caches advance by
a device count (`Cursor`).
"""

from __future__ import annotations


import mlx.core as mx
from mlx_lm.models.cache import KVCache

from .bundle import ModelBundle
from .mtp_head import MTPHead
from .prefill import PrefixUse, chunk_slices
from .rows import EVERY_ROW, NO_ROW, Reads, Rows, Window
from .sampling import candidates, log_probs
from .speculative import (
    Committed,
    Cycle,
    Flight,
    Prefilled,
    SpeculativeDecoding,
    read_flight,
    verify_one,
)
from .target import Cursor, commit, commit_device, forward_device, forward_tree, settle
from .tree import DeviceTree, TreeLayout

_VERIFY = TreeLayout.chain(2)
_CHAIN_PATH = mx.array([0, 1], dtype=mx.int32)   # a chain's slots in depth order


class MTPEngine(SpeculativeDecoding):
    name = "mtp"
    cycle_key = "mtp"
    capture: tuple[int, ...] = ()   # the head reads the final hidden state, which every forward keeps

    def __init__(self, bundle: ModelBundle, head: MTPHead, prompt_window: int | None = None):
        self.bundle = bundle
        self.head = head
        # the head's rows over the prompt run with the first cycle (one layer over every prompt row: ~0.2 ms
        # a row on the demo's CPU, 300 ms after 1.5k tokens); a window keeps only the last rows. RoPE is
        # relative, so a head cache that starts later is the same attention restricted to the window
        self.prompt_window = prompt_window

    @property
    def reads(self) -> Reads:
        """The head's rows read the prompt's hidden states in its window (engines.rows)."""
        return Reads(hidden=Window(0, self.prompt_window), layers=NO_ROW)

    def head_rows(self, next_tokens: mx.array, hidden: Rows, head_cache: KVCache) -> mx.array:
        """Append head rows (hidden[t], x[t+1]) to the head cache; returns their normed outputs
        (rows, H): lm_head of row t is the head's draft for the token after x[t+1]."""
        parts = []
        slices = chunk_slices(next_tokens.shape[0])
        for rows in slices:
            embeds = self.bundle.embed_tokens(next_tokens[rows])[None]
            parts.append(self.head(embeds, hidden[rows][None], head_cache)[0])
            if len(slices) > 1:
                mx.eval(parts[-1], head_cache.state)
        return parts[0] if len(parts) == 1 else mx.concatenate(parts)

    def start(self, request: Prefilled) -> _MTPDrafting:
        return _MTPDrafting(self, request)


class _MTPDrafting:
    """One request: the head's own KV cache and the logits of its next draft."""

    def __init__(self, engine: MTPEngine, request: Prefilled):
        self.engine, self.cache, self.cfg, self.rng = engine, request.cache, request.cfg, request.rng
        self.capture, self.processor = request.capture, request.processor
        self.cursor: Cursor | None = None        # set while cycles are pipelined
        self.head_cursor: Cursor | None = None
        self.head_cache = KVCache()
        # head rows 0..n-1 pair H[t] with x[t+1]; the first generated token closes the last row
        next_tokens = mx.concatenate([request.prompt[1:], request.first.astype(mx.uint32)])
        # the head's rows start at its window (drafts only propose: the verify keeps the output exact); a
        # deposit holds rows from row 0, so it is what this head reads only when the window starts there too
        first = 0 if engine.prompt_window is None else max(0, next_tokens.shape[0] - engine.prompt_window)
        done = self._deposit(request.prefix, next_tokens, request.out.hidden, self._resume(request.prefix)) \
            if first == 0 else first
        rows = engine.head_rows(next_tokens[done:], request.out.hidden[done:], self.head_cache)
        self.draft_logits = engine.bundle.lm_head(rows[-1])

    # The prefix cache: head rows 0..L-2 depend only on the first L tokens, so an entry of L tokens
    # can hold the head's cache after them; a later request resumes there instead of redoing them.
    def _resume(self, prefix: PrefixUse | None) -> int:
        found = prefix.extra(self.engine.name) if prefix is not None else None
        if found is None:
            return 0
        length, (keys, values) = found
        self.head_cache.state = (mx.moveaxis(keys, 0, 2), mx.moveaxis(values, 0, 2), length - 1)
        return length - 1

    def _deposit(self, prefix: PrefixUse | None, next_tokens: mx.array, hidden: mx.array, done: int) -> int:
        stored = prefix.stored if prefix is not None else None
        if stored is None or self.engine.name in stored.extras or len(stored.tokens) - 1 <= done:
            return done
        upto = len(stored.tokens) - 1
        self.engine.head_rows(next_tokens[done:upto], hidden[done:upto], self.head_cache)
        head = self.head_cache
        # rows first, as the prefix cache holds rows: an entry keeps only those past the deposit it extends
        prefix.deposit(self.engine.name, len(stored.tokens), EVERY_ROW,
                       [mx.moveaxis(head.keys[..., :upto, :], 2, 0), mx.moveaxis(head.values[..., :upto, :], 2, 0)])
        return upto

    def cycle(self, pending: int, sync: bool) -> Cycle:
        bundle, cfg, rng = self.engine.bundle, self.cfg, self.rng
        processor = self.processor
        # the head drafts from the history row 0 of the verify has: the same processing keeps its
        # proposals inside the constraint (the verify alone would keep the output exact either way)
        draft_logits = processor.apply(self.draft_logits[None], [[]])[0] if processor.active else self.draft_logits
        if cfg.greedy:
            draft_dist, draft = None, mx.argmax(draft_logits)
        else:
            draft_dist = candidates(draft_logits, cfg)
            draft = rng.sample(draft_dist)
        mx.async_eval(draft)  # the device runs the head while the host builds the verify graph
        verify_ids = mx.stack([mx.array(pending, dtype=mx.uint32), draft.astype(mx.uint32)])
        out = forward_tree(bundle, verify_ids, _VERIFY, self.cache, capture=self.capture if sync else ())
        target_logits = bundle.lm_head(out.hidden)
        if processor.active:  # row 1 continues the history by the draft (a host read of the draft)
            target_logits = processor.apply(target_logits, [[], [int(draft.item())]])
        verdict = verify_one(draft, draft_dist, target_logits, cfg, rng)
        # the cycle's one host sync
        accepted, drafted, bonus = (int(v) for v in mx.stack(
            [verdict.accepted.astype(mx.int64), draft.astype(mx.int64), verdict.bonus.astype(mx.int64)]).tolist())
        path = [0, 1] if accepted else [0]
        commit(bundle, self.cache, out, path)
        emitted = [drafted, bonus] if accepted else [bonus]
        rows = self.engine.head_rows(mx.array(emitted, dtype=mx.uint32), out.hidden[: len(path)], self.head_cache)
        self.draft_logits = bundle.lm_head(rows[-1])
        mx.async_eval(self.draft_logits)  # the next draft runs while the caller handles these tokens
        committed = None
        if sync:
            fed = [pending] + emitted[:-1]
            committed = Committed(fed, emitted, out.hidden[: len(path)],
                                  {i: h[: len(path)] for i, h in out.layer_outputs.items()})
        return Cycle(emitted, drafted=1, accepted=accepted, accepted_positions=[bool(accepted)], committed=committed,
                     logprobs=processor.logprobs(target_logits[: len(path)], emitted))

    def launch(self, pending: mx.array) -> Flight:
        """Draft, verify and commit without a host read (the request has no penalties/constraint)."""
        bundle, cfg, rng = self.engine.bundle, self.cfg, self.rng
        if self.cursor is None:   # entering pipelined cycles: the caches' committed lengths move to the device
            self.cursor = Cursor.at(self.cache[bundle.decoder.fa_idx].offset)
            self.head_cursor = Cursor.at(self.head_cache.offset)
        undo = self._undo()
        if cfg.greedy:
            draft_dist, draft = None, mx.argmax(self.draft_logits)
        else:
            draft_dist = candidates(self.draft_logits, cfg)
            draft = rng.sample(draft_dist)
        verify_ids = mx.stack([pending.reshape(()).astype(mx.uint32), draft.astype(mx.uint32)])
        tree = DeviceTree.of(_VERIFY, 1)   # a chain: the forwards use its layout (the kernel size is unused)
        out = forward_device(bundle, verify_ids, tree, self.cache, self.cursor)
        logits = bundle.lm_head(out.hidden)
        verdict = verify_one(draft, draft_dist, logits, cfg, rng)
        accepted = verdict.accepted.astype(mx.int32)
        commit_device(bundle, self.cache, out, tree, _CHAIN_PATH, accepted, accepted + 1, self.cursor)
        emitted = mx.stack([mx.where(verdict.accepted, draft, verdict.bonus), verdict.bonus]).astype(mx.uint32)
        rows = self.engine.head(bundle.embed_tokens(emitted)[None], out.hidden[None], self.head_cache, self.head_cursor)[0]
        self.head_cursor.advance(accepted + 1, 2)
        self.draft_logits = bundle.lm_head(mx.take(rows, accepted.reshape(1), axis=0)[0])
        result = mx.concatenate([mx.stack([accepted + 1, mx.array(1, mx.int32)]), emitted.astype(mx.int32)])
        mx.async_eval(result, self.draft_logits)
        return Flight(result, verdict.bonus.astype(mx.uint32), logits, _CHAIN_PATH, 1, undo)

    def _undo(self):
        """Puts back what a launch replaces (all references to immutable arrays)."""
        gdn = [(c, c[0], c[1]) for c in self.cache if not isinstance(c, KVCache)]
        draft_logits, pos, head_pos = self.draft_logits, self.cursor.pos, self.head_cursor.pos

        def undo() -> None:
            for c, conv, state in gdn:
                c[0], c[1] = conv, state
            self.draft_logits = draft_logits
            self.cursor.pos, self.head_cursor.pos = pos, head_pos
            self.cursor.inflight.pop()
            self.head_cursor.inflight.pop()
        return undo

    def land(self, flight: Flight) -> Cycle:
        emitted, _ = read_flight(flight)   # the cycle's one host sync
        self.cursor.landed(len(emitted))
        self.head_cursor.landed(len(emitted))
        logprobs = self.processor.logprobs(flight.logits[: len(emitted)], emitted) if self.processor.params.logprobs else []
        return Cycle(emitted, drafted=1, accepted=len(emitted) - 1, accepted_positions=[len(emitted) == 2],
                     logprobs=logprobs)

    def settle(self) -> None:
        if self.cursor is not None:
            settle(self.cache, self.cursor)
            settle([self.head_cache], self.head_cursor)
            self.cursor = self.head_cursor = None

    def absorb(self, committed: Committed) -> list[float]:
        """Head rows for positions another engine committed. The head's draft before each emitted
        token is a would-be MTP verify: greedy accepts iff it is the target's token; sampled accepts
        with probability sum(min(p, q)) (rejection sampling's acceptance)."""
        bundle, cfg = self.engine.bundle, self.cfg
        emitted = mx.array(committed.emitted, dtype=mx.uint32)
        rows = self.engine.head_rows(emitted, committed.hidden, self.head_cache)
        logits = bundle.lm_head(rows)
        drafts = mx.concatenate([self.draft_logits[None], logits[:-1]])   # the draft before emitted[i]
        self.draft_logits = logits[-1]
        if cfg.greedy:
            accepted = (mx.argmax(drafts, axis=-1) == emitted).astype(mx.float32)
        else:
            target = log_probs(bundle.lm_head(committed.hidden), cfg)
            accepted = mx.exp(mx.minimum(target, log_probs(drafts, cfg))).sum(axis=-1)
        return accepted.tolist()
