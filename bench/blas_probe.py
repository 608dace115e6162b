"""Linux CPU BLAS probe: the wheel's reference BLAS vs an installed OpenBLAS (LD_PRELOAD).

`python -m bench.blas_probe --model DIR` measures, in this process: a T-token target forward after
a context (T = 1, 2, 5 → c(1) = t(2)/t(1), c(4) = t(5)/t(1)), prefill tok/s and raw decode tok/s.
`--compare` runs that twice as child processes (without, then with OpenBLAS preloaded) and prints
the ratio table (JSON with --json). LD_PRELOAD only applies at process start, hence children.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def probe(model_dir: str | None, context: int = 256, trials: int = 7, decode_tokens: int = 64,
          dtype: str | None = None) -> dict:
    import mlx.core as mx

    from contracts.engine import CancelToken
    from contracts.sampling import SamplingParams
    from engines.prefill import prefill

    from .environment import describe_environment
    from .setup import load_bench_model

    model = load_bench_model(model_dir, dtype=dtype)
    bundle = model.runtime.bundle
    vocab = int(bundle.text_config.get("vocab_size", 1024))
    ids = [(i * 7919 + 13) % (vocab - 16) + 8 for i in range(context + 8)]

    def forward_seconds(tokens: int) -> float:
        cache = bundle.make_cache()
        prefill(bundle, cache, ids[:context])
        batch = mx.array(ids[context:context + tokens], dtype=mx.uint32)[None]
        started = time.perf_counter()
        mx.eval(bundle.model(batch, cache=cache))
        return time.perf_counter() - started

    forward_seconds(1)  # warm-up
    step = {t: statistics.median(forward_seconds(t) for _ in range(trials)) for t in (1, 2, 5)}
    prefill_times = []
    for _ in range(3):
        cache = bundle.make_cache()
        started = time.perf_counter()
        prefill(bundle, cache, ids[:context])
        prefill_times.append(time.perf_counter() - started)
    decode = []
    prompt = ids[:64]
    for _ in range(3):
        count, first = 0, None
        for chunk in model.runtime.generate(prompt, SamplingParams(temperature=0.0, max_tokens=decode_tokens), "raw",
                                            CancelToken()):
            count += len(chunk.token_ids)
            if first is None and count:
                first, first_count = time.perf_counter(), count
        decode.append((count - first_count) / (time.perf_counter() - first))
    return {
        "environment": describe_environment(),
        "model": str(model.model_dir),
        "dtype": str(bundle.dtype),
        "step_ms": {str(t): s * 1000 for t, s in step.items()},
        "c1": step[2] / step[1],
        "c4": step[5] / step[1],
        "prefill_tps": context / statistics.median(prefill_times),
        "decode_tps": statistics.median(decode),
    }


def _child(model: str | None, library: Path | None, extra: list[str]) -> dict:
    from gateway.cli.blas import preload_env

    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "SWITCHYARD_BLAS_REEXEC")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    if library is not None:
        env = preload_env(library, env)
    command = [sys.executable, "-m", "bench.blas_probe", "--json", *extra] + (["--model", model] if model else [])
    out = subprocess.run(command, env=env, cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(model: str | None, extra: list[str], system: str | None = None) -> dict:
    """The wheel's reference BLAS, the pip OpenBLAS (cmeel-openblas) and a system OpenBLAS (found, or
    `system`), each in a child process of its own."""
    from gateway.cli.blas import pip_openblas, system_openblas

    libraries = {"reference (mlx wheel)": None}
    if (pip := pip_openblas()) is not None:
        libraries[f"OpenBLAS, pip ({pip})"] = pip
    system_library = Path(system) if system else system_openblas()
    if system_library is not None:
        libraries[f"OpenBLAS, system ({system_library})"] = system_library
    if len(libraries) == 1:
        raise SystemExit("no OpenBLAS: pip install cmeel-openblas, or apt-get install libopenblas0-pthread")
    rows = {name: _child(model, library, extra) for name, library in libraries.items()}
    reference = rows["reference (mlx wheel)"]
    return {"rows": rows, "decode_speedup": {n: r["decode_tps"] / reference["decode_tps"] for n, r in rows.items()},
            "prefill_speedup": {n: r["prefill_tps"] / reference["prefill_tps"] for n, r in rows.items()}}


def table(result: dict) -> str:
    lines = [
        "| BLAS | 1-token step ms | c(1) = t2/t1 | c(4) = t5/t1 | prefill tok/s | raw decode tok/s | decode vs reference |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in result["rows"].items():
        lines.append(f"| {name} | {r['step_ms']['1']:.2f} | {r['c1']:.2f} | {r['c4']:.2f} | {r['prefill_tps']:.0f} | "
                     f"{r['decode_tps']:.1f} | {result['decode_speedup'][name]:.2f}x |")
    first = next(iter(result["rows"].values()))
    lines.append(f"\n(model {first['model']}, {first.get('dtype', '')}, {first['environment']['cpu']}, "
                 f"{first['environment']['cores']} cores)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="target dir (default: the embedded model)")
    parser.add_argument("--compare", action="store_true",
                        help="reference vs pip OpenBLAS vs system OpenBLAS, each in a child process")
    parser.add_argument("--system", default=None, metavar="LIB", help="a system libopenblas.so.0 to compare with")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None)
    parser.add_argument("--json", action="store_true", help="print JSON (last line)")
    args = parser.parse_args(argv)
    extra = ["--context", str(args.context), "--trials", str(args.trials)] + (["--dtype", args.dtype] if args.dtype else [])
    result = (compare(args.model, extra, args.system) if args.compare
              else probe(args.model, args.context, args.trials, dtype=args.dtype))
    if args.json:
        print(json.dumps(result))
    elif args.compare:
        print(table(result))
    else:
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
