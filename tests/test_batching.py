"""Continuous batching (engines/batch.py): requests that decode raw at the same time share one forward
per step, join and leave between steps, and produce exactly what they produce alone (float32)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from contracts.engine import CancelToken, Pause, SwitchRule
from contracts.sampling import SamplingParams

PROMPTS = ["The river", "Once upon a time there was a", "def add(a, b):", "SELECT * FROM", "A",
           "Rivers and mountains and the long road home"]


@pytest.fixture(scope="module")
def runtime(tiny_agree_target, tiny_agree_drafter):
    from engines.runtime import load_runtime

    return load_runtime(tiny_agree_target, draft_dir=tiny_agree_drafter, dtype="float32")


@dataclass
class Job:
    prompt: str
    params: SamplingParams
    start: int = 0                  # round in which the request arrives
    engine: str = "raw"
    switch: SwitchRule | None = None
    cancel_after: int | None = None  # steps after which the client goes away
    tokens: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)      # batch rows of each step
    engines: list[str] = field(default_factory=list)   # engine of each step
    logprobs: list = field(default_factory=list)
    finish: str | None = None
    pauses: int = 0


def interleave(runtime, jobs: list[Job]) -> list[Job]:
    """What the scheduler does with max_running > 1: one item of every running request per round."""
    running: dict[int, tuple] = {}
    round_ = 0
    while any(j.finish is None for j in jobs):
        for i, job in enumerate(jobs):
            if job.start == round_:
                ids = runtime.encode_prompt(job.prompt)
                cancel = CancelToken()
                running[i] = (runtime.generate(ids, job.params, job.engine, cancel, switch=job.switch), cancel)
        for i, (chunks, cancel) in list(running.items()):
            job = jobs[i]
            chunk = next(chunks)
            if isinstance(chunk, Pause):   # a long prefill gave the worker back
                job.pauses += 1
                continue
            job.tokens += chunk.token_ids
            job.logprobs += chunk.logprobs
            if chunk.step is not None:
                job.rows.append(chunk.step.batch_rows)
                job.engines.append(chunk.step.engine)
            if job.cancel_after is not None and len(job.rows) == job.cancel_after:
                cancel.cancel()
            if chunk.finish_reason is not None:
                job.finish = chunk.finish_reason
                chunks.close()
                del running[i]
        round_ += 1
        assert round_ < 10_000
    return jobs


def alone(runtime, job: Job) -> Job:
    batch = runtime.bundle.decode_batch
    runtime.set_batching(1)
    try:
        solo = Job(job.prompt, job.params, engine="raw", cancel_after=job.cancel_after)
        return interleave(runtime, [solo])[0]
    finally:
        runtime.bundle.decode_batch = batch


def openai_answers(runtime, prompts: list[str], ask, config=None, at_once: bool = False) -> tuple[list[str], str]:
    """Each prompt asked of a live server through the openai client (`ask(client, prompt)`), one after another
    or all at once from threads: the answers in order, and the server's /metrics text after them."""
    import threading

    import httpx
    import openai

    from gateway.config import GatewayConfig
    from gateway.http.app import create_app
    from tests.fakes import live_server

    with live_server(create_app(runtime, config=config or GatewayConfig())) as server:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)
        if not at_once:
            return [ask(client, p) for p in prompts], httpx.get(server.base_url + "/metrics").text
        got: dict[int, str] = {}
        threads = [threading.Thread(target=lambda i=i: got.__setitem__(i, ask(client, prompts[i])))
                   for i in range(len(prompts))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        return [got.get(i) for i in range(len(prompts))], httpx.get(server.base_url + "/metrics").text


def metric(text: str, name: str) -> float:
    """A sample's value in a /metrics text (an unlabelled one)."""
    return float(next(line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")))


def stream_text(client, prompt: str) -> str:
    """A greedy raw completion of 48 tokens, streamed, as its text."""
    stream = client.completions.create(model="default", prompt=prompt, max_tokens=48, temperature=0, stream=True,
                                       extra_body={"engine": "raw"})
    return "".join(chunk.choices[0].text for chunk in stream)


def _assert_batch_empty(runtime):
    batch = runtime.bundle.decode_batch
    assert batch.rows == [] and batch.groups == [] and batch.streams == 0 and batch.active == 0


def test_greedy_batched_requests_equal_their_unbatched_outputs(runtime):
    runtime.set_batching(8)
    greedy = lambda n: SamplingParams(max_tokens=n, temperature=0.0)  # noqa: E731
    jobs = [Job(PROMPTS[0], greedy(40)), Job(PROMPTS[1], greedy(12)), Job(PROMPTS[2], greedy(30), start=3),
            Job(PROMPTS[3], greedy(25), start=7), Job(PROMPTS[4], greedy(33), start=7), Job(PROMPTS[5], greedy(20), start=40)]
    interleave(runtime, jobs)
    for job in jobs:
        want = alone(runtime, job)
        assert job.tokens == want.tokens and job.finish == want.finish
    assert max(max(j.rows) for j in jobs) >= 4          # they really shared steps
    assert jobs[5].rows[-1] == 1   # the last one left decodes alone again
    assert runtime.bundle.decode_batch.steps > 0
    _assert_batch_empty(runtime)


def test_rows_keep_their_own_sampler_penalties_stops_and_logprobs(runtime):
    runtime.set_batching(8)
    jobs = [
        Job(PROMPTS[0], SamplingParams(max_tokens=30, temperature=0.0)),
        Job(PROMPTS[1], SamplingParams(max_tokens=30, temperature=0.9, top_p=0.9, seed=7)),
        Job(PROMPTS[2], SamplingParams(max_tokens=30, temperature=0.0, presence_penalty=1.5, logprobs=True,
                                       top_logprobs=2), start=1),
        Job(PROMPTS[3], SamplingParams(max_tokens=30, temperature=1.0, top_k=5, seed=3, frequency_penalty=0.5)),
        Job(PROMPTS[4], SamplingParams(max_tokens=30, temperature=0.0, stop=(" the",)), start=2),
    ]
    interleave(runtime, jobs)
    for job in jobs:
        want = alone(runtime, job)
        assert job.tokens == want.tokens and job.finish == want.finish
        assert [lp.token for lp in job.logprobs] == [lp.token for lp in want.logprobs]
        for got, exp in zip(job.logprobs, want.logprobs):
            assert got.logprob == pytest.approx(exp.logprob, abs=1e-4)
    assert len(jobs[2].logprobs) == len(jobs[2].tokens) > 0
    assert max(jobs[2].rows) >= 3
    _assert_batch_empty(runtime)


def test_a_cancelled_row_leaves_and_the_others_carry_on(runtime):
    runtime.set_batching(8)
    greedy = SamplingParams(max_tokens=30, temperature=0.0)
    jobs = [Job(PROMPTS[0], greedy), Job(PROMPTS[1], greedy, cancel_after=5), Job(PROMPTS[2], greedy)]
    interleave(runtime, jobs)
    assert jobs[1].finish == "cancelled" and len(jobs[1].rows) <= 6
    for job in (jobs[0], jobs[2]):
        assert job.tokens == alone(runtime, job).tokens
    _assert_batch_empty(runtime)


def test_a_full_batch_leaves_later_requests_decoding_alone(runtime):
    runtime.set_batching(2)
    greedy = SamplingParams(max_tokens=20, temperature=0.0)
    jobs = [Job(p, greedy) for p in PROMPTS[:4]]
    interleave(runtime, jobs)
    assert max(max(j.rows) for j in jobs) == 2
    for job in jobs:
        assert job.tokens == alone(runtime, job).tokens
    _assert_batch_empty(runtime)


def test_a_speculative_request_hands_over_to_the_batch_without_reprefill(runtime):
    """Under load raw is priced as a batch row (c(B+1) - c(B)): the MTP request's window shows the
    batch makes tokens cheaper, it hands over to raw, joins the batch, and stays lossless."""
    runtime.set_batching(8)
    greedy = SamplingParams(max_tokens=40, temperature=0.0)
    cheap_batch = SwitchRule(window=2, margin=0.0, evidence_z=0.0, costs={"mtp": 1.2}, targets=("raw",),
                             batch_costs=(1.0, 1.05, 1.1, 1.15))
    jobs = [Job(PROMPTS[0], greedy), Job(PROMPTS[2], greedy, engine="mtp", switch=cheap_batch)]
    interleave(runtime, jobs)
    spec = jobs[1]
    assert spec.engines[0] == "mtp" and spec.engines[-1] == "raw"
    assert any(rows >= 2 for rows, engine in zip(spec.rows, spec.engines) if engine == "raw")
    assert spec.tokens == alone(runtime, spec).tokens
    # alone (nobody else generating) the same rule prices raw at a full step: no hand-over
    solo = interleave(runtime, [Job(PROMPTS[2], greedy, engine="mtp", switch=cheap_batch)])[0]
    assert set(solo.engines) == {"mtp"} or solo.engines.index("raw") > 2
    _assert_batch_empty(runtime)


def test_a_long_prompt_prefills_in_pieces_while_running_streams_keep_flowing(runtime):
    runtime.set_batching(8)
    greedy = SamplingParams(max_tokens=40, temperature=0.0)
    long_prompt = " ".join(["rivers and mountains and the long road home"] * 160)   # ~2.7k tokens
    assert 1200 < len(runtime.encode_prompt(long_prompt)) < runtime.context_length - 64
    streaming, newcomer = Job(PROMPTS[0], greedy), Job(long_prompt, SamplingParams(max_tokens=8, temperature=0.0),
                                                       start=3)
    interleave(runtime, [streaming, newcomer])
    assert newcomer.pauses >= 2                       # 512-row pieces, the worker given back between them
    assert len(streaming.rows) >= 3 + newcomer.pauses  # the stream got a token in each of those rounds
    for job in (streaming, newcomer):
        assert job.tokens == alone(runtime, job).tokens
    # alone: pieces of 2048 rows, with the worker given back only between them (where it sees a cancel)
    assert alone(runtime, newcomer).pauses == (len(runtime.encode_prompt(long_prompt)) - 2) // 2048
    _assert_batch_empty(runtime)


def test_batching_off_never_shares_a_step(runtime):
    runtime.set_batching(1)
    greedy = SamplingParams(max_tokens=12, temperature=0.0)
    jobs = interleave(runtime, [Job(p, greedy) for p in PROMPTS[:3]])
    assert all(rows == 1 for j in jobs for rows in j.rows)
    assert runtime.batch_stats() is None


def test_concurrent_openai_clients_share_batched_steps_and_get_their_unbatched_answers(tiny_agree_target,
                                                                                         tiny_agree_drafter):
    """A real server with --max-batch 4 and four streaming clients at once, as chat UIs and sub-agents do."""
    from engines.runtime import load_runtime
    from gateway.config import GatewayConfig

    runtime = load_runtime(tiny_agree_target, draft_dir=tiny_agree_drafter, dtype="float32")
    prompts = [f"Write item {i}: {p}" for i, p in enumerate(PROMPTS[:4])]
    runtime.set_batching(1)
    want, _ = openai_answers(runtime, prompts, stream_text)
    runtime.set_batching(4)
    got, metrics = openai_answers(runtime, prompts, stream_text, GatewayConfig(max_running=4), at_once=True)
    assert got == want
    steps, rows = metric(metrics, "switchyard_batch_steps_total"), metric(metrics, "switchyard_batch_row_steps_total")
    assert steps > 0 and rows / steps >= 2.0
    assert metric(metrics, "switchyard_batch_max_rows") == 4.0
    _assert_batch_empty(runtime)


def test_joins_and_leaves_leave_no_backlog_to_step_past_a_requests_end(runtime):
    """A join or leave lands the queued step mid-round; a row that had already taken its token then has
    one more ready. It takes both next time, so rows never run ahead: the batch computes about one token
    per request past its end (the step in flight when it leaves), not one per join or leave it saw."""
    runtime.set_batching(8)
    greedy = lambda n: SamplingParams(max_tokens=n, temperature=0.0)  # noqa: E731
    jobs = [Job(PROMPTS[i % len(PROMPTS)], greedy(20 + 7 * (i % 4)), start=3 * i) for i in range(10)]
    batch = runtime.bundle.decode_batch
    before = batch.row_steps
    interleave(runtime, jobs)
    for job in jobs[:3]:
        assert job.tokens == alone(runtime, job).tokens
    batched_tokens = sum(len(job.tokens) for job in jobs) - len(jobs)   # each request's first token is its prefill's
    wasted = batch.row_steps - before - batched_tokens
    assert max(max(j.rows) for j in jobs) >= 4
    assert wasted <= 2 * len(jobs), wasted
    _assert_batch_empty(runtime)


def test_padding_rule_lets_short_rows_share_and_keeps_a_long_context_apart():
    from engines.batch import padding_fits

    free = 60_000   # a Qwen3.6-27B-class model in 4 bits: a quarter of 15.5 GB of weights in 64 KiB KV rows
    assert padding_fits([10, 3000], free)                           # short chats: little padding
    assert padding_fits([100_000, 80_000, 90_000], free)            # long agents of like lengths share
    assert padding_fits([100_000, 50_000], free)                    # padding half the rows' own KV
    assert not padding_fits([100_000, 2_000], free)                 # an agent's context beside a chat does not
    assert not padding_fits([30_000, *[500] * 7], free)             # nor beside seven
    assert padding_fits([free + 10, 10], free) and not padding_fits([free + 11, 10], free)


def test_the_free_padding_is_a_quarter_of_the_weights_in_kv_rows(runtime):
    from engines.batch import free_padding_tokens

    bundle = runtime.bundle
    per_token = bundle.kv_bytes_per_token()
    cache = bundle.make_cache()
    bundle.model(mx.zeros((1, 256), dtype=mx.uint32), cache=cache)   # 256 rows: one step of mlx-lm's KVCache
    attention = [c for c in cache if isinstance(c, KVCache)]
    assert sum(c.keys.nbytes + c.values.nbytes for c in attention) == 256 * per_token
    quarter = bundle.parameter_bytes() // 4
    on_gpu = mx.default_device().type == mx.gpu
    assert free_padding_tokens(bundle) == (max(quarter, 256 * 2**20) if on_gpu else quarter) // per_token


def test_the_batch_prices_raw_by_the_rows_it_could_join():
    """A speculative request's hand-off prices raw as a batch row only where a group could take it."""
    from engines.batch import BatchRow, DecodeBatch, Group

    batch = DecodeBatch(bundle=None)
    batch.active, batch.free_padding = 4, 1_000
    assert batch.shares_with(50_000) == 3                          # no groups: anyone generating may pair
    group = Group(batch)
    group.rows = [BatchRow(0, None, None, None, length=40), BatchRow(0, None, None, None, length=90)]
    batch.groups = [group]
    assert batch.shares_with(300) == 3
    assert batch.shares_with(50_000) == 1                          # not with these rows, only with the fourth


def test_a_long_context_decodes_apart_while_short_streams_share_steps(runtime, monkeypatch):
    """An agent's long context beside short chats: the chats share steps, the long one decodes alone, so
    the batch's caches never hold copies of its length (and every answer is its unbatched one)."""
    import engines.batch as batching

    runtime.set_batching(8)
    runtime.bundle.decode_batch.free_padding = 128   # the tiny model's quarter of its weights is its whole context
    fa = runtime.bundle.decoder.fa_idx
    widths: list[int] = []
    step = batching.Group._step

    def watched_step(group):
        step(group)
        widths.append(group.cache[fa].keys.shape[2])   # attention rows the group holds, padding included

    monkeypatch.setattr(batching.Group, "_step", watched_step)
    greedy = SamplingParams(max_tokens=30, temperature=0.0)
    long_prompt = " ".join(["rivers and mountains and the long road home"] * 80)
    long_tokens = len(runtime.encode_prompt(long_prompt))
    assert long_tokens > 600
    jobs = [Job(long_prompt, greedy), Job(PROMPTS[0], greedy, start=1), Job(PROMPTS[1], greedy, start=1),
            Job(PROMPTS[2], greedy, start=2)]
    interleave(runtime, jobs)
    assert set(jobs[0].rows) == {1}                                 # never in a batch with the chats
    assert max(max(j.rows) for j in jobs[1:]) == 3                  # the chats share steps
    assert widths and max(widths) < long_tokens                     # no row padded to the long context
    for job in jobs:
        assert job.tokens == alone(runtime, job).tokens
    _assert_batch_empty(runtime)


def test_long_contexts_of_like_lengths_share_steps_apart_from_short_ones(runtime):
    runtime.set_batching(8)
    runtime.bundle.decode_batch.free_padding = 128
    greedy = SamplingParams(max_tokens=30, temperature=0.0)
    text = "rivers and mountains and the long road home"
    jobs = [Job(" ".join([text] * 80), greedy), Job(PROMPTS[0], greedy), Job(" ".join([text] * 70), greedy),
            Job(PROMPTS[1], greedy)]
    interleave(runtime, jobs)
    assert [max(j.rows) for j in jobs] == [2, 2, 2, 2]               # two pairs, never three rows
    for job in jobs:
        assert job.tokens == alone(runtime, job).tokens
    _assert_batch_empty(runtime)


def test_openai_clients_with_a_long_agent_context_beside_short_chats(tiny_agree_target, tiny_agree_drafter):
    """A real server, an agent's long prompt and two short chats at once: the chats share steps, the long
    context never joins them (no step of three rows), and every answer is its unbatched one."""
    from engines.runtime import load_runtime
    from gateway.config import GatewayConfig

    runtime = load_runtime(tiny_agree_target, draft_dir=tiny_agree_drafter, dtype="float32")
    prompts = [" ".join(["rivers and mountains and the long road home"] * 80), PROMPTS[0], PROMPTS[1]]
    runtime.set_batching(1)
    want, _ = openai_answers(runtime, prompts, stream_text)
    runtime.set_batching(4)
    runtime.bundle.decode_batch.free_padding = 128
    got, metrics = openai_answers(runtime, prompts, stream_text, GatewayConfig(max_running=4), at_once=True)
    assert got == want
    steps, rows = metric(metrics, "switchyard_batch_steps_total"), metric(metrics, "switchyard_batch_row_steps_total")
    assert steps > 0 and 1.5 < rows / steps <= 2.0   # two rows a step, never three
    assert metric(metrics, "switchyard_batch_groups") == 0.0
    _assert_batch_empty(runtime)


def test_a_batched_request_does_not_keep_its_own_copy_of_its_context(runtime, monkeypatch):
    """Joining copies a request's caches into its group's; its own are freed then, not held beside them."""
    import gc
    import weakref

    import engines.batch as batching

    runtime.set_batching(8)
    own: list[weakref.ref] = []
    join = batching.Group.join

    def watched_join(group, cache, row):
        own.extend(weakref.ref(c) for c in cache)
        join(group, cache, row)

    monkeypatch.setattr(batching.Group, "join", watched_join)
    alive_while_batched: list[int] = []
    step = batching.Group._step

    def watched_step(group):
        gc.collect()
        alive_while_batched.append(sum(r() is not None for r in own))
        step(group)

    monkeypatch.setattr(batching.Group, "_step", watched_step)
    greedy = SamplingParams(max_tokens=20, temperature=0.0)
    jobs = interleave(runtime, [Job(PROMPTS[0], greedy), Job(PROMPTS[1], greedy), Job(PROMPTS[2], greedy)])
    assert own and alive_while_batched and max(alive_while_batched) == 0
    for job in jobs:
        assert job.tokens == alone(runtime, job).tokens
    _assert_batch_empty(runtime)
