"""DDTree engine: DFlash drafts a block, a best-first heap grows the B most probable prefixes,
ONE target forward verifies the whole tree, and the walk keeps the longest path the target agrees
with (docs/design.md "DDTree"). budget=1 is plain DFlash: the argmax chain over the whole block."""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Iterator, Sequence

import mlx.core as mx
import numpy as np

from contracts.engine import CancelToken, FallbackRule, StepResult
from contracts.sampling import SamplingParams

from .bundle import ModelBundle
from .dflash import DFlashDrafter
from .sampling import Rng, SamplerConfig, choose
from .speculative import Cycle, speculative_generate
from .target import commit, forward_tree
from .tree import TreeLayout


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


def walk(layout: TreeLayout, tokens: Sequence[int], choices: Sequence[int]) -> tuple[list[int], int]:
    """From the root follow the child whose token is the target's choice at the current node.
    Returns (accepted path of slots, bonus token = the target's choice where the walk stops)."""
    children: dict[int, dict[int, int]] = {}
    for slot in range(1, layout.size):
        children.setdefault(layout.parents[slot], {})[tokens[slot - 1]] = slot
    path, node = [0], 0
    while (child := children.get(node, {}).get(choices[node])) is not None:
        path.append(child)
        node = child
    return path, int(choices[node])


class DDTreeEngine:
    name = "ddtree"

    def __init__(self, bundle: ModelBundle, drafter: DFlashDrafter, budget: int = 4,
                 context_sink: int = 64, context_window: int | None = 4096):
        if budget < 1:
            raise ValueError("tree budget must be >= 1")
        self.bundle = bundle
        self.drafter = drafter
        self.budget = budget
        self.layer_ids = drafter.cfg.target_layer_ids
        self.context_sink, self.context_window = context_sink, context_window

    def _features(self, layer_outputs: dict[int, mx.array], rows: mx.array | slice) -> list[mx.array]:
        return [layer_outputs[i][rows] for i in self.layer_ids]

    def _propose(self, pending: int, context) -> "_Proposal":
        """The drafter's block after `pending` and its per-depth top candidates, as a lazy graph."""
        cfg = self.drafter.cfg
        block = mx.array([pending] + [cfg.mask_token_id] * (cfg.block_size - 1), dtype=mx.uint32)
        hidden = self.drafter(self.bundle.embed_tokens(block), context)
        logits = self.bundle.lm_head(hidden[1:]).astype(mx.float32)
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        budget = self.budget  # read once: the live policy may change it between cycles
        width = min(budget, logprobs.shape[-1])
        # top-`width` per depth without sorting the whole vocabulary, then sorted by log-prob
        candidates = mx.argpartition(-logprobs, kth=width - 1, axis=-1)[:, :width]
        candidate_lp = mx.take_along_axis(logprobs, candidates, axis=-1)
        rank = mx.argsort(-candidate_lp, axis=-1)
        order = mx.take_along_axis(candidates, rank, axis=-1)
        top_lp = mx.take_along_axis(candidate_lp, rank, axis=-1)
        return _Proposal(pending, budget, top_lp, order)

    def _draft(self, proposal: "_Proposal") -> DraftTree:
        top_lp, order = np.array(proposal.top_logprobs), np.array(proposal.top_tokens)  # host sync
        return chain_tree(order) if proposal.budget == 1 else build_tree(top_lp, order, proposal.budget)

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        cancel: CancelToken,
        fallback: FallbackRule | None = None,
    ) -> Iterator[StepResult]:
        def start(cache, prefilled, first, cfg, rng):
            context = self.drafter.new_context(self.context_sink, self.context_window)
            self.drafter.add_context(self._features(prefilled.layer_outputs, slice(None)), context)
            return _TreeDrafting(self, cache, context, cfg, rng)

        return speculative_generate(self.name, self.bundle, prompt_ids, params, cancel, fallback, start,
                                    capture=self.layer_ids)


@dataclass(frozen=True)
class _Proposal:
    pending: int               # the block's first token
    budget: int
    top_logprobs: mx.array     # (depths, width), sorted descending per depth
    top_tokens: mx.array


class _TreeDrafting:
    """One request: the drafter's context cache and the proposal started for the next cycle."""

    def __init__(self, engine: DDTreeEngine, cache: list, context, cfg: SamplerConfig, rng: Rng):
        self.engine, self.cache, self.context, self.cfg, self.rng = engine, cache, context, cfg, rng
        self.proposal: _Proposal | None = None

    def cycle(self, pending: int) -> Cycle:
        engine, bundle = self.engine, self.engine.bundle
        proposal = self.proposal
        if proposal is None or proposal.pending != pending or proposal.budget != engine.budget:
            proposal = engine._propose(pending, self.context)
        tree = engine._draft(proposal)
        ids = mx.array((pending,) + tree.tokens, dtype=mx.uint32)
        out = forward_tree(bundle, ids, tree.layout, self.cache, capture=engine.layer_ids)
        # one target choice per node: argmax, or one sample from the processed distribution
        choices = choose(bundle.lm_head(out.hidden), self.cfg, self.rng).tolist()
        path, bonus = walk(tree.layout, tree.tokens, choices)
        commit(bundle, self.cache, out, path)
        engine.drafter.add_context(engine._features(out.layer_outputs, mx.array(path)), self.context)
        # the next block starts with the bonus: draft it while the caller handles these tokens
        self.proposal = engine._propose(bonus, self.context)
        mx.async_eval(self.proposal.top_logprobs, self.proposal.top_tokens)
        depth = len(path) - 1
        return Cycle(
            emitted=[tree.tokens[s - 1] for s in path[1:]] + [bonus], drafted=len(tree.tokens), accepted=depth,
            accepted_positions=[d < depth for d in range(max(tree.layout.depths))],
        )
