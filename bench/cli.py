"""`switchyard bench`: the end-to-end benchmark (bench/run.py), registered as a `switchyard.commands`
entry point. MLX is imported only when it runs."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

ENGINE_CHOICES = ("raw", "mtp", "ddtree", "ddtree1", "auto")
WORKLOAD_CHOICES = ("mixed", "mixed-long", "code", "prose", "structured", "multiturn")


def _engines(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in ENGINE_CHOICES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown engine(s) {unknown}; choose from {', '.join(ENGINE_CHOICES)}")
    return names


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bench", help="benchmark every engine and the router on a workload (one process)")
    p.add_argument("--workload", choices=WORKLOAD_CHOICES, default="mixed")
    p.add_argument("--engines", type=_engines, default=ENGINE_CHOICES,
                   help="comma list of raw,mtp,ddtree,ddtree1 (= DFlash, budget 1),auto (default: all)")
    p.add_argument("--max-tokens", type=int, default=256, metavar="N", help="new tokens per request (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=1, metavar="R", help="passes over the workload (default: %(default)s)")
    p.add_argument("--per-class", type=int, default=None, metavar="N",
                   help="first N prompts of each class (default: all, 32 each)")
    p.add_argument("--sampled", action="store_true",
                   help="also run sampled (temperature 1.0, top-p 0.95, top-k 20) after greedy")
    p.add_argument("--sampled-only", action="store_true", help="only the sampled mode")
    p.add_argument("--sampled-defaults", action="store_true",
                   help="sample with the model's generation_config (what a client that sets nothing gets) "
                        "instead of temperature 1.0, top-p 0.95, top-k 20")
    p.add_argument("--model", metavar="DIR", default=None, help="target model dir (default: the embedded model)")
    p.add_argument("--draft", metavar="DIR", default=None, help="DFlash drafter dir (default: beside the target)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                   help="compute dtype (default: the checkpoint's; on Linux CPU float32 + OpenBLAS is fastest)")
    p.add_argument("--policy", metavar="FILE", default=None, help="router policy YAML (default: built-in)")
    p.add_argument("--labels", action="store_true",
                   help="route with the workload's own class labels instead of the classifier")
    p.add_argument("--no-anchor", action="store_true", help="skip mlx-lm stream_generate")
    p.add_argument("--fixed-path", choices=("gateway", "engine"), default="gateway",
                   help="fixed engines through the gateway's worker path, as auto (default), or Runtime.generate alone")
    p.add_argument("--no-http-raw", action="store_true", help="skip raw through the HTTP gateway")
    p.add_argument("--no-http-auto", action="store_true",
                   help="skip auto through the HTTP gateway (auto in process, on the fixed engines' footing, stays)")
    p.add_argument("--warmup-study", action="store_true",
                   help="also send the workload through auto from an empty monitor and report time to a steady choice")
    p.add_argument("--warmup-passes", type=int, default=3, metavar="P")
    p.add_argument("--warm-router", type=int, default=8, metavar="W",
                   help="before measuring, send the last W prompts of each class (never measured) through auto "
                        "in every mode, so its routers start warm (default: 8; 0: an empty monitor); with "
                        "--clients, each server first answers 3W of them one at a time")
    p.add_argument("--blas-probe", action="store_true",
                   help="Linux: also measure c(1)/c(4), prefill and decode with the wheel's BLAS vs OpenBLAS")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--clients", default=None, metavar="LIST",
                   help="concurrent streaming clients, e.g. 1,2,4,8: aggregate and per-client tok/s and TTFT of "
                        "`serve --max-batch 1`, `serve` (batched) and mlx_lm.server (bench/clients.py)")
    p.add_argument("--per-client", type=int, default=6, metavar="N",
                   help="requests per client with --clients (default 6: fewer make each level a few seconds long, "
                        "where one slow request moves the figure)")
    p.add_argument("--no-mlx-lm", action="store_true", help="with --clients or multiturn: skip mlx_lm.server")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", metavar="DIR", default="bench/out/latest", help="output dir (default: %(default)s)")
    p.set_defaults(func=bench)


def bench(args: argparse.Namespace) -> int:
    if args.workload == "multiturn":   # TTFT per turn with / without the prefix cache, and mlx_lm.server
        from engines.checkpoint import default_model_dir

        from .multiturn import run

        model = Path(args.model) if args.model else default_model_dir()
        report = run(model, Path(args.out), max_tokens=min(args.max_tokens, 64), with_mlx_lm=not args.no_mlx_lm)
        print((Path(args.out) / "multiturn.md").read_text())
        return 0 if report["series"] else 1
    if args.clients:   # concurrency: serial vs batched vs mlx_lm.server, servers one after another
        from engines.checkpoint import default_model_dir

        from .clients import run as run_clients

        levels = tuple(sorted({int(n) for n in args.clients.split(",") if n.strip()}))
        if not levels or min(levels) < 1 or args.per_client < 1:
            print("error: --clients takes positive integers, --per-client >= 1", file=sys.stderr)
            return 2
        model = Path(args.model) if args.model else default_model_dir()
        report = run_clients(model, Path(args.out), levels, args.per_client, args.max_tokens,
                             warmup=max(2, 3 * args.warm_router), with_mlx_lm=not args.no_mlx_lm,
                             serve_args=tuple(a for a in ("--dtype", args.dtype) if args.dtype) if args.dtype else ())
        print((Path(args.out) / "clients.md").read_text())
        return 0 if report["errors"] == 0 else 1
    from gateway.cli.blas import reexec_with_openblas

    reexec_with_openblas("bench")  # measure what `switchyard serve` runs (same BLAS choice, same opt-out)
    from bench.run import BenchConfig, run_bench  # imports MLX: only when the command runs

    if args.max_tokens < 2 or args.repeats < 1:
        print("error: --max-tokens must be >= 2 and --repeats >= 1", file=sys.stderr)
        return 2
    modes = ("sampled",) if args.sampled_only else (("greedy", "sampled") if args.sampled else ("greedy",))
    config = BenchConfig(
        workload=args.workload, engines=tuple(args.engines), max_tokens=args.max_tokens, repeats=args.repeats,
        modes=modes, per_class=args.per_class, model=args.model, draft=args.draft, dtype=args.dtype, out=Path(args.out),
        seed=args.seed, anchor=not args.no_anchor, http_raw=not args.no_http_raw, http_auto=not args.no_http_auto, policy=args.policy,
        use_labels=args.labels, warmup_study=args.warmup_study, warmup_passes=args.warmup_passes,
        warm_router=args.warm_router,
        plots=not args.no_plots, blas_probe=args.blas_probe, sampled_defaults=args.sampled_defaults,
        fixed_path=args.fixed_path, command="switchyard " + shlex.join(sys.argv[1:]),
    )
    results = run_bench(config)
    print(f"wrote {Path(args.out) / 'report.md'} and results.json"
          f"{' and plots' if config.plots else ''}; errors: {results['summary']['error_count']}")
    return 0
