"""DDTree engine: DFlash drafts a block, a best-first heap grows the B most probable prefixes,
ONE target forward verifies the whole tree, and the walk keeps the longest path the target agrees
with (docs/design.md "DDTree"). budget=1 is plain DFlash: the argmax chain over the whole block.

Pipelined (`launch`/`land`, engines/speculative.py): the tree is built on the device from the
drafter's candidates (`BestFirstTables`, precomputed per budget: every tree of a budget has one
shape, so one traced verify serves them all), walked on the device (`walk_device`), committed by a
device count, and every slot's drafter context row is appended with the rejected ones masked.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import KVCache

from .bundle import ModelBundle
from .dflash import DFlashDrafter, DraftContext
from .processing import TargetProcessor
from .request_cost import CONTEXT_SINK, CONTEXT_WINDOW
from .rows import NO_ROW, Reads, Rows, Window
from .sampling import choose
from .speculative import Committed, Cycle, Flight, Prefilled, SpeculativeDecoding, read_flight
from .target import Cursor, commit, commit_device, forward_device, forward_tree, settle
from .tree import BestFirstTables, DeviceTree, TreeLayout, all_layouts, walk_device


@dataclass(frozen=True)
class DraftTree:
    tokens: tuple[int, ...]    # per non-root slot (slot i+1)
    layout: TreeLayout          # slot 0 is the root (pending token)


def build_tree(top_logprobs: np.ndarray, top_tokens: np.ndarray, budget: int) -> DraftTree:
    """Best-first search over per-depth top-K candidates (DDTree Algorithm 1).

    top_logprobs/top_tokens: (depths, K), each row sorted by descending log-prob. Returns the
    `budget` most probable prefixes; a prefix's score is the sum of its per-depth log-probs. Each
    pop is the best remaining prefix; it pushes its first child and its next sibling.
    """
    depths, width = top_logprobs.shape
    parents, tokens = [-1], []
    # heap entries: (-score, tie, depth, rank, parent_slot, parent_score)
    heap = [(-float(top_logprobs[0, 0]), 0, 0, 0, 0, 0.0)]
    tie = 1
    while heap and len(tokens) < budget:
        neg, _, depth, rank, parent, parent_score = heapq.heappop(heap)
        slot = len(parents)
        parents.append(parent)
        tokens.append(int(top_tokens[depth, rank]))
        if rank + 1 < width:
            heapq.heappush(heap, (-(parent_score + float(top_logprobs[depth, rank + 1])), tie, depth, rank + 1, parent, parent_score))
            tie += 1
        if depth + 1 < depths:
            heapq.heappush(heap, (neg - float(top_logprobs[depth + 1, 0]), tie, depth + 1, 0, slot, -neg))
            tie += 1
    return DraftTree(tuple(tokens), TreeLayout.from_parents(parents))


def chain_tree(top_tokens: np.ndarray) -> DraftTree:
    """Plain DFlash: the argmax token at every depth, one chain."""
    return DraftTree(tuple(int(t) for t in top_tokens[:, 0]), TreeLayout.chain(top_tokens.shape[0] + 1))


def children_by_token(layout: TreeLayout, tokens: Sequence[int]) -> dict[int, dict[int, int]]:
    """slot -> {token of a child: child slot}."""
    children: dict[int, dict[int, int]] = {}
    for slot in range(1, layout.size):
        children.setdefault(layout.parents[slot], {})[tokens[slot - 1]] = slot
    return children


def walk(layout: TreeLayout, tokens: Sequence[int], choices: Sequence[int]) -> tuple[list[int], int]:
    """From the root follow the child whose token is the target's choice at the current node.
    Returns (accepted path of slots, bonus token = the target's choice where the walk stops)."""
    children = children_by_token(layout, tokens)
    path, node = [0], 0
    while (child := children.get(node, {}).get(choices[node])) is not None:
        path.append(child)
        node = child
    return path, int(choices[node])


MAX_WARM_LAYOUTS = 120   # budget 5 (5! layouts); larger budgets meet their layouts in requests
SHARPEN_SUPPORT = 64     # tokens per depth that normalise a sharpened tree score


class DDTreeEngine(SpeculativeDecoding):
    name = "ddtree"

    def __init__(self, bundle: ModelBundle, drafter: DFlashDrafter, budget: int = 4,
                 context_sink: int = CONTEXT_SINK, context_window: int | None = CONTEXT_WINDOW,
                 greedy_tree_temperature: float = 1.0):
        if budget < 1:
            raise ValueError("tree budget must be >= 1")
        if greedy_tree_temperature <= 0:
            raise ValueError("greedy_tree_temperature must be > 0")
        self.greedy_tree_temperature = greedy_tree_temperature
        self.bundle = bundle
        self.drafter = drafter
        self.budget = budget
        self.layer_ids = drafter.cfg.target_layer_ids
        self.capture = tuple(self.layer_ids)   # the drafter's context features
        self.context_sink, self.context_window = context_sink, context_window
        self.warm()

    @property
    def reads(self) -> Reads:
        """The drafter's context reads the captured layers of its sink and window (engines.rows)."""
        return Reads(hidden=NO_ROW, layers=Window(self.context_sink, self.context_window))

    def _features(self, layer_outputs: dict[int, Rows], rows: mx.array | slice) -> list[mx.array]:
        return [layer_outputs[i][rows] for i in self.layer_ids]

    @property
    def cycle_key(self) -> str:
        return f"{self.name}@{self.budget}"   # a budget is a tree shape: its cycle costs its own

    @property
    def kernel(self) -> int:
        return next(layer.linear_attn.conv_kernel_size for layer in self.bundle.layers if layer.is_linear)

    def device_tree(self, proposal: _Proposal) -> tuple[mx.array, DeviceTree]:
        """The proposal's draft tokens and tree without a host read (budget 1: the argmax chain)."""
        depths = proposal.top_tokens.shape[0]
        if proposal.budget == 1:
            return proposal.top_tokens[:, 0], DeviceTree.of(TreeLayout.chain(depths + 1), self.kernel)
        width = proposal.top_tokens.shape[1]
        return _tables(proposal.budget, depths, width, self.kernel).tree(proposal.top_logprobs, proposal.top_tokens)

    def depths(self, budget: int) -> int:
        """How many block positions a draft computes: a tree of `budget` nodes reaches depth `budget` at
        most, so the rows past it would be drafted for nothing (on a CPU the block's rows cost linearly);
        budget 1 is DFlash's argmax chain over the whole block."""
        block = self.drafter.cfg.block_size - 1
        return block if budget == 1 else min(block, budget)

    def warm(self) -> None:
        """Build the device tree tables of the current budget at load, not in a request's first cycle."""
        depths = self.depths(self.budget)
        if self.budget > 1:
            _tables(self.budget, depths, min(self.budget, self.bundle.vocab_size), self.kernel)

    def warm_layouts(self, limit: int = MAX_WARM_LAYOUTS) -> int:
        """Run one host-cycle verify of every tree layout the budget can draft, so that the per-layout
        setup (GDN ops traced per layout, masks, kernels compiled for new shapes) happens at load and not
        in requests: on MLX-CUDA a DDTree cycle's first pass cost 1.5-2.6x its second. Skipped (0) when
        the budget has more than `limit` layouts (budget! of them: 24 at the default budget 4)."""
        depths = self.depths(self.budget)
        layouts = [TreeLayout.chain(depths + 1)] if self.budget == 1 else all_layouts(self.budget, depths)
        if len(layouts) > limit:
            return 0
        for layout in layouts:
            out = forward_tree(self.bundle, mx.zeros((layout.size,), dtype=mx.uint32), layout, self.bundle.make_cache(),
                               capture=tuple(self.layer_ids))
            mx.eval(out.hidden, list(out.layer_outputs.values()))
        return len(layouts)

    def _propose(self, pending: int | mx.array, context, tree_temperature: float = 1.0) -> _Proposal:
        """The drafter's block after `pending` and its per-depth top candidates, as a lazy graph; the tree
        ranks paths by the candidates' log-probs at `tree_temperature` (the order within a depth is the same
        at any temperature; what changes is a sibling's score against a deeper node)."""
        budget = self.budget  # read once: the live policy may change it between cycles
        masks = mx.full((self.depths(budget),), self.drafter.cfg.mask_token_id, dtype=mx.uint32)
        first = pending.astype(mx.uint32) if isinstance(pending, mx.array) else mx.array(pending, dtype=mx.uint32)
        block = mx.concatenate([first.reshape(1), masks])   # a device token stays lazy (the pipelined cycle)
        hidden = self.drafter(self.bundle.embed_tokens(block), context)
        logits = self.bundle.lm_head(hidden[1:]).astype(mx.float32)
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        width = min(budget, logprobs.shape[-1])
        # top-`width` per depth without sorting the whole vocabulary, then sorted by log-prob
        candidates = mx.argpartition(-logprobs, kth=width - 1, axis=-1)[:, :width]
        candidate_lp = mx.take_along_axis(logprobs, candidates, axis=-1)
        rank = mx.argsort(-candidate_lp, axis=-1)
        order = mx.take_along_axis(candidates, rank, axis=-1)
        top_lp = mx.take_along_axis(candidate_lp, rank, axis=-1)
        if tree_temperature != 1.0:
            # normalised over the likeliest SHARPEN_SUPPORT tokens: a pass of exp over the whole vocabulary
            # costs ~0.6 ms on a CPU, and below a temperature of 1 the tail's share only shrinks
            support = min(SHARPEN_SUPPORT, logprobs.shape[-1])
            support = mx.argpartition(-logprobs, kth=support - 1, axis=-1)[:, :support]
            scale = mx.logsumexp(mx.take_along_axis(logprobs, support, axis=-1) / tree_temperature, axis=-1,
                                 keepdims=True)
            top_lp = top_lp / tree_temperature - scale
        return _Proposal(pending, budget, top_lp, order, logprobs, tree_temperature)

    def _draft(self, proposal: _Proposal, processor: TargetProcessor | None = None) -> DraftTree:
        if processor is not None and processor.active:
            top_lp, order = _processed_candidates(proposal, processor)
        else:
            top_lp, order = np.array(proposal.top_logprobs), np.array(proposal.top_tokens)  # host sync
        return chain_tree(order) if proposal.budget == 1 else build_tree(top_lp, order, proposal.budget)

    def start(self, request: Prefilled) -> _TreeDrafting:
        layers, prefix = request.out.layer_outputs, request.prefix
        found = prefix.extra(self.name) if prefix is not None else None
        if found is not None:
            done, context = found[0], DraftContext.from_rows(found[1], self.context_sink, self.context_window)
        else:
            done, context = 0, self.drafter.new_context(self.context_sink, self.context_window)
        # the drafter's context rows are per-row projections of the target's layers: an entry of L
        # tokens can hold the context after its L rows (added in pieces or at once, the same rows stay)
        stored = prefix.stored if prefix is not None else None
        if stored is not None and self.name not in stored.extras and done < len(stored.tokens):
            self._add_prompt_rows(layers, done, len(stored.tokens), context)
            done = len(stored.tokens)
            prefix.deposit(self.name, done, context.bound, context.rows())
        self._add_prompt_rows(layers, done, request.prompt.shape[0], context)
        return _TreeDrafting(self, request, context)

    def _add_prompt_rows(self, layers: dict[int, mx.array], done: int, total: int, context) -> None:
        """Context rows for prompt rows done..total, computing only those the context's sink + window
        keeps (the same rows at the same positions as adding all and trimming: a long prompt's middle
        would be projected through every drafter layer only to be dropped)."""
        new, have = total - done, context.positions.shape[0]
        head = max(0, context.sink - have)
        tail = new if context.window is None else min(new, context.window)
        if head + tail >= new:
            self.drafter.add_context(self._features(layers, slice(done, total)), context)
            return
        if head:
            self.drafter.add_context(self._features(layers, slice(done, done + head)), context)
        context.length += new - head - tail   # the skipped rows' positions
        self.drafter.add_context(self._features(layers, slice(total - tail, total)), context)


@lru_cache(maxsize=16)
def _tables(budget: int, depths: int, width: int, kernel: int) -> BestFirstTables:
    return BestFirstTables(budget, depths, width, kernel)


@dataclass(frozen=True)
class _Proposal:
    pending: int | mx.array    # the block's first token
    budget: int
    top_logprobs: mx.array     # (depths, width), sorted descending per depth
    top_tokens: mx.array
    logprobs: mx.array | None = None   # (depths, vocab): what penalties / a constraint re-rank
    tree_temperature: float = 1.0       # what top_logprobs were sharpened by (the processed path does the same)


def _processed_candidates(proposal: _Proposal, processor: TargetProcessor) -> tuple[np.ndarray, np.ndarray]:
    """Per-depth candidates under the request's penalties and output constraint, along the likeliest
    processed path. The drafter never sees them: unprocessed, its drafts of a JSON schema's reply are
    mostly tokens the verify can never accept. Drafts only propose; the verify keeps output exact."""
    width = proposal.top_tokens.shape[1]
    path: list[int] = []
    tops_lp, tops_tok = [], []
    for depth in range(proposal.logprobs.shape[0]):
        # the first depth as the verify sees it (a row the request's bans leave empty: its ending tokens)
        row = processor.apply(proposal.logprobs[depth][None], [path], dead_end=not path)[0]
        row = row / proposal.tree_temperature
        order = mx.argsort(-row)[:width]
        lp = np.array(row[order] - mx.logsumexp(row))
        if not np.isfinite(lp[0]):
            break   # nothing can follow this path (the constraint is complete): no deeper drafts
        tops_lp.append(lp)
        tops_tok.append(np.array(order))
        path.append(int(tops_tok[-1][0]))
    if not tops_lp:   # nothing even at the first depth (a tokenizer with no ending token): the drafter's own
        return np.array(proposal.top_logprobs)[:1], np.array(proposal.top_tokens)[:1]
    return np.stack(tops_lp), np.stack(tops_tok)


class _TreeDrafting:
    """One request: the drafter's context cache and the proposal started for the next cycle."""

    def __init__(self, engine: DDTreeEngine, request: Prefilled, context):
        self.engine, self.cache, self.context = engine, request.cache, context
        self.cfg, self.rng, self.capture = request.cfg, request.rng, request.capture
        self.processor = request.processor
        # greedy, a node is accepted when it is the target's argmax, about which a drafter trained on the
        # target's distribution is under-confident: the family's serving hints may sharpen the tree's scores
        self.tree_temperature = engine.greedy_tree_temperature if request.cfg.greedy else 1.0
        self.probe_every = max(1, request.probe_every)
        self.proposal: _Proposal | None = None
        self._probes: list[_Probe] = []   # trees proposed while another engine runs, awaiting tokens
        self._absorbed = 0
        self.cursor: Cursor | None = None   # set while cycles are pipelined

    def launch(self, pending: mx.array) -> Flight:
        """Draft, build the tree, verify, walk and commit without a host read."""
        engine, bundle = self.engine, self.engine.bundle
        if self.cursor is None:   # entering pipelined cycles: the caches' committed length moves to the device
            self.cursor = Cursor.at(self.cache[bundle.decoder.fa_idx].offset)
        undo = self._undo()
        proposal = engine._propose(pending, self.context, self.tree_temperature)
        tokens, tree = engine.device_tree(proposal)
        ids = mx.concatenate([pending.reshape(1).astype(mx.uint32), tokens.astype(mx.uint32)])
        out = forward_device(bundle, ids, tree, self.cache, self.cursor, capture=tuple(engine.layer_ids))
        logits = bundle.lm_head(out.hidden)
        walked = walk_device(tree, tokens, choose(logits, self.cfg, self.rng))
        count = walked.accepted + 1
        commit_device(bundle, self.cache, out, tree, walked.path, walked.last, count, self.cursor)
        valid = mx.arange(tree.size) < count
        engine.drafter.add_context(engine._features(out.layer_outputs, walked.path), self.context, valid)
        result = mx.concatenate([mx.stack([count, mx.array(tree.max_depth)]).astype(mx.int32), walked.emitted.astype(mx.int32)])
        mx.async_eval(result, self.context.length)
        bonus = walked.emitted[walked.accepted]
        return Flight(result, bonus.astype(mx.uint32), logits, walked.path, tree.size - 1, undo)

    def _undo(self):
        """Puts back what a launch replaces (all references to immutable arrays)."""
        gdn = [(c, c[0], c[1]) for c in self.cache if not isinstance(c, KVCache)]
        context = self.context
        saved = (list(context.keys), list(context.values), context.positions, context.valid, context.length)
        pos = self.cursor.pos

        def undo() -> None:
            for c, conv, state in gdn:
                c[0], c[1] = conv, state
            context.keys, context.values, context.positions, context.valid, context.length = (
                list(saved[0]), list(saved[1]), *saved[2:])
            self.cursor.pos = pos
            self.cursor.inflight.pop()
        return undo

    def land(self, flight: Flight) -> Cycle:
        emitted, max_depth = read_flight(flight)   # the cycle's one host sync
        self.cursor.landed(len(emitted))
        depth = len(emitted) - 1
        logprobs = []
        if self.processor.params.logprobs:
            logprobs = self.processor.logprobs(flight.logits[flight.path[: len(emitted)]], emitted)
        return Cycle(emitted, drafted=flight.drafted, accepted=depth,
                     accepted_positions=[d < depth for d in range(max_depth)], logprobs=logprobs)

    def settle(self) -> None:
        if self.cursor is not None:
            settle(self.cache, self.cursor)
            self.cursor = None

    def cycle(self, pending: int, sync: bool) -> Cycle:
        engine, bundle = self.engine, self.engine.bundle
        proposal = self.proposal
        if proposal is None or proposal.pending != pending or proposal.budget != engine.budget:
            proposal = engine._propose(pending, self.context, self.tree_temperature)
        tree = engine._draft(proposal, self.processor)
        ids = mx.array((pending,) + tree.tokens, dtype=mx.uint32)
        capture = tuple(sorted(set(engine.layer_ids) | set(self.capture if sync else ())))
        out = forward_tree(bundle, ids, tree.layout, self.cache, capture=capture)
        # one target choice per node: argmax, or one sample from the processed distribution; each node's
        # penalties/constraint follow its own path (its ancestors' tokens after the pending one)
        logits = bundle.lm_head(out.hidden)
        if self.processor.active:
            logits = self.processor.apply(logits, [[tree.tokens[s - 1] for s in tree.layout.path_to(slot)[1:]]
                                                   for slot in range(tree.layout.size)])
        choices = choose(logits, self.cfg, self.rng).tolist()
        path, bonus = walk(tree.layout, tree.tokens, choices)
        commit(bundle, self.cache, out, path)
        rows = mx.array(path)
        engine.drafter.add_context(engine._features(out.layer_outputs, rows), self.context)
        # the next block starts with the bonus: draft it while the caller handles these tokens
        self.proposal = engine._propose(bonus, self.context, self.tree_temperature)
        mx.async_eval(self.proposal.top_logprobs, self.proposal.top_tokens)
        depth = len(path) - 1
        emitted = [tree.tokens[s - 1] for s in path[1:]] + [bonus]
        committed = None
        if sync:
            committed = Committed([pending] + emitted[:-1], emitted, out.hidden[rows],
                                  {i: h[rows] for i, h in out.layer_outputs.items()})
        return Cycle(
            emitted=emitted, drafted=len(tree.tokens), accepted=depth,
            accepted_positions=[d < depth for d in range(max(tree.layout.depths))], committed=committed,
            logprobs=self.processor.logprobs(logits[rows], emitted),
        )

    def absorb(self, committed: Committed) -> list[float]:
        """Context rows for positions another engine committed, and probes: every `probe_every`
        absorbs the drafter proposes a tree after the new pending token, and once the following
        tokens are known the probe reports how deep DDTree's walk would have gone. Greedy, that is
        exactly what a verify would accept; sampled, the walk with the target's own samples has the
        distribution of DDTree's sampled walk."""
        engine = self.engine
        engine.drafter.add_context(engine._features(committed.layer_outputs, slice(None)), self.context)
        results: list[float] = []
        for token in committed.emitted:
            for probe in self._probes:
                probe.feed(token)
            results += [float(p.depth) for p in self._probes if p.done]
            self._probes = [p for p in self._probes if not p.done]
        if self._absorbed % self.probe_every == 0:
            proposal = engine._propose(committed.emitted[-1], self.context, self.tree_temperature)
            self._probes.append(_Probe(engine._draft(proposal)))
        self._absorbed += 1
        self.proposal = None
        return results


class _Probe:
    """A would-be DDTree verify: the tree proposed after a pending token, walked with the tokens
    the request actually produced next."""

    def __init__(self, tree: DraftTree):
        self._children = children_by_token(tree.layout, tree.tokens)
        self.node = 0
        self.depth = 0
        self.done = False

    def feed(self, token: int) -> None:
        if self.done:
            return
        child = self._children.get(self.node, {}).get(token)
        if child is None:
            self.done = True     # the target's token is not in the tree: the walk stops here
            return
        self.node, self.depth = child, self.depth + 1
        self.done = self.node not in self._children   # a leaf: nothing deeper to accept
