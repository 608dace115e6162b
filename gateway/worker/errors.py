"""What the scheduler raises; the HTTP layer (gateway/http/errors.py) maps each to a status."""

from __future__ import annotations


class WorkerError(Exception):
    """Base of the scheduler's errors."""


class QueueFull(WorkerError):
    """The bounded queue is full (HTTP 429 with Retry-After)."""

    def __init__(self, retry_after_seconds: int):
        super().__init__("The server is busy: the request queue is full. Retry later.")
        self.retry_after_seconds = retry_after_seconds


class WorkerUnavailable(WorkerError):
    """The worker is not running, has died, or the server is draining (HTTP 503)."""

    def __init__(self, message: str = "The model worker is not running."):
        super().__init__(message)


class RequestTimedOut(WorkerError):
    """The request ran past its wall-clock budget; its generation was stopped (HTTP 504)."""

    def __init__(self, seconds: float):
        super().__init__(f"The request took longer than the server's limit of {seconds:g} s and was stopped.")
        self.seconds = seconds
