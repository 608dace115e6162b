"""Live policy reload: SIGHUP, file change (editors save by rename) and an admin call.

PolicyStore holds the current immutable snapshot; a reload swaps it whole, so a request keeps the
snapshot it was admitted with. An invalid file is rejected with its errors, the old policy stays,
and the failure is counted and logged.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .policy import Policy, PolicyError, load_policy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PolicySnapshot:
    policy: Policy
    version: int          # 1 for the policy loaded at start, +1 per successful reload
    loaded_at: float      # time.time()
    source: str           # file path, or "<defaults>"


@dataclass(frozen=True)
class ReloadResult:
    ok: bool
    version: int          # the version in force after the attempt
    trigger: str          # "sighup" | "file" | "admin" | ...
    errors: list[str] = field(default_factory=list)

    def as_json(self) -> dict:
        return {"ok": self.ok, "version": self.version, "trigger": self.trigger, "errors": self.errors}


@dataclass(frozen=True)
class _FileSignature:
    mtime_ns: int
    inode: int
    size: int


def _signature(path: Path) -> _FileSignature | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _FileSignature(st.st_mtime_ns, st.st_ino, st.st_size)


class PolicyStore:
    """The current policy snapshot plus reload machinery and counters for metrics."""

    def __init__(self, path: str | Path | None = None, policy: Policy | None = None):
        """Load `path` (raising PolicyError if invalid: a daemon must not start on a bad policy),
        or use `policy`, or the built-in defaults."""
        self.path = Path(path).expanduser() if path is not None else None
        if self.path is not None:
            self._signature = _signature(self.path)
            policy = load_policy(self.path)
        self._snapshot = PolicySnapshot(policy or Policy(), 1, time.time(), str(self.path or "<defaults>"))
        self._lock = threading.Lock()           # serialises reloads, not readers
        self._listeners: list[Callable[[PolicySnapshot], None]] = []
        self.reload_successes = 0
        self.reload_failures = 0
        self.last_success_time = self._snapshot.loaded_at
        self.last_failure_time: float | None = None
        self.last_errors: list[str] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._pending_trigger: str | None = None
        self._watcher: threading.Thread | None = None

    def current(self) -> PolicySnapshot:
        return self._snapshot  # one attribute read: atomic, no lock needed

    @property
    def policy(self) -> Policy:
        return self._snapshot.policy

    def subscribe(self, listener: Callable[[PolicySnapshot], None]) -> None:
        """Call `listener(snapshot)` after each successful reload (on the reloading thread)."""
        self._listeners.append(listener)

    def reload(self, trigger: str = "admin") -> ReloadResult:
        """Re-read the file. Used by POST /admin/reload, SIGHUP and the file watcher."""
        with self._lock:
            if self.path is None:
                return self._fail(trigger, ["no policy file: the server runs on built-in defaults"])
            self._signature = _signature(self.path)
            try:
                policy = load_policy(self.path)
            except PolicyError as exc:
                return self._fail(trigger, exc.errors)
            old = self._snapshot
            if policy.state != old.policy.state:
                log.warning("policy reload: changes to `state:` take effect at the next restart")
            self._snapshot = PolicySnapshot(policy, old.version + 1, time.time(), str(self.path))
            self.reload_successes += 1
            self.last_success_time = self._snapshot.loaded_at
            self.last_errors = []
            snapshot = self._snapshot
        log.info("policy reloaded from %s (version %d, trigger %s)", self.path, snapshot.version, trigger)
        for listener in self._listeners:
            try:
                listener(snapshot)
            except Exception:  # a listener bug must not undo a valid reload
                log.exception("policy reload listener failed")
        return ReloadResult(True, snapshot.version, trigger)

    def _fail(self, trigger: str, errors: list[str]) -> ReloadResult:
        self.reload_failures += 1
        self.last_failure_time = time.time()
        self.last_errors = list(errors)
        log.error("policy reload (%s) rejected, keeping version %d: %s", trigger, self._snapshot.version, "; ".join(errors))
        return ReloadResult(False, self._snapshot.version, trigger, list(errors))

    def counters(self) -> dict:
        """JSON-able reload bookkeeping (also the source of the reload metrics)."""
        snap = self._snapshot
        return {
            "version": snap.version,
            "source": snap.source,
            "loaded_at": snap.loaded_at,
            "reload_successes": self.reload_successes,
            "reload_failures": self.reload_failures,
            "last_success_time": self.last_success_time,
            "last_failure_time": self.last_failure_time,
            "last_errors": list(self.last_errors),
        }

    # --- SIGHUP -----------------------------------------------------------------------------
    def install_sighup_handler(self) -> None:
        """Reload on SIGHUP. Must be called from the main thread (Python's rule for signal handlers).

        With the watcher running, the handler only wakes it (no file IO in the handler); otherwise it
        reloads inline. Under asyncio, prefer `loop.add_signal_handler(SIGHUP, store.request_reload)`.
        """
        signal.signal(signal.SIGHUP, lambda signum, frame: self.request_reload("sighup"))

    def request_reload(self, trigger: str = "sighup") -> None:
        if self._watcher is not None and self._watcher.is_alive():
            self._pending_trigger = trigger
            self._wake.set()
        else:
            self.reload(trigger)

    # --- file watching ----------------------------------------------------------------------
    def start_watching(self, interval: float = 1.0) -> None:
        """Poll mtime + inode + size of the policy file (rename-on-save changes the inode)."""
        if self.path is None or self._watcher is not None:
            return
        self._stop.clear()
        self._watcher = threading.Thread(target=self._watch, args=(interval,), name="switchyard-policy-watch", daemon=True)
        self._watcher.start()

    def stop_watching(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
            self._watcher = None

    def _watch(self, interval: float) -> None:
        missing_logged = False
        while not self._stop.is_set():
            self._wake.wait(interval)
            if self._stop.is_set():
                return
            if self._wake.is_set():
                self._wake.clear()
                trigger, self._pending_trigger = self._pending_trigger or "sighup", None
                self.reload(trigger)
                continue
            assert self.path is not None
            current = _signature(self.path)
            if current is None:
                if not missing_logged:
                    log.warning("policy file %s disappeared; keeping version %d", self.path, self._snapshot.version)
                    missing_logged = True
                continue
            missing_logged = False
            if current != self._signature:
                time.sleep(0.05)  # let a writer that writes in place finish before reading
                if _signature(self.path) == current:
                    self.reload("file")
