"""Running the app under uvicorn, and graceful shutdown (SIGTERM from launchd/systemd): drain, then stop.

uvicorn, on SIGTERM, closes the listening socket and waits for open responses. Alone, that lets
queued requests keep the process alive and, at its timeout, cuts streams mid-frame. The drain runs
beside it: new requests get 503, admitted ones may finish for `timeout` seconds, and whatever is
left is cancelled through the engines' cancel flag, so every stream still ends with a final chunk
and `data: [DONE]`. uvicorn's own graceful timeout (drain timeout + CANCEL_GRACE) is the hard stop.
The caller (serve) persists the router's monitor state once uvicorn returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import threading
import time
from typing import Iterator

from gateway.config import GatewayConfig

from .state import GatewayState

log = logging.getLogger("switchyard.shutdown")

EXIT_WORKER_DIED = 3     # the model worker crashed: exit non-zero so launchd/systemd restarts us
CANCEL_GRACE_SECONDS = 5.0   # after cancelling: time for the current step to end and streams to flush
POLL_SECONDS = 0.05


def hard_timeout(drain_timeout: float) -> float:
    """uvicorn's timeout_graceful_shutdown for a given drain timeout."""
    return drain_timeout + CANCEL_GRACE_SECONDS


async def drain(state: GatewayState, timeout: float) -> bool:
    """Stop admitting, wait up to `timeout` s for the admitted requests, cancel the rest.
    Returns True if everything finished on its own."""
    scheduler = state.scheduler
    scheduler.close_admission()
    state.metrics.draining.set(1)
    started = time.monotonic()
    log.info("draining: %d running, %d queued; waiting up to %.0f s", scheduler.running, scheduler.waiting, timeout)
    while not scheduler.idle and time.monotonic() - started < timeout:
        await asyncio.sleep(POLL_SECONDS)
    if scheduler.idle:
        log.info("drained in %.1f s", time.monotonic() - started)
        return True
    cancelled = scheduler.cancel_all()
    log.warning("drain timeout (%.0f s): cancelled %d request(s); their streams end with finish_reason "
                "'cancelled'", timeout, cancelled)
    return False


def _server_class():
    import uvicorn
    from uvicorn.server import HANDLED_SIGNALS

    class Server(uvicorn.Server):
        """uvicorn re-raises SIGTERM/SIGINT after its graceful shutdown, which kills the process before
        the caller can persist the router's state; here a signal just ends run() and we exit normally."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in HANDLED_SIGNALS}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

        async def shutdown(self, sockets=None) -> None:
            # Beside uvicorn's wait: refuse new requests, cancel what is left at the drain timeout.
            timeout = max(0.0, (self.config.timeout_graceful_shutdown or 0.0) - CANCEL_GRACE_SECONDS)
            draining = asyncio.ensure_future(drain(self.config.app.state.gateway, timeout))
            await super().shutdown(sockets)
            draining.cancel()

    return Server


def run_server(app, config: GatewayConfig, log_level: str = "info") -> int:
    """Run uvicorn until stopped (SIGTERM/SIGINT: graceful, exit 0); a dead model worker stops it
    and makes the exit code non-zero."""
    import uvicorn

    server = _server_class()(
        uvicorn.Config(app, host=config.host, port=config.port, log_level=log_level, lifespan="on",
                       timeout_graceful_shutdown=hard_timeout(config.shutdown_timeout_seconds))
    )
    scheduler = app.state.gateway.scheduler

    def stop_server(exc: BaseException) -> None:
        server.should_exit = True

    scheduler.on_death(stop_server)
    server.run()
    if scheduler.death is not None:
        print(f"switchyard: the model worker died ({scheduler.death!r}); exiting", file=sys.stderr)
        return EXIT_WORKER_DIED
    return 0 if server.started else 1
