"""Where a step's time goes: a 1-token decode step vs T-token verifies (chain T = 2, 5; a tree of 5
with the ancestor mask), broken into layer kinds with an mx.eval fence after each piece.

    python -m bench.profile_step [--model DIR] [--context 256] [--trials 9]

Rows: embed, GDN (input norm + GatedDeltaNet mixer, all GDN layers), attention (input norm + gated
attention, all attention layers), MLP (post norm + MLP + residuals), lm_head (final norm + lm_head),
sampling (greedy choice per row), host sync (.tolist()), commit (GDN restore + KV pack; verifies).
Fences serialise the pieces, so the fenced sum is above the unfenced total (also shown): it says
what scales with T, not the exact share of an overlapped step. The 1-token step runs mlx-lm's own
layers (what raw decode runs); the verifies run engines/target.py's tree forward (what MTP and
DDTree run).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict

import mlx.core as mx

PIECES = ("embed", "GDN", "attention", "MLP", "lm_head", "sampling", "host sync", "commit")


def _fence(timings: dict, name: str, started: float, *arrays) -> float:
    mx.eval(*arrays)
    now = time.perf_counter()
    timings[name] += now - started
    return now


def profile_shape(bundle, shape: str, context_ids: list[int], trials: int) -> tuple[dict, float]:
    """Median per-piece seconds and the median unfenced total for one step shape."""
    from mlx_lm.models.base import create_attention_mask, create_ssm_mask

    from contracts.sampling import SamplingParams
    from engines.gdn import gdn_tree
    from engines.prefill import prefill
    from engines.sampling import Rng, choose, resolve
    from engines.target import attention_tree, commit, forward_tree, tree_mask
    from engines.tree import TreeLayout

    layouts = {"decode (T=1)": None, "verify chain T=2": TreeLayout.chain(2), "verify chain T=5": TreeLayout.chain(5),
               "verify tree of 5": TreeLayout.from_parents([-1, 0, 0, 1, 2])}
    layout = layouts[shape]
    T = 1 if layout is None else layout.size
    cfg, rng = resolve(SamplingParams(temperature=0.0), bundle.generation), Rng(0)
    tokens = mx.array(context_ids[-T:], dtype=mx.uint32)
    decoder = bundle.decoder
    per_piece: dict[str, list[float]] = defaultdict(list)
    totals: list[float] = []
    for trial in range(trials + 1):  # trial 0 warms up
        for fenced in (True, False):
            cache = bundle.make_cache()
            prefill(bundle, cache, context_ids[:-T])
            timings: dict[str, float] = defaultdict(float)
            started = t = time.perf_counter()
            if not fenced:
                if layout is None:
                    choices = choose(bundle.model(tokens[None], cache=cache)[:, -1, :], cfg, rng).tolist()
                else:
                    out = forward_tree(bundle, tokens, layout, cache)
                    choices = choose(bundle.lm_head(out.hidden), cfg, rng).tolist()
                    commit(bundle, cache, out, [0])
                    mx.eval([c.state for c in cache])
                if trial:
                    totals.append(time.perf_counter() - started)
                continue
            h = decoder.embed_tokens(tokens[None])
            t = _fence(timings, "embed", t, h)
            if layout is None:
                fa_mask = create_attention_mask(h, cache[decoder.fa_idx])
                ssm_mask = create_ssm_mask(h, cache[decoder.ssm_idx])
            else:  # as forward_tree: one mask per forward, shared by the attention layers
                tree_attention_mask = tree_mask(layout, cache[decoder.fa_idx].offset)
            snapshots = {}
            for i, (layer, layer_cache) in enumerate(zip(bundle.layers, cache)):
                normed = layer.input_layernorm(h)
                if layout is None:
                    mixer = layer.linear_attn if layer.is_linear else layer.self_attn
                    r = mixer(normed, ssm_mask if layer.is_linear else fa_mask, layer_cache)
                elif layer.is_linear:
                    r, snapshots[i] = gdn_tree(layer.linear_attn, normed, layer_cache, layout)
                else:
                    r = attention_tree(layer.self_attn, normed, layer_cache, layout, tree_attention_mask)
                t = _fence(timings, "GDN" if layer.is_linear else "attention", t, r, *(snapshots[i].state,) if i in snapshots else ())
                h = h + r
                h = h + layer.mlp(layer.post_attention_layernorm(h))
                t = _fence(timings, "MLP", t, h)
            logits = bundle.lm_head(decoder.norm(h)[0])
            t = _fence(timings, "lm_head", t, logits)
            choice = choose(logits if layout is not None else logits[-1:], cfg, rng)
            t = _fence(timings, "sampling", t, choice)
            choice.tolist()
            t = _fence(timings, "host sync", t)
            if layout is not None:
                from engines.target import TreeOutput

                commit(bundle, cache, TreeOutput(hidden=h[0], offset=len(context_ids) - T, snapshots=snapshots), [0])
                t = _fence(timings, "commit", t, *[c.state for c in cache])
            if trial:
                for name in PIECES:
                    per_piece[name].append(timings.get(name, 0.0))
    return {name: statistics.median(v) for name, v in per_piece.items()}, statistics.median(totals)


def profile_drafts(runtime, context_ids: list[int], trials: int) -> dict[str, float]:
    """Median seconds of the drafting half of a speculative cycle (what profile_shape leaves out):
    the MTP head's draft (head forward over the 1-2 new rows + lm_head + argmax), a DDTree draft
    (DFlash block forward + lm_head + top-k + best-first tree build, host sync included) at the
    engine's budget and at budget 1, and feeding accepted rows' features to the drafter."""
    from mlx_lm.models.cache import KVCache

    from engines.ddtree import DDTreeEngine
    from engines.prefill import prefill

    bundle = runtime.bundle
    out: dict[str, list[float]] = defaultdict(list)
    mtp, ddtree = runtime.engines.get("mtp"), runtime.engines.get("ddtree")
    for trial in range(trials + 1):
        layer_ids = ddtree.layer_ids if ddtree is not None else ()
        cache = bundle.make_cache()
        prefilled = prefill(bundle, cache, context_ids, capture=layer_ids, last_alone=True)
        mx.eval(prefilled.hidden)
        if mtp is not None:
            head_cache = KVCache()
            prompt = mx.array(context_ids[1:] + [context_ids[-1]], dtype=mx.uint32)
            mx.eval(mtp.bundle.lm_head(mtp.head_rows(prompt, prefilled.hidden, head_cache)[-1]))
            started = time.perf_counter()
            draft = mx.argmax(mtp.bundle.lm_head(mtp.head_rows(mx.array(context_ids[-2:], dtype=mx.uint32), prefilled.hidden[-2:], head_cache)[-1]))
            draft.item()
            if trial:
                out["draft: MTP head (2 rows in, 1 token out)"].append(time.perf_counter() - started)
        if ddtree is not None:
            for engine in (ddtree, DDTreeEngine(bundle, ddtree.drafter, budget=1)):
                context = engine.drafter.new_context(engine.context_sink, engine.context_window)
                engine.drafter.add_context(engine._features(prefilled.layer_outputs, slice(None)), context)
                mx.eval(context.keys, context.values, context.positions)   # the prompt's context is not the draft
                started = time.perf_counter()
                engine._draft(engine._propose(int(context_ids[-1]), context))
                if trial:
                    out[f"draft: DFlash block + tree (budget {engine.budget})"].append(time.perf_counter() - started)
            started = time.perf_counter()
            ddtree.drafter.add_context(ddtree._features(prefilled.layer_outputs, slice(-3, None)), context)
            mx.eval(context.keys, context.values, context.positions)
            if trial:
                out["drafter: add 3 accepted rows to its context"].append(time.perf_counter() - started)
    return {name: statistics.median(v) for name, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="target dir (default: the embedded model)")
    parser.add_argument("--context", type=int, default=256, help="committed tokens before the step")
    parser.add_argument("--trials", type=int, default=9)
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None)
    parser.add_argument("--fast-paths", choices=("on", "off"), default="on",
                        help="engines.kernels.fast_paths (compiled verify paths): compare before/after")
    args = parser.parse_args(argv)

    from engines.kernels import fast_paths

    from .environment import describe_environment
    from .setup import load_bench_model

    fast_paths.enabled = args.fast_paths == "on"
    model = load_bench_model(args.model, dtype=args.dtype)
    bundle = model.runtime.bundle
    vocab = int(bundle.text_config.get("vocab_size", 1024))
    ids = [(i * 7919 + 13) % (vocab - 16) + 8 for i in range(args.context)]
    shapes = ("decode (T=1)", "verify chain T=2", "verify chain T=5", "verify tree of 5")
    results = {s: profile_shape(bundle, s, ids, args.trials) for s in shapes}
    env = describe_environment()
    print(f"model {model.model_dir} ({bundle.dtype}); fast paths {args.fast_paths}; context {args.context}; {env['cpu']} ({env['cores']} cores), device "
          f"{env['device']}, BLAS {env['sgemm']}; median of {args.trials} trials, ms")
    print("| piece | " + " | ".join(shapes) + " |")
    print("|---|" + "---|" * len(shapes))
    base = results[shapes[0]][0]
    for name in PIECES:
        cells = []
        for s in shapes:
            ms = results[s][0].get(name, 0.0) * 1000
            ratio = f" ({results[s][0][name] / base[name]:.2f}x)" if s != shapes[0] and base.get(name) else ""
            cells.append(f"{ms:.2f}{ratio}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    fenced = {s: sum(results[s][0].values()) for s in shapes}
    print("| fenced sum | " + " | ".join(f"{fenced[s] * 1000:.2f}" for s in shapes) + " |")
    unfenced = {s: results[s][1] for s in shapes}
    print("| unfenced step | " + " | ".join(
        f"{unfenced[s] * 1000:.2f} (c={unfenced[s] / unfenced[shapes[0]]:.2f})" for s in shapes) + " |")
    drafts = profile_drafts(model.runtime, ids, args.trials)
    if drafts:
        print("\n| drafting (not in the verify above) | ms | vs T=1 step |")
        print("|---|---|---|")
        for name, seconds in drafts.items():
            print(f"| {name} | {seconds * 1000:.2f} | {seconds / unfenced[shapes[0]]:.2f} |")
    return 0


if __name__ == "__main__":
    from bench.environment import as_served

    as_served()
    sys.exit(main())
