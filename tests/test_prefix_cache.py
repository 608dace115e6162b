"""Prefix cache across requests: a hit resumes from an exact snapshot (target KV + GDN state + the
prefix rows' hidden states and captured layers), so raw, mtp and ddtree give the same greedy output
with and without a hit; memory stays within the byte limit; tenants do not share entries; clients see
usage.prompt_tokens_details.cached_tokens and Prometheus the hit counters."""

from __future__ import annotations

import httpx
import openai
import pytest

from contracts.engine import CancelToken, PrefixHint
from contracts.sampling import SamplingParams
from gateway.config import GatewayConfig
from gateway.http.app import create_app
from tests.fakes import live_server

GREEDY = SamplingParams(temperature=0.0, max_tokens=24)
ENGINES = ("raw", "mtp", "ddtree")


@pytest.fixture(scope="module")
def runtime(tiny_agree_target, tiny_agree_drafter):
    from engines.runtime import load_runtime

    return load_runtime(str(tiny_agree_target), draft_dir=str(tiny_agree_drafter))


def _run(runtime, ids, engine, prefix=None, params=GREEDY):
    chunks = list(runtime.generate(ids, params, engine, CancelToken(), prefix=prefix))
    return [t for c in chunks for t in c.token_ids], chunks[0].cached_tokens


def test_a_hit_gives_the_same_tokens_for_every_engine(runtime):
    first = runtime.encode_prompt("the cat sat on the mat and the dog ran to the park with a ball and")
    follow = first + runtime.encode_prompt(" then the bird flew over the tree and the cat")
    reference = {engine: _run(runtime, follow, engine)[0] for engine in ENGINES}   # no cache at all
    runtime.set_prefix_cache(64 * 2**20)
    try:
        hint = PrefixHint("t")
        for engine in ENGINES:
            runtime.prefix_cache.clear()
            _, cached = _run(runtime, first, engine, hint)           # miss: stores first[:-1]
            assert cached == 0
            if engine != "raw":   # the engine left its own state (head KV / drafter context) on the entry
                assert all(engine in e.extras for e in runtime.prefix_cache.entries.values()), engine
            tokens, cached = _run(runtime, follow, engine, hint)      # hit: resumes the target and the engine
            assert cached == len(first) - 1, engine
            assert tokens == reference[engine], engine
        # an entry stored by one engine serves the others (same state whichever engine prefilled)
        runtime.prefix_cache.clear()
        _run(runtime, first, "raw", hint)
        for engine in ("mtp", "ddtree"):
            tokens, cached = _run(runtime, follow, engine, hint)
            assert cached > 0 and tokens == reference[engine], engine
        # the exact same prompt again: everything but the last token comes from the cache
        tokens, cached = _run(runtime, follow, "ddtree", hint)
        assert cached == len(follow) - 1 and tokens == reference["ddtree"]
        stats = runtime.prefix_cache_stats()
        assert stats["hits"] >= 4 and stats["cached_tokens"] > 0 and 0 < stats["bytes"] <= stats["max_bytes"]
    finally:
        runtime.set_prefix_cache(0)


def test_memory_stays_within_the_limit_under_eviction(runtime):
    runtime.set_prefix_cache(1)                       # nothing fits: every request simply misses
    try:
        ids = runtime.encode_prompt("a b c d e f g h i j k l m n o p q r s t u v w x y z " * 2)
        _run(runtime, ids, "raw", PrefixHint())
        assert runtime.prefix_cache_stats()["entries"] == 0
        runtime.set_prefix_cache(64 * 2**20)
        _run(runtime, ids, "raw", PrefixHint())
        one = runtime.prefix_cache_stats()["bytes"]
        limit = int(one * 2.5)                        # room for two snapshots of this size
        runtime.set_prefix_cache(limit)
        for i in range(24):                           # a soak of distinct prompts
            prompt = runtime.encode_prompt(f"prompt number {i} says " + "the quick brown fox " * 6)
            _run(runtime, prompt, "mtp", PrefixHint())
            stats = runtime.prefix_cache_stats()
            assert stats["bytes"] <= limit and stats["entries"] <= 2
        assert runtime.prefix_cache_stats()["evictions"] >= 20
    finally:
        runtime.set_prefix_cache(0)


def test_scopes_are_isolated(runtime):
    runtime.set_prefix_cache(64 * 2**20)
    try:
        ids = runtime.encode_prompt("a shared system prompt that both tenants send word for word, then more")
        _run(runtime, ids, "raw", PrefixHint("tenant-a"))
        assert _run(runtime, ids, "raw", PrefixHint("tenant-b"))[1] == 0
        assert _run(runtime, ids, "raw", PrefixHint("tenant-a"))[1] == len(ids) - 1
    finally:
        runtime.set_prefix_cache(0)


KEYS = ("sk-alpha-0123456789abcdef", "sk-beta-0123456789abcdef")


def _chat(base_url: str, key: str, messages: list[dict]):
    client = openai.OpenAI(base_url=base_url + "/v1", api_key=key, max_retries=0)
    return client.chat.completions.create(model="default", messages=messages, max_tokens=8, temperature=0)


def test_multi_turn_chat_reports_cached_tokens_per_tenant(runtime):
    runtime.set_prefix_cache(64 * 2**20)
    try:
        with live_server(create_app(runtime, config=GatewayConfig(api_keys=KEYS))) as srv:
            turn1 = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}]
            first = _chat(srv.base_url, KEYS[0], turn1)
            assert first.usage.prompt_tokens_details.cached_tokens == 0
            turn2 = [*turn1, {"role": "assistant", "content": first.choices[0].message.content or "red"},
                     {"role": "user", "content": "And another one?"}]
            second = _chat(srv.base_url, KEYS[0], turn2)
            cached = second.usage.prompt_tokens_details.cached_tokens
            assert 0 < cached < second.usage.prompt_tokens          # turn 1's conversation came from the cache
            other = _chat(srv.base_url, KEYS[1], turn2)               # another key: no reuse
            assert other.usage.prompt_tokens_details.cached_tokens == 0
            again = _chat(srv.base_url, KEYS[1], turn2)
            assert again.usage.prompt_tokens_details.cached_tokens > 0
            assert again.choices[0].message.content == other.choices[0].message.content
            metrics = httpx.get(srv.base_url + "/metrics", headers={"Authorization": f"Bearer {KEYS[0]}"}).text
            hits = next(line for line in metrics.splitlines() if line.startswith("switchyard_prefix_cache_hits_total"))
            assert float(hits.split()[-1]) >= 2
        with live_server(create_app(runtime, config=GatewayConfig(api_keys=KEYS, share_prefix_cache=True))) as srv:
            _chat(srv.base_url, KEYS[0], turn2)
            shared = _chat(srv.base_url, KEYS[1], turn2 + [{"role": "assistant", "content": "blue"},
                                                           {"role": "user", "content": "Thanks"}])
            assert shared.usage.prompt_tokens_details.cached_tokens > 0   # key A's entry, shared by choice
    finally:
        runtime.set_prefix_cache(0)


def test_new_conversations_share_the_system_prompt(runtime):
    """Snapshots at the end of the system prompt: a new conversation (or a sub-agent) with the same
    system prompt resumes there, and its output equals the uncached one."""
    system = {"role": "system", "content": "You are a careful assistant. " * 12}
    first = runtime.chat_prompt([system, {"role": "user", "content": "the cat sat on the mat"}])
    second = runtime.chat_prompt([system, {"role": "user", "content": "a dog ran to the park"}])
    assert first.cache_points and first.cache_points[0] == second.cache_points[0]
    reference = _run(runtime, second.ids, "ddtree")[0]
    runtime.set_prefix_cache(64 * 2**20)
    try:
        _run(runtime, first.ids, "ddtree", PrefixHint("", first.cache_points))
        tokens, cached = _run(runtime, second.ids, "ddtree", PrefixHint("", second.cache_points))
        assert cached == second.cache_points[0] and tokens == reference
    finally:
        runtime.set_prefix_cache(0)
