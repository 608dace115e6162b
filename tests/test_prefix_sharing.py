"""The prefix cache stores rows once: an entry keeps only the rows past the entry it extends, plus the state
that cannot be cut back (GDN), so a request's boundaries and a conversation's turns chain instead of each
holding the whole prompt again. Evicting an entry that a later one extends keeps its rows (hollow) until the
last extension goes; outputs with a hit equal those without, for every engine, evictions or not."""

from __future__ import annotations

import pytest

from contracts.engine import CancelToken, PrefixHint
from contracts.sampling import SamplingParams
from engines.prefill import PrefixPlan, prefill_cached
from engines.prefix_cache import PrefixCache

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)
ENGINES = ("raw", "mtp", "ddtree")


@pytest.fixture(scope="module")
def runtime(tiny_agree_target, tiny_agree_drafter):
    from engines.runtime import load_runtime

    return load_runtime(str(tiny_agree_target), draft_dir=str(tiny_agree_drafter))


def _run(runtime, prompt, engine, scope=""):
    hint = PrefixHint(scope, prompt.cache_points) if runtime.prefix_cache is not None else None
    chunks = list(runtime.generate(prompt.ids, GREEDY, engine, CancelToken(), prefix=hint))
    return [t for c in chunks for t in c.token_ids], chunks[0].cached_tokens


def _consistent(store: PrefixCache) -> None:
    """What the store must hold at every moment: its byte count is its nodes', every node's children are
    counted, a hollow node is still extended by one, and only full entries are hits."""
    assert store.bytes == sum(node.nbytes for node in store.nodes.values())
    assert store.bytes <= store.max_bytes
    for node in store.nodes.values():
        assert node.children == sum(other.parent is node for other in store.nodes.values())
        assert node.rows.start == (len(node.parent.tokens) if node.parent is not None else 0)
        assert node.rows.hidden.shape[0] == len(node.tokens) - node.rows.start
        if node.states is None:
            assert node.children > 0 and (node.scope, node.tokens) not in store.entries
    assert all(entry.states is not None and store.nodes[key] is entry for key, entry in store.entries.items())


def _conversation(turns: int) -> list[list[dict]]:
    """Message lists of a chat that grows turn by turn (fixed replies, so every engine sees the same prompts)."""
    messages = [{"role": "system", "content": "You are a careful assistant who answers briefly. " * 4}]
    out = []
    for turn in range(turns):
        messages = [*messages, {"role": "user", "content": f"question {turn}: the cat sat on the mat and the dog ran"}]
        out.append(messages)
        messages = [*messages, {"role": "assistant", "content": f"answer {turn} is that the bird flew over the tree"}]
    return out


def test_a_requests_boundaries_store_their_rows_once(runtime):
    prompt = runtime.chat_prompt(_conversation(2)[1])
    assert len(prompt.cache_points) == 2          # the system prompt's end and the conversation's end
    runtime.set_prefix_cache(64 * 2**20)
    try:
        _run(runtime, prompt, "raw")
        store = runtime.prefix_cache
        _consistent(store)
        body = max(store.entries.values(), key=lambda e: len(e.tokens))
        chain = body.chain()
        assert [len(e.tokens) for e in chain] == [*prompt.cache_points, len(prompt.ids) - 1]
        assert sum(e.rows.hidden.shape[0] for e in chain) == len(body.tokens)   # each row once
        kv_rows = sum(next(iter(e.rows.kv.values()))[0].shape[2] for e in chain)
        assert kv_rows == len(body.tokens)
    finally:
        runtime.set_prefix_cache(0)


def test_turns_chain_and_outputs_stay_exact_while_entries_are_evicted(runtime):
    turns = [runtime.chat_prompt(m) for m in _conversation(5)]
    reference = {engine: [_run(runtime, p, engine)[0] for p in turns] for engine in ENGINES}
    runtime.set_prefix_cache(64 * 2**20)
    try:
        for prompt in turns:
            _run(runtime, prompt, "raw")
        last = runtime.prefix_cache.entries[("", tuple(turns[-1].ids[:-1]))]
        rows, state = sum(e.rows.nbytes for e in last.chain()), last.state_bytes
        for engine in ENGINES:
            # room for the conversation's rows and a few states: older turns' entries are evicted as it grows,
            # and those the newer ones extend stay, hollow
            runtime.set_prefix_cache(rows + 4 * state)
            store = runtime.prefix_cache
            hollow_seen = False
            for i, prompt in enumerate(turns):
                tokens, cached = _run(runtime, prompt, engine)
                assert tokens == reference[engine][i], (engine, i)
                if i:
                    assert cached > len(turns[i - 1].ids) // 2, (engine, i)   # resumed from the last turn
                _consistent(store)
                hollow_seen |= any(node.states is None for node in store.nodes.values())
            assert hollow_seen and store.stats.evictions > 0, engine
            # the last turn's entry is stored, with its rows once: a copy per boundary would take twice as much
            last = store.entries[("", tuple(turns[-1].ids[:-1]))]
            assert store.bytes < 2 * sum(e.rows.nbytes for e in last.chain())
    finally:
        runtime.set_prefix_cache(0)


def _prefill(runtime, store, ids, points=()):
    cache = runtime.bundle.make_cache()
    out, cached, use = prefill_cached(runtime.bundle, cache, ids, last_alone=True,
                                      plan=PrefixPlan(store, "", tuple(points)))
    return cached, use


@pytest.fixture
def store(runtime):
    runtime.set_prefix_cache(64 * 2**20)
    yield runtime.prefix_cache
    runtime.set_prefix_cache(0)


def test_a_hollow_entry_goes_with_its_last_extension_and_comes_back_on_its_own_prompt(runtime, store):
    ids = runtime.encode_prompt("one two three four five six seven eight nine ten " * 4)
    _prefill(runtime, store, ids[:30])                      # entry A: ids[:29]
    _, use = _prefill(runtime, store, ids)                  # entry B extends A
    a = store.nodes[("", tuple(ids[:29]))]
    b = use.stored
    assert b.parent is a and a.children == 1 and b.rows.start == 29
    state = a.state_bytes
    store.lookup("", ids)                                   # B is now the most recent: A goes first
    store.max_bytes = store.bytes - 1
    store._evict(keep=1)
    _consistent(store)
    assert a.states is None and a.rows.hidden.shape[0] == 29 and store.lookup("", ids[:29]) is None
    # A's own prompt again: the entry comes back with its state only (its rows never left)
    store.max_bytes = 64 * 2**20
    before = store.bytes
    cached, use = _prefill(runtime, store, ids[:30])
    assert cached == 0 and use.stored is a and a.states is not None and store.bytes == before + state
    _consistent(store)
    # both evicted: nothing is left, and no byte is counted twice
    store.max_bytes = 0
    store._evict(keep=0)
    assert store.bytes == 0 and not store.nodes and not store.entries


def test_an_entry_whose_extended_rows_do_not_fit_beside_it_is_not_stored(runtime, store):
    ids = runtime.encode_prompt("alpha beta gamma delta epsilon zeta eta theta iota kappa " * 4)
    _prefill(runtime, store, ids[:30])
    a = store.nodes[("", tuple(ids[:29]))]
    # room for the extension alone but not for it and the rows it extends
    store.max_bytes = a.nbytes + 2
    cached, use = _prefill(runtime, store, ids)
    assert cached == 29 and use.stored is None
    _consistent(store)
    assert store.bytes == a.nbytes and list(store.entries.values()) == [a] and a.children == 0
