"""The classifier's features and probabilities are pinned: today's featurize and predict against
rows recorded before the latency rewrite (tests/classifier_golden.py), and the fast paths of the
featurizer against the plain code they replace."""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest

from classifier import cues, features, hashing, lexicon
from classifier.model import Classifier
from contracts.request_text import RequestText
from tests.classifier_golden import GOLDEN_PATH, cases, fingerprint

TOLERANCE = 1e-9


@pytest.fixture(scope="module")
def shipped() -> Classifier:
    return Classifier.load()


@pytest.fixture(scope="module")
def golden() -> list[dict]:
    return json.loads(GOLDEN_PATH.read_text(encoding="utf-8"))["cases"]


def test_golden_cases_are_the_recorded_requests(golden):
    assert [RequestText(**case["request"]) for case in golden] == cases()
    assert len(golden) >= 30


def test_features_match_the_golden_rows(shipped, golden):
    spec = shipped.model.spec
    for number, case in enumerate(golden):
        want = case["features"]
        got = fingerprint(*features.featurize(RequestText(**case["request"]), spec), spec, "indices" in want)
        where = f"case {number}: {case['request']['user'][:60]!r}"
        assert got["block_counts"] == want["block_counts"], where
        assert got["indices_sha256"] == want["indices_sha256"], where
        for key in ("sum", "sum_sq", "projection"):
            assert got[key] == pytest.approx(want[key], rel=TOLERANCE, abs=TOLERANCE), f"{where}: {key}"
        if "indices" in want:
            assert got["indices"] == want["indices"], where
            np.testing.assert_allclose(got["values"], want["values"], rtol=TOLERANCE, atol=TOLERANCE, err_msg=where)


def test_probabilities_and_labels_match_the_golden_rows(shipped, golden):
    for number, case in enumerate(golden):
        request = RequestText(**case["request"])
        probs = dict(zip(shipped.model.labels, shipped.model.probabilities(request).tolist()))
        for label, want in case["probabilities"].items():
            assert probs[label] == pytest.approx(want, abs=TOLERANCE), f"case {number}: {label}"
        assert shipped.predict(request).label == case["label"], f"case {number}"


def test_unpasted_cuts_what_the_pasted_block_regex_matches():
    rng = random.Random(0)
    for _ in range(3000):
        text = "".join(rng.choice("``\"\"\"ab\n ") for _ in range(rng.randrange(0, 40)))
        assert features.unpasted(text) == features._PASTED_BLOCK.sub("\n", text), repr(text)


def test_looks_like_ask_counts_letters_like_str_isalpha():
    def plain(line: str) -> bool:
        stripped = line.strip()
        if not stripped or len(stripped) > 400 or line[:1] in (" ", "\t"):
            return False
        return sum(map(str.isalpha, stripped)) + stripped.count(" ") >= 0.8 * len(stripped)

    rng = random.Random(1)
    for _ in range(3000):
        line = "".join(rng.choice("ab Z9_-.\t\u00e9\u4e2d") for _ in range(rng.randrange(0, 30)))
        assert features._looks_like_ask(line) == plain(line), repr(line)


def test_ask_text_scans_the_first_and_last_lines():
    def plain(text: str) -> str:
        lines = text.split("\n")
        if len(lines) > 2 * features.ASK_SCAN_LINES:
            lines = lines[: features.ASK_SCAN_LINES] + lines[-features.ASK_SCAN_LINES :]
        ask = "\n".join(line for line in lines if features._looks_like_ask(line))
        return ask[: features.EDGE_CHARS] + "\n" + ask[-features.EDGE_CHARS :] if len(ask) > 2 * features.EDGE_CHARS else ask

    rng = random.Random(2)
    for _ in range(3000):
        text = "".join(rng.choice(["\n", "ab c", "Write it", "  x", "\t", "\u00e9"]) for _ in range(rng.randrange(0, 60)))
        assert features.ask_text(text, text) == plain(text), repr(text)


def test_joined_tokens_hash_like_each_text_alone():
    texts = ["Hello, world_1 \u00e9t\u00e9", "", "a\nb  c", "\u4e2d\u6587 x  ", "tail"]
    joined = hashing.join(texts)
    for i, text in enumerate(texts):
        lo, hi = joined.chars(i)
        assert joined.points[lo:hi].tolist() == [ord(c) for c in text]
        points, prefix, starts, ends = hashing.tokens(text)
        alone = hashing.word_unigrams(prefix, starts, ends, 7)
        assert hashing.mix(joined.span_hashes(i, i + 1) + np.uint64(7)).tolist() == alone.tolist()
        for n, salt in ((1, 3), (2, 5), (4, 9)):
            want = hashing.char_ngram_hashes(hashing.prefix_hash(points), n, salt)
            assert hashing.ngram_hashes(joined.points[lo:hi], (n,), (salt,)).tolist() == want.tolist()
    with pytest.raises(ValueError):
        hashing.join(texts + ["one too many"])  # the power tables cover MAX_JOINED_TEXTS texts


def test_key_index_finds_what_a_binary_search_finds():
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(0, 2**63, 3000, dtype=np.uint64) * np.uint64(2))
    index = hashing.KeyIndex(keys, bits=10)  # 3,000 keys in 1,024 slots: most slots shared
    queries = np.concatenate((keys[::3], rng.integers(0, 2**63, 2000, dtype=np.uint64), keys[-1:], keys[:1]))
    rng.shuffle(queries)
    where = np.searchsorted(keys, queries)
    want = np.flatnonzero(keys.take(where, mode="clip") == queries)
    found, rows = index.find(queries)
    assert found.tolist() == want.tolist() and rows.tolist() == where[want].tolist()
    empty = index.find(np.empty(0, dtype=np.uint64))
    assert empty[0].size == 0 and empty[1].size == 0


def test_cue_values_and_word_vectors_of_their_own_tokens():
    ask = "what is 3 + 4?\nwrite a python function in rust\n(a) yes\nhow do i parse a file"
    names = {name for name, value in zip(cues.CUE_NAMES, cues.TABLE.values(ask)) if value}
    assert {"prose_wh", "math", "code_make", "code_lang", "question_mark", "options", "code_howto"} <= names
    shipped = lexicon.load()
    assert np.isclose(np.linalg.norm(shipped.mean_vector(ask)), 1.0)
    assert shipped.mean_vector("").tolist() == [0.0] * shipped.dim


def test_uint16_columns_count_like_int32(shipped, golden, monkeypatch):
    """The shipped spec's hashed columns fit 16 bits and are radix-sorted; the int32 quicksort
    path (for wider specs) must give the same rows."""
    spec = shipped.model.spec
    narrow = features._layout(spec)
    assert narrow.column_dtype is np.uint16
    requests = [RequestText(**case["request"]) for case in golden]
    want = [features.featurize(request, spec) for request in requests]
    monkeypatch.setitem(features._LAYOUTS, id(spec), (spec, dataclasses.replace(narrow, column_dtype=np.int32)))
    for request, (index, values) in zip(requests, want):
        got_index, got_values = features.featurize(request, spec)
        assert got_index.tolist() == index.tolist() and got_values.tolist() == values.tolist()
    wide = features.FeatureSpec(char_bits=16, lexicon_weight=0.0)  # 2^16 char columns: int32 path
    assert features._layout(wide).column_dtype is np.int32
    index, _ = features.featurize(requests[0], wide)
    assert index.size and int(index.max()) < wide.n_features and np.all(np.diff(index) > 0)


def test_byte_stats_count_like_bincount_and_bytes_count():
    rng = random.Random(3)
    alphabet = ["a", "Z", "\n", "\t", ":", " ", '"', "<", "/", ">", "=", "\u00e9", "\u4e2d", "\x7f"]
    for _ in range(2000):
        data = "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 2, 3, 7, 50, 400]))).encode()
        hist, counts = features._byte_stats(data)
        want = np.bincount(np.frombuffer(data, dtype=np.uint8), minlength=256)[:128].astype(np.float64)
        assert hist.tolist() == want.tolist(), data
        assert counts == [data.count(pair) for pair in features._PAIRS], data


def test_cue_symbol_alternations_match_substring_tests():
    """A cue's symbols are searched as one alternation: fires exactly where one of them is in the ask."""
    rng = random.Random(4)
    alphabet = ["1", " ", "\n", "\t", "=", ">", "(", ")", "a", ".", "?", ":", "-", "!", "\u0663", "\u4ee3\u7801"]
    for _ in range(3000):
        ask = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 30)))
        for bit, symbols, ascii_symbols in cues.TABLE.symbols:
            plain = any(symbol in ask for symbol in cues.CUES[bit].symbols)
            assert bool(symbols.search(ask)) == plain, repr(ask)
            if ask.isascii():
                assert bool(ascii_symbols and ascii_symbols.search(ask)) == plain, repr(ask)


def test_log1p_table_matches_log1p(shipped, monkeypatch):
    counts = np.arange(features._LOG1P.size)
    assert features._LOG1P.take(counts[::-1]).tolist() == np.log1p(counts[::-1], dtype=np.float64).tolist()
    request = RequestText(user="word " * 3000 + "".join(chr(0x4E00 + i) for i in range(3000)))
    want = features.featurize(request, shipped.model.spec)
    monkeypatch.setattr(features, "_LOG1P", features._LOG1P[:2])  # every prompt takes the log1p fallback
    got = features.featurize(request, shipped.model.spec)
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


def test_join_lower_cases_like_str_lower():
    """join(lower=True) lower-cases text other than ASCII by a table; where the table cannot (İ,
    final sigma, past the BMP) it falls back to str.lower. Either way: the points of str.lower."""
    rng = random.Random(5)
    alphabet = ["A", "b", " ", "\n", "\u00c9", "\u00e9", "\u4e2d", "\u0130", "\u03a3", "\u039f", "\u1e9e", "\U0001f600",
                "\U00010400", "\u0399", "\uffff", "\u2c2f", "\u13a0"]  # fmt: skip
    for _ in range(2000):
        texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12))) for _ in range(4)]
        got, want = hashing.join(texts, lower=True), hashing.join([text.lower() for text in texts])
        assert got.points.tolist() == want.points.tolist(), texts
        assert (got.char_bounds, got.word_bounds) == (want.char_bounds, want.word_bounds), texts
    table = hashing._LOWER
    for code in range(0, 1 << 16, 7):
        if table[code] != hashing._NOT_MAPPED and not 0xD800 <= code < 0xE000:
            assert chr(code).lower() == chr(table[code]), hex(code)


def test_offer_scan_finds_what_the_label_and_phrase_loops_find():
    """`tool_offer._label_or_phrase` scans 17 shared literals for the label lines' and phrases' 27;
    on random texts built from their pieces it answers as the two plain loops do."""
    from classifier import tool_offer

    rng = random.Random(6)
    pieces = ["tools:", "tool", "functions", "function:", " api", "apis:", "you can call", "you may use",
              "you  can", "available", "access to the following tools", "called", "tool called", "above",
              "functions above", "use the tool", "call ", "calls", "invoke", "given these functions", "expose",
              "<tools>", "<functions>", "actions", "operations:", "endpoint", "\n", "## ", "- ", " ", "x",
              "f(x)", "`get_x(", "\u00e9", "with access to tools"]  # fmt: skip
    fired = 0
    for _ in range(5000):
        low = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 14)))
        want = tool_offer._label_line(low) or tool_offer._phrase(low)
        assert tool_offer._label_or_phrase(low) == want, repr(low)
        fired += want
    assert 500 < fired < 4500  # both answers are exercised


def test_glosses_strip_each_word_as_before():
    """glosses reads a non-English ask's distinct words, each stripped of punctuation once: the same
    glosses, in the same order, as stripping every occurrence."""
    from classifier import glossary

    def plain(text: str) -> str:  # the function before the fast path, for text other than ASCII
        found = [(text.find(term), gloss) for term, gloss in glossary._SUBSTRING_GLOSS if term in text]
        words = {word.strip(glossary._PUNCTUATION) for word in text.replace("-", " ").split()}
        found += [(text.find(word), glossary._WORD_GLOSS[word]) for word in glossary._WORD_GLOSS.keys() & words]
        return " ".join(gloss for _, gloss in sorted(found))

    rng = random.Random(7)
    pieces = ["función", "(función)", "skript,", "напиши", "«таблица»", "写", "函数", "表格", "コード", "-", " ",
              "\n", "é", "code", "tabla-", "escribe:", "y", "的"]  # fmt: skip
    for _ in range(3000):
        text = "\u00e9 " + "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 20)))
        assert glossary.glosses(text) == plain(text), repr(text)
