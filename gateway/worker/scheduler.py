"""One worker thread owns the model; requests wait in a bounded FIFO and run one at a time.

The worker iterates a request's work generator and hands each item to the event loop through
loop.call_soon_threadsafe, so the loop never blocks on model code. Cancelling a ticket (client
disconnect) removes it from the queue, or stops the running generator after the current step.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from typing import Any, Callable, Iterator

from contracts.engine import CancelToken

from .errors import QueueFull, RequestTimedOut, WorkerUnavailable

log = logging.getLogger("switchyard.scheduler")

_ITEM, _ERROR, _END = "item", "error", "end"


class Ticket:
    """One admitted request: its cancel flag and the stream of items its work yields."""

    def __init__(
        self, work: Callable[["Ticket"], Iterator[Any]], loop: asyncio.AbstractEventLoop, admitted_depth: int,
        timeout: float | None = None,
    ):
        self.work = work
        self.cancel_token = CancelToken()
        self.admitted_depth = admitted_depth   # requests waiting ahead of this one when it was admitted
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout if timeout is not None else None
        self._loop = loop
        self._inbox: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._on_cancel: Callable[[Ticket], None] | None = None
        self._closed = False

    # -- event-loop side --
    def cancel(self) -> None:
        if not self.cancel_token.cancelled:
            self.cancel_token.cancel()
            if self._on_cancel is not None:
                self._on_cancel(self)

    async def next(self) -> Any:
        """The next item; raises StopAsyncIteration at the end, or the exception the work raised."""
        if self._closed:
            raise StopAsyncIteration
        kind, value = await self._inbox.get()
        if kind == _ITEM:
            return value
        self._closed = True
        if kind == _ERROR:
            raise value
        raise StopAsyncIteration

    def __aiter__(self) -> "Ticket":
        return self

    async def __anext__(self) -> Any:
        return await self.next()

    # -- worker side (thread-safe) --
    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def _post(self, kind: str, value: Any = None) -> None:
        try:
            self._loop.call_soon_threadsafe(self._inbox.put_nowait, (kind, value))
        except RuntimeError:  # event loop closed (shutdown): nobody is listening any more
            self.cancel_token.cancel()


class Scheduler:
    def __init__(self, max_queue: int, retry_after_seconds: int = 1, request_timeout: float | None = None,
                 on_exit: Callable[[], None] | None = None):
        self.max_queue = max_queue
        self._on_exit = on_exit   # run on the worker thread as its last act (Backend.end_thread)
        self.retry_after_seconds = retry_after_seconds
        self.request_timeout = request_timeout   # seconds from admission; None = unlimited
        self._waiting: collections.deque[Ticket] = collections.deque()
        self._running: Ticket | None = None
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._admission_closed = False   # draining for shutdown: admitted requests still run
        self.death: BaseException | None = None
        self._death_callbacks: list[Callable[[BaseException], None]] = []

    # -- state --
    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return 0 if self._running is None else 1

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.death is None

    @property
    def admitting(self) -> bool:
        """False once shutdown began (draining) or the worker is gone."""
        return self.alive and not self._admission_closed and not self._stopping

    @property
    def full(self) -> bool:
        """A submit now would get 429 (the same rule as submit())."""
        busy = self._running is not None or bool(self._waiting)
        return busy and len(self._waiting) >= self.max_queue

    @property
    def idle(self) -> bool:
        return self._running is None and not self._waiting

    @property
    def worker_thread(self) -> threading.Thread | None:
        return self._thread

    def on_death(self, callback: Callable[[BaseException], None]) -> None:
        """Called (on the worker thread) if the worker dies; the CLI uses it to exit non-zero."""
        self._death_callbacks.append(callback)

    # -- lifecycle --
    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="switchyard-worker", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop admitting, cancel everything, and wait for the worker to finish its current step."""
        with self._cond:
            self._stopping = True
            pending = list(self._waiting)
            self._waiting.clear()
            if self._running is not None:
                self._running.cancel_token.cancel()
            self._cond.notify_all()
        for ticket in pending:
            ticket.cancel_token.cancel()
            ticket._post(_END)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    # -- graceful shutdown (gateway/shutdown.py) --
    def close_admission(self) -> None:
        """New requests get 503 from now on; the running and queued ones carry on."""
        with self._cond:
            self._admission_closed = True

    def cancel_all(self) -> int:
        """Cancel the running request (it ends within one step) and every queued one. Event loop only."""
        with self._cond:
            tickets = ([self._running] if self._running is not None else []) + list(self._waiting)
        for ticket in tickets:
            ticket.cancel()
        return len(tickets)

    # -- admission --
    def submit(self, work: Callable[[Ticket], Iterator[Any]]) -> Ticket:
        """Queue work (called on the event loop). Raises QueueFull / WorkerUnavailable."""
        loop = asyncio.get_running_loop()
        with self._cond:
            if not self.alive or self._stopping:
                raise WorkerUnavailable()
            if self._admission_closed:
                raise WorkerUnavailable("The server is shutting down.")
            busy = self._running is not None or bool(self._waiting)
            if busy and len(self._waiting) >= self.max_queue:  # an idle server always admits one
                raise QueueFull(self.retry_after_seconds)
            ticket = Ticket(work, loop, admitted_depth=len(self._waiting), timeout=self.request_timeout)
            ticket._on_cancel = self._discard
            self._waiting.append(ticket)
            self._cond.notify()
        return ticket

    def _discard(self, ticket: Ticket) -> None:
        """A cancelled ticket still waiting leaves the queue at once (frees its slot)."""
        with self._cond:
            try:
                self._waiting.remove(ticket)
            except ValueError:
                return  # already running (the worker stops it after this step) or finished
        ticket._post(_END)

    # -- worker --
    def _take(self) -> Ticket | None:
        with self._cond:
            while not self._waiting and not self._stopping:
                self._cond.wait()
            if self._stopping:
                return None
            self._running = self._waiting.popleft()
            return self._running

    def _run(self) -> None:
        try:
            while (ticket := self._take()) is not None:
                self._serve(ticket)
        except BaseException as exc:  # noqa: BLE001 - a dead worker must be reported, whatever killed it
            self._die(exc)
        finally:
            if self._on_exit is not None:
                try:
                    self._on_exit()
                except Exception:  # noqa: BLE001
                    log.exception("worker exit hook failed")

    def _serve(self, ticket: Ticket) -> None:
        work = None
        try:
            if ticket.cancel_token.cancelled:
                return
            if ticket.expired():  # timed out while queued
                ticket._post(_ERROR, RequestTimedOut(ticket.timeout or 0.0))
                return
            work = ticket.work(ticket)
            for item in work:
                ticket._post(_ITEM, item)
                if ticket.cancel_token.cancelled:
                    break  # stop within one step of the cancel
                if ticket.expired() and getattr(item, "finish_reason", None) is None:
                    # stop within one step of the deadline (a final chunk already ended the request)
                    ticket.cancel_token.cancel()
                    ticket._post(_ERROR, RequestTimedOut(ticket.timeout or 0.0))
                    break
        except Exception as exc:  # a request's failure, not the worker's
            ticket._post(_ERROR, exc)
        except BaseException:
            # Never hand a BaseException to the event loop; the worker itself is going down.
            ticket._post(_ERROR, WorkerUnavailable("The model worker died; the server is restarting."))
            raise
        finally:
            if work is not None and hasattr(work, "close"):
                try:
                    work.close()  # runs the generator's finally blocks now, on this thread
                except Exception:  # noqa: BLE001
                    log.exception("error while closing a request's generator")
            ticket._post(_END)
            with self._cond:
                self._running = None

    def _die(self, exc: BaseException) -> None:
        log.critical("model worker thread died: %r", exc)
        with self._cond:
            self.death = exc
            self._stopping = True
            pending = list(self._waiting)
            self._waiting.clear()
        for ticket in pending:
            ticket._post(_ERROR, WorkerUnavailable("The model worker died; the server is restarting."))
        for callback in self._death_callbacks:
            try:
                callback(exc)
            except Exception:  # noqa: BLE001
                log.exception("worker-death callback failed")
