"""Several agents at once under one prefix-cache budget: this checkout against another commit, in one run.

    PYTHONPATH=. python -m bench.prefix_sharing --base 8604533 [--agents 3] [--turns 6] [--budgets 1.5,3]
        [--budget-mib 40,93.2] [--model DIR] [--engine auto|raw|mtp|ddtree] [--out DIR]

Agents of one coding tool share a system prompt and tools (bench.multiturn's agent context, ~4k tokens on the
demo tokenizer) and each works on its own task: every turn adds a tool call and a ~350-token tool result. They
take turns round robin, streaming, greedy, as several clients of one server would. Each server (`--base`'s code
from a temporary worktree, then this checkout's) runs the same replay at each budget. A budget is a multiple of
one agent's whole conversation as this checkout stores it (measured first, from a server's
`switchyard_model_memory_bytes{kind="prefix_cache"}` after that conversation's last prompt), so a factor means
the same bytes for both; `--budget-mib` adds budgets in bytes, comparable across runs. Reported per server and
budget: prompt tokens served from the cache, TTFT of the turns after each agent's first, the cache's bytes,
entries and evictions at the end, and the MLX allocator's peak over the server's life.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .load_server import REPO, ServeProcess, scrape, series, side_by_side
from .multiturn import TURNS, _text, after_tool_call, agent_context, stream_once


@dataclass
class AgentTurn:
    agent: int
    turn: int
    prompt_tokens: int
    cached_tokens: int
    ttft_s: float
    engine: str | None


@dataclass
class Replay:
    server: str
    budget_factor: float
    budget_bytes: int
    turns: list[AgentTurn] = field(default_factory=list)
    cache_bytes: float = 0.0
    entries: float = 0.0
    evictions: float = 0.0
    peak_bytes: float = 0.0            # the MLX allocator's peak over the server's life (weights included)

    def later(self) -> list[AgentTurn]:
        """Turns after each agent's first (the first has nothing of its own to resume)."""
        return [t for t in self.turns if t.turn > 1]

    def summary(self) -> dict:
        later = self.later()
        prompt = sum(t.prompt_tokens for t in later)
        return {"cached_share": sum(t.cached_tokens for t in later) / prompt if prompt else 0.0,
                "prefilled_tokens": sum(t.prompt_tokens - t.cached_tokens for t in self.turns),
                "ttft_median_s": statistics.median(t.ttft_s for t in later) if later else None,
                "ttft_mean_s": statistics.fmean(t.ttft_s for t in later) if later else None}


def agents(count: int, turns: int) -> list[tuple[list[dict], list[dict], list[str]]]:
    """Each agent's opening messages, the shared tools, and its tool results: one system prompt for all."""
    system, tools, _ = agent_context()
    out = []
    for index in range(count):
        rng = random.Random(1000 + index)
        opening = [system[0], {"role": "user", "content": f"Task {index + 1}: refactor the " + _text(rng, 20)}]
        out.append((opening, tools, [_text(rng, 110) for _ in range(turns)]))
    return out


def replay(url: str, plans: list, turns: int, max_tokens: int, into: Replay, engine: str = "auto") -> None:
    params = {"model": "default", "max_tokens": max_tokens, "temperature": 0, "engine": engine}
    conversations = [opening for opening, _, _ in plans]
    for turn in range(turns):
        for agent, (_, tools, results) in enumerate(plans):
            ttft, _, text, usage = stream_once(url, {**params, "messages": conversations[agent], "tools": tools})
            details = usage.get("prompt_tokens_details") or {}
            into.turns.append(AgentTurn(agent + 1, turn + 1, int(usage.get("prompt_tokens") or 0),
                                        int(details.get("cached_tokens") or 0), ttft, usage.get("_engine")))
            conversations[agent] = after_tool_call(conversations[agent], turn, text, results[turn])
    samples = scrape(url)
    into.cache_bytes = series(samples, "switchyard_model_memory_bytes").get((("kind", "prefix_cache"),), 0.0)
    into.entries = sum(series(samples, "switchyard_prefix_cache_entries").values())
    into.evictions = sum(series(samples, "switchyard_prefix_cache_evictions_total").values())
    into.peak_bytes = series(samples, "switchyard_model_memory_bytes").get((("kind", "peak"),), 0.0)


def one_conversation_bytes(model: list[str], plans: list, turns: int, out: Path, engine: str = "auto") -> int:
    """What this checkout's cache holds after one agent's last prompt (its whole conversation), sent once."""
    opening, tools, results = plans[0]
    messages = opening
    for turn in range(turns - 1):
        messages = after_tool_call(messages, turn, "", results[turn])
    proc = ServeProcess(model, out / "serve-calibrate.log")
    try:
        stream_once(proc.url, {"model": "default", "max_tokens": 1, "temperature": 0, "messages": messages,
                               "tools": tools, "engine": engine})
        return int(series(scrape(proc.url), "switchyard_model_memory_bytes")[(("kind", "prefix_cache"),)])
    finally:
        proc.stop()


def run(base: str, model: Path | None, out: Path, agent_count: int, turns: int, factors: list[float],
        max_tokens: int, budgets_mib: list[float] = (), engine: str = "auto") -> dict:
    """Each budget (`factors` times one conversation, then `budgets_mib` as they are) served by both commits."""
    out.mkdir(parents=True, exist_ok=True)
    plans = agents(agent_count, turns)
    model_args = ["--model", str(model)] if model is not None else []   # none: serve's embedded demo
    unit = one_conversation_bytes(model_args, plans, turns, out, engine)
    replays: list[Replay] = []
    with side_by_side(base) as servers:
        for factor, budget in [*((f, int(unit * f)) for f in factors),
                               *((m * 2**20 / unit, int(m * 2**20)) for m in budgets_mib)]:
            for name, repo in servers:
                proc = ServeProcess([*model_args, "--prefix-cache-bytes", str(budget)],
                                    out / f"serve-{len(replays)}.log", repo=repo)
                try:
                    replays.append(Replay(name, factor, budget))
                    replay(proc.url, plans, turns, max_tokens, replays[-1], engine)
                finally:
                    proc.stop()
    report = {"base": base, "model": str(model) if model is not None else "embedded demo", "engine": engine,
              "agents": agent_count,
              "turns": turns, "max_tokens": max_tokens, "one_conversation_bytes": unit,
              "replays": [{**asdict(r), "summary": r.summary()} for r in replays]}
    (out / "prefix_sharing.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "prefix_sharing.md").write_text(markdown(report))
    return report


def markdown(report: dict) -> str:
    lines = [f"{report['agents']} agents x {report['turns']} turns, round robin, engine "
             f"{report.get('engine', 'auto')}; one conversation stored once = "
             f"{report['one_conversation_bytes'] / 2**20:.1f} MiB", "",
             "| budget (x one conversation) | server | cached share of later turns' prompts | tokens prefilled | "
             "TTFT later turns, median / mean (s) | cache MiB at the end | entries | evictions | peak MiB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["replays"]:
        s = r["summary"]
        lines.append(f"| {r['budget_factor']:g} ({r['budget_bytes'] / 2**20:.1f} MiB) | {r['server']} | "
                     f"{s['cached_share']:.3f} | {s['prefilled_tokens']} | {s['ttft_median_s']:.2f} / "
                     f"{s['ttft_mean_s']:.2f} | {r['cache_bytes'] / 2**20:.1f} | {r['entries']:.0f} | "
                     f"{r['evictions']:.0f} | {r['peak_bytes'] / 2**20:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit to compare against (served from a worktree)")
    parser.add_argument("--model", type=Path, default=None, help="model directory (default: the embedded demo)")
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--turns", type=int, default=6, help=f"turns per agent (at most {TURNS})")
    parser.add_argument("--budgets", default="1.5,3", help="budgets, as multiples of one conversation stored once")
    parser.add_argument("--budget-mib", default="", help="more budgets, in MiB (comparable across runs)")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--engine", default="auto", choices=("auto", "raw", "mtp", "ddtree"),
                        help="the engine every request asks for (mtp: the head's deposits on every entry)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "prefix-sharing")
    args = parser.parse_args(argv)
    report = run(args.base, args.model, args.out, args.agents, min(args.turns, TURNS),
                 [float(f) for f in args.budgets.split(",") if f], args.max_tokens,
                 [float(m) for m in args.budget_mib.split(",") if m], args.engine)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
