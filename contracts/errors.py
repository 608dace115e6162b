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


class EngineUnavailableError(SwitchyardError):
    """The requested engine is not loaded (or quarantined)."""


class EngineFailure(SwitchyardError):
    """An engine raised while generating; the request fails, the engine may be quarantined."""

    def __init__(self, engine: str, cause: BaseException):
        super().__init__(f"engine {engine!r} failed: {cause}")
        self.engine = engine
        self.cause = cause
