"""The server side of the load test: spawn `switchyard serve` on loopback, watch its memory, scrape metrics."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServeProcess:
    """`python -m gateway.cli serve --host 127.0.0.1 --port <free> <serve_args>`; log to a file. `repo`: the
    checkout whose code serves (another commit's worktree, for a side-by-side run)."""

    def __init__(self, serve_args: list[str], log_path: Path, startup_timeout: float = 180.0, repo: Path = REPO):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port),
             "--log-level", "warning", *serve_args],
            cwd=repo, env={**os.environ,
                           "PYTHONPATH": os.pathsep.join(p for p in (str(repo), os.environ.get("PYTHONPATH")) if p)},
            stdout=self._log, stderr=subprocess.STDOUT,
        )
        self.pid = self.proc.pid   # serve may re-exec itself (OpenBLAS): exec keeps the pid
        deadline = time.monotonic() + startup_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("serve did not become healthy in time:\n" + self.log())
            time.sleep(0.1)

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (graceful), then SIGKILL if it does not exit; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


@contextlib.contextmanager
def side_by_side(base: str) -> Iterator[list[tuple[str, Path]]]:
    """The two checkouts a side-by-side bench serves from, in order: `base` (a commit, checked out in a temporary
    worktree, removed afterwards) and this one, as (name, repo) pairs."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), base], check=True,
                       capture_output=True)
        try:
            yield [(f"base {base}", tree), ("this checkout", REPO)]
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)


def error_lines(log: str, limit: int = 300) -> list[str]:
    """The log from its first traceback on (at most `limit` lines): why a load run failed."""
    lines = log.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("Traceback") or " ERROR " in line), len(lines))
    return lines[first:][:limit]


def rss_bytes(pid: int) -> int | None:
    try:
        import psutil

        return int(psutil.Process(pid).memory_info().rss)
    except ImportError:  # psutil is a dev dependency; /proc works on Linux without it
        try:
            fields = Path(f"/proc/{pid}/statm").read_text().split()
            return int(fields[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            return None
    except Exception:  # noqa: BLE001 - the process is gone
        return None


def scrape(url: str, headers: dict[str, str] | None = None) -> dict[str, dict[tuple, float]]:
    """/metrics as name -> {sorted label items -> value}."""
    text = httpx.get(url + "/metrics", timeout=10, headers=headers).text
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def series(samples: dict[str, dict[tuple, float]], name: str) -> dict[tuple, float]:
    return samples.get(name, {})


@dataclass
class MemoryTrace:
    """(seconds since start, value) samples of the server's RSS and MLX active memory."""

    rss: list[tuple[float, int]] = field(default_factory=list)
    mlx_active: list[tuple[float, float]] = field(default_factory=list)

    def sample(self, t: float, pid: int | None, url: str, headers: dict[str, str] | None) -> None:
        if pid is not None and (rss := rss_bytes(pid)) is not None:
            self.rss.append((t, rss))
        try:
            active = series(scrape(url, headers), "switchyard_model_memory_bytes").get((("kind", "active"),))
        except httpx.HTTPError:
            active = None
        if active is not None:
            self.mlx_active.append((t, active))


def growth(trace: list[tuple[float, float]], warmup_s: float) -> dict[str, float] | None:
    """After warm-up: first and last quarter medians, their difference, and the least-squares slope per minute."""
    points = [(t, v) for t, v in trace if t >= warmup_s]
    if len(points) < 4:
        return None
    quarter = max(1, len(points) // 4)

    def median(values: list[float]) -> float:
        ordered = sorted(values)
        return ordered[len(ordered) // 2]

    start = median([v for _, v in points[:quarter]])
    end = median([v for _, v in points[-quarter:]])
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var_t = sum((t - mean_t) ** 2 for t, _ in points) or 1.0
    slope = sum((t - mean_t) * (v - mean_v) for t, v in points) / var_t
    return {"start": start, "end": end, "growth": end - start, "min": min(v for _, v in points),
            "max": max(v for _, v in points), "slope_per_minute": slope * 60.0, "samples": n}
