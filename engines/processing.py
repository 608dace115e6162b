"""What a request does to the target's logits before anything is chosen: penalties, a logit bias, min_tokens'
ban of the ending tokens, vLLM's allowed_token_ids and bad_words, and an output constraint (llguidance), and
the log-probabilities it reports.

Every engine computes target logits for one or more rows at once (a decode step: 1 row; an MTP
verify: 2; a DDTree verify: every tree node). Row r continues the request's emitted tokens by
`paths[r]`, the draft tokens between the pending token and that row. Penalising and masking each
row with its own history is what keeps speculation lossless under penalties and constraints: the
target's distribution at every verified position is exactly the one a plain decode would use.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import mlx.core as mx
import numpy as np

from contracts.chat import TokenLogprob, TopLogprob
from contracts.errors import InvalidRequestError
from contracts.sampling import SamplingParams
from engines.text import TokenBytes


def _llguidance_tokenizer(tokenizer: Any, vocab: int):
    """llguidance's view of the target's tokenizer (built once per tokenizer and vocabulary width)."""
    cache = getattr(tokenizer, "_switchyard_llg", None)
    if cache is not None and cache[0] == vocab:
        return cache[1]
    import llguidance.hf

    hf = getattr(tokenizer, "_tokenizer", tokenizer)
    llg = llguidance.hf.from_tokenizer(hf, n_vocab=vocab)
    tokenizer._switchyard_llg = (vocab, llg)
    return llg


def _bias_row(logit_bias: Sequence[tuple[int, float]], vocab: int) -> mx.array:
    """OpenAI's logit_bias as one (V,) row added to every logits row; ids outside the model's vocabulary
    are the request's error (ids are the target tokenizer's)."""
    row = np.zeros(vocab, dtype=np.float32)
    for token, value in logit_bias:
        if not 0 <= token < vocab:
            raise InvalidRequestError(f"logit_bias: token id {token} is not in this model's vocabulary "
                                      f"(0 to {vocab - 1})", param="logit_bias")
        row[token] += value
    return mx.array(row)


def _never_row(params: SamplingParams, tokenizer: Any, vocab: int) -> tuple[mx.array | None, tuple[tuple[int, ...], ...]]:
    """(V,) bool of the tokens never sampled (outside allowed_token_ids; a bad word of one token), or None, and
    the bad words of more tokens, whose last token is banned where the others were just generated. Each bad
    word as vLLM reads it: its tokens as written, and with a leading space (a word inside the text)."""
    never = np.zeros(vocab, dtype=bool)
    if params.allowed_token_ids:
        outside = [t for t in params.allowed_token_ids if not 0 <= t < vocab]
        if outside:
            raise InvalidRequestError(f"allowed_token_ids: token id {outside[0]} is not in this model's vocabulary "
                                      f"(0 to {vocab - 1})", param="allowed_token_ids", code="invalid_token_id")
        never[:] = True
        never[list(params.allowed_token_ids)] = False
    sequences: list[tuple[int, ...]] = []
    for word in params.bad_words:
        for text in dict.fromkeys((word.lstrip(), " " + word.lstrip())):
            ids = tuple(int(t) for t in tokenizer.encode(text, add_special_tokens=False) if 0 <= t < vocab)
            if len(ids) == 1:
                never[ids[0]] = True
            elif ids and ids not in sequences:
                sequences.append(ids)
    return (mx.array(never) if never.any() else None), tuple(sequences)


class ThinkingBudget:
    """A cap on the thinking block the generation prompt opened: once `budget` tokens were thought, the token
    that closes the block is forced (every other logit -inf); a block the model closes itself ends the cap. A
    state is (tokens thought, closed); `after` is a pure function of the tokens, so each verified row gets the
    state its own path leads to."""

    start_state = (0, False)

    def __init__(self, budget: int, end: int):
        self.budget = budget
        self.end = end   # the closing marker's token (Qwen's </think>: one added token)

    def after(self, state: tuple[int, bool], tokens: Sequence[int]) -> tuple[int, bool]:
        thought, closed = state
        for token in tokens:
            if closed:
                break
            closed = token == self.end   # forced past the budget, or the model's own
            thought += not closed
        return thought, closed

    def forced(self, state: tuple[int, bool]) -> int | None:
        """The token the next position must be, or None (free)."""
        thought, closed = state
        return self.end if not closed and thought >= self.budget else None


def thinking_budget(params: SamplingParams, tokenizer: Any) -> ThinkingBudget | None:
    """The request's cap on its thinking, where it has one and the reply starts inside a thinking block whose
    closing marker the tokenizer writes as one token (Qwen's </think>); else None."""
    if params.thinking_budget is None or not params.opens_in_reasoning or not getattr(tokenizer, "has_thinking", False):
        return None
    end = list(tokenizer.encode(tokenizer.think_end, add_special_tokens=False))
    return ThinkingBudget(params.thinking_budget, end[0]) if len(end) == 1 else None


def ending_tokens(eos_token_ids: Iterable[int], params: SamplingParams) -> frozenset[int]:
    """The tokens that end a reply: EOS (unless ignore_eos) and the request's stop_token_ids. The text stream
    stops at them and min_tokens bans them: one set for both."""
    return frozenset(() if params.ignore_eos else map(int, eos_token_ids)) | frozenset(params.stop_token_ids)


def _dead_end_row(params: SamplingParams, tokenizer: Any, vocab: int) -> mx.array | None:
    """(V,) bool: what a row whose every token is banned may still write, the tokens that end a reply (EOS even
    under ignore_eos: there is nothing else); None where there are none."""
    ends = ending_tokens(getattr(tokenizer, "eos_token_ids", None) or (), replace(params, ignore_eos=False))
    ends = [t for t in ends if 0 <= t < vocab]
    if not ends:
        return None
    row = np.zeros(vocab, dtype=bool)
    row[ends] = True
    return mx.array(row)


def _end_row(params: SamplingParams, tokenizer: Any, vocab: int) -> mx.array:
    """(V,) bool: the tokens that end a reply (ending_tokens), which min_tokens bans."""
    row = np.zeros(vocab, dtype=bool)
    ends = ending_tokens(getattr(tokenizer, "eos_token_ids", None) or (), params)
    row[[t for t in ends if 0 <= t < vocab]] = True
    return mx.array(row)


class TargetProcessor:
    """One request's penalties, logit bias and constraint, and the tokens it has emitted so far."""

    def __init__(self, params: SamplingParams, prompt_ids: Sequence[int], tokenizer: Any, vocab: int):
        self.params = params
        self.tokenizer = tokenizer
        self.vocab = vocab
        self.counts = np.zeros(vocab, dtype=np.float32)         # generated tokens (presence, frequency)
        self.seen = np.zeros(vocab, dtype=bool)                  # prompt + generated (repetition)
        self.seen[[t for t in prompt_ids if 0 <= t < vocab]] = True
        self.bias = _bias_row(params.logit_bias, vocab) if params.biased else None
        for token in params.stop_token_ids:
            if not 0 <= token < vocab:
                raise InvalidRequestError(f"stop_token_ids: token id {token} is not in this model's vocabulary "
                                          f"(0 to {vocab - 1})", param="stop_token_ids")
        self.emitted = 0   # tokens the request has emitted (advance)
        self.never, self.bad_sequences = _never_row(params, tokenizer, vocab) \
            if params.allowed_token_ids or params.bad_words else (None, ())
        # what later rows' histories are read from: the generated tokens (bad words of several tokens) and, with
        # a repetition window, the prompt's last tokens before them
        self.window = params.repetition_window if params.repetition_penalty != 1.0 else 0
        self._keep = max(self.window, max(map(len, self.bad_sequences), default=0))
        self.recent: list[int] = list(prompt_ids[-self.window:]) if self.window else []
        self.thinking = thinking_budget(params, tokenizer)
        self.think_state = self.thinking.start_state if self.thinking is not None else None
        # min_tokens: the tokens that would end the reply, banned (-inf) at each position before min_tokens
        self.early_ban = _end_row(params, tokenizer, vocab) if params.min_tokens > 0 else None
        self.matcher = None
        self.off_constraint = False   # the request wrote a token its constraint rejects: nothing is allowed after
        if params.grammar is not None:
            import llguidance

            self.matcher = llguidance.LLMatcher(_llguidance_tokenizer(tokenizer, vocab), params.grammar)
            if self.matcher.is_error():
                # the gateway and engines.forced_call compile every grammar before a request runs
                raise InvalidRequestError(f"output constraint (response_format or a forced tool call): "
                                          f"{self.matcher.get_error()}")
        # where the request's bans leave a row no token at all (allowed_token_ids outside what the constraint
        # permits, min_tokens past a constraint's end), the reply ends: the ending tokens get logit 0 on that row,
        # a function of the row's own history, so every engine ends it at the same token. Only a request with
        # such bans can meet one (built for those alone: a vocabulary-wide row)
        bans = (self.never is not None or bool(self.bad_sequences) or self.early_ban is not None
                or self.matcher is not None or self.thinking is not None)
        self.dead_end = _dead_end_row(params, tokenizer, vocab) if bans else None

    @property
    def active(self) -> bool:
        return (self.params.penalised or self.bias is not None or self.matcher is not None or self.early_ban is not None
                or self.never is not None or bool(self.bad_sequences)
                or (self.think_state is not None and not self.think_state[1]))

    @property
    def per_token(self) -> bool:
        """Each token's logits need this request's history on the host (penalties, a constraint) or
        it reports log-probabilities: it cannot be decoded pipelined."""
        return self.active or bool(self.params.logprobs)

    def advance(self, tokens: Sequence[int]) -> None:
        """Tokens the request emitted (in order): they join every later row's history."""
        self.emitted += len(tokens)
        if self.early_ban is not None and self.emitted >= self.params.min_tokens:
            self.early_ban = None   # past min_tokens no row is early: the request's later steps skip the ban
        for token in tokens:
            if 0 <= token < self.vocab:
                self.counts[token] += 1
                self.seen[token] = True
        if self._keep:
            self.recent = (self.recent + list(tokens))[-self._keep:]
        if self.thinking is not None:
            self.think_state = self.thinking.after(self.think_state, tokens)
        if self.matcher is not None:
            for token in tokens:   # a verify may accept drafts past the end-of-sequence the text stops at
                if self.off_constraint or self.matcher.is_stopped():
                    break
                # a token the constraint rejects (a dead end's EOS, ignore_eos writing on past it): from there
                # no token is the constraint's, on every row alike
                self.off_constraint = self.matcher.try_consume_tokens([int(token)]) != 1

    def apply(self, logits: mx.array, paths: Sequence[Sequence[int]], dead_end: bool = True) -> mx.array:
        """logits (R, V) float; row r continues the emitted tokens by paths[r]. A row left no token ends the
        reply (dead_end; a drafter's deeper rows pass False: nothing to draft there)."""
        if not self.active:
            return logits
        p = self.params
        logits = logits.astype(mx.float32)
        if p.penalised:
            counts = np.repeat(self.counts[None], len(paths), axis=0)
            seen = np.repeat(self.seen[None], len(paths), axis=0) if not self.window else \
                np.zeros((len(paths), self.vocab), dtype=bool)
            for row, path in enumerate(paths):
                for token in path:
                    counts[row, token] += 1
                    seen[row, token] = True
                if self.window:   # the row's last `window` tokens of prompt + generated + its path
                    seen[row, [t for t in (self.recent + list(path))[-self.window:] if 0 <= t < self.vocab]] = True
            if p.repetition_penalty != 1.0:
                rep = mx.array(seen)
                logits = mx.where(rep, mx.where(logits > 0, logits / p.repetition_penalty,
                                                logits * p.repetition_penalty), logits)
            c = mx.array(counts)
            logits = logits - p.frequency_penalty * c - p.presence_penalty * (c > 0)
        if self.bias is not None:
            logits = logits + self.bias
        if self.never is not None:
            logits = mx.where(self.never[None], -mx.inf, logits)
        if self.bad_sequences:
            banned = self._bad_word_ends(paths)
            if banned.any():
                logits = mx.where(mx.array(banned), -mx.inf, logits)
        if self.early_ban is not None:   # row r's token is the request's (emitted + len(paths[r]) + 1)-th
            early = np.array([self.emitted + len(path) < p.min_tokens for path in paths])
            if early.any():
                logits = mx.where(mx.array(early)[:, None] & self.early_ban[None], -mx.inf, logits)
        if self.thinking is not None and not self.think_state[1]:   # a row past the budget: its closing token only
            forced = [self.thinking.forced(self.thinking.after(self.think_state, path)) for path in paths]
            if any(token is not None for token in forced):
                only = np.zeros((len(paths), self.vocab), dtype=bool)
                for row, token in enumerate(forced):
                    if token is None:
                        only[row] = True
                    else:
                        only[row, token] = True
                logits = mx.where(mx.array(only), logits, -mx.inf)
        if self.matcher is not None:
            logits = mx.where(mx.array(self._allowed(paths)), logits, -mx.inf)
        if dead_end and self.dead_end is not None:
            dead = mx.isneginf(mx.max(logits, axis=-1, keepdims=True))   # (R, 1): nothing left on that row
            logits = mx.where(dead & self.dead_end[None], 0.0, logits)
        return logits

    def _bad_word_ends(self, paths: Sequence[Sequence[int]]) -> np.ndarray:
        """(R, V) bool: each row's banned last tokens of the bad words whose other tokens its generated tokens
        (the request's and its path) end with (vLLM reads the generated tokens only, not the prompt)."""
        banned = np.zeros((len(paths), self.vocab), dtype=bool)
        generated = self.recent[-min(self._keep, self.emitted):] if self.emitted else []
        for row, path in enumerate(paths):
            tail = generated + list(path)
            for word in self.bad_sequences:
                head = list(word[:-1])
                if len(tail) >= len(head) and tail[len(tail) - len(head):] == head:
                    banned[row, word[-1]] = True
        return banned

    def logprobs(self, logits: mx.array, tokens: Sequence[int]) -> list[TokenLogprob]:
        """The emitted `tokens`' log-probabilities under processed `logits` rows (one row each), if asked."""
        if not self.params.logprobs or not tokens:
            return []
        return token_logprobs(self.tokenizer, logits, tokens, self.params.top_logprobs)

    def _allowed(self, paths: Sequence[Sequence[int]]) -> np.ndarray:
        """(R, V) bool: the constraint's next-token set after each row's path."""
        from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

        masks = allocate_token_bitmask(len(paths), self.vocab)
        masks[:] = 0
        if self.off_constraint:
            return np.zeros((len(paths), self.vocab), dtype=bool)
        for row, path in enumerate(paths):
            # past a token the constraint rejects nothing is allowed (the request's own history alike: a row is
            # processed as the same tokens emitted would be); try_consume stops at the first rejected token
            # without putting the matcher in error
            consumed = self.matcher.try_consume_tokens(list(path)) if path else 0
            if consumed == len(path):
                fill_next_token_bitmask(self.matcher, masks, row)
            if consumed:
                self.matcher.rollback(consumed)
        bits = (masks[:, :, None] >> np.arange(32, dtype=np.int32)) & 1
        return bits.reshape(len(paths), -1)[:, : self.vocab].astype(bool)


# what a token the processed distribution rules out (a grammar's mask) reports instead of -inf, which
# JSON cannot carry: OpenAI's own value for a token with no chance
LOGPROB_FLOOR = -9999.0


def token_logprobs(tokenizer: Any, logits: mx.array, tokens: Sequence[int], top: int,
                   ranked: bool = False) -> list[TokenLogprob]:
    """Log-probabilities of `tokens` under the (processed) target `logits` rows, with `top` alternatives
    (none below LOGPROB_FLOOR), and `ranked`: each token's rank (1 + the tokens likelier than it)."""
    raw = TokenBytes(tokenizer)
    lp = logits.astype(mx.float32) - mx.logsumexp(logits.astype(mx.float32), axis=-1, keepdims=True)
    lp = mx.maximum(lp, LOGPROB_FLOOR)
    picked = mx.take_along_axis(lp, mx.array(list(tokens))[:, None], axis=-1)
    chosen = np.array(picked[:, 0])
    ranks = np.array(mx.sum(lp > picked, axis=-1) + 1) if ranked else np.zeros(len(tokens), dtype=np.int64)
    tops: list[tuple[TopLogprob, ...]] = [()] * len(tokens)
    if top > 0:
        index = np.array(mx.argsort(-lp, axis=-1)[:, :top])
        values = np.array(mx.take_along_axis(lp, mx.array(index), axis=-1))
        tops = [tuple(TopLogprob(tokenizer.decode([int(t)]), int(t), float(v), raw(int(t)))
                      for t, v in zip(row_i, row_v))
                for row_i, row_v in zip(index, values)]
    return [TokenLogprob(tokenizer.decode([int(t)]), int(t), float(v), tuple(alternatives), raw(int(t)), int(rank))
            for t, v, alternatives, rank in zip(tokens, chosen, tops, ranks)]
