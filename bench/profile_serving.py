"""Where a serving process spends its time under N streaming clients (issue 21).

    python -m bench.profile_serving [--model DIR] [--clients 8] [--seconds 20] [--max-tokens 128]
                                    [--serve-arg=--max-batch=8 ...] [--out DIR]

Starts `switchyard serve` on loopback, warms it (one request at a time, then one concurrent round),
then runs N closed-loop streaming clients (greedy, the mixed held-out-style workload) while py-spy
samples the server (every thread, Python frames). Prints the aggregate tok/s, the mean batch size from
the server's own counters, and per thread the busy share and the functions with the most inclusive
samples; writes the raw py-spy profile and a JSON summary to --out. Needs py-spy on PATH (PyPI
`py-spy`; on the lent GPU carry its wheel); without it only the rates are reported.

Read it as: worker busy share vs event-loop busy share; inside the worker, the share in the batched
step (`DecodeBatch._step`: launching and waiting for the forward) against the per-row work around it
(the generator chain: detokenize, reply split, router observe, posting chunks to the event loop).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from .clients import mixed_prompts
from .load_server import ServeProcess, scrape, series
from .multiturn import stream_once


def _clients(url: str, count: int, seconds: float, max_tokens: int, prompts: list[dict]) -> int:
    """Closed-loop streaming clients until `seconds` pass; returns the completion tokens received."""
    tokens = [0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(index: int) -> None:
        k = index
        while time.monotonic() < stop:
            prompt = prompts[k % len(prompts)]
            k += count
            _, _, _, usage = stream_once(url, {"messages": prompt["messages"], "max_tokens": max_tokens,
                                               "temperature": 0})
            with lock:
                tokens[0] += int(usage.get("completion_tokens") or 0)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return tokens[0]


def summarize(raw: Path, top: int = 25) -> dict:
    """Per thread (its outermost frame): samples, and the functions with most inclusive samples."""
    threads: Counter = Counter()
    inclusive: dict[str, Counter] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        thread = _name(frames[0])
        samples = int(count)
        threads[thread] += samples
        total += samples
        seen = set()
        for frame in frames:
            name = _name(frame)
            if name not in seen:
                seen.add(name)
                inclusive.setdefault(thread, Counter())[name] += samples
    # the trunk every sample of a thread passes through (thread start, the event loop's run) says nothing
    return {"samples": total,
            "threads": {thread: {"samples": n, "top": [(name, k) for name, k in inclusive[thread].most_common()
                                                       if k < 0.9 * n][:top]}
                        for thread, n in threads.most_common() if n >= 0.01 * total}}


def _total(samples: dict, name: str) -> float:
    return sum(series(samples, name).values())


def _name(frame: str) -> str:
    """`func (path/file.py:line)` -> `func (file.py)`."""
    func, _, where = frame.partition(" (")
    return f"{func} ({where.split(':')[0].split('/')[-1]})" if where else func


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--serve-arg", action="append", default=[], help="extra `serve` argument (repeatable)")
    parser.add_argument("--out", type=Path, default=Path("bench/out/profile-serving"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    serve_args = (["--model", args.model] if args.model else []) + [a for arg in args.serve_arg for a in arg.split("=", 1)]
    prompts = mixed_prompts()
    server = ServeProcess(serve_args, args.out / "serve.log")
    try:
        for prompt in prompts[:3]:   # compiles, the router's first choices
            stream_once(server.url, {"messages": prompt["messages"], "max_tokens": args.max_tokens, "temperature": 0})
        _clients(server.url, args.clients, min(args.seconds, 8.0), args.max_tokens, prompts[3:])   # batch shapes
        before = scrape(server.url)
        spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
        raw = args.out / "py-spy.txt"
        recorder = None
        if spy:
            recorder = subprocess.Popen([spy, "record", "-p", str(server.pid), "-d", str(int(args.seconds)),
                                         "-r", str(args.rate), "-f", "raw", "-o", str(raw), "--nonblocking"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        started = time.perf_counter()
        tokens = _clients(server.url, args.clients, args.seconds, args.max_tokens, prompts)
        wall = time.perf_counter() - started
        after = scrape(server.url)
        if recorder is not None:
            recorder.wait(timeout=args.seconds + 30)
    finally:
        server.stop()
    steps = _total(after, "switchyard_batch_steps_total") - _total(before, "switchyard_batch_steps_total")
    rows = _total(after, "switchyard_batch_row_steps_total") - _total(before, "switchyard_batch_row_steps_total")
    result = {"clients": args.clients, "seconds": wall, "tokens": tokens, "tok_s": tokens / wall,
              "batched_steps": steps, "mean_batch_rows": rows / steps if steps else None,
              "batched_share_of_tokens": rows / tokens if tokens else None}
    if raw.exists():
        result["profile"] = summarize(raw)
    (args.out / "profile_serving.json").write_text(json.dumps(result, indent=1))
    print(f"{args.clients} clients, {wall:.1f} s: {result['tok_s']:.1f} tok/s; batched steps {steps:.0f}, "
          f"mean rows {result['mean_batch_rows'] or 0:.2f}, batched row-steps per token received "
          f"{result['batched_share_of_tokens'] or 0:.2f} (above 1: rows stepped once more past their end, pipelining)")
    for thread, info in result.get("profile", {}).get("threads", {}).items():
        print(f"\n[{thread}] {info['samples']} samples")
        for name, samples in info["top"]:
            print(f"  {samples / max(info['samples'], 1):6.1%}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
