"""Multi-turn TTFT with and without the prefix cache (issue 20), against mlx_lm.server's prompt cache
on the same model, in one run: `switchyard bench --workload multiturn [--model DIR] [--out DIR]`.

Two conversations are replayed turn by turn through a real server (streaming; TTFT is the time to
the first generated token's frame): a 10-turn chat (each turn adds the reply and a new question)
and an agent loop (a system prompt with tool definitions, each turn adds a tool call and a ~400-token
tool result, growing the context from ~4k to ~7.5k tokens). Servers run one after another on the same
machine: `switchyard serve --prefix-cache-bytes 0`, `switchyard serve` (cache on) and
`mlx_lm.server`. The goal: TTFT of turn 10 <= 1.5x turn 1 with the cache, decode speed unchanged.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from .load_server import REPO, ServeProcess, free_port

TURNS = 10
WORDS = ("river stone window garden signal engine copper valley lantern harbor meadow thunder canvas "
         "orbit pepper marble summit ribbon falcon ember glacier cedar velvet compass").split()


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def chat_turns(seed: int = 0) -> list[dict]:
    """User messages of a 10-turn chat (the replies come from the server)."""
    rng = random.Random(seed)
    return [{"role": "user", "content": f"Question {i + 1}: tell me about the {_text(rng, 12)}."} for i in range(TURNS)]


def agent_context(seed: int = 0) -> tuple[list[dict], list[dict], list[str]]:
    """An agent's system prompt with tools (~4k tokens on the demo tokenizer), its task, and one ~350-token
    tool result per turn (the context grows to ~7.5k tokens by turn 10)."""
    rng = random.Random(seed)
    tools = [{"type": "function", "function": {
        "name": f"tool_{i}", "description": _text(rng, 30),
        "parameters": {"type": "object", "properties": {f"arg_{j}": {"type": "string", "description": _text(rng, 8)}
                                                        for j in range(4)}, "required": ["arg_0"]}}}
        for i in range(12)]
    system = [{"role": "system", "content": "You are a coding agent. " + _text(rng, 500)},
              {"role": "user", "content": "Refactor the " + _text(rng, 20)}]
    results = [_text(rng, 110) for _ in range(TURNS)]
    return system, tools, results


@dataclass
class Turn:
    turn: int
    prompt_tokens: int
    ttft_s: float
    decode_tok_s: float | None
    cached_tokens: int | None
    engine: str | None = None          # X-Switchyard-Engine (None for mlx_lm.server)


@dataclass
class Series:
    server: str
    scenario: str
    turns: list[Turn] = field(default_factory=list)

    @property
    def growth(self) -> float:
        return self.turns[-1].ttft_s / self.turns[0].ttft_s


class StreamError(RuntimeError):
    """The server ended a stream with an error event."""


def stream_once(base_url: str, body: dict, timeout: float = 600.0) -> tuple[float, float | None, str, dict]:
    """POST a streaming chat completion: (TTFT, decode tokens/s after the first token, text, usage);
    usage also carries the engine that ran (`_engine`)."""
    started = time.perf_counter()
    first = None
    pieces: list[str] = []
    usage: dict = {}
    frames = 0
    with httpx.stream("POST", base_url + "/v1/chat/completions", json={**body, "stream": True,
                      "stream_options": {"include_usage": True}}, timeout=timeout) as response:
        response.raise_for_status()
        engine = response.headers.get("x-switchyard-engine")
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if data.get("error"):   # a failure after the 200: the reply is cut short, never a success
                raise StreamError(f"error event: {data['error']}")
            if data.get("usage"):
                usage = data["usage"]
            for choice in data.get("choices") or []:
                delta = choice.get("delta") or {}
                text = (delta.get("content") or "") + (delta.get("reasoning_content") or delta.get("reasoning") or "")
                if text or delta.get("tool_calls"):
                    frames += 1
                    if first is None:
                        first = time.perf_counter()
                    pieces.append(delta.get("content") or "")
    end = time.perf_counter()
    first = first if first is not None else end
    tokens = usage.get("completion_tokens") or frames
    decode = (tokens - 1) / (end - first) if tokens > 1 and end > first else None
    return first - started, decode, "".join(pieces), {**usage, "_engine": engine}


def replay(base_url: str, model: str, scenario: str, max_tokens: int, server: str) -> Series:
    series = Series(server, scenario)
    params = {"model": model, "max_tokens": max_tokens, "temperature": 0}
    if scenario == "chat":
        messages: list[dict] = [{"role": "system", "content": "You are a helpful assistant."}]
        for index, ask in enumerate(chat_turns()):
            messages.append(ask)
            ttft, decode, text, usage = stream_once(base_url, {**params, "messages": messages})
            series.turns.append(_turn(index, ttft, decode, usage))
            messages.append({"role": "assistant", "content": text or "ok"})
        return series
    messages, tools, results = agent_context()
    for index, result in enumerate(results):
        ttft, decode, text, usage = stream_once(base_url, {**params, "messages": messages, "tools": tools})
        series.turns.append(_turn(index, ttft, decode, usage))
        messages = after_tool_call(messages, index, text, result)
    return series


def after_tool_call(messages: list[dict], index: int, text: str, result: str) -> list[dict]:
    """The agent's next context: its reply with turn `index`'s tool call, then the tool's result."""
    call_id = f"call_{index}"
    return [*messages,
            {"role": "assistant", "content": text or "", "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": f"tool_{index % 12}", "arguments": json.dumps({"arg_0": f"step {index}"})}}]},
            {"role": "tool", "tool_call_id": call_id, "content": result}]


def _turn(index: int, ttft: float, decode: float | None, usage: dict) -> Turn:
    details = usage.get("prompt_tokens_details") or {}
    return Turn(index + 1, int(usage.get("prompt_tokens") or 0), ttft, decode, details.get("cached_tokens"),
                usage.get("_engine"))


class MlxLmServer:
    """mlx_lm.server on the same model (its own LRU prompt cache), for the side-by-side row."""

    def __init__(self, model: Path, log_path: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "mlx_lm.server", "--model", str(model), "--port",
                                      str(self.port)], cwd=REPO, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ})
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlx_lm.server exited: {log_path.read_text()[-2000:]}")
            try:
                httpx.get(self.url + "/v1/models", timeout=1)
                return
            except httpx.TransportError:
                time.sleep(0.2)
        raise RuntimeError("mlx_lm.server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()


def run(model_dir: Path, out: Path, max_tokens: int = 16, with_mlx_lm: bool = True) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    all_series: list[Series] = []
    for server, flags in (("switchyard, no prefix cache", ["--prefix-cache-bytes", "0"]),
                          ("switchyard, prefix cache", [])):
        proc = ServeProcess(["--model", str(model_dir), *flags], out / f"serve-{len(all_series)}.log")
        try:
            for scenario in ("chat", "agent"):
                all_series.append(replay(proc.url, "default", scenario, max_tokens, server))
        finally:
            proc.stop()
    if with_mlx_lm:
        mlx = MlxLmServer(model_dir, out / "mlx_lm_server.log")
        try:
            for scenario in ("chat", "agent"):
                all_series.append(replay(mlx.url, str(model_dir), scenario, max_tokens, "mlx_lm.server"))
        finally:
            mlx.stop()
    report = {"model": str(model_dir), "max_tokens": max_tokens, "series": [
        {**asdict(s), "growth_turn10_over_turn1": s.growth} for s in all_series]}
    (out / "multiturn.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "multiturn.md").write_text(markdown(all_series))
    return report


def markdown(all_series: list[Series]) -> str:
    lines = ["| scenario | server | turn 1 prompt | turn 10 prompt | TTFT turn 1 (s) | TTFT turn 10 (s) | "
             "turn 10 / turn 1 | cached tokens turn 10 | decode tok/s (median) |", "|---" * 9 + "|"]
    for s in sorted(all_series, key=lambda s: (s.scenario, s.server)):
        first, last = s.turns[0], s.turns[-1]
        decodes = sorted(t.decode_tok_s for t in s.turns if t.decode_tok_s)
        median = f"{decodes[len(decodes) // 2]:.0f}" if decodes else "n/a"
        lines.append(f"| {s.scenario} | {s.server} | {first.prompt_tokens} | {last.prompt_tokens} | "
                     f"{first.ttft_s:.3f} | {last.ttft_s:.3f} | {s.growth:.2f}x | "
                     f"{last.cached_tokens if last.cached_tokens is not None else 'n/a'} | {median} |")
    per_turn = ["", "TTFT per turn (s):", "", "| scenario | server | " + " | ".join(str(i) for i in range(1, TURNS + 1))
                + " |", "|---|---" + "|---" * TURNS + "|"]
    for s in sorted(all_series, key=lambda s: (s.scenario, s.server)):
        per_turn.append(f"| {s.scenario} | {s.server} | " + " | ".join(
            f"{t.ttft_s:.2f}" + (f" {t.engine}" if t.engine else "") for t in s.turns) + " |")
    return "\n".join(lines + per_turn) + "\n"
