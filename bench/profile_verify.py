"""Verify cost: c(1) = t(2)/t(1), c(4) = t(5)/t(1) and a tree of 5 (ancestor mask), before/after the
fast paths in ONE process (paths interleaved per trial), plus the per-layer-kind breakdown of
bench/profile_step.py under each path.

    python -m bench.profile_verify --model demo --trials 15 [--pieces] [--json out.json]
    python -m bench.profile_verify --model random-0.8b --dtype bfloat16      # on the GPU
    python -m bench.profile_verify --model random-small                     # 0.8B layer shapes, 6 layers

Paths: `reference` (per-level ops loop, per-call index/mask arrays), `fast` (compiled per-layout GDN,
cached arrays, causal chains), `cuda` (fast + the one-launch tree GDN kernel; MLX-CUDA only), and
`mlx-lm` for scale: mlx-lm's own causal forward of the chain's T tokens (what a prefill of T tokens
costs), which keeps no per-slot state and so cannot verify; no tree.
The 1-token step is mlx-lm's own forward (what raw decode runs); a step = forward + greedy choice
+ host read + (verifies) commit of the root, all evaluated. The cache is restored after every step
(GDN arrays by reference, KV offset), so every trial sees the same `--context` committed tokens.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import mlx.core as mx

SHAPES = ("decode (T=1)", "verify chain T=2", "verify chain T=5", "verify tree of 5")
TREE_OF_5 = (-1, 0, 0, 1, 2)

# Qwen3.5-0.8B text sizes (hidden 1024, 24 layers, GDN 16x128 heads, attention 8x256, vocab 248k)
QWEN35_08B = dict(
    hidden_size=1024, num_hidden_layers=24, intermediate_size=3584, num_attention_heads=8,
    num_key_value_heads=2, head_dim=256, linear_num_key_heads=16, linear_num_value_heads=16,
    linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
    full_attention_interval=4, vocab_size=248320, tie_word_embeddings=True, rms_norm_eps=1e-6,
    max_position_embeddings=32768,
    rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
)
RANDOM_MODELS = {
    "random-0.8b": QWEN35_08B,
    # same per-layer shapes, fewer layers and a smaller vocabulary: what a 2-core CPU can profile
    "random-small": {**QWEN35_08B, "num_hidden_layers": 8, "vocab_size": 32768},
}


def random_bundle(name: str, dtype: str):
    """A Qwen3.5 built in-process with mlx-lm's own model class and its random init."""
    from mlx_lm.models.qwen3_5 import Model, ModelArgs

    from engines.bundle import ModelBundle

    config = {"model_type": "qwen3_5", **RANDOM_MODELS[name]}
    mx.random.seed(0)
    model = Model(ModelArgs.from_dict(config))
    model.set_dtype(getattr(mx, dtype), lambda current: mx.issubdtype(current, mx.floating))
    model.eval()
    mx.eval(model.parameters())
    tokenizer = SimpleNamespace(eos_token_ids=[0])
    return ModelBundle(Path(name), model, tokenizer, config)


def load_model(name: str, dtype: str | None):
    if name in RANDOM_MODELS:
        return random_bundle(name, dtype or "bfloat16")
    from engines.bundle import load_bundle
    from engines.checkpoint import DEMO_FAMILY

    return load_bundle(DEMO_FAMILY / "target" if name == "demo" else name, dtype=dtype)


def add_served_model_arguments(parser) -> None:
    """--model and --dtype for a bench that loads the model as `switchyard serve` does (`served_model`)."""
    parser.add_argument("--model", default="demo", help="demo, random-0.8b (Qwen3.5-0.8B shapes) or a target dir")
    parser.add_argument("--dtype", default=None,
                        help="e.g. float32 (default: as `switchyard serve` loads it, float32 on the CPU; random: bfloat16)")


def served_model(args):
    """The model `add_served_model_arguments` names, in the dtype asked for, else as serve loads it ("auto")."""
    return load_model(args.model, args.dtype or (None if args.model in RANDOM_MODELS else "auto"))


def _snapshot(cache) -> list:
    return [c.offset if hasattr(c, "offset") and not hasattr(c, "cache") else (c[0], c[1]) for c in cache]


def _restore(cache, saved) -> None:
    for c, s in zip(cache, saved):
        if isinstance(s, tuple):
            c[0], c[1] = s
        else:
            c.offset = s


CAUSAL_T = {"decode (T=1)": 1, "verify chain T=2": 2, "verify chain T=5": 5}   # the mlx-lm row's shapes


def run_step(bundle, cache, shape: str, tokens: mx.array, causal: bool = False) -> None:
    """One step as an engine runs it, fully evaluated (host read + committed caches). `causal`: mlx-lm's
    own forward of the chain's tokens instead (greedy choice at every row, caches evaluated)."""
    from engines.sampling import SamplerConfig, choose
    from engines.target import commit, forward_tree
    from engines.tree import TreeLayout

    greedy = SamplerConfig(temperature=0.0, top_p=1.0, top_k=0, min_p=0.0)
    if shape == "decode (T=1)" or causal:
        logits = bundle.model(tokens[None, : CAUSAL_T[shape]], cache=cache)[0]
        choose(logits, greedy, None).tolist()
        mx.eval([c.state for c in cache])
        return
    layout = {"verify chain T=2": TreeLayout.chain(2), "verify chain T=5": TreeLayout.chain(5),
              "verify tree of 5": TreeLayout.from_parents(TREE_OF_5)}[shape]
    out = forward_tree(bundle, tokens[: layout.size], layout, cache)
    choose(bundle.lm_head(out.hidden), greedy, None).tolist()
    commit(bundle, cache, out, [0])
    mx.eval([c.state for c in cache])


def measure_costs(bundle, modes: list[str], context: int, trials: int) -> dict:
    """Median step seconds per (mode, shape); modes and shapes interleaved inside every trial."""
    from engines.kernels import using
    from engines.prefill import prefill

    vocab = int(bundle.text_config.get("vocab_size", 1024))
    ids = [(i * 7919 + 13) % (vocab - 16) + 8 for i in range(context + 5)]
    cache = bundle.make_cache()
    prefill(bundle, cache, ids[:context])
    saved = _snapshot(cache)
    tokens = mx.array(ids[context:], dtype=mx.uint32)
    times: dict[str, dict[str, list[float]]] = {m: {s: [] for s in SHAPES} for m in modes}
    for trial in range(trials + 2):  # two warm-up rounds: compile + JIT per mode and layout
        for mode in modes:
            with using(enabled=mode != "reference", cuda_kernel=mode == "cuda", chunked_gdn=mode != "fast-levels"):
                for shape in _shapes(mode):
                    started = time.perf_counter()
                    run_step(bundle, cache, shape, tokens, causal=mode == "mlx-lm")
                    elapsed = time.perf_counter() - started
                    _restore(cache, saved)
                    if trial >= 2:
                        times[mode][shape].append(elapsed)
    result = {}
    for mode in modes:   # a shape the path does not run (mlx-lm's tree) reads None
        med = {s: statistics.median(v) if v else None for s, v in times[mode].items()}
        base = med["decode (T=1)"]

        def ratio(shape: str) -> float | None:
            return None if med[shape] is None else med[shape] / base

        result[mode] = {
            "ms": {s: None if med[s] is None else med[s] * 1000 for s in SHAPES},
            "c1": ratio("verify chain T=2"), "c4": ratio("verify chain T=5"), "tree5": ratio("verify tree of 5"),
            "spread_ms": {s: (min(v) * 1000, max(v) * 1000) for s, v in times[mode].items() if v},
        }
    return result


def _shapes(mode: str) -> tuple[str, ...]:
    return tuple(CAUSAL_T) if mode == "mlx-lm" else SHAPES


def pieces(bundle, modes: list[str], context: int, trials: int) -> dict:
    """bench/profile_step.py's fenced per-layer-kind breakdown under each path."""
    from engines.kernels import using

    from .profile_step import profile_shape

    vocab = int(bundle.text_config.get("vocab_size", 1024))
    ids = [(i * 7919 + 13) % (vocab - 16) + 8 for i in range(context)]
    out = {}
    for mode in modes:
        with using(enabled=mode != "reference", cuda_kernel=mode == "cuda", chunked_gdn=mode != "fast-levels"):
            out[mode] = {s: {k: v * 1000 for k, v in profile_shape(bundle, s, ids, trials)[0].items()} for s in SHAPES}
    return out


def available_modes() -> list[str]:
    from engines.kernels import gdn_tree_cuda

    return ["reference", "fast-levels", "fast"] + (["cuda"] if gdn_tree_cuda.available() else []) + ["mlx-lm"]


def print_costs(title: str, costs: dict) -> None:
    print(f"\n### {title}: step ms (median) and verify cost ratios")
    print("| path | " + " | ".join(SHAPES) + " | c(1) | c(4) | tree-5 |")
    print("|---|" + "---|" * (len(SHAPES) + 3))
    for mode, row in costs.items():
        cells = " | ".join(_cell(value) for value in [*(row["ms"][s] for s in SHAPES), row["c1"], row["c4"], row["tree5"]])
        print(f"| {mode} | {cells} |")


def _cell(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def print_pieces(title: str, table: dict) -> None:
    from .profile_step import PIECES

    for mode, shapes in table.items():
        print(f"\n### {title}, path {mode}: fenced ms per piece")
        print("| piece | " + " | ".join(SHAPES) + " |")
        print("|---|" + "---|" * len(SHAPES))
        for name in PIECES:
            print(f"| {name} | " + " | ".join(f"{shapes[s].get(name, 0.0):.2f}" for s in SHAPES) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="demo", help="demo, random-0.8b, random-small or a target dir")
    parser.add_argument("--dtype", default=None, help="cast floating weights (float32, bfloat16)")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--trials", type=int, default=15)
    parser.add_argument("--modes", default=None, help="comma list of reference,fast-levels (compiled, recurrence one "
                        "tree level at a time),fast (compiled, all slots at once),cuda,mlx-lm (mlx-lm's causal "
                        "forward of the chain, for scale) (default: all available)")
    parser.add_argument("--pieces", action="store_true", help="also the fenced per-layer-kind breakdown")
    parser.add_argument("--piece-trials", type=int, default=5)
    parser.add_argument("--json", default=None, help="write the numbers here")
    args = parser.parse_args(argv)

    from .environment import describe_environment

    modes = args.modes.split(",") if args.modes else available_modes()
    bundle = load_model(args.model, args.dtype)
    env = describe_environment()
    title = f"{args.model} ({bundle.dtype}), context {args.context}, {env['device']}, BLAS {env['sgemm']}"
    print(f"{title}; {env['cpu']} ({env['cores']} cores); mlx {mx.__version__}; {args.trials} trials")
    report: dict = {"model": args.model, "dtype": str(bundle.dtype), "context": args.context, "env": env,
                    "costs": measure_costs(bundle, modes, args.context, args.trials)}
    print_costs(title, report["costs"])
    if args.pieces:
        report["pieces"] = pieces(bundle, [m for m in modes if m != "mlx-lm"], args.context, args.piece_trials)
        print_pieces(title, report["pieces"])
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    from bench.environment import as_served

    as_served()
    sys.exit(main())
