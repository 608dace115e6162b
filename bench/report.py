"""Write a bench run: results.json (records + summary), report.md (tables) and PNG plots."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path


_FIXED_ON_GATEWAY = ("`raw`, `mtp`, `ddtree`, `ddtree1` (= DFlash) take the same path with the engine forced "
                     "(through a router of their own, so they teach auto's monitor nothing): every lane pays the "
                     "gateway's per-step work, as served requests do; ")
_FIXED_ON_ENGINE = ("`raw`, `mtp`, `ddtree`, `ddtree1` (= DFlash) run through Runtime.generate alone (`--fixed-path "
                    "engine`): their lanes leave out the gateway's per-step work (reply parser, the router's "
                    "bookkeeping) that auto's pays; ")


def _clean(value):
    """JSON has no NaN/inf: write null (strict parsers reject NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def write_outputs(results: dict, out: Path, plots: bool = True) -> dict[str, Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "markdown": out / "report.md"}
    paths["json"].write_text(json.dumps(_clean(results), indent=1, allow_nan=False) + "\n")
    images: dict[str, Path] = {}
    if plots:
        from .plots import write_plots

        images = write_plots(results, out)
        paths.update(images)
    paths["markdown"].write_text(markdown(results, {k: v.name for k, v in images.items()}))
    return paths


def _f(value, digits: int = 1, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.{digits}f}{suffix}"


def _spread(s: dict, digits: int = 1) -> str:
    if not s or s.get("median") is None:
        return "–"
    return f"{_f(s['median'], digits)} [{_f(s['q1'], digits)}–{_f(s['q3'], digits)}]"


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f}" if n else "–"


def markdown(results: dict, images: dict[str, str]) -> str:
    cfg, env, summary = results["config"], results["environment"], results["summary"]
    lines = [
        "# Switchyard bench",
        "",
        f"- command: `{cfg.get('command') or '(programmatic)'}`",
        f"- hardware: {env['cpu']} ({env['cores']} cores), {env['platform']}, device {env['device']}",
        f"- software: Python {env['python']}, mlx {env['mlx']}, mlx-lm {env['mlx_lm']}; BLAS mapped: "
        f"{env['blas']}{' (LD_PRELOAD ' + env['ld_preload'] + ')' if env['ld_preload'] else ''}",
        f"- commit: {env['commit']}",
        f"- model: `{results['model']['dir']}` (drafter `{results['model']['draft']}`), engines "
        f"{', '.join(results['model']['engines'])}",
        f"- dtype: {cfg.get('dtype', 'checkpoint')}; workload: {cfg['workload']}, per class {cfg['per_class'] or 'all'}, {cfg['max_tokens']} new tokens, "
        f"{cfg['repeats']} repeat(s), modes {', '.join(cfg['modes'])}, sampled = {cfg['sampled_params']}",
        f"- lanes (round-robin per prompt, rotating start): {', '.join(cfg['lanes'])}; router policy "
        f"{cfg['policy']}; classes for routing from: {cfg['classifier']}; auto's routers "
        + (f"warmed by {cfg['warm_router']} held-out prompts per class in each mode" if cfg.get('warm_router')
           else "start from an empty monitor"),
        f"- wall time {results['wall_seconds']:.0f} s; errors: {summary['error_count']}; load average (1 min) at "
        f"start {_f(env.get('load_average'), 1)}, end {_f(results.get('load_average_end'), 1)} on {env['cores']} cores",
        "",
        "Decode tok/s excludes the prefill (tokens after the first / time after the first token); "
        "cells are median [IQR] over requests. Speedup and cost ratio are per-prompt pairwise vs raw "
        "(same prompt, mode, repeat), then the median. `agg` = total tokens / total seconds. "
        "`anchor` = mlx-lm `stream_generate`; `auto` runs the gateway worker's own request path in process "
        "(OpenAI body validated, classified, routed, generated, monitor fed: gateway.worker.pipeline.run_request); "
        + (_FIXED_ON_ENGINE if cfg.get("fixed_path") == "engine" else _FIXED_ON_GATEWAY) +
        "`raw@http` and `auto@http` go through the real HTTP gateway (loopback uvicorn, SSE) whose router "
        "is a second one, warmed the same way; forced raw@http requests also feed that router's monitor, as forced "
        "traffic does in production (the warm-up study sends auto traffic only).",
        "",
    ]
    for mode, block in summary["modes"].items():
        lines += _mode_section(mode, block)
    if results.get("warmup_study"):
        lines += _warmup_section(results["warmup_study"])
    if results.get("blas_probe"):
        lines += _blas_section(results["blas_probe"])
    if results.get("cycle_modes"):
        lines += _cycle_mode_section(results["cycle_modes"])
    mem = results["model"]["memory"]
    lines += ["## Memory", "",
              f"parameters {_mib(mem.get('parameters', 0))} MiB, MTP head {_mib(mem.get('mtp_head', 0))} MiB, "
              f"drafter {_mib(mem.get('drafter', 0))} MiB, process peak (mx.get_peak_memory) "
              f"{_mib(mem.get('peak', 0))} MiB; per-engine request peaks are in the tables.", ""]
    if summary["errors"]:
        lines += ["## Errors", ""] + [f"- {e}" for e in summary["errors"]] + [""]
    if images:
        lines += ["## Plots", ""] + [f"![{k}]({v})" for k, v in images.items()] + [""]
    return "\n".join(lines)


def _mode_section(mode: str, block: dict) -> list[str]:
    lines = [f"## {mode}", ""]
    header = ("| class | engine | n | decode tok/s | agg | e2e tok/s | speedup vs raw | cost ratio | "
              "acc/step | accept rate | TTFT ms | peak MiB |")
    lines += [header, "|" + "---|" * 12]
    for scope, engines in block["table"].items():
        for engine, s in engines.items():
            ttft = s["ttft_s"]
            ttft_ms = _f(ttft["median"] * 1000, 1) if ttft["median"] is not None else "–"
            lines.append(
                f"| {scope} | {engine} | {s['requests']} | {_spread(s['decode_tps'])} | {_f(s['decode_tps_aggregate'])} | "
                f"{_f(s['e2e_tps']['median'])} | {_spread(s['speedup_vs_raw'], 2)} | {_spread(s['cost_ratio'], 2)} | "
                f"{_f(s['accepted_per_step'], 2)} | {_f(s['acceptance'], 2)} | {ttft_ms} | {_mib(s['peak_memory_bytes'])} |"
            )
    g = block["goals"]
    t = g["targets"]
    per_class = ", ".join(f"{k} {_f(v, 2)}" for k, v in g["auto_vs_raw_per_class"].items())
    lines += ["", f"### Goals ({mode}, measured)", "",
              f"- auto / best fixed engine ({g['best_fixed_engine']}): {_f(g['auto_vs_best_fixed'], 3)} "
              f"(goal ≥ {t['auto_vs_best_fixed_mixed']})",
              f"- auto / raw per class: {per_class or '–'} (goal ≥ {t['auto_vs_raw_every_class']} each)",
              *([f"- auto / best fixed engine in each context scope: " + ", ".join(
                  f"{k} {_f(v, 3)}" for k, v in g["auto_vs_best_fixed_per_context"].items())]
                if g.get("auto_vs_best_fixed_per_context") else []),
              f"- auto / raw overall: {_f(g['auto_vs_raw_overall'], 3)} (goal ≥ {t['auto_vs_raw_overall_greedy']}, greedy); "
              f"auto / raw@http: {_f(g['auto_vs_raw_http_overall'], 3)}",
              f"- through HTTP: auto@http / raw@http overall {_f(g.get('auto_http_vs_raw_http_overall'), 3)}, per class "
              + (", ".join(f"{k} {_f(v, 2)}" for k, v in (g.get('auto_http_vs_raw_http_per_class') or {}).items()) or "–")
              + f"; regret {_f(_pct(((block.get('http') or {}).get('regret') or {}).get('regret')), 1, '%')}",
              f"- regret vs per-request oracle: {_f(_pct(block['regret'].get('all', {}).get('regret')), 1, '%')} "
              f"(goal ≤ {t['regret_max'] * 100:.0f}%); vs the best engine per class in aggregate: "
              f"{_f(_pct(block['class_oracle_regret']['regret']), 1, '%')} "
              f"(best per class: {_counts_plain(block['class_oracle_regret']['best_engine_per_class'])}). "
              "The per-request oracle takes the max of noisy measurements, so it is biased high under load.",
              f"- gateway overhead: Runtime raw / stream_generate {_f(g['runtime_raw_vs_stream_generate'], 3)}, "
              f"HTTP raw / stream_generate {_f(g['http_raw_vs_stream_generate'], 3)} (agg rates; goal ≥ "
              f"{t['gateway_vs_stream_generate']})",
              ""]
    lines += ["### Router", "", "| class | choices | reasons | regret | auto picked oracle's engine |", "|---|---|---|---|---|"]
    routes = block["routes"]
    for scope, reg in block["regret"].items():
        choices = routes["choices"].get(scope, {}) if scope != "all" else {}
        reasons = routes["reasons"].get(scope, {}) if scope != "all" else {}
        lines.append(f"| {scope} | {_counts(choices)} | {_counts(reasons)} | {_f(_pct(reg['regret']), 1, '%')} | "
                     f"{reg['auto_picked_oracle_engine']}/{reg['auto_requests']} |")
    acc = routes["class_accuracy"]
    lines += ["", f"Class agreement of the router's class with the workload label: {_f(_pct(acc), 0, '%')}; "
              f"requests handed to raw mid-way: {routes['mid_request_fallbacks']}.", ""]
    stab = block.get("stability") or {}
    if stab:
        lines += ["Router choice over the measured requests: " + "; ".join(
            f"{k}: steady {v['steady_engine']} after {v['requests_to_stable']} of {v['requests']} requests"
            for k, v in stab.items()), ""]
    if block["lossless"]:
        lines += ["Greedy losslessness (token ids equal raw's): " + ", ".join(
            f"{e} {v['equal']}/{v['compared']}" for e, v in block["lossless"].items()), ""]
    return lines


def _cycle_mode_section(modes: dict) -> list[str]:
    lines = ["## Speculative cycle modes (engines/cycle_modes.py)", "",
             "ms per cycle as measured on this run's requests (warm-up trials included); the engine runs the "
             "cheaper mode (fixed on the CPU backend or when SWITCHYARD_PIPELINED is set).", "",
             "| engine | pipelined ms | host ms | requests pipelined / host | runs |", "|---|---|---|---|---|"]
    for key, row in modes.items():
        chosen = row.get("pipelined")
        runs = "measuring" if chosen != chosen else ("pipelined" if chosen else "host")
        lines.append(f"| {key} | {_f(row['pipelined_seconds'] * 1e3, 2)} | {_f(row['host_seconds'] * 1e3, 2)} | "
                     f"{int(row['pipelined_requests'])} / {int(row['host_requests'])} | {runs} |")
    return lines + [""]


def _warmup_section(study: dict) -> list[str]:
    lines = ["## Warm-up study (empty monitor, auto only)", "",
             f"{study['requests']} requests ({study['passes']} passes over the workload).", "",
             "| class | steady engine | requests to stable | requests | explorations |", "|---|---|---|---|---|"]
    for klass, s in study["per_class"].items():
        lines.append(f"| {klass} | {s['steady_engine']} | {s['requests_to_stable']} | {s['requests']} | {s['explorations']} |")
    return lines + [""]


def _blas_section(probe: dict) -> list[str]:
    lines = ["## Linux CPU BLAS (bench/blas_probe.py)", ""]
    if "error" in probe:
        return lines + [f"not measured: {probe['error']}", ""]
    from .blas_probe import table

    return lines + [table(probe), ""]


def _counts(counter: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items(), key=lambda kv: -kv[1])) or "–"


def _counts_plain(mapping: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in mapping.items()) or "–"


def _pct(value):
    return None if value is None else value * 100


def rebuild(out: Path, plots: bool = True) -> dict[str, Path]:
    """Recompute the summary, Markdown and plots of a finished run from its results.json records."""
    from dataclasses import fields

    from .measure import RequestRecord
    from .summary import summarize

    path = Path(out) / "results.json"
    # committed runs keep their records gzipped (results.json.gz): the tree travels to the GPU in every device call
    results = json.loads(path.read_text() if path.exists() else gzip.decompress(path.with_suffix(".json.gz").read_bytes()))
    names = {f.name for f in fields(RequestRecord)}
    nan = float("nan")
    records = [RequestRecord(**{k: (nan if v is None and k.endswith("_s") else v) for k, v in row.items() if k in names})
               for row in results["records"]]
    results["summary"] = summarize(records, results["config"]["modes"])
    return write_outputs(results, Path(out), plots=plots)


if __name__ == "__main__":
    import sys

    for directory in sys.argv[1:] or ["bench/out/latest"]:
        print(rebuild(Path(directory))["markdown"])
