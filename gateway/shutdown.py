"""Graceful shutdown (SIGTERM from launchd/systemd): drain, then stop.

uvicorn, on SIGTERM, closes the listening socket and waits for open responses. Alone, that lets
queued requests keep the process alive and, at its timeout, cuts streams mid-frame. The drain runs
beside it: new requests get 503, admitted ones may finish for `timeout` seconds, and whatever is
left is cancelled through the engines' cancel flag, so every stream still ends with a final chunk
and `data: [DONE]`. uvicorn's own graceful timeout (drain timeout + CANCEL_GRACE) is the hard stop.
The caller (serve) persists the router's monitor state once uvicorn returns.
"""

from __future__ import annotations

import asyncio
import logging
import time

from .state import GatewayState

log = logging.getLogger("switchyard.shutdown")

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
