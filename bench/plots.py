"""PNG plots of a bench run (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ENGINE_COLORS = {"anchor": "#999999", "raw": "#4c72b0", "raw@http": "#8fa8d0", "mtp": "#55a868",
                 "ddtree": "#c44e52", "ddtree1": "#e6a0a2", "auto": "#8172b2",
                 "auto@http": "#b4a9d6"}
CHOICE_Y = {"raw": 0, "mtp": 1, "ddtree": 2}
CLASS_MARKERS = {"code": "o", "prose": "s", "structured": "^"}


def write_plots(results: dict, out: Path) -> dict[str, Path]:
    paths: dict[str, Path] = {}
    for mode, block in results["summary"]["modes"].items():
        paths[f"tokens_per_second_{mode}"] = _bars(block["table"], out / f"tokens_per_second_{mode}.png", mode)
        paths[f"acceptance_{mode}"] = _acceptance(block["table"], out / f"acceptance_{mode}.png", mode)
    autos = [r for r in results["records"] if r["engine"] == "auto"]
    if autos:
        paths["router_choices"] = _choices(autos, out / "router_choices.png", "Router choices over the run")
    study = results.get("warmup_study")
    if study:
        paths["warmup_choices"] = _choices(study["records"], out / "warmup_choices.png",
                                           "Warm-up study: choices from an empty monitor")
    return paths


def _bars(table: dict, path: Path, mode: str) -> Path:
    scopes = list(table)
    engines = [e for e in ENGINE_COLORS if any(e in table[s] for s in scopes)]
    width = 0.8 / max(1, len(engines))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    x = np.arange(len(scopes))
    for i, engine in enumerate(engines):
        med, lo, hi = [], [], []
        for scope in scopes:
            s = table[scope].get(engine, {}).get("decode_tps", {})
            m = s.get("median")
            med.append(m or 0.0)
            lo.append((m - s["q1"]) if m is not None else 0.0)
            hi.append((s["q3"] - m) if m is not None else 0.0)
        ax.bar(x + (i - (len(engines) - 1) / 2) * width, med, width, yerr=[lo, hi], capsize=2,
               label=engine, color=ENGINE_COLORS[engine])
    ax.set_xticks(x, scopes)
    ax.set_ylabel("decode tokens/s (median, IQR)")
    ax.set_title(f"Decode speed per class and engine ({mode})")
    ax.legend(ncol=4, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _acceptance(table: dict, path: Path, mode: str) -> Path:
    scopes = [s for s in table if s != "all"] + ["all"]
    engines = [e for e in ("mtp", "ddtree", "ddtree1") if any(e in table[s] for s in scopes)]
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(1, len(engines))
    x = np.arange(len(scopes))
    for i, engine in enumerate(engines):
        vals = [table[s].get(engine, {}).get("accepted_per_step") or 0.0 for s in scopes]
        ax.bar(x + (i - (len(engines) - 1) / 2) * width, vals, width, label=engine, color=ENGINE_COLORS[engine])
    ax.set_xticks(x, scopes)
    ax.set_ylabel("accepted draft tokens per step")
    ax.set_title(f"Acceptance per class ({mode})")
    if engines:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _choices(records: list[dict], path: Path, title: str) -> Path:
    fig, ax = plt.subplots(figsize=(10, 3.5))
    for klass, marker in CLASS_MARKERS.items():
        rows = [(i, r) for i, r in enumerate(records) if r["klass"] == klass and r.get("route_engine") in CHOICE_Y]
        if not rows:
            continue
        offset = {"code": -0.15, "prose": 0.0, "structured": 0.15}[klass]
        xs = [i for i, _ in rows]
        ys = [CHOICE_Y[r["route_engine"]] + offset for _, r in rows]
        colors = ["#dd8452" if r.get("route_reason") == "explore" else "#4c72b0" for _, r in rows]
        ax.scatter(xs, ys, marker=marker, c=colors, s=22)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker=m, linestyle="", color="#555555", label=k) for k, m in CLASS_MARKERS.items()]
    handles += [Line2D([], [], marker="o", linestyle="", color=c, label=l)
                for c, l in (("#4c72b0", "monitor/rule"), ("#dd8452", "explore"))]
    ax.set_yticks(list(CHOICE_Y.values()), list(CHOICE_Y))
    ax.set_xlabel("request (in arrival order)")
    ax.set_title(title)
    ax.legend(handles=handles, fontsize=8, loc="upper right", ncol=5)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
