"""What a request asks of the sampler."""

from __future__ import annotations

from dataclasses import dataclass


SEEDS = 2**64   # the generator's seeds are 64-bit unsigned: 0 to SEEDS - 1


def choice_seed(seed: int, index: int) -> int:
    """Choice `index`'s seed of a request seeded `seed`: seed + index, wrapping past the last seed (a request's
    seed may be the last one, and its n choices must all be valid seeds)."""
    return (seed + index) % SEEDS


@dataclass(frozen=True)
class SamplingParams:
    """What the sampler needs. None means "use the model's generation_config default"."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None            # 0 to SEEDS - 1
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    # penalties on the target's logits (every engine applies them identically at every verified position)
    presence_penalty: float = 0.0      # subtracted once from every token already generated
    frequency_penalty: float = 0.0     # subtracted per occurrence among the generated tokens
    repetition_penalty: float = 1.0    # divides positive / multiplies negative logits of prompt + generated tokens
    repetition_window: int = 0         # of the last this many of those tokens only (llama.cpp's and Ollama's
                                       # repeat_last_n); 0: all of them
    logit_bias: tuple[tuple[int, float], ...] = ()   # (token id, value added to its logit), as OpenAI's logit_bias
    logprobs: bool = False             # report each emitted token's log-probability
    top_logprobs: int = 0              # and this many alternatives per position
    grammar: str | None = None         # an output constraint (llguidance grammar), e.g. from a JSON schema
    # vLLM's: the first min_tokens tokens cannot be an end (EOS unless ignore_eos, or one of stop_token_ids),
    # a -inf on those ids in the target's logits at every position before it (so speculation stays lossless)
    min_tokens: int = 0
    stop_token_ids: tuple[int, ...] = ()   # more tokens that end the reply as EOS does (not part of its text)
    ignore_eos: bool = False               # EOS does not end the reply (max_tokens, a stop or stop_token_ids do)
    skip_special_tokens: bool = True       # vLLM's default: special tokens (an ignored EOS, ...) are not text
    allowed_token_ids: tuple[int, ...] = ()   # vLLM's: only these may be sampled (-inf on every other); (): any
    bad_words: tuple[str, ...] = ()            # vLLM's: words never written (their last token banned after the rest)
    # at most this many tokens inside the thinking block the generation prompt opened, then its end is forced
    # (vLLM's thinking_token_budget, Anthropic's budget_tokens); None: no cap
    thinking_budget: int | None = None
    opens_in_reasoning: bool = False           # the generation prompt opened the thinking block (set per prompt)

    @property
    def penalised(self) -> bool:
        return self.presence_penalty != 0.0 or self.frequency_penalty != 0.0 or self.repetition_penalty != 1.0

    @property
    def biased(self) -> bool:
        return any(value != 0.0 for _, value in self.logit_bias)

    @property
    def greedy(self) -> bool:
        return self.temperature is not None and self.temperature <= 0.0
