"""Turn a validated OpenAI request into what the worker runs (RequestSpec); reject what we cannot honour."""

from __future__ import annotations

from contracts.request_text import from_messages, from_prompt
from contracts.sampling import SamplingParams
from gateway.config import GatewayConfig
from gateway.worker.spec import RequestSpec

from .errors import APIError, bad_request
from .schemas import ChatCompletionRequest, CompletionRequest, _SamplingFields

AUTO = "auto"


def _reject_common(req: _SamplingFields) -> None:
    if req.n is not None and req.n != 1:
        raise bad_request("Only n=1 is supported.", param="n", code="unsupported_value")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(req, name) not in (None, 0, 0.0):
            raise bad_request(f"{name} is not supported (only 0).", param=name, code="unsupported_value")
    if req.logit_bias:
        raise bad_request("logit_bias is not supported.", param="logit_bias", code="unsupported_parameter")
    if req.logprobs not in (None, False):
        raise bad_request("logprobs are not supported.", param="logprobs", code="unsupported_parameter")


def _reject_chat(req: ChatCompletionRequest) -> None:
    _reject_common(req)
    if req.top_logprobs not in (None, 0):
        raise bad_request("top_logprobs is not supported.", param="top_logprobs", code="unsupported_parameter")
    for name in ("tools", "functions"):
        if getattr(req, name):
            raise bad_request(f"{name} (tool calling) is not supported.", param=name, code="unsupported_parameter")
    for name in ("tool_choice", "function_call"):
        if getattr(req, name) not in (None, "none"):
            raise bad_request(f"{name} is not supported.", param=name, code="unsupported_parameter")
    if req.response_format is not None and req.response_format.type != "text":
        raise bad_request(
            f"response_format {req.response_format.type!r} is not supported; only 'text'.",
            param="response_format",
            code="unsupported_value",
        )


def _reject_completion(req: CompletionRequest) -> None:
    _reject_common(req)
    if req.echo:
        raise bad_request("echo is not supported.", param="echo", code="unsupported_parameter")
    if req.suffix:
        raise bad_request("suffix is not supported.", param="suffix", code="unsupported_parameter")
    if req.best_of not in (None, 1):
        raise bad_request("Only best_of=1 is supported.", param="best_of", code="unsupported_value")


def _stop_list(stop: str | list[str] | None, config: GatewayConfig) -> tuple[str, ...]:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > config.max_stop_sequences:
        raise bad_request(f"At most {config.max_stop_sequences} stop sequences are allowed.", param="stop")
    if any(s == "" for s in stops):
        raise bad_request("Stop sequences must not be empty strings.", param="stop")
    if any(len(s) > config.max_stop_chars for s in stops):
        raise bad_request(f"Stop sequences may be at most {config.max_stop_chars} characters long.", param="stop")
    return tuple(stops)


def _max_tokens(asked: int | None, param: str, config: GatewayConfig) -> int:
    """The request's max_tokens (over the server's cap -> 400), or the default, itself capped."""
    if asked is None:
        return min(config.default_max_tokens, config.max_tokens_limit)
    if asked > config.max_tokens_limit:
        raise bad_request(f"{param} must be at most {config.max_tokens_limit} on this server (got {asked}).",
                          param=param, code="invalid_value")
    return asked


def _sampling(req: _SamplingFields, max_tokens: int, config: GatewayConfig) -> SamplingParams:
    return SamplingParams(
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=0 if req.top_k == -1 else req.top_k,
        min_p=req.min_p,
        seed=req.seed,
        max_tokens=max_tokens,
        stop=_stop_list(req.stop, config),
    )


def resolve_engine(body_engine: str | None, header_engine: str | None, loaded: tuple[str, ...]) -> str | None:
    """The forced engine (body field wins over the header), None for auto. Each one given must name
    auto or a loaded engine (unknown/unloaded -> 400), even when the other one wins."""
    header = _engine_name(header_engine, loaded)
    body = _engine_name(body_engine, loaded)
    return body if body_engine is not None else header


def _engine_name(given: str | None, loaded: tuple[str, ...]) -> str | None:
    if given is None:
        return None
    name = given.strip(" \t").lower()  # as /openapi.json documents it
    if name in ("", AUTO):
        return None
    if name not in loaded:
        choices = ", ".join([AUTO, *loaded])
        raise APIError(400, f"Engine {name!r} is not loaded; choose one of: {choices}.", param="engine", code="engine_not_loaded")
    return name


def chat_spec(req: ChatCompletionRequest, forced_engine: str | None, config: GatewayConfig) -> RequestSpec:
    _reject_chat(req)
    if len(req.messages) > config.max_messages:
        raise bad_request(f"At most {config.max_messages} messages are allowed per request.", param="messages")
    param = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
    max_tokens = _max_tokens(req.max_completion_tokens or req.max_tokens, param, config)
    messages = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in req.messages]
    return RequestSpec(
        messages=messages,
        prompt=None,
        params=_sampling(req, max_tokens, config),
        forced_engine=forced_engine,
        text=from_messages(messages, req.response_format.type if req.response_format else None),
        max_tokens_defaulted=req.max_completion_tokens is None and req.max_tokens is None,
    )


def completion_spec(req: CompletionRequest, forced_engine: str | None, config: GatewayConfig) -> RequestSpec:
    _reject_completion(req)
    prompt = req.prompt
    if isinstance(prompt, list):
        if len(prompt) != 1 or not isinstance(prompt[0], str):
            raise bad_request("prompt must be a string (or a list holding exactly one string).", param="prompt")
        prompt = prompt[0]
    if not prompt:
        raise bad_request("prompt must not be empty.", param="prompt")
    return RequestSpec(
        messages=None,
        prompt=prompt,
        params=_sampling(req, _max_tokens(req.max_tokens, "max_tokens", config), config),
        forced_engine=forced_engine,
        text=from_prompt(prompt),
        max_tokens_defaulted=req.max_tokens is None,
    )
