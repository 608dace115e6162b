"""A running request gives its caches back when the memory budget needs them (CancelToken.ask_release) and goes on
later from the tokens it wrote (engines/resume.py): its engine's caches are freed while it waits, and the reply
is the one it writes without the release (greedy: token for token, with penalties too; sampled: a fresh draw
from the target given everything written, as a request whose prompt held it)."""

from __future__ import annotations

import gc
import json
import time
import weakref
from dataclasses import replace

import pytest

from contracts.engine import CancelToken, Released
from contracts.sampling import SamplingParams

ENGINES = ("raw", "mtp", "ddtree")
PROMPT = "Write a function that reads a file and counts the words in it, then explain how it works."
GREEDY = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)


@pytest.fixture(scope="module")
def runtime(tiny_agree_target, tiny_agree_drafter):
    from engines.runtime import load_runtime

    return load_runtime(str(tiny_agree_target), draft_dir=str(tiny_agree_drafter), dtype="float32")


def _ids(runtime) -> list[int]:
    return runtime.encode_chat([{"role": "user", "content": PROMPT}])


def _reply(runtime, ids, params, engine, release_after=(), on_release=None, prefix=None) -> tuple[list[int], list[int]]:
    """The reply's tokens, the scheduler's ask made after each chunk count in `release_after`; and the tokens
    written each time the request gave its caches back."""
    cancel = CancelToken()
    tokens: list[int] = []
    released: list[int] = []
    chunks = 0
    for chunk in runtime.generate(ids, params, engine, cancel, prefix=prefix):
        if isinstance(chunk, Released):
            released.append(len(tokens))
            if on_release is not None:
                on_release()
            continue
        if not hasattr(chunk, "token_ids"):
            continue
        tokens += chunk.token_ids
        chunks += 1
        if chunks in release_after:
            cancel.ask_release()
        if chunk.finish_reason is not None:
            break
    return tokens, released


@pytest.mark.parametrize("engine", ENGINES)
def test_a_released_request_goes_on_with_the_reply_it_writes_without_the_release(runtime, engine):
    ids = _ids(runtime)
    want, none = _reply(runtime, ids, GREEDY, engine)
    got, released = _reply(runtime, ids, GREEDY, engine, release_after=(1, 4, 9))
    assert none == [] and len(released) == 3 and released[0] >= 1
    assert got == want and len(want) == 40


@pytest.mark.parametrize("engine", ENGINES)
def test_penalties_and_bias_see_the_tokens_written_before_the_release(runtime, engine):
    """The processor is rebuilt from the prompt and the written tokens: a repetition / presence / frequency
    penalty and a logit bias act after the release as they would have."""
    ids = _ids(runtime)
    params = replace(GREEDY, repetition_penalty=1.3, presence_penalty=0.6, frequency_penalty=0.4,
                     logit_bias=((int(ids[3]), 4.0),))
    want, _ = _reply(runtime, ids, params, engine)
    got, released = _reply(runtime, ids, params, engine, release_after=(3, 7))
    assert len(released) == 2 and got == want
    plain, _ = _reply(runtime, ids, GREEDY, engine)
    assert want != plain   # the penalties matter here: a processor restarted from the prompt alone would differ


@pytest.mark.parametrize("engine", ENGINES)
def test_the_caches_are_freed_while_the_request_waits(runtime, engine, monkeypatch):
    """Every cache the request built before the release is garbage once it has yielded Released (the target's,
    and so whatever the engines hold beside it goes with the same generator)."""
    bundle = runtime.bundle
    made: list[weakref.ref] = []
    make = bundle.make_cache

    def recorded():
        cache = make()
        made.extend(weakref.ref(layer) for layer in cache)
        return cache

    monkeypatch.setattr(bundle, "make_cache", recorded)
    alive: list[int] = []

    def count_alive():
        gc.collect()
        alive.append(sum(ref() is not None for ref in made))

    got, released = _reply(runtime, _ids(runtime), GREEDY, engine, release_after=(5,), on_release=count_alive)
    assert len(released) == 1 and len(made) > 0 and alive == [0]
    assert len(got) == 40


def test_a_released_raw_row_leaves_its_decode_batch_and_comes_back(tiny_agree_target, tiny_agree_drafter):
    """With continuous batching on, two raw requests share the batch; the one released leaves it (the other
    decodes on alone) and both write what they write alone."""
    from engines.runtime import load_runtime

    runtime = load_runtime(str(tiny_agree_target), draft_dir=str(tiny_agree_drafter), dtype="float32")
    runtime.set_batching(4)
    ids = _ids(runtime)
    other_ids = runtime.encode_chat([{"role": "user", "content": "Name three rivers and say where they run."}])
    want = [_reply(runtime, i, GREEDY, "raw")[0] for i in (ids, other_ids)]
    cancels = [CancelToken(), CancelToken()]
    streams = [runtime.generate(i, GREEDY, "raw", c) for i, c in zip((ids, other_ids), cancels)]
    got: list[list[int]] = [[], []]
    rows_while_released: list[float] = []
    done = [False, False]
    rounds = 0
    while not all(done):
        rounds += 1
        for k, stream in enumerate(streams):
            if done[k]:
                continue
            chunk = next(stream)
            if isinstance(chunk, Released):
                rows_while_released.append(runtime.batch_stats()["rows"])
                continue
            if hasattr(chunk, "token_ids"):
                got[k] += chunk.token_ids
                done[k] = chunk.finish_reason is not None
        if rounds == 6:
            cancels[1].ask_release()
    assert got == want
    assert rows_while_released and rows_while_released[0] <= 1


@pytest.mark.parametrize("engine", ("raw", "mtp"))
def test_a_sampled_request_resumes_as_a_fresh_draw_given_what_it_wrote(runtime, engine):
    """Sampled, the reply after a release is the engine's draw for a prompt that holds the tokens written, from
    the random stream derived from the seed and their count (so the reply has the target's distribution, as every
    request's does; and a seeded one is reproducible)."""
    ids = _ids(runtime)
    params = SamplingParams(temperature=0.9, top_p=0.95, max_tokens=30, ignore_eos=True, seed=11)
    first, released = _reply(runtime, ids, params, engine, release_after=(6,))
    again, _ = _reply(runtime, ids, params, engine, release_after=(6,))
    assert len(released) == 1 and first == again   # seeded: reproducible
    written = first[:released[0]]
    fresh_params = replace(params, max_tokens=30 - len(written), seed=(11 * 1_000_003 + len(written)) % 2**63)
    fresh, _ = _reply(runtime, [*ids, *written], fresh_params, engine)
    assert first[len(written):] == fresh


@pytest.mark.parametrize("engine", ENGINES)
def test_a_constrained_reply_released_inside_its_json_stays_in_its_schema(runtime, engine):
    """The constraint's matcher is replayed over the tokens written: released in the middle of a JSON answer, the
    request writes the same valid value as without the release."""
    from gateway.http.request_spec import json_grammar

    schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no", "maybe"]},
                                               "count": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["answer", "count"], "additionalProperties": False}
    params = SamplingParams(temperature=0.0, max_tokens=60, grammar=json_grammar(schema))
    ids = runtime.encode_prompt("the cat sat on the mat and the")
    want, _ = _reply(runtime, ids, params, engine)
    got, released = _reply(runtime, ids, params, engine, release_after=(2, 4))
    assert len(released) == 2 and 0 < released[0] < len(got) and got == want
    value = json.loads(runtime.bundle.tokenizer.decode(got))
    assert value["answer"] in ("yes", "no", "maybe")


@pytest.mark.parametrize("engine", ENGINES)
def test_openai_clients_past_the_budget_take_turns_by_releasing_and_get_their_answers(tiny_agree_target,
                                                                                        tiny_agree_drafter, engine):
    """A real server and the openai client: two 300-token completions whose prompts and first 256 tokens fit the
    budget together, their whole replies not. Both start at once; the newer gives its caches back as they grow and
    finishes after; each gets the answer it gets alone."""
    from engines.runtime import load_runtime
    from gateway.config import GatewayConfig
    from tests.test_batching import metric, openai_answers

    runtime = load_runtime(str(tiny_agree_target), draft_dir=str(tiny_agree_drafter), dtype="float32")
    runtime.set_batching(4)
    prompts = [" ".join([f"agent {i} reads the long file"] * 8) for i in range(2)]

    def ask(client, prompt: str) -> str:
        reply = client.completions.create(model="default", prompt=prompt, max_tokens=300, temperature=0,
                                          extra_body={"engine": engine, "ignore_eos": True})
        assert reply.usage.completion_tokens == 300
        return reply.choices[0].text

    want, _ = openai_answers(runtime, prompts, ask)
    longest = max(len(runtime.encode_prompt(p)) for p in prompts)
    budget = 2 * runtime.request_bytes(longest + 256) + runtime.request_bytes(40) - runtime.request_bytes(0)
    assert 2 * runtime.request_bytes(longest + 300) > budget
    got, metrics = openai_answers(runtime, prompts, ask, GatewayConfig(max_running=4, request_memory_bytes=budget),
                                  at_once=True)
    assert got == want
    assert metric(metrics, "switchyard_requests_released_total") >= 1


def test_many_streams_under_a_tight_budget_release_resume_and_hang_up_without_loss(tiny_agree_target,
                                                                                   tiny_agree_drafter):
    """Six streaming chats at once on every engine, greedy and sampled, under a budget that two of them at once
    outgrow (the rest wait their turn); two clients hang up mid-stream. Every stream the client kept ends
    with [DONE] after max_tokens tokens, greedy ones with the text they get alone; the server ends idle, with
    its budget free and releases counted."""
    import threading

    import httpx

    from engines.runtime import load_runtime
    from gateway.config import GatewayConfig
    from gateway.http.app import create_app
    from tests.fakes import live_server
    from tests.test_batching import metric

    runtime = load_runtime(str(tiny_agree_target), draft_dir=str(tiny_agree_drafter), dtype="float32")
    runtime.set_batching(4)
    asks = [(f"Tell me about river number {i} and the towns along it.", engine, sampled)
            for i, (engine, sampled) in enumerate([("raw", False), ("mtp", False), ("ddtree", False),
                                                    ("raw", True), ("mtp", True), ("ddtree", False)])]
    hang_up = {3: 40, 5: 300}   # client index -> content frames after which it hangs up

    def body(prompt: str, engine: str, sampled: bool) -> dict:
        return {"model": "default", "messages": [{"role": "user", "content": prompt}], "max_tokens": 400,
                "stream": True, "stream_options": {"include_usage": True}, "engine": engine, "ignore_eos": True,
                **({"temperature": 0.8, "seed": 5} if sampled else {"temperature": 0})}

    def stream(url: str, index: int, out: dict) -> None:
        text, frames, done = [], 0, False
        with httpx.stream("POST", url + "/v1/chat/completions", json=body(*asks[index]), timeout=120) as response:
            out[index] = {"status": response.status_code}
            for line in response.iter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: {"):
                    data = json.loads(line[6:])
                    assert "error" not in data, data
                    for choice in data.get("choices") or []:
                        if choice["delta"].get("content"):
                            text.append(choice["delta"]["content"])
                            frames += 1
                    if data.get("usage"):
                        out[index]["usage"] = data["usage"]
                if index in hang_up and frames >= hang_up[index]:
                    break
        out[index].update(text="".join(text), done=done)

    with live_server(create_app(runtime, config=GatewayConfig(max_running=8))) as server:
        alone: dict = {}
        for index, (_, _, sampled) in enumerate(asks):
            if not sampled and index not in hang_up:
                stream(server.base_url, index, alone)
    tokens = max(len(runtime.encode_chat([{"role": "user", "content": p}])) for p, _, _ in asks)
    budget = 2 * runtime.request_bytes(tokens + 300)   # two start; 50 tokens on, one of them must give way
    app = create_app(runtime, config=GatewayConfig(max_running=8, request_memory_bytes=budget))
    scheduler = app.state.gateway.scheduler
    with live_server(app) as server:
        got: dict = {}
        threads = [threading.Thread(target=stream, args=(server.base_url, i, got)) for i in range(len(asks))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(180)
        deadline = time.monotonic() + 10   # the hung-up streams end at the worker's next step
        while not scheduler.idle and time.monotonic() < deadline:
            time.sleep(0.05)
        metrics = httpx.get(server.base_url + "/metrics").text
    assert scheduler.idle and scheduler.reserved_bytes == 0
    assert metric(metrics, "switchyard_requests_released_total") >= 2
    for index, (_, _, sampled) in enumerate(asks):
        assert got[index]["status"] == 200
        if index in hang_up:
            continue
        assert got[index]["done"] and got[index]["usage"]["completion_tokens"] == 400, index
        if not sampled:
            assert got[index]["text"] == alone[index]["text"], index


@pytest.mark.parametrize("engine", ENGINES)
def test_a_released_request_resumes_from_its_prompt_in_the_prefix_cache(tiny_agree_target, tiny_agree_drafter,
                                                                       engine):
    """With the prefix cache on, the prefill after a release is a hit at the prompt's end: only the tokens written
    are computed again. The reply is the one without the release."""
    from contracts.engine import PrefixHint
    from engines.runtime import load_runtime

    runtime = load_runtime(str(tiny_agree_target), draft_dir=str(tiny_agree_drafter), dtype="float32",
                           prefix_cache_bytes=64 * 2**20)
    prompt = runtime.chat_prompt([{"role": "user", "content": PROMPT}])
    want, _ = _reply(runtime, prompt.ids, GREEDY, engine)
    at_release: list[dict] = []
    got, released = _reply(runtime, prompt.ids, GREEDY, engine, release_after=(10,),
                           on_release=lambda: at_release.append(runtime.prefix_cache_stats()),
                           prefix=PrefixHint("", prompt.cache_points))
    after = runtime.prefix_cache_stats()
    assert got == want and len(released) == 1
    assert at_release[0]["hits"] == 0 and after["hits"] == 1
    restored = after["cached_tokens"] - at_release[0]["cached_tokens"]
    assert len(prompt.ids) - 16 <= restored <= len(prompt.ids)   # the prompt (up to its generation prompt's tokens)
