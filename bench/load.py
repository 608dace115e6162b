"""Load test: N concurrent streaming clients for a while, with random mid-stream disconnects.

    python -m bench.load --serve --model DIR [--draft DIR] --clients 32 --duration 180
    python -m bench.load --url http://127.0.0.1:8000 --pid <server pid> --duration 60

Loopback only, bounded in clients, time and requests. It checks that the server answers only 200
or 429 (with Retry-After), that every accepted stream ends with [DONE] and a finish_reason (or was
cut by the client on purpose), that the server reports no 5xx and no finish_reason "error", that it
is idle right after the clients stop, that a disconnected stream frees the worker within about one
step, and that RSS and MLX active memory stay flat after warm-up. Prints a JSON summary; exit 1 on
any violation.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import httpx

from gateway.http.auth import is_loopback_host

from .load_server import MemoryTrace, ServeProcess, error_lines, growth, scrape, series

MAX_CLIENTS = 256
MAX_DURATION_S = 3600.0
PROMPTS = [
    ("chat", "Write a Python function that reverses a linked list."),
    ("chat", "Tell me a short story about a lighthouse keeper."),
    ("chat", 'Return a JSON object with keys "name" and "age" for a fictional person.'),
    ("chat", "Explain why the sky is blue in two sentences."),
    ("completion", "def fibonacci(n):\n"),
    ("completion", "Once upon a time, in a quiet valley,"),
]


@dataclass
class Tally:
    started: int = 0
    completed: int = 0          # 200, stream read to [DONE] with a finish_reason
    disconnected: int = 0       # cut by the client on purpose, mid-stream
    rejected_429: int = 0
    content_frames: int = 0
    statuses: Counter = field(default_factory=Counter)
    finish_reasons: Counter = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)

    def violation(self, text: str) -> None:
        if len(self.violations) < 50:
            self.violations.append(text)


def _body(rng: random.Random, max_tokens: int) -> tuple[str, dict]:
    kind, text = rng.choice(PROMPTS)
    body: dict = {"max_tokens": rng.randint(1, max_tokens), "stream": True,
                  "temperature": rng.choice([None, 0.0, 0.8])}
    if rng.random() < 0.5:
        body["stream_options"] = {"include_usage": True}
    if kind == "chat":
        return "/v1/chat/completions", {**body, "messages": [{"role": "user", "content": text}]}
    return "/v1/completions", {**body, "prompt": text}


async def _one_request(http: httpx.AsyncClient, rng: random.Random, tally: Tally, max_tokens: int,
                       disconnect_prob: float) -> float:
    """Returns seconds to wait before the next request (Retry-After after a 429)."""
    path, body = _body(rng, max_tokens)
    cut_after = rng.randint(1, 4) if rng.random() < disconnect_prob else None
    tally.started += 1
    async with http.stream("POST", path, json=body) as response:
        tally.statuses[response.status_code] += 1
        if response.status_code == 429:
            tally.rejected_429 += 1
            retry_after = response.headers.get("retry-after")
            if retry_after is None or not retry_after.isdigit():
                tally.violation(f"429 without a valid Retry-After: {retry_after!r}")
                return 1.0
            return float(retry_after) * rng.uniform(0.2, 1.0)   # honoured, with jitter
        if response.status_code != 200:
            tally.violation(f"{response.status_code} {path}: {(await response.aread())[:300]!r}")
            return 0.0
        frames, finish, done = 0, None, False
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            payload = line[6:]
            if payload == "[DONE]":
                done = True
                break
            chunk = json.loads(payload)
            if "error" in chunk:
                tally.violation(f"in-stream error: {chunk['error']}")
                continue
            for choice in chunk.get("choices", []):
                finish = choice.get("finish_reason") or finish
            frames += 1
            tally.content_frames += 1
            if cut_after is not None and frames >= cut_after:
                tally.disconnected += 1   # leaving the block closes the connection mid-stream
                return 0.0
        if not done or finish is None:
            tally.violation(f"stream ended without [DONE] or finish_reason (done={done}, finish={finish})")
        else:
            tally.completed += 1
            tally.finish_reasons[finish] += 1
    return 0.0


async def _client(url: str, seed: int, deadline: float, budget: list[int], tally: Tally, max_tokens: int,
                  disconnect_prob: float, headers: dict[str, str]) -> None:
    rng = random.Random(seed)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(120.0), headers=headers) as http:
        while time.monotonic() < deadline and budget[0] > 0:
            budget[0] -= 1
            try:
                pause = await _one_request(http, rng, tally, max_tokens, disconnect_prob)
            except httpx.HTTPError as exc:
                tally.violation(f"transport error: {exc!r}")
                pause = 0.5
            if pause:
                await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))


async def _sample_memory(trace: MemoryTrace, started: float, deadline: float, pid: int | None, url: str,
                         headers: dict[str, str], interval: float) -> None:
    while time.monotonic() < deadline:
        await asyncio.to_thread(trace.sample, time.monotonic() - started, pid, url, headers)
        await asyncio.sleep(interval)


def _wait_idle(http: httpx.Client, timeout: float, start: float | None = None) -> float | None:
    """Seconds (from `start`, default now) until /health shows nothing running or waiting; None if
    not within `timeout`. `http` is an open client, so a poll costs one request, not a connect."""
    start = time.monotonic() if start is None else start
    while time.monotonic() - start < timeout:
        health = http.get("/health", timeout=5).json()
        if health.get("requests_running") == 0 and health.get("requests_waiting") == 0:
            return time.monotonic() - start
        time.sleep(0.002)
    return None


def _engine_steps(url: str, headers: dict[str, str]) -> float:
    return sum(series(scrape(url, headers), "switchyard_engine_steps_total").values())


PROBE_PROMPTS = ("Once upon a time", "def main():\n", "The history of the river begins", "{\"items\": [")


def disconnect_probe(url: str, headers: dict[str, str], attempts: int = 8) -> dict[str, float]:
    """disconnect_probe_once until a stream is long enough to be cut (a model may stop early)."""
    result: dict[str, float] = {}
    for attempt in range(attempts):
        result = disconnect_probe_once(url, headers, PROBE_PROMPTS[attempt % len(PROBE_PROMPTS)], seed=attempt)
        if result["cut_mid_stream"]:
            break
    return result


def disconnect_probe_once(url: str, headers: dict[str, str], prompt: str, seed: int,
                          frames_before_cut: int = 4) -> dict[str, float]:
    """On an idle server: stream a long generation, hang up after a few frames, and time how long
    the worker keeps running (should be within about one step: the engines poll the cancel flag)."""
    body = {"prompt": prompt, "max_tokens": 256, "stream": True, "temperature": 1.0, "seed": seed}
    arrivals: list[float] = []
    steps_before = _engine_steps(url, headers)
    with httpx.Client(base_url=url, timeout=60, headers=headers) as poller:
        poller.get("/health")   # connect now, not after the cut
        with httpx.Client(base_url=url, timeout=60, headers=headers) as http:
            with http.stream("POST", "/v1/completions", json=body) as response:
                if response.status_code != 200:
                    raise RuntimeError(f"disconnect probe refused: {response.status_code} {response.read()[:200]!r}")
                for line in response.iter_lines():
                    if line.startswith("data: {"):
                        arrivals.append(time.monotonic())
                        if len(arrivals) >= frames_before_cut + 1:
                            break
        cut = time.monotonic()
        freed = _wait_idle(poller, timeout=30.0, start=cut)
    steps = _engine_steps(url, headers) - steps_before
    gaps = [b - a for a, b in zip(arrivals[1:], arrivals[2:])] or [0.0]
    return {"step_seconds": statistics.median(gaps), "freed_seconds": freed if freed is not None else float("inf"),
            "frames_before_cut": len(arrivals), "cut_mid_stream": len(arrivals) > frames_before_cut,
            # steps the engine ran beyond the frames the client read (frames still in the socket buffers count too)
            "steps_beyond_frames_read": steps - len(arrivals)}


def _server_totals(url: str, headers: dict[str, str]) -> dict[str, dict[str, float]]:
    samples = scrape(url, headers)
    statuses: Counter = Counter()
    for labels, value in series(samples, "switchyard_requests_total").items():
        statuses[dict(labels)["status"]] += value
    finishes = {dict(labels)["reason"]: value for labels, value in series(samples, "switchyard_finish_reasons_total").items()}
    return {"statuses": dict(statuses), "finish_reasons": finishes}


@dataclass
class LoadConfig:
    url: str
    clients: int = 32
    duration_s: float = 180.0
    max_tokens: int = 48
    disconnect_prob: float = 0.2
    max_requests: int = 100_000
    warmup_s: float | None = None            # default: a quarter of the run
    sample_interval_s: float = 1.0
    pid: int | None = None
    api_key: str | None = None
    # flatness bounds after warm-up
    rss_growth_limit_bytes: float = 64 * 2**20
    mlx_growth_limit_bytes: float = 16 * 2**20
    freed_step_multiple: float = 3.0         # disconnect -> idle within this many steps ...
    freed_slack_s: float = 0.25              # ... plus polling / scheduling slack


def validate(config: LoadConfig) -> None:
    host = urlparse(config.url).hostname or ""
    if not is_loopback_host(host):
        raise SystemExit(f"refusing to load-test {host!r}: loopback addresses only")
    if not 1 <= config.clients <= MAX_CLIENTS:
        raise SystemExit(f"--clients must be 1..{MAX_CLIENTS}")
    if not 0 < config.duration_s <= MAX_DURATION_S:
        raise SystemExit(f"--duration must be in (0, {MAX_DURATION_S:.0f}] seconds")


def run_load(config: LoadConfig) -> dict:
    """Run the load, the probes and the checks; returns the summary (summary["ok"] says if all held)."""
    validate(config)
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    tally, trace = Tally(), MemoryTrace()
    warmup = config.warmup_s if config.warmup_s is not None else config.duration_s / 4
    before = _server_totals(config.url, headers)
    started = time.monotonic()
    deadline = started + config.duration_s
    budget = [config.max_requests]

    async def main() -> None:
        tasks = [_client(config.url, 1000 + i, deadline, budget, tally, config.max_tokens, config.disconnect_prob,
                         headers) for i in range(config.clients)]
        tasks.append(_sample_memory(trace, started, deadline, config.pid, config.url, headers,
                                    config.sample_interval_s))
        await asyncio.gather(*tasks)

    asyncio.run(main())
    elapsed = time.monotonic() - started
    with httpx.Client(base_url=config.url, headers=headers) as http:
        idle_after = _wait_idle(http, timeout=10.0)
    probe = disconnect_probe(config.url, headers)
    after = _server_totals(config.url, headers)
    server = {
        kind: {k: after[kind].get(k, 0.0) - before[kind].get(k, 0.0) for k in after[kind]} for kind in after
    }
    summary = {
        "config": asdict(config) | {"api_key": bool(config.api_key)},
        "elapsed_s": elapsed,
        "client": {**{k: v for k, v in asdict(tally).items() if k != "violations"},
                   "statuses": dict(tally.statuses), "finish_reasons": dict(tally.finish_reasons),
                   "completed_per_s": tally.completed / elapsed, "content_frames_per_s": tally.content_frames / elapsed},
        "server": server,
        "idle_after_s": idle_after,
        "disconnect_probe": probe,
        "memory": {"warmup_s": warmup, "rss": growth([(t, float(v)) for t, v in trace.rss], warmup),
                   "mlx_active": growth(trace.mlx_active, warmup)},
    }
    violations = list(tally.violations)
    violations += _server_violations(server, tally)
    if idle_after is None:
        violations.append("server still busy 10 s after the clients stopped")
    bound = config.freed_step_multiple * probe["step_seconds"] + config.freed_slack_s
    if not probe["cut_mid_stream"]:
        violations.append("disconnect probe: the stream ended before the client could hang up")
    elif probe["freed_seconds"] > bound:
        violations.append(f"disconnected stream held the worker {probe['freed_seconds']:.3f} s (> {bound:.3f} s)")
    for name, limit in (("rss", config.rss_growth_limit_bytes), ("mlx_active", config.mlx_growth_limit_bytes)):
        mem = summary["memory"][name]
        if mem is not None and mem["growth"] > limit:
            violations.append(f"{name} grew {mem['growth'] / 2**20:.1f} MiB after warm-up (limit {limit / 2**20:.0f})")
    if tally.completed == 0:
        violations.append("no request completed")
    summary["violations"] = violations
    summary["ok"] = not violations
    return summary


def _server_violations(server: dict, tally: Tally) -> list[str]:
    out = []
    for status, count in server["statuses"].items():
        if count and status not in ("200", "429", "499"):   # 499: client closed (our disconnects)
            out.append(f"server counted {count:.0f} responses with status {status}")
    if server["finish_reasons"].get("error", 0):
        out.append(f"server counted {server['finish_reasons']['error']:.0f} generations ending in error")
    # every cancellation must come from a client hanging up (ours, plus the disconnect probe's one)
    cancelled = server["finish_reasons"].get("cancelled", 0)
    if cancelled > tally.disconnected + 1:
        out.append(f"server cancelled {cancelled:.0f} generations but clients hung up only {tally.disconnected + 1} times")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="a running server (loopback only)")
    p.add_argument("--pid", type=int, help="its process id, for RSS")
    p.add_argument("--serve", action="store_true", help="start `switchyard serve` on a free loopback port")
    p.add_argument("--model", help="--serve: model dir")
    p.add_argument("--draft", help="--serve: drafter dir")
    p.add_argument("--policy", help="--serve: policy file")
    p.add_argument("--max-queue", type=int, default=16, help="--serve: queue bound (default: %(default)s)")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--duration", type=float, default=180.0, help="seconds (default: %(default)s)")
    p.add_argument("--max-tokens", type=int, default=48, help="per request, drawn from 1..N")
    p.add_argument("--disconnect-prob", type=float, default=0.2)
    p.add_argument("--max-requests", type=int, default=100_000)
    p.add_argument("--api-key", default=None)
    p.add_argument("--json", type=Path, help="write the summary here too")
    args = p.parse_args(argv)
    if bool(args.url) == bool(args.serve):
        p.error("give exactly one of --url or --serve")
    server = None
    if args.serve:
        serve_args = [*(["--model", args.model] if args.model else []), *(["--draft", args.draft] if args.draft else []),
                      *(["--policy", args.policy] if args.policy else []), "--max-queue", str(args.max_queue)]
        server = ServeProcess(serve_args, Path(args.json or "load").with_suffix(".server.log"))
    config = LoadConfig(url=server.url if server else args.url, clients=args.clients, duration_s=args.duration,
                        max_tokens=args.max_tokens, disconnect_prob=args.disconnect_prob,
                        max_requests=args.max_requests, pid=server.pid if server else args.pid, api_key=args.api_key)
    try:
        summary = run_load(config)
    finally:
        if server is not None:
            code = server.stop()
    if server is not None:
        summary["server_exit_code"] = code
        if code != 0:
            summary["violations"].append(f"server exited with {code} on SIGTERM")
            summary["ok"] = False
        if not summary["ok"]:   # what the server logged about it (the log file may not outlive a CI run)
            summary["server_log_errors"] = error_lines(server.log())
    text = json.dumps(summary, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
