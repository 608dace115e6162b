"""One worker thread owns the model; requests wait in a bounded FIFO and up to `max_running` of
them run at once, interleaved one step at a time.

The worker advances each running request's work generator by one item per round (round robin) and
hands each item to the event loop through loop.call_soon_threadsafe, so the loop never blocks on
model code. Interleaving is what lets raw decoders share a batched forward (engines/batch.py): the
first of them to ask for a token in a round runs the step for all. Cancelling a ticket (client
disconnect) removes it from the queue, or stops its generator after its current step.

Latency SLO: the worker times every round. In a decode round (nobody starting or prefilling) each
stream waits one round for its next tokens, so round seconds / tokens of the slowest stream is the
per-token latency the clients see; its EWMA, per running count, goes to the `admission` callable
(the router applies the policy's batching.max_token_latency_ms), whose answer caps how many requests
run at once. Requests already running are never stopped for it; at least one always runs.

Memory budget: a request's first item (`Routed`) says how long its prompt is and how many tokens its context
may reach (`reserve_tokens`: prompt + max_tokens); every item with tokens adds them. `reserve` turns a context
into the bytes its caches hold, and a request counts for its context now plus GROWTH_TOKENS (at most what it
may reach): what it holds, and what it may add before the worker looks again. A request that does not fit
beside the running ones under `memory_budget` is parked right there (its route taken, nothing computed yet).
When the running ones grow past the budget, the newest of the lowest priority is asked to give its caches back
(CancelToken.ask_release): it yields `Released` at its next step and is parked with the tokens it wrote
(engines/resume.py). Parked requests resume, highest priority and then oldest first and ahead of every queued
one, once the running ones have freed enough. So the budget holds what the caches are, not what max_tokens says
they might become (a chat UI's request that sends no max_tokens asks for 32k tokens and writes a few hundred),
and several long agent contexts take turns instead of overrunning the machine's memory. At least one request
(the first of the highest priority) always runs, whatever its size, and is never asked to release.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from typing import Any, Callable, Iterator

from contracts.engine import CancelToken, Pause, Released
from gateway.routing.interface import AdmissionLimit, LoadReading

from .errors import QueueFull, RequestTimedOut, WorkerUnavailable

log = logging.getLogger("switchyard.scheduler")

_ITEM, _ERROR, _END = "item", "error", "end"
LATENCY_ALPHA = 0.25   # EWMA weight of one decode round's per-token latency (remembers ~4 rounds)
SETTLE_ROUNDS = 4      # decode rounds at one running count before its latency is published
# Tokens a running request may add before the worker looks at the budget again: a round adds a few (a step, a
# verify's accepted drafts), and mlx-lm's KV caches grow in blocks of 256 rows, so this covers what a cache holds.
GROWTH_TOKENS = 256


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
        self.concurrent = 0   # other requests running when this one started (what the router weighs)
        self.priority = 0     # higher leaves the queue first
        self.items: Iterator[Any] | None = None   # the work's generator once started (worker side)
        self.decoding = False  # its last item carried tokens: the next one costs a decode step, not a prefill
        self.step_kind = ""    # what its last advance was: "start", "prefill", "decode" or "other"
        self.step_tokens = 0   # tokens its last item carried
        self.reserved = 0      # bytes its caches hold, and may reach before the next look (known once routed)
        self.limit_tokens = 0  # the most tokens its context may reach (prompt + max_tokens; 0: not routed yet)
        self.context_tokens = 0   # its prompt's tokens and those written since (all its choices': an upper bound)
        self.order = 0         # when it first ran: of one priority, the newest running request is asked to release
        self.released = False  # it gave its caches back (Released) and waits for memory to go on
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
                 on_exit: Callable[[], None] | None = None, max_running: int = 1,
                 admission: Callable[[LoadReading], AdmissionLimit] | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 memory_budget: int | None = None, reserve: Callable[[int], int] | None = None):
        self.max_queue = max_queue
        self.max_running = max(1, max_running)   # requests interleaved on the worker (1: one at a time)
        self._admission = admission   # the latency SLO's cap, asked every round (None: max_running alone)
        self._clock = clock           # times rounds (tests pass a fake one)
        self.running_limit = self.max_running   # requests that may run at once now (SLO cap within max_running)
        self._exempt_priority: int | None = None
        self.token_seconds: float | None = None   # published per-token latency of the slowest stream (EWMA)
        self.measured_running = 0                 # running count that latency was measured at
        self._ewma: float | None = None           # the EWMA settling at the current running count
        self._ewma_running = 0
        self._ewma_rounds = 0
        self._on_exit = on_exit   # run on the worker thread as its last act (Backend.end_thread)
        self.retry_after_seconds = retry_after_seconds
        self.request_timeout = request_timeout   # seconds from admission; None = unlimited
        self._waiting: collections.deque[Ticket] = collections.deque()
        self._running: list[Ticket] = []
        self.memory_budget = memory_budget   # bytes the running requests' caches may reach together (None: no limit)
        self._reserve = reserve              # bytes the caches of a request whose context reaches n tokens hold
        self._parked: list[Ticket] = []   # routed, waiting for memory (oldest first)
        self._started = 0                  # requests that have run so far (Ticket.order)
        self.releases = 0                  # times a running request gave its caches back for the budget
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._admission_closed = False   # draining for shutdown: admitted requests still run
        self.death: BaseException | None = None
        self._death_callbacks: list[Callable[[BaseException], None]] = []

    # -- state --
    @property
    def waiting(self) -> int:
        """Requests not running: queued, and routed but waiting for memory."""
        return len(self._waiting) + len(self._parked)

    @property
    def waiting_for_memory(self) -> int:
        return len(self._parked)

    @property
    def reserved_bytes(self) -> int:
        """Bytes the running requests' caches hold together, each with room for GROWTH_TOKENS more."""
        return sum(t.reserved for t in list(self._running))

    @property
    def running(self) -> int:
        return len(self._running)

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
        return self.waiting >= self.max_queue + self._free_slots()

    def _free_slots(self) -> int:
        """Running slots not taken (a waiting request fills one at the worker's next round); the
        latency SLO's cap counts: requests it holds back wait within --max-queue like the others."""
        return max(0, self.running_limit - len(self._running))

    @property
    def idle(self) -> bool:
        return not self._running and not self._waiting and not self._parked

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
            for ticket in (*self._running, *self._parked):   # the worker closes these, on its thread
                ticket.cancel_token.cancel()
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
            tickets = list(self._running) + list(self._parked) + list(self._waiting)
        for ticket in tickets:
            ticket.cancel()
        return len(tickets)

    # -- admission --
    def submit(self, work: Callable[[Ticket], Iterator[Any]], priority: int = 0) -> Ticket:
        """Queue work (called on the event loop); higher `priority` waits behind fewer others (FIFO
        within a priority). Raises QueueFull / WorkerUnavailable."""
        loop = asyncio.get_running_loop()
        with self._cond:
            if not self.alive or self._stopping:
                raise WorkerUnavailable()
            if self._admission_closed:
                raise WorkerUnavailable("The server is shutting down.")
            if self.waiting >= self.max_queue + self._free_slots():  # a free slot always admits one
                raise QueueFull(self.retry_after_seconds)
            ahead = sum(1 for t in self._waiting if t.priority >= priority)
            ticket = Ticket(work, loop, admitted_depth=ahead, timeout=self.request_timeout)
            ticket.priority = priority
            ticket._on_cancel = self._discard
            self._waiting.insert(ahead, ticket)
            self._cond.notify()
        return ticket

    def _discard(self, ticket: Ticket) -> None:
        """A cancelled ticket still waiting leaves the queue at once (frees its slot). A parked one has started:
        the worker closes it at its next round (`_unpark`)."""
        with self._cond:
            try:
                self._waiting.remove(ticket)
            except ValueError:
                return  # already running (the worker stops it after this step) or finished
        ticket._post(_END)

    # -- worker --
    def _admit(self) -> bool:
        """Moves waiting requests into free running slots; blocks while there is nothing to run.
        False when the worker should stop."""
        with self._cond:
            while not self._waiting and not self._running and not self._parked and not self._stopping:
                self._cond.wait()
            if self._stopping:
                return False
        self._update_limit()   # outside the lock: the router takes its own
        self._unpark()
        with self._cond:
            while self._waiting and not self._parked and len(self._running) < self.max_running:
                head = self._waiting[0]
                exempt = self._exempt_priority is not None and head.priority >= self._exempt_priority
                if len(self._running) >= self.running_limit and not exempt:
                    break   # the SLO holds it back; the queue keeps its priority order
                self._waiting.popleft()
                head.concurrent = len(self._running)
                self._started += 1
                head.order = self._started
                self._running.append(head)
            return True

    def _fits(self, ticket: Ticket) -> bool:
        """The ticket's caches fit beside the running requests' under the memory budget (or nothing that
        reserved memory runs: at least one request always runs)."""
        others = sum(t.reserved for t in self._running if t is not ticket)
        return self.memory_budget is None or others == 0 or others + ticket.reserved <= self.memory_budget

    @staticmethod
    def _rank(ticket: Ticket) -> tuple[int, int]:
        """Who keeps its memory first: the higher priority, then the one that started first."""
        return -ticket.priority, ticket.order

    def _park(self, ticket: Ticket) -> None:
        """The ticket (just routed, or released) waits for memory: out of the running slots, ahead of the queue,
        behind the parked ones that rank before it."""
        with self._cond:
            self._running.remove(ticket)
            at = next((i for i, t in enumerate(self._parked) if self._rank(t) > self._rank(ticket)),
                      len(self._parked))
            self._parked.insert(at, ticket)

    def _ask_releases(self) -> None:
        """While the running requests' caches (with their growth room) are over the budget, the last-ranked ones
        (lowest priority, newest) are asked to give theirs back; the first-ranked always runs."""
        if self.memory_budget is None:
            return
        routed = sorted((t for t in self._running if t.limit_tokens), key=self._rank)
        total = sum(t.reserved for t in routed)
        for ticket in reversed(routed[1:]):
            if total <= self.memory_budget:
                return
            if not ticket.cancel_token.release_asked:
                log.info("memory budget: %d of %d bytes; a request gives its caches back", total,
                         self.memory_budget)
                ticket.cancel_token.ask_release()
            total -= ticket.reserved

    def _unpark(self) -> None:
        """Parked tickets resume, oldest first, while they fit (and the latency SLO's cap allows); cancelled or
        expired ones are closed here."""
        with self._cond:
            gone = [t for t in self._parked if t.cancel_token.cancelled or t.expired()]
            for ticket in gone:
                self._parked.remove(ticket)
            while self._parked and self._fits(self._parked[0]) and len(self._running) < self.running_limit:
                ticket = self._parked.pop(0)
                ticket.released = False
                self._running.append(ticket)
        for ticket in gone:
            if not ticket.cancel_token.cancelled:
                ticket.cancel_token.cancel()
                ticket._post(_ERROR, RequestTimedOut(ticket.timeout or 0.0))
            self._finish(ticket)

    def _update_limit(self) -> None:
        """Ask the admission callable (the latency SLO) how many may run now; never fewer than one."""
        if self._admission is None:
            return
        try:
            limit = self._admission(LoadReading(len(self._running), self.max_running, self.token_seconds,
                                                self.measured_running))
        except Exception:  # noqa: BLE001 - a routing bug must not stop the worker: --max-batch alone limits
            log.exception("admission limit failed; using --max-batch")
            limit = AdmissionLimit()
        cap = self.max_running if limit.requests is None else max(1, min(self.max_running, limit.requests))
        with self._cond:   # submit() reads it for the 429 rule
            self.running_limit, self._exempt_priority = cap, limit.exempt_priority

    def _run(self) -> None:
        try:
            while self._admit():
                self._ask_releases()
                tickets = list(self._running)
                started = self._clock()
                decode_tokens: list[int] = []
                measurable = True
                for ticket in tickets:
                    if not self._advance(ticket):
                        self._finish(ticket)
                    elif ticket.released or (ticket.step_kind == "start" and not self._fits(ticket)):
                        self._park(ticket)
                    if ticket.step_kind in ("start", "prefill"):
                        measurable = False   # a prompt's prefill is not what streams wait for per token
                    elif ticket.step_kind == "decode":
                        decode_tokens.append(ticket.step_tokens)
                if measurable and decode_tokens:
                    self._measure((self._clock() - started) / min(decode_tokens), len(tickets))
            for ticket in (*self._running, *self._parked):   # stopping: they were cancelled; close them here
                self._finish(ticket)
        except BaseException as exc:  # noqa: BLE001 - a dead worker must be reported, whatever killed it
            for ticket in (*self._running, *self._parked):
                ticket._post(_ERROR, WorkerUnavailable("The model worker died; the server is restarting."))
                self._finish(ticket, post_end=False)
            self._die(exc)
        finally:
            if self._on_exit is not None:
                try:
                    self._on_exit()
                except Exception:  # noqa: BLE001
                    log.exception("worker exit hook failed")

    def _advance(self, ticket: Ticket) -> bool:
        """One item of the ticket's work, posted to its stream. False once the ticket is done. Notes
        on the ticket what the item cost (step_kind, step_tokens) for the round's latency."""
        ticket.step_kind, ticket.step_tokens = "other", 0
        try:
            if ticket.items is None:
                if ticket.cancel_token.cancelled:
                    return False
                if ticket.expired():  # timed out while queued
                    ticket._post(_ERROR, RequestTimedOut(ticket.timeout or 0.0))
                    return False
                ticket.items = ticket.work(ticket)
                ticket.step_kind = "start"
            if ticket.cancel_token.cancelled:
                return False  # stop within one step of the cancel
            try:
                item = next(ticket.items)
            except StopIteration:
                return False
            self._note_step(ticket, item)
            self._count(ticket, item)
            if isinstance(item, Released):   # it gave its caches back: parked until they fit again
                ticket.released = True
                self.releases += 1
            if isinstance(item, Pause):   # the request gave the worker back mid-prefill: nothing to send
                return not self._stop_if_expired(ticket)
            ticket._post(_ITEM, item)
            # a final chunk already ended the request
            return getattr(item, "finish_reason", None) is not None or not self._stop_if_expired(ticket)
        except Exception as exc:  # a request's failure, not the worker's
            ticket._post(_ERROR, exc)
            return False

    def _count(self, ticket: Ticket, item: Any) -> None:
        """The ticket's context after this item, and the bytes it counts for under the memory budget."""
        limit = getattr(item, "reserve_tokens", None)
        if limit is not None:   # Routed: its prompt (prompts) and the most its context may reach
            ticket.limit_tokens = limit
            ticket.context_tokens = getattr(item, "prompt_tokens", limit)
        else:
            ticket.context_tokens += ticket.step_tokens
        if ticket.limit_tokens and self._reserve is not None:
            ticket.reserved = self._reserve(min(ticket.limit_tokens, ticket.context_tokens + GROWTH_TOKENS))

    @staticmethod
    def _stop_if_expired(ticket: Ticket) -> bool:
        """Past its deadline: cancelled and told why. Checked after every item, so a request stops within
        one step (or one piece of a long prompt's prefill) of it."""
        if not ticket.expired():
            return False
        ticket.cancel_token.cancel()
        ticket._post(_ERROR, RequestTimedOut(ticket.timeout or 0.0))
        return True

    @staticmethod
    def _note_step(ticket: Ticket, item: Any) -> None:
        """Items that carry tokens (`token_ids`, as GenerationChunk) after one that did are decode
        steps; the first tokens after anything else (the route, a choice's start, a Pause) carry a
        prefill. The scheduler stays engine-agnostic: it only counts."""
        tokens = 0 if isinstance(item, Pause) else len(getattr(item, "token_ids", None) or ())
        if ticket.step_kind != "start":
            if isinstance(item, Pause) or (tokens and not ticket.decoding):
                ticket.step_kind = "prefill"
            elif tokens:
                ticket.step_kind = "decode"
        ticket.step_tokens, ticket.decoding = tokens, tokens > 0

    def _measure(self, token_seconds: float, running: int) -> None:
        """One decode round's per-token latency with `running` requests running: an EWMA per running
        count, published once it has SETTLE_ROUNDS rounds (until then the last published one stands)."""
        if running != self._ewma_running or self._ewma is None:
            self._ewma, self._ewma_running, self._ewma_rounds = token_seconds, running, 0
        else:
            self._ewma += LATENCY_ALPHA * (token_seconds - self._ewma)
        self._ewma_rounds += 1
        if self._ewma_rounds >= SETTLE_ROUNDS:
            self.token_seconds, self.measured_running = self._ewma, running

    def _finish(self, ticket: Ticket, post_end: bool = True) -> None:
        work, ticket.items = ticket.items, None
        try:
            if work is not None and hasattr(work, "close"):
                work.close()  # runs the generator's finally blocks now, on this thread (a batch row leaves)
        except Exception:  # noqa: BLE001
            log.exception("error while closing a request's generator")
        finally:
            with self._cond:   # the slot is free before the client hears the end
                if ticket in self._running:
                    self._running.remove(ticket)
                elif ticket in self._parked:
                    self._parked.remove(ticket)
            if post_end:
                ticket._post(_END)

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
