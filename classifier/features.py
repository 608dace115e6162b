"""Feature vector of one request: hashed n-gram blocks plus a few structural statistics.

Column layout (one sparse row):
  [char n-grams of system+user | words+bigrams of system+user | words of the ask (system prompt +
   running-text lines of the user message, see ask_text) |
   words of earlier history (weighted down) | structural features (standardised) | reply cues |
   the ask's mean word vector (lexicon.py)]
Training (featurizer.py) and inference (model.py) both call `featurize`, so the persisted model
reproduces the fitted pipeline exactly.

featurize runs on every request (p99 budget 1 ms at 4k characters, issue 16), and its cost is
mostly the number of numpy calls (~1-2 us each), not the text's length: all texts of a request
are tokenised in one pass (`hashing.join`), every word hash of every block comes out of one
`mix`, the four hashed blocks are counted with one sort, what depends only on the spec is built
once (`_layout`), and array methods stand in for numpy's Python-level wrappers
(`a.nonzero()[0]` for `np.flatnonzero(a)`, `a.searchsorted` for `np.searchsorted`: 2-3x cheaper).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, replace
from itertools import pairwise

import numpy as np

from classifier import cues, glossary, hashing, lexicon
from contracts.request_text import RequestText

# The constants below are part of the feature map too: changing any of them needs a retrain.
# Long prompts keep their head and tail: the instruction sits at one end, pasted material between.
HEAD_CHARS = 3000
TAIL_CHARS = 3000
# Char n-grams read at most this many characters from each end (the rest is more of the same).
CHAR_CLIP = 1000
# The "edge" (ask) block reads the system prompt and the running-text lines of the user message.
EDGE_CHARS = 300


@dataclass(frozen=True)
class FeatureSpec:
    """Hyper-parameters of the feature map. Saved with the model; any change needs a retrain."""

    char_bits: int = 14
    word_bits: int = 14
    edge_bits: int = 13
    history_bits: int = 13
    char_ngrams: tuple[int, ...] = (1, 2, 3, 4)
    char_weight: float = 1.0
    word_weight: float = 1.0
    edge_weight: float = 1.6
    history_weight: float = 0.3
    struct_weight: float = 0.5
    cue_weight: float = 1.0
    # Word vectors of the ask (classifier/lexicon.py): fixed by the lexicon's digest at fit time;
    # weight 0 (or a spec saved before the lexicon existed) leaves the block out.
    lexicon_weight: float = 1.0
    lexicon_digest: str = ""
    lexicon_dim: int = 0
    # English glosses of non-English ask words (classifier/glossary.py): the glossary's VERSION at
    # fit time; 0 (a spec saved before it existed) reads none
    glossary: int = 0
    # The system prompt's words in columns of their own (edge block), out of the cue text and the word
    # vector, which then read the user's message only: custom instructions ("explain your reasoning",
    # "short paragraphs") set how every reply reads, the ask what this one is. A spec saved before this
    # field existed reads the system prompt as part of the ask (from_json).
    system_apart: bool = True
    struct_mean: tuple[float, ...] = field(default_factory=tuple)
    struct_scale: tuple[float, ...] = field(default_factory=tuple)

    @property
    def offsets(self) -> tuple[int, int, int, int, int]:
        char = 1 << self.char_bits
        word = char + (1 << self.word_bits)
        edge = word + (1 << self.edge_bits)
        return 0, char, word, edge, edge + (1 << self.history_bits)

    @property
    def n_features(self) -> int:
        return self.offsets[-1] + len(STRUCT_NAMES) + len(cues.CUE_NAMES) + self.lexicon_dim

    def with_lexicon(self) -> "FeatureSpec":
        """This spec bound to the shipped lexicon and glossary (what fitting does)."""
        bound = self if self.glossary else replace(self, glossary=glossary.VERSION)
        if bound.lexicon_weight <= 0 or bound.lexicon_digest:
            return bound
        shipped = lexicon.load()
        return replace(bound, lexicon_digest=shipped.digest, lexicon_dim=shipped.dim)

    def to_json(self) -> dict:
        data = asdict(self)
        data["char_ngrams"] = list(self.char_ngrams)
        data["struct_mean"] = list(self.struct_mean)
        data["struct_scale"] = list(self.struct_scale)
        return data

    @classmethod
    def from_json(cls, data: dict) -> "FeatureSpec":
        data = dict(data)
        for key in ("char_ngrams", "struct_mean", "struct_scale"):
            data[key] = tuple(data[key])
        data.setdefault("system_apart", False)
        return cls(**data)


def clip_long(text: str) -> str:
    if len(text) <= HEAD_CHARS + TAIL_CHARS:
        return text
    return text[:HEAD_CHARS] + "\n" + text[-TAIL_CHARS:]


def primary_text(request: RequestText) -> str:
    return clip_long(f"{request.system}\n{request.user}" if request.system else request.user)


# Fenced or triple-quoted blocks are pasted material, never the ask. `unpasted` cuts exactly what
# this regex matches, by str.find (the regex tries both openings at every position: ~70 us at 4k).
_PASTED_BLOCK = re.compile(r"```.*?(?:```|$)|\"\"\".*?(?:\"\"\"|$)", re.S)
ASK_SCAN_LINES = 8
_LETTERS_AND_SPACE = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz "


def _looks_like_ask(line: str) -> bool:
    """A line of running text: not indented, not too long, mostly letters and spaces."""
    stripped = line.strip()
    if not stripped or len(stripped) > 400 or line[:1] in (" ", "\t"):
        return False
    if stripped.isascii():  # str.isalpha is [A-Za-z] there: count them in C, not per character
        letters = len(stripped) - len(stripped.encode().translate(None, _LETTERS_AND_SPACE))
    else:
        letters = sum(map(str.isalpha, stripped)) + stripped.count(" ")
    return letters >= 0.8 * len(stripped)


def unpasted(user: str) -> str:
    """The user message (head and tail when long) with fenced / triple-quoted blocks cut out:
    each block, from its opening to the same closing fence or the end, becomes one newline."""
    text = clip_long(user)
    pieces, done = [], 0
    ticks, quotes = text.find("```"), text.find('"""')  # the next opening of each kind (-1: none)
    while ticks >= 0 or quotes >= 0:
        start = ticks if quotes < 0 or 0 <= ticks < quotes else quotes
        close = text.find(text[start : start + 3], start + 3)
        pieces += (text[done:start], "\n")
        # unclosed: the block runs to the end, where `$` also stops before a final newline
        done = close + 3 if close >= 0 else len(text) - text.endswith("\n")
        if 0 <= ticks < done:
            ticks = text.find("```", done)
        if 0 <= quotes < done:
            quotes = text.find('"""', done)
    return "".join(pieces) + text[done:] if pieces else text


def ask_text(user: str, outside: str | None = None) -> str:
    """The request's own words: running-text lines among the first and last few lines of the
    user message, outside pasted blocks. Pasted code or data would otherwise drown a short ask.
    `outside`: `unpasted(user)` when the caller has it already."""
    text = unpasted(user) if outside is None else outside
    if text.count("\n") >= 2 * ASK_SCAN_LINES:  # more lines than scanned: split off the ends only
        lines = text.split("\n", ASK_SCAN_LINES)[:ASK_SCAN_LINES] + text.rsplit("\n", ASK_SCAN_LINES)[1:]
    else:
        lines = text.split("\n")
    ask = "\n".join(line for line in lines if _looks_like_ask(line))
    if len(ask) > 2 * EDGE_CHARS:
        ask = ask[:EDGE_CHARS] + "\n" + ask[-EDGE_CHARS:]
    return ask


def edge_text(request: RequestText, outside: str | None = None, system_apart: bool = False) -> str:
    if system_apart:
        return ask_text(request.user, outside)
    return f"{request.system[:EDGE_CHARS]}\n{ask_text(request.user, outside)}"


def _unigrams(text: str) -> np.ndarray:
    points = hashing.codepoints(text.lower())
    starts, ends = hashing.word_spans(points)
    return hashing.word_unigrams(hashing.prefix_hash(points), starts, ends, _WORD_SALT)


STRUCT_NAMES: tuple[str, ...] = (
    "log_chars", "log_lines", "fences", "alpha", "upper", "non_ascii",
    "curly_square", "parens", "semicolon", "colon", "comma", "equals", "angle", "quote", "pipe", "hash",
    "digit", "space", "newline",
    "indented_lines", "json_keys", "yaml_keys", "list_items", "csv_lines", "xml_tags", "sql_words", "code_words",
)  # fmt: skip

_SQL_WORDS = ("select", "from", "where", "insert", "into", "create", "table", "join", "group", "update")
_CODE_WORDS = ("def", "return", "import", "include", "function", "const", "class", "public", "fn", "var", "let")
_WORD_SALT = 1
_EDGE_SALT = 2
_HISTORY_SALT = 3
_SYSTEM_SALT = 4


def _keyword_hashes(words: tuple[str, ...]) -> np.ndarray:
    """Hashes of keywords as the word block hashes them, so keyword hits are an isin, not str.count."""
    hashes = []
    for word in words:
        points = hashing.codepoints(word)
        hashes.append(hashing.word_unigrams(hashing.prefix_hash(points), np.array([0]), np.array([len(word)]), _WORD_SALT)[0])
    return np.array(hashes, dtype=np.uint64)


_SQL_HASHES = _keyword_hashes(_SQL_WORDS)
_CODE_HASHES = _keyword_hashes(_CODE_WORDS)
# Both lists in one index, with the list each hash comes from (1: SQL, 2: code).
_KEYWORD_ORDER = np.argsort(np.concatenate((_SQL_HASHES, _CODE_HASHES)))
_KEYWORDS = hashing.KeyIndex(np.concatenate((_SQL_HASHES, _CODE_HASHES))[_KEYWORD_ORDER], bits=12)
_KEYWORD_KIND = np.repeat([1, 2], [len(_SQL_WORDS), len(_CODE_WORDS)])[_KEYWORD_ORDER]


def _keyword_counts(words: np.ndarray) -> tuple[int, int]:
    """How many of the word hashes are SQL keywords, how many code keywords."""
    kinds = _KEYWORD_KIND.take(_KEYWORDS.find(words)[1]).tolist()  # a few: list.count beats a bincount
    return kinds.count(1), kinds.count(2)


# Character groups whose share of the text is a feature, as a (groups x 128) indicator matrix,
# then rows that count upper-case letters, lower-case letters and all ASCII characters.
_CHAR_GROUPS = ("{}[]", "()", ";", ":", ",", "=", "<>", "\"'", "|", "#", "0123456789", " \t", "\n")
_GROUP_MATRIX = np.zeros((len(_CHAR_GROUPS) + 3, 128))
for _row, _chars in enumerate(_CHAR_GROUPS):
    _GROUP_MATRIX[_row, [ord(ch) for ch in _chars]] = 1.0
_GROUP_MATRIX[len(_CHAR_GROUPS), 65:91] = _GROUP_MATRIX[len(_CHAR_GROUPS) + 1, 97:123] = _GROUP_MATRIX[-1] = 1.0

# Two-byte patterns counted from the byte pairs (`_byte_stats`). Each has two different bytes, so
# occurrences cannot overlap, and the number of pairs equal to it is what bytes.count returns.
_PAIRS = (b":\n", b": ", b'":', b"</", b"/>", b"=>", b"\n\t")
_PAIR_CODES = np.array([first | second << 8 for first, second in _PAIRS], dtype=np.uint16)  # little-endian uint16
# One searchsorted answers everything: each pattern's range [code, code + 1), then the range of
# each second byte k < 128, [k << 8, (k + 1) << 8).
_PAIR_BOUNDS = np.concatenate((_PAIR_CODES, _PAIR_CODES + 1, np.arange(129, dtype=np.uint16) << 8))


def _byte_stats(data: bytes) -> tuple[np.ndarray, list[int]]:
    """Histogram of the ASCII bytes of `data` (float64, 128 entries) and the count of each of
    `_PAIRS` in it, from one radix sort of its n - 1 adjacent byte pairs (uint16, second byte high).

    A bincount and seven bytes.count passes cost ~30 us on a 4k text here, this about half; the
    second bytes of all pairs are every byte but the first, so their ranges give the histogram.
    """
    size = len(data)
    if size < 2:
        hist = np.zeros(128)
        if size and data[0] < 128:
            hist[data[0]] = 1.0
        return hist, [0] * len(_PAIRS)
    even, odd = np.frombuffer(data, np.uint16, size // 2), np.frombuffer(data, np.uint16, (size - 1) // 2, 1)
    pairs = np.concatenate((even, odd))
    pairs.sort(kind="stable")  # uint16: a radix sort
    at = pairs.searchsorted(_PAIR_BOUNDS)
    n_pairs = len(_PAIRS)
    counts = (at[n_pairs : 2 * n_pairs] - at[:n_pairs]).tolist()
    second = at[2 * n_pairs :]
    hist = np.subtract(second[1:], second[:-1], dtype=np.float64)  # not np.diff: a Python-level wrapper
    if data[0] < 128:
        hist[data[0]] += 1.0
    return hist, counts


def structural_raw(text: str, words: np.ndarray | None = None) -> np.ndarray:
    """Unscaled structural statistics of the primary text (ratios are per character or per line).

    `words`: the text's lower-cased word hashes (computed here when not given).
    Only C-speed primitives (bytes.count, numpy) here: this runs on every request. The patterns
    counted are ASCII, so they count the same in the UTF-8 bytes as in the text (and bytes.count
    is several times faster than str.count on a text with non-ASCII characters).
    """
    if words is None:
        words = _unigrams(text)
    data = text.encode("utf-8")
    ascii_hist, pairs = _byte_stats(data)
    colon_newline, colon_space, json_key, xml_close, xml_empty, arrow, newline_tab = pairs
    head = text[: hashing.MAX_SPAN_CHARS]  # character shares read what `hashing.codepoints` reads
    codes = np.frombuffer(data, dtype=np.uint8)
    if len(head) != len(text):  # only for texts longer than featurize reads (clip_long)
        head_data = head.encode("utf-8")
        codes = np.frombuffer(head_data, dtype=np.uint8)
        ascii_hist = _byte_stats(head_data)[0]
    n = max(len(head), 1)
    groups = _GROUP_MATRIX @ ascii_hist  # counts: exact in float64, as the sums they replace
    shares = groups[: len(_CHAR_GROUPS)] / n
    upper, lower, ascii_chars = groups[len(_CHAR_GROUPS) :].tolist()
    alpha = upper + lower
    n_lines = int(ascii_hist[10]) + 1
    csv_lines = _csv_lines(codes) if ascii_hist[44] >= 2 else 0
    sql_words, code_words = _keyword_counts(words)
    nl_data = b"\n" + data
    indented = nl_data.count(b"\n    ") + newline_tab + data.startswith(b"\t")  # "\n\t" in nl_data
    list_items = nl_data.count(b"\n- ") + nl_data.count(b"\n* ") + nl_data.count(b"\n  - ")
    per_line = np.array(
        [
            indented,
            min(json_key, 50),
            colon_newline + colon_space,
            list_items,
            csv_lines,
            min(xml_close + xml_empty, 50),
            sql_words,
            code_words + arrow,
        ]
    ) / n_lines
    head_stats = np.array(
        [
            np.log1p(len(text)),
            np.log1p(n_lines),
            min(data.count(b"```"), 8),
            alpha / n,
            upper / max(alpha, 1.0),
            (n - ascii_chars) / n,
        ]
    )
    return np.concatenate((head_stats, shares, per_line))


def _csv_lines(codes: np.ndarray) -> int:
    """Lines with two commas or more (codes: the text's UTF-8 bytes)."""
    line_of_comma = (codes == 10).nonzero()[0].searchsorted((codes == 44).nonzero()[0])
    return int(np.count_nonzero(np.bincount(line_of_comma) >= 2))


# Cues (classifier/cues.py): what the *reply* must be, phrased the way people ask it in any style
# (a judge template, a forum question, an essay assignment). Matched on the ask text only (system
# prompt + running text of the user message), so pasted code or data does not fire them. Binary.
CUE_HEAD, CUE_TAIL = 1000, 500


def cue_text(request: RequestText, outside: str | None = None, system_apart: bool = False) -> str:
    """The user message outside fenced blocks, head and tail (where asks sit), after the system
    prompt's head unless `system_apart`."""
    user = unpasted(request.user) if outside is None else outside
    if len(user) > CUE_HEAD + CUE_TAIL:
        user = user[:CUE_HEAD] + "\n" + user[-CUE_TAIL:]
    return user.strip() if system_apart else f"{request.system[:EDGE_CHARS]}\n{user}".strip()


def cue_values(request: RequestText, outside: str | None = None, system_apart: bool = False) -> np.ndarray:
    return cues.TABLE.values(cue_text(request, outside, system_apart).lower())


@dataclass(frozen=True)
class _Layout:
    """What featurize needs from a spec beyond its numbers, derived once per spec object."""

    ngrams: tuple[int, ...]  # char n-gram orders and their salts
    ngram_salts: tuple[int, ...]
    hashed_bits: tuple[int, ...]  # bits of the hashed blocks, in column order: char, word, edge, history
    hashed_starts: tuple[int, ...]  # their first columns
    hashed_weights: tuple[float, ...]
    column_dtype: type  # of the hashed columns while they are counted: uint16 where they fit
    struct_index: np.ndarray
    struct_mean: np.ndarray | None  # None: not fitted yet (the featurizer fits the scaler on raw values)
    struct_scale: np.ndarray | None
    cue_start: int
    lexicon: lexicon.Lexicon | None
    lexicon_index: np.ndarray

    @classmethod
    def of(cls, spec: FeatureSpec) -> "_Layout":
        char_off, word_off, edge_off, hist_off, struct_off = spec.offsets
        if struct_off >= 1 << 31:
            raise ValueError("hashed blocks over 2^31 columns: hashing.bucket_runs gives int32 columns")
        # 16-bit columns (the shipped spec: 49,152) sort by radix sort (kind="stable"), 4-5x faster
        # than the quicksort numpy runs on int32 here (25 against 126 us for 9,300 columns at 4k)
        narrow = struct_off <= 1 << 16
        cue_start = struct_off + len(STRUCT_NAMES)
        fitted = bool(spec.struct_mean)
        return cls(
            ngrams=spec.char_ngrams,
            ngram_salts=tuple(n * 7919 for n in spec.char_ngrams),
            hashed_bits=(spec.char_bits, spec.word_bits, spec.edge_bits, spec.history_bits),
            hashed_starts=(char_off, word_off, edge_off, hist_off),
            hashed_weights=(spec.char_weight, spec.word_weight, spec.edge_weight, spec.history_weight),
            column_dtype=np.uint16 if narrow else np.int32,
            struct_index=np.arange(len(STRUCT_NAMES)) + struct_off,
            struct_mean=np.asarray(spec.struct_mean) if fitted else None,
            struct_scale=np.asarray(spec.struct_scale) if fitted else None,
            cue_start=cue_start,
            lexicon=lexicon.for_digest(spec.lexicon_digest) if spec.lexicon_dim else None,
            lexicon_index=np.arange(spec.lexicon_dim) + cue_start + len(cues.CUE_NAMES),
        )


# Keyed by id(spec), holding the spec itself (so the id cannot be reused while cached).
_LAYOUTS: dict[int, tuple[FeatureSpec, _Layout]] = {}


def _layout(spec: FeatureSpec) -> _Layout:
    cached = _LAYOUTS.get(id(spec))
    if cached is None or cached[0] is not spec:
        if len(_LAYOUTS) >= 16:  # training makes a spec per fold; a server has one or two
            _LAYOUTS.clear()
        cached = _LAYOUTS[id(spec)] = (spec, _Layout.of(spec))
    return cached[1]


# The texts a request is read through, tokenised together by `hashing.join`, in this order (_SYSTEM:
# the system prompt's head where the spec reads it apart, else empty).
_PRIMARY, _EDGE, _ASK, _SYSTEM, _HISTORY = range(5)
# Salts of the word hashes of each text (the ask's words are hashed twice: cues and lexicon).
_TEXT_SALTS = np.array([_WORD_SALT, _EDGE_SALT, cues.SALT, _SYSTEM_SALT, _HISTORY_SALT], dtype=np.uint64)


@dataclass(slots=True)  # not frozen: a frozen dataclass costs ~1.5 us to build, per request
class _Words:
    """Salted word (and bigram) hashes of the request's texts, from one `mix` over all of them."""

    unigrams: list[np.ndarray]  # per text _PRIMARY .. _HISTORY, salted with _TEXT_SALTS
    bigrams: list[np.ndarray]  # likewise (the history block uses none)
    lexicon: np.ndarray  # the ask's words with the lexicon's salt

    @classmethod
    def of(cls, joined: hashing.Joined) -> "_Words":
        spans = joined.span_hashes(_PRIMARY, _HISTORY + 1)
        counts = [hi - lo for lo, hi in map(joined.words, range(_HISTORY + 1))]
        ask_lo, ask_hi = joined.words(_ASK)
        salted = np.concatenate((spans + _TEXT_SALTS.repeat(counts), spans[ask_lo:ask_hi] + np.uint64(lexicon.SALT)))
        words = hashing.mix(salted)
        pairs = hashing.pair_hashes(words[: joined.words(_HISTORY)[0]])  # bigrams of the texts before the history
        unigrams, bigrams, lo = [], [], 0
        for count in counts:
            unigrams.append(words[lo : lo + count])
            bigrams.append(pairs[lo : lo + max(count - 1, 0)])  # none across two texts
            lo += count
        return cls(unigrams, bigrams, words[lo:])


# log1p(k) for the counts of hashed columns: a lookup is 3-4x cheaper than numpy's log1p (no SIMD
# loop for it here: 10-15 us for the ~3,900 columns of a 4k prompt) and gives the same bits. A
# count is at most the number of tokens counted, so tables this long cover any prompt of up to
# ~16k tokens; longer ones fall back to log1p.
_LOG1P = np.log1p(np.arange(1 << 14, dtype=np.float64))


def _hashed_blocks(chars: np.ndarray, word_blocks: list[list[np.ndarray]], layout: _Layout) -> tuple[np.ndarray, np.ndarray]:
    """Columns and values of the hashed blocks: char n-grams of `chars` (code points), then the
    word, edge and history blocks (each a list of token hash arrays). Values: log1p counts,
    L2-normalised per block, times the block weight.

    All blocks at once, in one token array: bucket, sort, count runs. One sort of ~10k uint16 is
    cheaper than a bincount and a scan over each block's 2^bits columns (and than np.unique).
    """
    n_grams = sum(hashing.ngram_sizes(chars.size, layout.ngrams))
    sizes = [n_grams, *(sum(part.size for part in parts) for parts in word_blocks)]
    tokens = np.empty(sum(sizes), dtype=np.uint64)
    hashing.ngram_hashes(chars, layout.ngrams, layout.ngram_salts, out=tokens[:n_grams])
    np.concatenate([part for parts in word_blocks for part in parts], out=tokens[n_grams:])
    columns = hashing.bucket_runs(tokens, sizes, layout.hashed_bits, layout.hashed_starts, layout.column_dtype)
    if not columns.size:
        return np.empty(0, dtype=np.int64), np.empty(0)
    columns.sort(kind="stable" if columns.dtype == np.uint16 else "quicksort")  # stable on uint16: radix sort
    is_edge = np.empty(columns.size + 1, dtype=bool)  # where a run of equal columns starts (and the end)
    is_edge[0] = is_edge[-1] = True
    np.not_equal(columns[1:], columns[:-1], out=is_edge[1:-1])
    edges = is_edge.nonzero()[0]
    index = columns.take(edges[:-1])
    runs = edges[1:] - edges[:-1]
    values = _LOG1P.take(runs) if columns.size < _LOG1P.size else np.log1p(runs, dtype=np.float64)
    bounds = [*index.searchsorted(layout.hashed_starts).tolist(), index.size]
    for (lo, hi), weight in zip(pairwise(bounds), layout.hashed_weights):
        if hi > lo:
            block = values[lo:hi]
            block *= weight / math.sqrt(block @ block)
    return index, values


def featurize(request: RequestText, spec: FeatureSpec) -> tuple[np.ndarray, np.ndarray]:
    """Column indices and values of the request's sparse feature row (indices increase by block)."""
    layout = _layout(spec)
    text = primary_text(request)
    outside = unpasted(request.user)  # shared by the ask block and the cues
    apart = spec.system_apart
    cue = cue_text(request, outside, apart)
    ask = cue.lower()  # the cues' and the word vectors' text (str.lower: decoding join's points costs more)
    edge = edge_text(request, outside, apart)
    english = glossary.glosses(ask) if spec.glossary else ""
    if english:  # a non-English ask also reads as the English words it uses (classifier/glossary.py)
        cue, edge = f"{cue}\n{english}", f"{edge}\n{english}"
        ask = f"{ask}\n{english}"
    system = request.system[:EDGE_CHARS] if apart else ""
    joined = hashing.join([text, edge, cue, system, clip_long(request.history)], lower=True)
    words = _Words.of(joined)

    lo, hi = joined.chars(_PRIMARY)
    chars = joined.points[lo:hi]
    if chars.size > 2 * CHAR_CLIP:  # char n-grams read the head and the tail only
        chars = np.concatenate((chars[:CHAR_CLIP], chars[-CHAR_CLIP:]))
    hashed_index, hashed_values = _hashed_blocks(
        chars,
        [
            [words.unigrams[_PRIMARY], words.bigrams[_PRIMARY]],
            [words.unigrams[_EDGE], words.bigrams[_EDGE], words.unigrams[_SYSTEM], words.bigrams[_SYSTEM]],
            [words.unigrams[_HISTORY]],
        ],
        layout,
    )
    raw = structural_raw(text, words.unigrams[_PRIMARY])
    scaled = raw if layout.struct_mean is None else (raw - layout.struct_mean) / layout.struct_scale * spec.struct_weight

    lo, hi = joined.chars(_ASK)
    first_word, last_word = joined.words(_ASK)
    hit = cues.TABLE.mask(ask, joined.points[lo:hi], joined.starts[first_word:last_word] - lo,
                          words.unigrams[_ASK], words.bigrams[_ASK])  # fmt: skip
    cue_index = [layout.cue_start + bit for bit in range(len(cues.CUE_NAMES)) if hit >> bit & 1]
    if layout.lexicon is None:
        vector = np.zeros(0)
    else:
        vector = layout.lexicon.mean_of(words.lexicon) * spec.lexicon_weight
    indices = (hashed_index, layout.struct_index, np.array(cue_index, dtype=np.int64), layout.lexicon_index)
    values = (hashed_values, scaled, np.full(len(cue_index), float(spec.cue_weight)), vector)
    return np.concatenate(indices), np.concatenate(values)
