"""Typed errors that library code raises; only the gateway turns them into HTTP responses."""

from __future__ import annotations


class SwitchyardError(Exception):
    """Base class of the typed errors library code raises; the gateway maps them to HTTP."""


class ModelLoadError(SwitchyardError):
    """A model, MTP head, drafter or classifier artifact is missing or malformed."""


class InvalidRequestError(SwitchyardError):
    """The request cannot be served as asked (bad parameter, prompt too long, ...)."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param = param
        self.code = code


class ContextLengthExceeded(InvalidRequestError):
    """The prompt, or the prompt plus the max_tokens asked for, does not fit the model's context.

    The message is OpenAI's own wording because clients key on it: litellm raises its
    ContextWindowExceededError (which Aider and litellm's context-window fallbacks catch) only when the
    text starts "This model's maximum context length is". The numbers are kept so an endpoint can
    say it in its own API's words (gateway.http.anthropic)."""

    def __init__(self, prompt_tokens: int, context_length: int, max_tokens: int | None = None):
        self.prompt_tokens, self.context_length, self.max_tokens = prompt_tokens, context_length, max_tokens
        if max_tokens is None:   # the client set no max_tokens: the prompt alone leaves no room
            message = (f"This model's maximum context length is {context_length} tokens. However, your messages "
                       f"resulted in {prompt_tokens} tokens. Please reduce the length of the messages.")
        else:
            message = (f"This model's maximum context length is {context_length} tokens. However, you requested "
                       f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the "
                       "completion). Please reduce the length of the messages or completion.")
        super().__init__(message, param="messages", code="context_length_exceeded")


class EngineUnavailableError(SwitchyardError):
    """The requested engine is not loaded (or quarantined)."""


class EngineFailure(SwitchyardError):
    """An engine raised while generating; the request fails, the engine may be quarantined."""

    def __init__(self, engine: str, cause: BaseException):
        super().__init__(f"engine {engine!r} failed: {cause}")
        self.engine = engine
        self.cause = cause
