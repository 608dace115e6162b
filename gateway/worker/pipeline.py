"""What the worker thread runs for one request: tokenize, route, generate (feeding the router)."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace

from contracts.chat import ChatPrompt, PromptLogprobs
from contracts.engine import Backend, CancelToken, GenerationChunk, Pause, PrefixHint
from contracts.errors import ContextLengthExceeded, InvalidRequestError
from contracts.sampling import SamplingParams, choice_seed
from gateway.routing.interface import RouteDecision, Router, RouteRequest

from .spec import RequestSpec

log = logging.getLogger("switchyard.gateway")


@dataclass(frozen=True)
class Routed:
    """First item of every request: the route taken and the prompt length."""

    decision: RouteDecision
    prompt_tokens: int
    reserve_tokens: int = 0   # the most tokens one of its contexts may reach (prompt + max_tokens): its memory


@dataclass(frozen=True)
class ChoiceStart:
    """Precedes the chunks of each choice (n > 1, or several prompts: generated one after another)."""

    index: int
    prompt: int = 0   # which of the request's prompts it answers (a text completion may send several)
    # that prompt's own tokens scored (echo with logprobs, vLLM's prompt_logprobs)
    prompt_logprobs: PromptLogprobs | None = None


def _prompt(backend: Backend, spec: RequestSpec) -> tuple[list[list[int]], ChatPrompt | None, PrefixHint]:
    """The prompts' tokens (a chat has one, a text completion one or more), the rendered chat (how to read the
    reply, what it imposes on it) and where to snapshot it."""
    keep = backend.context_length if spec.truncate_prompt == -1 else spec.truncate_prompt
    if spec.messages is None:
        prompts = [backend.encode_prompt(p, spec.suffix) for p in spec.prompts]
        return [ids[-keep:] for ids in prompts] if keep else prompts, None, PrefixHint(spec.cache_scope)
    prompt = backend.chat_prompt(spec.messages, spec.tools, spec.tool_choice, spec.template_kwargs, spec.continue_final,
                                 answer_schema=spec.answer_schema)
    cut = max(len(prompt.ids) - keep, 0) if keep else 0
    if cut:   # the snapshot points move with the prompt's new start
        prompt = replace(prompt, ids=prompt.ids[cut:], cache_points=tuple(p - cut for p in prompt.cache_points if p > cut))
    return [prompt.ids], prompt, PrefixHint(spec.cache_scope, prompt.cache_points)


def _imposed(params: SamplingParams, chat: ChatPrompt | None) -> SamplingParams:
    """The params with what the rendered chat imposes on its reply: whether it starts inside the thinking block
    (where a thinking budget counts), its grammar (a forced call, for which
    chat_spec drops a response_format's grammar; or a JSON answer beside tools: that JSON or a call, in the
    template's syntax), and its banned tokens (tool_choice "none"'s call opening) as a -inf logit bias, which
    every engine applies to the target's logits like any bias."""
    if chat is None:
        return params
    if params.thinking_budget is not None:   # the cap reads where the reply starts: inside thinking or not
        params = replace(params, opens_in_reasoning=chat.reply.opens_in_reasoning)
    if chat.grammar is not None:
        params = replace(params, grammar=chat.grammar)
    if chat.banned:
        params = replace(params, logit_bias=(*params.logit_bias, *((token, -math.inf) for token in chat.banned)))
    return params


def check_fits(prompt_tokens: int, context_length: int, spec: RequestSpec) -> None:
    """Raise ContextLengthExceeded when the prompt (plus the max_tokens the client asked for) does not fit
    the context, as run_request (an unasked max_tokens: the prompt alone) and the backend's generate (an
    asked one) would."""
    if spec.max_tokens_defaulted:
        if context_length - prompt_tokens <= 0:   # the client set no max_tokens: do not blame one
            raise ContextLengthExceeded(prompt_tokens, context_length)
    elif prompt_tokens + spec.params.max_tokens > context_length:
        raise ContextLengthExceeded(prompt_tokens, context_length, spec.params.max_tokens)


def check_prompt(backend: Backend, spec: RequestSpec) -> None:
    """Render the prompt as run_request will and raise what it would raise about it (a template's error,
    a prompt that does not fit). Tokenizer only, no model: safe off the worker thread. For a stream that
    must start while it still waits in the queue, so that those errors stay plain HTTP errors."""
    for ids in _prompt(backend, spec)[0]:
        check_fits(len(ids), backend.context_length, spec)


def _fitted(params: SamplingParams, prompt_tokens: int, context_length: int, spec: RequestSpec) -> SamplingParams:
    """The params for one prompt: a max_tokens the client did not ask for stops at the context's end instead
    of refusing the prompt."""
    room = context_length - prompt_tokens
    if spec.max_tokens_defaulted and 0 < room < params.max_tokens:
        return replace(params, max_tokens=room)
    return params


def run_request(
    backend: Backend, router: Router, spec: RequestSpec, cancel: CancelToken, queue_depth: int, concurrent: int = 0
) -> Iterator[Routed | ChoiceStart | GenerationChunk | Pause]:
    prompts, chat, prefix = _prompt(backend, spec)
    reply = chat.reply if chat is not None else None
    if reply is not None and not spec.parallel_tool_calls:   # the engines end the reply at its first call
        reply = replace(reply, one_call=True)
    params = _imposed(spec.params, chat)
    for ids in prompts:   # every prompt is checked before the first one runs: a batch fails whole or not at all
        check_fits(len(ids), backend.context_length, spec)
    longest = max(map(len, prompts))
    decision = router.choose(
        RouteRequest(
            text=spec.text,
            forced_engine=spec.forced_engine,
            prompt_tokens=longest,
            queue_depth=queue_depth,
            concurrent=concurrent,
            sampled=(params.temperature if params.temperature is not None else backend.default_temperature) > 0,
        )
    )
    fitted = [_fitted(params, len(ids), backend.context_length, spec) for ids in prompts]
    # usage counts every prompt once, as OpenAI's does (not once per choice of it); choices run one after another
    yield Routed(decision, sum(map(len, prompts)), max(len(ids) + p.max_tokens for ids, p in zip(prompts, fitted)))
    error: BaseException | None = None
    try:
        for at, (prompt_ids, prompt_params) in enumerate(zip(prompts, fitted)):
            # echo with logprobs ("": no text, nothing echoed) and vLLM's prompt_logprobs share one scoring, with
            # the more alternatives of the two (the renderer keeps each its own)
            echoed = spec.score_prompts and spec.prompts[at] != ""
            scored = backend.prompt_logprobs(prompt_ids, max(params.top_logprobs if echoed else 0,
                                                             spec.prompt_logprobs or 0)) \
                if echoed or spec.prompt_logprobs is not None else None
            for index in range(spec.n):
                if cancel.cancelled:
                    return
                yield ChoiceStart(at * spec.n + index, at, scored)
                # each choice is its own sample: a fixed seed gives n different (reproducible) choices, and a
                # prompt's choices in a batch are those it would get alone
                choice_params = replace(prompt_params, seed=choice_seed(prompt_params.seed, index)) \
                    if prompt_params.seed is not None else prompt_params
                chunks = backend.generate(prompt_ids, choice_params, decision.engine, cancel, switch=decision.switch,
                                          reply=reply, prefix=prefix) if choice_params.max_tokens > 0 \
                    else _nothing(len(prompt_ids))
                for chunk in _one_call_at_most(chunks) if not spec.parallel_tool_calls else chunks:
                    if isinstance(chunk, Pause):   # a long prefill gives the worker back: the scheduler posts nothing
                        yield chunk
                        continue
                    if chunk.step is not None:
                        _safely(router.observe, decision, chunk.step)
                    yield chunk
    except InvalidRequestError:
        raise  # the request's fault, not the engine's: no quarantine
    except Exception as exc:
        error = exc
        raise
    finally:
        _safely(router.finished, decision, error)


def _nothing(prompt_tokens: int) -> Iterator[GenerationChunk]:
    """The reply to max_tokens 0 (a text completion's echo, to score the prompt): no token, cut by length."""
    yield GenerationChunk("", [], "length", None, prompt_tokens, 0)


def _one_call_at_most(chunks: Iterator[GenerationChunk]) -> Iterator[GenerationChunk]:
    """parallel_tool_calls: false — the reply ends with its first tool call (the generation stops
    there instead of writing calls that would be dropped). The runtime already ends it at the token that
    closed the call (ReplyFormat.one_call); this holds for any backend."""
    for chunk in chunks:
        if not isinstance(chunk, Pause) and chunk.tool_calls:
            yield replace(chunk, tool_calls=chunk.tool_calls[:1], finish_reason="tool_calls",
                          call_deltas=[delta for delta in chunk.call_deltas if delta.index == 0])
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
            return
        yield chunk


def _safely(fn, *args) -> None:
    """A monitor/router bug must not break the request being served; it is logged loudly."""
    try:
        fn(*args)
    except Exception:
        log.exception("router callback %s failed", getattr(fn, "__name__", fn))
