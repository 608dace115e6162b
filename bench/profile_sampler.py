"""What sampled decoding adds to a step: the sampler's pieces against a raw decode step, per setting.

    python -m bench.profile_sampler [--model DIR] [--dtype float32] [--trials 300]

Pieces (each evaluated alone, the median over trials; in brackets the share of a raw step): `draw 1 row` (raw decode's sampled choice),
`draw 5 rows` (DDTree's sampled walk at budget 4: one target sample per node), `MTP draft + verify`
(the draft's distribution and draw, then `verify_one` on a 2-row verify: accept test, residual, both
bonus draws). Settings: the model's generation_config, Qwen3.6's published one (T 0.6, top-p 0.95,
top-k 20), top-p without top-k, plain temperature. Logits are the model's own (its lm_head on real
hidden states), so the truncated supports have their real sizes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import mlx.core as mx


def _median_ms(work, trials: int) -> float:
    for _ in range(10):
        mx.eval(work())
    times = []
    for _ in range(trials):
        started = time.perf_counter()
        mx.eval(work())
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="target dir (default: the demo family)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--trials", type=int, default=300)
    args = parser.parse_args(argv)

    from engines.bundle import load_bundle
    from engines.runtime import default_model_dir
    from engines.sampling import Rng, SamplerConfig, candidates, choose
    from engines.speculative import verify_one

    from .environment import describe_environment

    bundle = load_bundle(args.model or default_model_dir(), dtype=args.dtype)
    ids = bundle.tokenizer.encode("def read_lines(path):\n    with open(path) as handle:\n        return handle.read()\n"
                                  "The history of the printing press begins in the fifteenth century, when")
    hidden = bundle.decoder(mx.array([ids]), cache=bundle.make_cache())[0]   # final-norm hidden states
    logits = bundle.lm_head(hidden[-6:]).astype(mx.float32)
    mx.eval(logits)
    step_cache = bundle.make_cache()
    mx.eval(bundle.model(mx.array([ids]), cache=step_cache))
    token = mx.array([[ids[-1]]])
    raw_ms = _median_ms(lambda: bundle.model(token, cache=step_cache), max(30, args.trials // 10))

    g = bundle.generation
    settings = {
        "generation_config": SamplerConfig(g.temperature or 1.0, g.top_p, g.top_k, g.min_p),
        "Qwen3.6 (T 0.6, p 0.95, k 20)": SamplerConfig(0.6, 0.95, 20, 0.0),
        "top-p 0.9, no top-k": SamplerConfig(0.7, 0.9, 0, 0.0),
        "temperature only": SamplerConfig(1.0, 1.0, 0, 0.0),
    }
    env = describe_environment()
    print(f"{bundle.path.name} ({bundle.dtype}), vocab {bundle.vocab_size}, {env['device']}, {env['cpu']} "
          f"({env['cores']} cores), mlx {mx.__version__}; raw decode step {raw_ms:.2f} ms; median of {args.trials}")
    print("| setting | draw 1 row | draw 5 rows | MTP draft + verify |")
    print("|---|---|---|---|")
    rng = Rng(0)
    for name, cfg in settings.items():
        one = _median_ms(lambda: choose(logits[:1], cfg, rng), args.trials)
        five = _median_ms(lambda: choose(logits[:5], cfg, rng), args.trials)

        def mtp_cycle():
            q = candidates(logits[0], cfg)
            draft = rng.sample(q)
            return verify_one(draft, q, logits[1:3], cfg, rng).bonus

        mtp = _median_ms(mtp_cycle, args.trials)
        cells = " | ".join(f"{ms:.3f} ms ({ms / raw_ms:.1%})" for ms in (one, five, mtp))
        print(f"| {name} | {cells} |")
    return 0


if __name__ == "__main__":
    from bench.environment import as_served

    as_served()
    sys.exit(main())
