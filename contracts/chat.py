"""What a chat reply is made of beyond text: reasoning, tool calls, token log-probabilities, and
how the prompt shapes the reply's start. No MLX; the gateway renders these as OpenAI/Anthropic JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


# what part of a chat reply a generated token is (GenerationChunk.parts): inside the thinking block, the
# answer's text, or neither (the markers, tool calls, the template's blank lines before the answer)
REASONING, ANSWER, MARKUP = "reasoning", "answer", "markup"


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str          # a JSON object, as the OpenAI API carries it


@dataclass(frozen=True)
class CallDelta:
    """A tool call's progress in a stream, in the order the reply writes it. Every returned call comes as
    one or more deltas: the first `opens` it (its id and name), each carries more of its arguments' JSON
    text, and the last holds the whole call (`done`); joined, the deltas' arguments are the call's."""

    index: int              # the call's place among the reply's calls, from 0
    id: str
    name: str
    arguments: str          # more of the arguments' JSON text ("" allowed)
    opens: bool = False
    done: ToolCall | None = None


@dataclass(frozen=True)
class TopLogprob:
    token: str
    token_id: int
    logprob: float
    # the token's own bytes: a token holding part of a multi-byte character (an emoji, a CJK character in
    # a byte-level vocabulary) decodes to U+FFFD, while clients rebuild the text by joining these (OpenAI's
    # `bytes`); empty: the UTF-8 of `token`
    raw: bytes = b""


@dataclass(frozen=True)
class TokenLogprob:
    """One emitted token's log-probability under the target's distribution (after penalties and any
    output constraint, before temperature), and the most likely alternatives at that position."""

    token: str
    token_id: int
    logprob: float
    top: tuple[TopLogprob, ...] = ()
    raw: bytes = b""   # the token's own bytes (TopLogprob.raw)
    rank: int = 0      # 1 + how many tokens were likelier (vLLM's prompt_logprobs report it); 0: not computed


@dataclass(frozen=True)
class PromptLogprobs:
    """A prompt's tokens scored, for a text completion's echo with logprobs: the first token, which nothing
    precedes (it has no log-probability), then each later one under the target given the tokens before it."""

    first: str
    first_raw: bytes
    scored: tuple[TokenLogprob, ...]


@dataclass(frozen=True)
class ReplyFormat:
    """How to read the reply's text: reasoning blocks and tool calls in the chat template's syntax."""

    tools: tuple[dict[str, Any], ...] = ()   # the request's tools (argument types for the parser)
    parse_tools: bool = False                # no tools: tool-call markup stays text
    opens_in_reasoning: bool = False         # the generation prompt already opened a thinking block
    prefix: str = ""                         # reply text the prompt already holds (a forced tool call's start)
    continues: bool = False                  # the reply continues the client's own start of it (a prefill):
                                             # its first characters belong to the answer, leading blanks too
    one_call: bool = False                   # parallel_tool_calls false: the reply ends with its first call
    refuse_calls: bool = False               # tool_choice none (tools shown, no call allowed): a call the model
                                             # writes anyway ends the reply and is not returned, nor its markup


@dataclass(frozen=True)
class ChatPrompt:
    ids: list[int]
    reply: ReplyFormat = field(default_factory=ReplyFormat)
    # token counts worth a prefix-cache snapshot: the end of the system prompt + tools (shared by new
    # conversations and sub-agents) and the conversation before the generation prompt (where the next
    # turn's prompt leaves this one when the template rewrites the reply, e.g. dropped reasoning)
    cache_points: tuple[int, ...] = ()
    # what the reply must follow (SamplingParams.grammar, an llguidance grammar): a forced tool call,
    # from just after its opening (`reply.prefix`, the prompt's end) to the end of the reply
    grammar: str | None = None
    # tokens the reply may not hold (SamplingParams.logit_bias -inf): tool_choice "none"'s call opening
    banned: tuple[int, ...] = ()
