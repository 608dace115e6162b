"""The benchmark harness: a tiny end-to-end run (every lane, HTTP gateway included) writes
well-formed JSON / Markdown / PNG; the summary arithmetic (pairing, oracle regret, stability)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bench import multiturn
from bench.measure import RequestRecord
from bench.summary import oracle_regret, summarize
from bench.warmup import stability
from bench.workloads import CLASSES, load_workload

REPO = Path(__file__).resolve().parent.parent


def _reject_nan(value: str):
    raise ValueError(f"non-standard JSON constant {value}")


@pytest.fixture(scope="module")
def family(tmp_path_factory) -> Path:
    from bench.setup import generated_family

    return generated_family(tmp_path_factory.mktemp("bench-family"))


def test_workloads_are_shipped_and_mixed_is_equal_thirds_shuffled():
    for klass in CLASSES:
        prompts = load_workload(klass)
        assert len(prompts) >= 30 and {p.klass for p in prompts} == {klass}
        assert len({p.text for p in prompts}) == len(prompts)
    mixed = load_workload("mixed", seed=3)
    counts = {k: sum(p.klass == k for p in mixed) for k in CLASSES}
    assert len(set(counts.values())) == 1
    assert [p.id for p in mixed] == [p.id for p in load_workload("mixed", seed=3)]
    assert [p.id for p in mixed] != [p.id for p in load_workload("mixed", seed=4)]
    assert [p.klass for p in mixed[:6]] != ["code"] * 6  # shuffled, not concatenated


def test_router_warm_up_prompts_are_held_out_of_the_measured_set():
    from bench.workloads import warm_prompts

    measured = load_workload("mixed", seed=0, held_out=8)
    warm = warm_prompts("mixed", 8, seed=0)
    assert not {p.id for p in measured} & {p.id for p in warm}
    assert {k: sum(p.klass == k for p in warm) for k in CLASSES} == {k: 8 for k in CLASSES}
    assert len(measured) == 3 * (len(load_workload("code")) - 8)
    assert len(load_workload("mixed", per_class=4, held_out=8)) == 12 and warm_prompts("mixed", 0) == []
    with pytest.raises(ValueError):
        load_workload("code", held_out=len(load_workload("code")))


def test_mixed_long_pastes_the_shipped_sources_behind_every_other_prompt_of_each_class():
    """The long contexts come from contexts.jsonl, not from the running Python's standard library, so
    every machine measures the same prompts; each class keeps its short / long split."""
    from bench.workloads import CONTEXT_MODULES, LONG_SUFFIX, pasted_sources

    assert set(pasted_sources()) == set(CONTEXT_MODULES)
    assert all(1000 < len(text) <= 6000 for text in pasted_sources().values())
    prompts = load_workload("mixed-long", per_class=4, seed=1)
    assert [p.id.removesuffix(LONG_SUFFIX) for p in prompts] == [p.id for p in load_workload("mixed", per_class=4, seed=1)]
    for klass in CLASSES:
        ids = [p.id for p in prompts if p.klass == klass]
        assert [i.endswith(LONG_SUFFIX) for i in ids] == [False, True, False, True]
    pasted = [p for p in prompts if p.id.endswith(LONG_SUFFIX)]
    assert all(any(text in p.messages[-1]["content"] for text in pasted_sources().values()) for p in pasted)
    assert len({p.messages[-1]["content"][:80] for p in pasted}) > 1      # not one file for every prompt


def test_bench_run_writes_json_markdown_and_plots(family, tmp_path):
    from bench.run import BenchConfig, run_bench

    out = tmp_path / "out"
    config = BenchConfig(workload="mixed", per_class=1, max_tokens=6, modes=("greedy", "sampled"),
                         model=str(family / "target"), draft=str(family / "drafter"), out=out,
                         use_labels=True, warmup_study=True, warmup_passes=1, warm_router=1)
    run_bench(config, progress=lambda _: None)

    results = json.loads((out / "results.json").read_text(), parse_constant=_reject_nan)
    lanes = results["config"]["lanes"]
    assert lanes == ["anchor", "raw", "mtp", "ddtree", "ddtree1", "raw@http", "auto", "auto@http"]
    records = results["records"]
    assert len(records) == 3 * len(lanes) * 2
    assert not results["summary"]["errors"], results["summary"]["errors"]
    for r in records:
        assert r["completion_tokens"] > 0 and r["ttft_s"] > 0 and r["total_s"] >= r["ttft_s"]
    autos = [r for r in records if r["engine"] in ("auto", "auto@http")]
    assert len(autos) == 2 * 3 * 2
    assert all(r["route_engine"] in ("raw", "mtp", "ddtree") and r["route_reason"] and r["route_class"] for r in autos)
    # auto in process and auto over HTTP have a router each: both learned from their own traffic only,
    # 3 measured prompts and 3 held-out warm-up prompts (1 per class) in each of the 2 modes
    assert results["config"]["warm_router"] == 1 and "warmed by 1 held-out prompts per class" in (out / "report.md").read_text()
    for stats in (results["router_stats"], results["http_router_stats"]):
        assert sum(d["count"] for d in stats["decisions"] if d["reason"] != "forced") == (3 + 3) * 2
    # the fixed lanes run the gateway's worker path too (as served requests do), through a router of
    # their own: auto's in-process router never saw a forced request
    assert results["config"]["fixed_path"] == "gateway"
    assert not [d for d in results["router_stats"]["decisions"] if d["reason"] == "forced"]
    assert "take the same path with the engine forced" in (out / "report.md").read_text()
    greedy = results["summary"]["modes"]["greedy"]
    assert set(greedy["table"]) == {"code", "prose", "structured", "all"}
    assert set(greedy["table"]["all"]) == set(lanes)
    # lossless engines: greedy tokens equal raw's, and stream_generate's too
    assert all(v["equal"] == v["compared"] == 3 for v in greedy["lossless"].values())
    assert results["warmup_study"]["requests"] == 3

    report = (out / "report.md").read_text()
    assert "| class | engine |" in report and "### Goals (greedy, measured)" in report
    assert "Warm-up study" in report and "![tokens_per_second_greedy]" in report

    import matplotlib.image

    for name in ("tokens_per_second_greedy", "acceptance_sampled", "router_choices", "warmup_choices"):
        path = out / f"{name}.png"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        height, width = matplotlib.image.imread(path).shape[:2]
        assert height > 100 and width > 100


def _rec(prompt: str, engine: str, tps: float, tokens: int = 101, route: str | None = None,
         reason: str = "monitor", klass: str = "code") -> RequestRecord:
    r = RequestRecord(prompt, klass, engine, "greedy", 0, completion_tokens=tokens, first_tokens=1,
                      ttft_s=0.01, total_s=0.01 + (tokens - 1) / tps, decode_s=(tokens - 1) / tps)
    r.route_engine, r.route_reason = route, reason
    return r


def test_oracle_regret_is_zero_when_auto_matches_the_best_engine_and_positive_otherwise():
    records = [_rec("a", "raw", 100), _rec("a", "mtp", 200), _rec("b", "raw", 100), _rec("b", "ddtree", 50)]
    perfect = records + [_rec("a", "auto", 200, route="mtp"), _rec("b", "auto", 100, route="raw")]
    assert oracle_regret(perfect)["regret"] == pytest.approx(0.0)
    assert oracle_regret(perfect)["auto_picked_oracle_engine"] == 2
    # auto ran raw on "a" (100 tok/s instead of 200): 1 s there instead of 0.5 s, 1 s on "b" either way
    worse = records + [_rec("a", "auto", 100, route="raw"), _rec("b", "auto", 100, route="raw")]
    assert oracle_regret(worse)["regret"] == pytest.approx(1 - 1.5 / 2)


def test_speedups_are_paired_per_prompt_then_median():
    records = [_rec("a", "raw", 100), _rec("a", "mtp", 150), _rec("b", "raw", 300), _rec("b", "mtp", 300),
               _rec("c", "raw", 50), _rec("c", "mtp", 100)]
    table = summarize(records, ["greedy"])["modes"]["greedy"]["table"]["all"]
    assert table["mtp"]["speedup_vs_raw"]["median"] == pytest.approx(1.5)   # ratios 1.5, 1.0, 2.0
    assert table["raw"]["speedup_vs_raw"]["median"] == pytest.approx(1.0)
    assert math.isclose(table["mtp"]["decode_tps"]["median"], 150)


def test_stability_counts_requests_until_the_last_change_and_ignores_exploration():
    seq = ["raw", "ddtree", "raw", "ddtree", "ddtree", "ddtree", "ddtree", "ddtree", "ddtree"]
    records = [_rec(f"p{i}", "auto", 100, route=e) for i, e in enumerate(seq)]
    records.insert(6, _rec("x", "auto", 100, route="raw", reason="explore"))
    s = stability(records)["code"]
    assert s["steady_engine"] == "ddtree"
    assert s["requests_to_stable"] == 4       # the 3rd request (index 2) was the last non-ddtree pick
    assert s["explorations"] == 1 and s["requests"] == 10


def test_bench_cli_is_registered_and_imports_no_mlx():
    code = ("import sys; from gateway.cli import build_parser; "
            "a = build_parser().parse_args(['bench', '--engines', 'raw,auto', '--max-tokens', '8']); "
            "assert a.engines == ('raw', 'auto') and a.max_tokens == 8; "
            "assert not any(m == 'mlx' or m.startswith('mlx.') for m in sys.modules), 'mlx imported'")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
    bad = subprocess.run([sys.executable, "-m", "gateway.cli", "bench", "--engines", "raw,bogus"], cwd=REPO,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown engine" in bad.stderr


@pytest.mark.parametrize("failed", [False, True])
def test_a_stream_that_ends_in_an_error_event_is_a_failed_request(monkeypatch, failed):
    # a server that fails after its 200 says so in an SSE error event: the clients/multiturn benches
    # must count that request as an error, not as a short success
    events = [{"choices": [{"delta": {"content": "hi"}}]}]
    if failed:
        events.append({"error": {"message": "The 'ddtree' engine failed while generating.", "code": "engine_failure"}})
    events.append({"choices": [], "usage": {"completion_tokens": 1}})
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    client = httpx.Client(transport=httpx.MockTransport(
        lambda request: httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})))
    monkeypatch.setattr(multiturn.httpx, "stream", client.stream)
    ask = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    if failed:
        with pytest.raises(multiturn.StreamError, match="engine_failure"):
            multiturn.stream_once("http://server", ask)
    else:
        assert multiturn.stream_once("http://server", ask)[2] == "hi"


def test_consumer_clock_counts_the_callers_work_on_each_item_not_the_producers():
    """bench/profile_consumer.py: the time charged to a step is what the caller spends on its item."""
    import time

    from bench.profile_consumer import ConsumerClock

    def busy(seconds: float) -> None:
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    def producer():
        for i in range(3):
            busy(0.02)   # the engine's step
            yield i

    clock = ConsumerClock()
    for _ in clock.wrap(producer()):
        busy(0.005)      # the gateway's work on the step's tokens
    assert len(clock.per_step) == 3
    assert all(4_000 <= us < 15_000 for us in clock.per_step), clock.per_step


def test_reply_repetition_counts_the_four_grams_a_reply_already_wrote():
    from bench.reply_repetition import accepted_by_class, report, repeated_share

    assert repeated_share(list(range(20))) == 0.0                  # nothing repeats
    assert repeated_share([7, 8, 9]) == 0.0                        # too short for two 4-grams
    loop = [1, 2, 3] * 10                      # "slow slow slow ...": 27 4-grams, all but the first three repeat
    assert repeated_share(loop) == pytest.approx(24 / 27)
    assert repeated_share([5, 5, 5, 5, 5, 6]) == pytest.approx(1 / 3)
    traces = [{"klass": "code", "mode": "greedy", "engine": "mtp", "accepted": [1, 0, 1]},
              {"klass": "code", "mode": "greedy", "engine": "mtp", "accepted": [1]},
              {"klass": "prose", "mode": "greedy", "engine": "ddtree", "accepted": []}]
    accepted = accepted_by_class(traces)
    assert accepted == {("code", "greedy", "mtp"): 0.75}           # cycles pooled over requests; no cycles, no row
    rows = [{"klass": "code", "mode": "greedy", "repeated": 0.2}, {"klass": "code", "mode": "greedy", "repeated": 0.8}]
    assert "| greedy | code | 2 | 0.50 | 1 | — | — | 0.75 |" in report(rows, accepted)   # rows without top-1
    rows = [{**row, "top1": p, "oracle_chain": c} for row, p, c in zip(rows, (0.5, 0.7), ([4, 1], [0]))]
    assert "| greedy | code | 2 | 0.50 | 1 | 0.600 | 1.67 | 0.75 |" in report(rows, accepted)


def test_oracle_chain_replays_cycles_of_the_likeliest_tokens_on_the_sampled_reply():
    from bench.reply_repetition import oracle_chain

    assert oracle_chain([True] * 9) == [4, 4]                 # 4 drafts + the target's own token, twice, then 0 left
    assert oracle_chain([True] * 11) == [4, 4, 1]
    assert oracle_chain([False, True, True, False, True]) == [0, 2, 1]
    assert oracle_chain([]) == []


def test_depth_reach_counts_the_cycles_that_got_at_least_each_depth():
    from bench.reply_repetition import depth_reach, depth_report

    traces = [{"klass": "code", "mode": "sampled", "engine": "ddtree", "accepted": [0, 1, 3]},
              {"klass": "code", "mode": "sampled", "engine": "ddtree", "accepted": [1]},
              {"klass": "code", "mode": "sampled", "engine": "mtp", "accepted": [1, 0]}]
    reach = depth_reach(traces)
    assert reach[("code", "sampled", "ddtree")] == [0.75, 0.25, 0.25]
    assert reach[("code", "sampled", "mtp")] == [0.5]
    table = depth_report(reach)
    assert "| sampled | ddtree | code | 0.75 | 0.25 | 0.25 | 0.33 | 1.00 |" in table
    assert "| sampled | mtp | code | 0.50 | 0.00 | 0.00 | 0.00 | 0.00 |" in table


def test_top1_probability_reads_the_positions_that_chose_the_reply(tiny_bundle):
    """The teacher-forced forward's rows line up with a step-by-step decode of the same reply."""
    import mlx.core as mx

    from bench.reply_repetition import target_top1
    from contracts.sampling import SamplingParams
    from engines.sampling import SamplerConfig, probs

    prompt, reply = [3, 17, 42, 5], [9, 28, 11]
    cache = tiny_bundle.make_cache()
    logits = tiny_bundle.model(mx.array([prompt]), cache=cache)[0, -1]
    step_max = []
    for token in reply:
        step_max.append(mx.max(mx.softmax(logits.astype(mx.float32))).item())
        logits = tiny_bundle.model(mx.array([[token]]), cache=cache)[0, -1]
    greedy, hits = target_top1(tiny_bundle, prompt, reply, SamplingParams(temperature=0.0, max_tokens=3))
    assert greedy == pytest.approx(sum(step_max) / len(step_max), rel=1e-4)
    sharp = SamplingParams(temperature=0.5, top_p=1.0, top_k=0, min_p=0.0, max_tokens=3)
    expected = probs(tiny_bundle.model(mx.array([prompt + reply]), cache=tiny_bundle.make_cache())[0, 3:6]
                     .astype(mx.float32), SamplerConfig(0.5, 1.0, 0, 0.0))
    assert target_top1(tiny_bundle, prompt, reply, sharp)[0] == pytest.approx(
        mx.mean(mx.max(expected, axis=-1)).item(), rel=1e-4)
    assert target_top1(tiny_bundle, prompt, reply, sharp)[0] > greedy    # a sharper distribution
    assert hits == [int(mx.argmax(row).item()) == token for row, token in zip(expected, reply)]
    assert target_top1(tiny_bundle, prompt, [], sharp) == (0.0, [])
