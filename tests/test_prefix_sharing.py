"""The prefix cache stores rows once: an entry keeps only the rows past the entry it extends, plus the state
that cannot be cut back (GDN), so a request's boundaries and a conversation's turns chain instead of each
holding the whole prompt again. Evicting an entry that a later one extends keeps its rows (hollow) until the
last extension goes; outputs with a hit equal those without, for every engine, evictions or not."""

from __future__ import annotations

import json
import shutil

import mlx.core as mx
import pytest

from contracts.engine import CancelToken, PrefixHint
from contracts.sampling import SamplingParams
from engines.prefill import SNAPSHOT_GAP, PrefixPlan, prefill_cached, prefill_stepwise
from engines.prefix_cache import PrefixCache, _shortest_reader
from engines.rows import READS_ALL, HeldRows, Reads, RowsNotHeld, Window, widest
from tests.engine_helpers import run_engine

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
        assert _kv_rows(node) == len(node.tokens) - node.rows.start
        # hidden states and captured layers: only what the store's windows read of the entry's own rows, at its
        # end, or once hollow at the end of the shortest entry that still reads them
        read_at = len(node.tokens) if node.states is not None else _shortest_reader(node)
        for held, window in ((node.rows.hidden, store.reads.hidden),
                             *((rows, store.reads.layers) for rows in node.rows.layers.values())):
            spans = window.spans(node.rows.start, len(node.tokens), read_at)
            assert [(a, a + block.shape[0]) for a, block in held.spans] == spans
        if node.states is None:
            assert node.children > 0 and (node.scope, node.tokens) not in store.entries
        # an engine's deposit holds what its window reads of the rows past its base's, a deposit on an entry it
        # extends, and stays on an evicted entry exactly while later deposits read it
        for engine, deposit in node.extras.items():
            assert deposit.users == sum(other.extras.get(engine) is not None and other.extras[engine].base is deposit
                                        for other in store.nodes.values())
            assert node.states is not None or deposit.users > 0
            assert deposit.end == len(node.tokens) - (engine == "mtp")   # a head row pairs a row with the next token
            start = deposit.base.end if deposit.base is not None else 0
            for rows in deposit.rows:
                assert [(a, a + block.shape[0]) for a, block in rows.spans] == deposit.window.spans(start, deposit.end,
                                                                                                  deposit.end)
            if deposit.base is not None:
                assert any(e.extras.get(engine) is deposit.base for e in node.chain()[:-1])
    assert all(entry.states is not None and store.nodes[key] is entry for key, entry in store.entries.items())


def _end_entry(store: PrefixCache, prompt):
    """The entry a chat prompt's end resumes from: the conversation's end, SNAPSHOT_GAP rows or fewer before it."""
    return store.entries[("", tuple(prompt.ids[:prompt.cache_points[-1]]))]


def _kv_rows(node) -> int:
    return next(iter(node.rows.kv.values()))[0].shape[2]


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
        last = max(store.entries.values(), key=lambda e: len(e.tokens))
        chain = last.chain()
        # the prompt's end, a few rows past the conversation's (its generation prompt), has no snapshot of its own
        assert [len(e.tokens) for e in chain] == list(prompt.cache_points)
        assert 0 < len(prompt.ids) - 1 - prompt.cache_points[-1] <= SNAPSHOT_GAP
        assert sum(_kv_rows(e) for e in chain) == len(last.tokens)   # each row once
    finally:
        runtime.set_prefix_cache(0)


def test_a_prompt_resent_resumes_at_its_conversations_end_and_the_engines_deposit_there(runtime):
    """The prompt's end is not snapshotted a few rows after the conversation's (a second GatedDeltaNet state for
    the generation prompt's tokens): the same prompt again resumes at the conversation's end, prefills those
    rows, and gives the same output for every engine; each engine's state is deposited on that entry."""
    prompt = runtime.chat_prompt(_conversation(2)[1])
    reference = {engine: _run(runtime, prompt, engine)[0] for engine in ENGINES}
    runtime.set_prefix_cache(64 * 2**20)
    try:
        store = runtime.prefix_cache
        for engine in ENGINES:
            _run(runtime, prompt, engine)
            tokens, cached = _run(runtime, prompt, engine)
            assert tokens == reference[engine] and cached == prompt.cache_points[-1], engine
        end = _end_entry(store, prompt)
        assert set(end.extras) == {"mtp", "ddtree"} and len(store.nodes) == len(prompt.cache_points)
        _consistent(store)
    finally:
        runtime.set_prefix_cache(0)


def test_turns_chain_and_outputs_stay_exact_while_entries_are_evicted(runtime):
    turns = [runtime.chat_prompt(m) for m in _conversation(5)]
    reference = {engine: [_run(runtime, p, engine)[0] for p in turns] for engine in ENGINES}
    runtime.set_prefix_cache(64 * 2**20)
    try:
        for prompt in turns:
            _run(runtime, prompt, "raw")
        last = _end_entry(runtime.prefix_cache, turns[-1])
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
            last = _end_entry(store, turns[-1])
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
    assert a.states is None and _kv_rows(a) == 29 and store.lookup("", ids[:29]) is None
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


# --- windows: a long prompt's middle rows, which no engine reads, are neither kept by a prefill nor stored ---

@pytest.fixture(scope="module")
def windowed(tiny_agree_target, tiny_agree_drafter, tmp_path_factory):
    """The tiny family with narrow windows: the MTP head reads the prompt's last 24 hidden states, the drafter
    the captured layers of its first 64 rows (the sink) and its last 16."""
    from engines.runtime import load_runtime

    root = tmp_path_factory.mktemp("windowed")
    shutil.copytree(tiny_agree_target, root / "target")
    shutil.copytree(tiny_agree_drafter, root / "drafter")
    (root / "serving.json").write_text(json.dumps({"mtp_prompt_window": 24, "drafter_context_window": 16}))
    return load_runtime(str(root / "target"), draft_dir=str(root / "drafter"))


LONG = "the cat sat on the mat and the dog ran to the park with a ball while the bird flew over the tree " * 5


def test_a_prefill_keeps_the_rows_the_engines_read_and_they_equal_the_whole_prompts(windowed):
    bundle, ddtree = windowed.bundle, windowed.engines["ddtree"]
    ids = windowed.encode_prompt(LONG)
    reads = widest(e.reads for e in (windowed.engines["mtp"], ddtree))
    assert reads == Reads(Window(0, 24), Window(64, 16))
    whole = _prefill_in_pieces(bundle, ids, ddtree.capture, READS_ALL)
    held = _prefill_in_pieces(bundle, ids, ddtree.capture, reads)
    total = len(ids)
    for window, dense, kept in ((reads.hidden, whole.hidden, held.hidden),
                                *((reads.layers, whole.layer_outputs[i], held.layer_outputs[i])
                                  for i in ddtree.capture)):
        assert isinstance(kept, HeldRows) and kept.nbytes < dense.nbytes / 2
        for a, b in window.spans(0, total, total):
            assert mx.array_equal(kept[a:b], dense[a:b])
        with pytest.raises(RowsNotHeld):
            kept[70:80]   # the middle: read by no engine, not kept


def _prefill_in_pieces(bundle, ids, capture, reads):
    """A prefill in pieces of 32 rows (rows are dropped as it goes), as a request sharing the worker runs it."""
    steps = prefill_stepwise(bundle, bundle.make_cache(), ids, capture, last_alone=True, pause_every=32, reads=reads)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value[0]


def _steps(runtime, engine, ids, plan):
    _, steps = run_engine(runtime.engines[engine], ids, 24, GREEDY, prefix=plan)
    return [(s.tokens, s.accepted) for s in steps]


def test_windowed_entries_draft_as_the_whole_prompt_does_for_every_engine(windowed):
    """With a hit the engines' drafts come from the stored windows; without one from the prefill's: the same
    rows, so the same drafts and acceptance at every step (drafts only propose: a wrong row would change
    acceptance, not the output)."""
    first = windowed.encode_prompt(LONG)
    follow = first + windowed.encode_prompt(" then the bird flew back over the tree and the cat slept")
    windowed.set_prefix_cache(64 * 2**20)
    try:
        store = windowed.prefix_cache
        for engine in ("mtp", "ddtree"):
            reference = _steps(windowed, engine, follow, None)
            for stored_by in ("raw", engine):      # an entry without and with the engine's own state on it
                store.clear()
                run_engine(windowed.engines[stored_by], first, 4, GREEDY, prefix=PrefixPlan(store, "", ()))
                assert _steps(windowed, engine, follow, PrefixPlan(store, "", ())) == reference, (engine, stored_by)
                assert store.stats.hits and store.stats.cached_tokens == len(first) - 1
                store.stats.hits = store.stats.cached_tokens = 0
                _consistent(store)
                entry = store.entries[("", tuple(follow[:-1]))]
                held = sum(b.shape[0] for _, b in entry.rows.hidden.spans)
                assert held <= 24 < len(follow) - entry.rows.start
    finally:
        windowed.set_prefix_cache(0)


def test_hollow_entries_keep_only_the_rows_later_entries_read(windowed):
    """A conversation under a tight budget: older turns' entries go hollow and keep only the rows their
    extensions read at their own ends (the drafter's sink and the window before the shortest one's end); every
    turn still drafts as without the cache, and a new entry extends only rows that still serve it."""
    turns = [windowed.chat_prompt(m) for m in _conversation(6)]
    references = {engine: [_steps(windowed, engine, p.ids, None) for p in turns] for engine in ("mtp", "ddtree")}
    windowed.set_prefix_cache(64 * 2**20)
    try:
        for prompt in turns:
            run_engine(windowed.engines["raw"], prompt.ids, 2, GREEDY,
                       prefix=PrefixPlan(windowed.prefix_cache, "", prompt.cache_points))
        last = _end_entry(windowed.prefix_cache, turns[-1])
        budget = sum(e.rows.nbytes for e in last.chain()) + 3 * last.state_bytes
        for engine in ("mtp", "ddtree"):
            windowed.set_prefix_cache(budget)
            store = windowed.prefix_cache
            trimmed = False
            for i, prompt in enumerate(turns):
                plan = PrefixPlan(store, "", prompt.cache_points)
                assert _steps(windowed, engine, prompt.ids, plan) == references[engine][i], (engine, i)
                _consistent(store)
                for node in store.nodes.values():
                    if node.states is None:
                        full = store.reads.layers.spans(node.rows.start, len(node.tokens), len(node.tokens))
                        trimmed |= sum(b.shape[0] for _, b in next(iter(node.rows.layers.values())).spans) < \
                            sum(b - a for a, b in full)
            assert trimmed and store.stats.hits >= len(turns) - 1, engine
    finally:
        windowed.set_prefix_cache(0)


def test_a_shared_system_prompt_stays_a_hit_while_conversations_on_it_are_evicted(runtime):
    """Agents sharing a system prompt, under a budget too small for all their conversations: an agent whose own
    entries were evicted still resumes at the end of the system prompt, which every hit on the conversations
    that extend it keeps in use."""
    system = {"role": "system", "content": "You are a coding agent with tools for files and shells. " * 6}
    agents = [[system, {"role": "user", "content": f"task {a}: fix the parser in module {a} and run the tests"}]
              for a in range(3)]
    rounds = []
    for turn in range(4):
        for a, messages in enumerate(agents):
            rounds.append(runtime.chat_prompt(messages))
            agents[a] = [*messages, {"role": "assistant", "content": f"step {turn}: I read the file and ran it"},
                         {"role": "user", "content": f"the output of step {turn} says the test still fails"}]
    runtime.set_prefix_cache(64 * 2**20)
    try:
        for prompt in rounds:
            _run(runtime, prompt, "raw")
        everything = runtime.prefix_cache.bytes
        runtime.set_prefix_cache(int(everything * 0.5))
        store = runtime.prefix_cache
        system_end = rounds[0].cache_points[0]
        for i, prompt in enumerate(rounds):
            assert prompt.cache_points[0] == system_end
            _, cached = _run(runtime, prompt, "raw")
            assert i == 0 or cached >= system_end, i
            _consistent(store)
        assert store.stats.evictions > 0 and store.lookup("", rounds[0].ids[:system_end]) is not None
    finally:
        runtime.set_prefix_cache(0)


def test_a_trimmed_hollow_entry_comes_back_on_its_own_prompt_refilled(windowed):
    """Its rows were cut to what its extension reads, which is less than its own prompt reads: on that prompt
    again they are refilled from the prefill (which holds what the entry reads), the entry is a hit again, and
    the extension still serves its prompts. Before, that boundary was refused until the extension went."""
    ids = windowed.encode_prompt(LONG * 2)
    windowed.set_prefix_cache(64 * 2**20)
    try:
        store = windowed.prefix_cache
        _prefill(windowed, store, ids[:101])                   # entry A: ids[:100]
        _, use = _prefill(windowed, store, ids[:201])          # entry B extends A
        a, b = store.nodes[("", tuple(ids[:100]))], use.stored
        assert b.parent is a
        store.lookup("", ids[:201])                            # B the most recent: A goes first
        store.max_bytes = store.bytes - 1
        store._evict(keep=1)
        _consistent(store)
        layer = next(iter(a.rows.layers.values()))
        assert a.states is None and sum(block.shape[0] for _, block in layer.spans) == 64   # the sink alone
        store.max_bytes = 64 * 2**20
        cached, use = _prefill(windowed, store, ids[:101])     # A's own prompt again: refilled, stored
        assert cached == 0 and use.stored is a and a.states is not None
        assert sum(block.shape[0] for _, block in next(iter(a.rows.layers.values())).spans) == 64 + 16
        _consistent(store)
        for engine in ("mtp", "ddtree"):                      # a hit again, drafting from the refilled rows
            hits = store.stats.hits
            assert _steps(windowed, engine, ids[:101], PrefixPlan(store, "", ())) == \
                _steps(windowed, engine, ids[:101], None)
            assert store.stats.hits == hits + 1
        assert _prefill(windowed, store, ids[:211])[0] == 200   # B still serves what extends it
        _consistent(store)
    finally:
        windowed.set_prefix_cache(0)


def _each_turn(family, engine: str, turns, store: PrefixCache | None = None) -> None:
    """A conversation's turns with `engine` (2 tokens each), through `store` if given, which is checked after each."""
    for prompt in turns:
        run_engine(family.engines[engine], prompt.ids, 2, GREEDY,
                   prefix=PrefixPlan(store, "", prompt.cache_points) if store is not None else None)
        if store is not None:
            _consistent(store)


def _recording_heads(monkeypatch) -> list:
    """Records every MTP request's head cache as its first draft reads it: (rows, keys, values)."""
    from engines import mtp

    heads = []
    start = mtp._MTPDrafting.__init__

    def recorded(self, engine, request):
        start(self, engine, request)
        head, rows = self.head_cache, slice(0, self.head_cache.offset)
        heads.append((head.offset, mx.array(head.keys[..., rows, :]), mx.array(head.values[..., rows, :])))

    monkeypatch.setattr(mtp._MTPDrafting, "__init__", recorded)
    return heads


def test_the_mtp_heads_rows_with_a_hit_are_those_without_one(runtime, windowed, monkeypatch):
    """Turn by turn, the head's cache after a hit holds the rows it holds without the cache: with no window
    every row from the first (resumed from the entry's deposit), with one only the prompt's last rows. A
    deposit holds rows from row 0, so a window that starts later computes its rows afresh: resumed, the head
    attended to the old turn's rows in front of its window as well (46, 68, 90 rows for a window of 24)."""
    heads = _recording_heads(monkeypatch)
    for family in (runtime, windowed):
        turns = [family.chat_prompt(m) for m in _conversation(4)]
        _each_turn(family, "mtp", turns)
        without, heads[:] = list(heads), []
        family.set_prefix_cache(64 * 2**20)
        try:
            _each_turn(family, "mtp", turns, family.prefix_cache)
            assert family.prefix_cache.stats.hits == len(turns) - 1
        finally:
            family.set_prefix_cache(0)
        window = family.engines["mtp"].prompt_window
        for prompt, (rows, keys, values), (hit_rows, hit_keys, hit_values) in zip(turns, without, heads):
            assert rows == hit_rows == (len(prompt.ids) if window is None else min(window, len(prompt.ids)))
            assert mx.allclose(keys, hit_keys, atol=1e-5) and mx.allclose(values, hit_values, atol=1e-5)
        heads.clear()


def test_the_mtp_heads_deposits_chain_along_a_conversation_and_outlive_eviction_while_read(runtime, monkeypatch):
    """Without a window the head's cache covers every row, and each turn deposits it: stored whole, a
    conversation's deposits held every earlier turn's rows again. Each deposit keeps only the rows past the
    previous turn's, so together they hold each row once; under a budget that evicts old turns, an evicted
    turn's deposit stays while a later one reads it, goes with the last, and every turn's head still starts
    from exactly the rows it computes without the cache."""
    turns = [runtime.chat_prompt(m) for m in _conversation(6)]
    heads = _recording_heads(monkeypatch)
    _each_turn(runtime, "mtp", turns)
    without = list(heads)
    runtime.set_prefix_cache(64 * 2**20)
    try:
        store = runtime.prefix_cache
        _each_turn(runtime, "mtp", turns, store)
        deposits = [node.extras["mtp"] for node in store.nodes.values() if "mtp" in node.extras]
        assert len(deposits) == len(turns)
        last = max(deposits, key=lambda d: d.end)
        assert sum(block.shape[0] for d in deposits for _, block in d.rows[0].spans) == last.end   # every row once
        assert mx.array_equal(mx.moveaxis(last.held()[0], 0, 2), heads[-1][1][..., :last.end, :])
        row_bytes = sum(d.nbytes for d in deposits) // last.end
        assert sum(d.nbytes for d in deposits) < sum(d.end for d in deposits) * row_bytes / 2   # whole: each again
        # a budget that holds the last turn's rows and a few entries' states: old turns are evicted as it goes
        final = _end_entry(store, turns[-1])
        budget = sum(e.rows.nbytes for e in final.chain()) + 3 * final.state_bytes + 2 * last.nbytes
        runtime.set_prefix_cache(budget)
        store, heads[:] = runtime.prefix_cache, []
        kept_while_read = False
        for prompt in turns:
            _each_turn(runtime, "mtp", [prompt], store)
            kept_while_read |= any(n.states is None and "mtp" in n.extras for n in store.nodes.values())
        assert store.stats.evictions > 0 and kept_while_read
        for (rows, keys, values), (hit_rows, hit_keys, hit_values) in zip(without, heads):
            assert rows == hit_rows
            assert mx.allclose(keys, hit_keys, atol=1e-5) and mx.allclose(values, hit_values, atol=1e-5)
    finally:
        runtime.set_prefix_cache(0)


def test_the_drafters_deposits_chain_and_its_context_with_a_hit_is_the_one_without(runtime, windowed, monkeypatch):
    """The drafter's context after the prompt (keys and values of every layer, over its sink and window): turn
    by turn, with the cache, under a budget that evicts old turns, it holds the rows and positions it holds
    without the cache, and each turn's deposit stores only the rows past the previous turn's that its window
    reads (stored whole, every deposit held the sink and the window again)."""
    from engines.ddtree import DDTreeEngine

    contexts = []
    start = DDTreeEngine.start

    def recorded(self, request):
        drafting = start(self, request)
        c = drafting.context
        contexts.append((int(c.length), c.positions.tolist(), [mx.array(a) for a in (*c.keys, *c.values)]))
        return drafting

    monkeypatch.setattr(DDTreeEngine, "start", recorded)
    for family in (runtime, windowed):
        turns = [family.chat_prompt(m) for m in _conversation(6)]
        _each_turn(family, "ddtree", turns)
        without, contexts[:] = list(contexts), []
        family.set_prefix_cache(64 * 2**20)
        store = family.prefix_cache
        try:
            _each_turn(family, "ddtree", turns, store)
            deposits = sorted((n.extras["ddtree"] for n in store.nodes.values() if "ddtree" in n.extras),
                              key=lambda d: d.end)
            assert len(deposits) == len(turns)
            own = [sum(block.shape[0] for _, block in d.rows[0].spans) for d in deposits]
            whole = [sum(b - a for a, b in d.window.spans(0, d.end, d.end)) for d in deposits]
            assert sum(own) < sum(whole) / 2 and own[0] == whole[0]
            final = _end_entry(store, turns[-1])
            budget = sum(e.rows.nbytes for e in final.chain()) + 3 * final.state_bytes + 3 * deposits[-1].nbytes
            family.set_prefix_cache(budget)
            store, contexts[:] = family.prefix_cache, []
            _each_turn(family, "ddtree", turns, store)
            assert store.stats.evictions > 0 and store.stats.hits >= len(turns) - 1
        finally:
            family.set_prefix_cache(0)
        for (length, positions, arrays), (hit_length, hit_positions, hit_arrays) in zip(without, contexts):
            assert (length, positions) == (hit_length, hit_positions)
            assert all(mx.allclose(a, b, atol=1e-5) for a, b in zip(arrays, hit_arrays))
        contexts.clear()
