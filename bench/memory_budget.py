"""Chats at once under one request-memory budget: this checkout against another commit, in one run.

    PYTHONPATH=. python -m bench.memory_budget --base da665b0~1 [--clients 6] [--requests 2] [--contexts 2]
        [--max-tokens N] [--model DIR] [--out DIR]

`--clients` chat clients send `--requests` chats each, one after another, all clients at once, streaming, with
no max_tokens (a chat UI's request: the server's default, up to the context's end), sampled at the model's
defaults with a seed per request, held-out-style prompts of every class (bench/workloads). Each server (`--base`'s
code from a temporary worktree, then this checkout's) runs with `--max-batch 8` and a `--request-memory-bytes`
budget of `--contexts` whole contexts of one request (what the server counts for a request whose context reaches
the model's length, measured from this checkout's Runtime.request_bytes). A server that counts each request for
prompt + max_tokens runs `--contexts` of them at once; one that counts what the caches hold runs as many as fit.
Reported per server: wall time, completion tokens per second over the run, TTFT median / p90 / max, requests
running at once (mean over the samples while any ran, and the most), requests waiting for memory (most), times a
request gave its caches back, and the MLX allocator's peak over the server's life.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .load_server import REPO, ServeProcess, scrape, series, side_by_side
from .multiturn import stream_once
from .workloads import load_workload


@dataclass
class Chat:
    client: int
    index: int
    klass: str
    ttft_s: float
    seconds: float
    completion_tokens: int
    finish: str | None = None


@dataclass
class Run:
    server: str
    budget_bytes: int
    chats: list[Chat] = field(default_factory=list)
    wall_s: float = 0.0
    running: list[float] = field(default_factory=list)          # sampled every 0.25 s while any chat ran
    waiting_memory: list[float] = field(default_factory=list)
    releases: float = 0.0
    peak_bytes: float = 0.0
    errors: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        ttft = sorted(c.ttft_s for c in self.chats)
        busy = [r for r in self.running if r > 0]
        tokens = sum(c.completion_tokens for c in self.chats)
        return {"chats": len(self.chats), "completion_tokens": tokens,
                "tokens_per_s": tokens / self.wall_s if self.wall_s else 0.0,
                "ttft_median_s": statistics.median(ttft) if ttft else None,
                "ttft_p90_s": ttft[min(len(ttft) - 1, int(0.9 * len(ttft)))] if ttft else None,
                "ttft_max_s": ttft[-1] if ttft else None,
                "running_mean": statistics.fmean(busy) if busy else 0.0, "running_max": max(busy, default=0.0),
                "waiting_memory_max": max(self.waiting_memory, default=0.0), "releases": self.releases,
                "errors": len(self.errors)}


def request_bytes_at_context(model: Path | None) -> tuple[int, int]:
    """(bytes this checkout's server counts for one request at the model's whole context, that context)."""
    from engines.checkpoint import default_model_dir
    from engines.runtime import load_runtime

    runtime = load_runtime(str(model or default_model_dir()))
    return runtime.request_bytes(runtime.context_length), runtime.context_length


def drive(url: str, clients: int, requests: int, max_tokens: int | None, into: Run) -> None:
    prompts = load_workload("mixed")
    done = threading.Event()

    def client(number: int) -> None:
        for index in range(requests):
            prompt = prompts[(number * requests + index) % len(prompts)]
            body = {"model": "default", "messages": prompt.messages, "seed": 1000 * number + index}
            if max_tokens is not None:
                body["max_tokens"] = max_tokens
            started = time.perf_counter()
            try:
                ttft, _, _, usage = stream_once(url, body)
            except Exception as exc:  # noqa: BLE001 - reported, the run goes on
                into.errors.append(f"client {number} chat {index}: {exc!r}")
                continue
            into.chats.append(Chat(number, index, prompt.klass, ttft, time.perf_counter() - started,
                                   int(usage.get("completion_tokens") or 0)))

    def watch() -> None:
        while not done.is_set():
            samples = scrape(url)
            into.running.append(sum(series(samples, "switchyard_requests_running").values()))
            into.waiting_memory.append(sum(series(samples, "switchyard_requests_waiting_memory").values()))
            time.sleep(0.25)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    into.wall_s = time.perf_counter() - started
    done.set()
    watcher.join(5)
    samples = scrape(url)
    into.releases = sum(series(samples, "switchyard_requests_released_total").values())
    into.peak_bytes = series(samples, "switchyard_model_memory_bytes").get((("kind", "peak"),), 0.0)


def run(base: str, model: Path | None, out: Path, clients: int, requests: int, contexts: float,
        max_tokens: int | None) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    one, context = request_bytes_at_context(model)
    budget = int(one * contexts)
    model_args = ["--model", str(model)] if model is not None else []
    runs: list[Run] = []
    with side_by_side(base) as servers:
        for name, repo in servers:
            proc = ServeProcess([*model_args, "--max-batch", "8", "--request-memory-bytes", str(budget)],
                                out / f"serve-{len(runs)}.log", repo=repo)
            try:
                runs.append(Run(name, budget))
                drive(proc.url, clients, requests, max_tokens, runs[-1])
            finally:
                proc.stop()
    report = {"base": base, "model": str(model) if model is not None else "embedded demo", "clients": clients,
              "requests_per_client": requests, "context": context, "one_context_bytes": one, "contexts": contexts,
              "max_tokens": max_tokens, "runs": [{**asdict(r), "summary": r.summary()} for r in runs]}
    (out / "memory_budget.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "memory_budget.md").write_text(markdown(report))
    return report


def markdown(report: dict) -> str:
    asked = "none (the server's default)" if report["max_tokens"] is None else str(report["max_tokens"])
    lines = [f"{report['clients']} clients x {report['requests_per_client']} chats, max_tokens {asked}; budget "
             f"{report['contexts']:g} whole contexts ({report['context']} tokens each) = "
             f"{report['runs'][0]['budget_bytes'] / 2**20:.1f} MiB", "",
             "| server | wall (s) | completion tokens | tokens/s | TTFT median / p90 / max (s) | running mean / max | "
             "waiting for memory (max) | released | peak MiB | errors |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        s = r["summary"]
        lines.append(f"| {r['server']} | {r['wall_s']:.1f} | {s['completion_tokens']} | {s['tokens_per_s']:.1f} | "
                     f"{s['ttft_median_s']:.2f} / {s['ttft_p90_s']:.2f} / {s['ttft_max_s']:.2f} | "
                     f"{s['running_mean']:.2f} / {s['running_max']:.0f} | {s['waiting_memory_max']:.0f} | "
                     f"{s['releases']:.0f} | {r['peak_bytes'] / 2**20:.0f} | {s['errors']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit to compare against (served from a worktree)")
    parser.add_argument("--model", type=Path, default=None, help="model directory (default: the embedded demo)")
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--requests", type=int, default=2, help="chats per client, one after another")
    parser.add_argument("--contexts", type=float, default=2.0,
                        help="the budget, in whole contexts of one request (this checkout's count)")
    parser.add_argument("--max-tokens", type=int, default=None, help="default: none sent (a chat UI's request)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "memory-budget")
    args = parser.parse_args(argv)
    report = run(args.base, args.model, args.out, args.clients, args.requests, args.contexts, args.max_tokens)
    print(markdown(report))
    return 0 if all(not r["errors"] for r in report["runs"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
