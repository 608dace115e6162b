"""Concurrent streaming clients (issue 21): `switchyard bench --clients 1,2,4,8 [--model DIR] [--out DIR]`.

N clients each stream `--per-client` chat completions back to back (greedy, the mixed held-out-style
workload of bench/workloads, every client its own prompts, the same ones on every server), for each N,
against three servers run one after another on this machine:

* `switchyard serve --max-batch 1`: requests one at a time (the router picks each one's engine), as
  before continuous batching;
* `switchyard serve` (default `--max-batch 8`): raw decoders share one batched forward, the router
  weighs load;
* `mlx_lm.server` on the same model (it batches concurrent requests too).

Each server first answers 24 warm-up requests one at a time (`--warm-router` 8 per class, prompts the
levels never use: compiles, and the router's monitor learns which engine wins each class here, so the
serial and batched servers start from settled choices rather than a few noisy ones),
then one full concurrent round at the largest N (every batch size's first-use compiles on a GPU: on
MLX-CUDA a cold batched pass ran at 0.13x a warm one, bench.profile_batch).
Reported per N: aggregate completion tokens/s (all tokens / wall time), per-client decode tokens/s
(median over requests), TTFT p50/p99, and whether every greedy answer equals the serial server's.
Goals: 8 clients >= 2.5x the serial server's aggregate; 1 client >= 0.98x it.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .load_server import ServeProcess
from .multiturn import MlxLmServer, stream_once

WORKLOADS = Path(__file__).parent / "workloads"
SERIAL, BATCHED, MLX_LM = "switchyard --max-batch 1", "switchyard (batched)", "mlx_lm.server"


def mixed_prompts() -> list[dict]:
    """The held-out-style workload, classes interleaved (code, prose, structured, code, ...)."""
    by_class = [[json.loads(line) for line in (WORKLOADS / f"{k}.jsonl").read_text().splitlines() if line.strip()]
                for k in ("code", "prose", "structured")]
    return [item for group in zip(*by_class) for item in group]


@dataclass
class Request:
    client: int
    prompt_id: str
    ttft_s: float
    decode_tok_s: float | None
    completion_tokens: int
    text: str
    engine: str | None


@dataclass
class Level:
    server: str
    clients: int
    wall_s: float
    requests: list[Request] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(r.completion_tokens for r in self.requests)

    @property
    def aggregate_tok_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0

    def ttft(self, q: float) -> float:
        values = sorted(r.ttft_s for r in self.requests)
        return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")

    @property
    def per_client_tok_s(self) -> float:
        rates = [r.decode_tok_s for r in self.requests if r.decode_tok_s]
        return statistics.median(rates) if rates else float("nan")


def run_level(base_url: str, model: str, server: str, clients: int, per_client: int, prompts: list[dict],
              max_tokens: int) -> Level:
    """`clients` threads, each streaming its `per_client` requests one after another."""
    level = Level(server, clients, 0.0)
    lock = threading.Lock()

    def client(index: int) -> None:
        for r in range(per_client):
            item = prompts[(index * per_client + r) % len(prompts)]
            body = {"model": model, "messages": item["messages"], "max_tokens": max_tokens, "temperature": 0}
            try:
                ttft, decode, text, usage = stream_once(base_url, body)
            except Exception as exc:  # noqa: BLE001 - counted and reported, never hidden
                with lock:
                    level.errors.append(f"client {index}: {exc!r}")
                continue
            with lock:
                level.requests.append(Request(index, item["id"], ttft, decode, int(usage.get("completion_tokens") or 0),
                                              text, usage.get("_engine")))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    level.wall_s = time.perf_counter() - started
    return level


def _warm(base_url: str, model: str, prompts: list[dict], count: int, max_tokens: int, clients: int) -> None:
    """`count` requests one at a time (first-use compiles, the router's monitor), then one full round of
    `clients` at once (every batch size's first-use compiles on a GPU, which a long-running server pays
    once), on prompts the measurement does not use first."""
    if not count:
        return
    for item in prompts[-count:]:
        stream_once(base_url, {"model": model, "messages": item["messages"], "max_tokens": max_tokens, "temperature": 0})
    run_level(base_url, model, "warm-up", clients, 1, prompts[::-1], max_tokens)


def run(model_dir: Path, out: Path, levels: tuple[int, ...] = (1, 2, 4, 8), per_client: int = 2,
        max_tokens: int = 128, warmup: int = 24, with_mlx_lm: bool = True, serve_args: tuple[str, ...] = ()) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    prompts = mixed_prompts()
    results: list[Level] = []
    servers: list[tuple[str, list[str] | None]] = [(SERIAL, ["--max-batch", "1"]), (BATCHED, [])]
    if with_mlx_lm:
        servers.append((MLX_LM, None))
    for number, (name, flags) in enumerate(servers):
        log = out / f"server-{number}.log"
        if flags is not None:   # a fresh router state per server, beside the results (never the user's)
            policy = out / f"policy-{number}.yaml"
            state = out / f"router_state-{number}.json"
            state.unlink(missing_ok=True)
            policy.write_text(f"version: 1\nstate:\n  path: {json.dumps(str(state))}\n")
            proc = ServeProcess(["--model", str(model_dir), "--policy", str(policy), *serve_args, *flags], log)
        else:
            proc = MlxLmServer(model_dir, log)
        model = "default" if flags is not None else str(model_dir)
        try:
            _warm(proc.url, model, prompts, warmup, max_tokens, max(levels))
            for clients in levels:
                results.append(run_level(proc.url, model, name, clients, per_client, prompts, max_tokens))
                print(f"{name}: {clients} clients {results[-1].aggregate_tok_s:.1f} tok/s", flush=True)
        finally:
            proc.stop()
    report = summarise(results, levels)
    report.update(model=str(model_dir), max_tokens=max_tokens, per_client=per_client, warmup=warmup,
                  levels=[{**asdict(level), "aggregate_tok_s": level.aggregate_tok_s, "ttft_p50": level.ttft(0.5),
                           "ttft_p99": level.ttft(0.99), "per_client_tok_s": level.per_client_tok_s}
                          for level in results])
    (out / "clients.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "clients.md").write_text(markdown(results, report))
    return report


def summarise(results: list[Level], levels: tuple[int, ...]) -> dict:
    """Ratios against the serial server at the same N, and greedy answers compared with its answers."""
    by = {(level.server, level.clients): level for level in results}
    serial_text = {r.prompt_id: r.text for level in results if level.server == SERIAL for r in level.requests}
    ratios: dict[str, dict[int, float]] = {}
    same: dict[str, list[int]] = {}
    for level in results:
        base = by.get((SERIAL, level.clients))
        if base is not None and base.aggregate_tok_s > 0:
            ratios.setdefault(level.server, {})[level.clients] = level.aggregate_tok_s / base.aggregate_tok_s
        if level.server == BATCHED:
            counts = same.setdefault(level.server, [0, 0])
            for r in level.requests:
                counts[0] += r.text == serial_text.get(r.prompt_id)
                counts[1] += 1
    serial_one = by.get((SERIAL, 1))
    batched = {n: by[(BATCHED, n)] for n in levels if (BATCHED, n) in by}
    goals = {}
    if serial_one is not None and batched:
        top = max(batched)
        goals = {
            f"{top}_clients_vs_serial": batched[top].aggregate_tok_s / by[(SERIAL, top)].aggregate_tok_s
            if (SERIAL, top) in by else None,
            "1_client_vs_serial": batched[1].aggregate_tok_s / serial_one.aggregate_tok_s if 1 in batched else None,
        }
    return {"ratio_vs_serial": ratios, "greedy_equal_to_serial": same, "goals": goals,
            "errors": sum(len(level.errors) for level in results)}


def markdown(results: list[Level], report: dict) -> str:
    lines = ["| server | clients | requests | aggregate tok/s | vs serial | per-client tok/s (median) | TTFT p50 (s) | "
             "TTFT p99 (s) | engines | errors |", "|---" * 10 + "|"]
    for level in results:
        ratio = report["ratio_vs_serial"].get(level.server, {}).get(level.clients)
        engines: dict[str, int] = {}
        for r in level.requests:
            engines[r.engine or "-"] = engines.get(r.engine or "-", 0) + 1
        lines.append(f"| {level.server} | {level.clients} | {len(level.requests)} | {level.aggregate_tok_s:.1f} | "
                     f"{f'{ratio:.2f}x' if ratio is not None else 'n/a'} | {level.per_client_tok_s:.1f} | "
                     f"{level.ttft(0.5):.2f} | {level.ttft(0.99):.2f} | "
                     f"{', '.join(f'{k} {v}' for k, v in sorted(engines.items()))} | {len(level.errors)} |")
    same = report["greedy_equal_to_serial"].get(BATCHED)
    if same:
        lines += ["", f"Greedy answers of the batched server equal to the serial server's: {same[0]}/{same[1]}."]
    goals = report.get("goals") or {}
    if goals:
        lines += ["", "Goals: " + "; ".join(f"{k} = {v:.2f}x" for k, v in goals.items() if v is not None)]
    return "\n".join(lines) + "\n"
