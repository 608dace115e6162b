"""Feature vector of one request: hashed n-gram blocks plus a few structural statistics.

Column layout (one sparse row):
  [char n-grams of system+user | words+bigrams of system+user | words of the ask (system prompt +
   running-text lines of the user message, see ask_text) |
   words of earlier history (weighted down) | structural features (standardised) | reply cues |
   the ask's mean word vector (lexicon.py)]
Training (featurizer.py) and inference (model.py) both call `featurize`, so the persisted model
reproduces the fitted pipeline exactly.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from classifier import cues, hashing, lexicon
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
        """This spec bound to the shipped lexicon (what fitting does when the block is wanted)."""
        if self.lexicon_weight <= 0 or self.lexicon_digest:
            return self
        shipped = lexicon.load()
        return replace(self, lexicon_digest=shipped.digest, lexicon_dim=shipped.dim)

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
        return cls(**data)


def clip_long(text: str) -> str:
    if len(text) <= HEAD_CHARS + TAIL_CHARS:
        return text
    return text[:HEAD_CHARS] + "\n" + text[-TAIL_CHARS:]


def primary_text(request: RequestText) -> str:
    return clip_long(f"{request.system}\n{request.user}" if request.system else request.user)


# Fenced or triple-quoted blocks are pasted material, never the ask.
_PASTED_BLOCK = re.compile(r"```.*?(?:```|$)|\"\"\".*?(?:\"\"\"|$)", re.S)
ASK_SCAN_LINES = 8


def _looks_like_ask(line: str) -> bool:
    """A line of running text: not indented, not too long, mostly letters and spaces."""
    stripped = line.strip()
    if not stripped or len(stripped) > 400 or line[:1] in (" ", "\t"):
        return False
    letters = sum(map(str.isalpha, stripped)) + stripped.count(" ")
    return letters >= 0.8 * len(stripped)


def unpasted(user: str) -> str:
    """The user message (head and tail when long) with fenced / triple-quoted blocks cut out."""
    return _PASTED_BLOCK.sub("\n", clip_long(user))


def ask_text(user: str, outside: str | None = None) -> str:
    """The request's own words: running-text lines among the first and last few lines of the
    user message, outside pasted blocks. Pasted code or data would otherwise drown a short ask.
    `outside`: `unpasted(user)` when the caller has it already."""
    lines = (unpasted(user) if outside is None else outside).split("\n")
    if len(lines) > 2 * ASK_SCAN_LINES:
        lines = lines[:ASK_SCAN_LINES] + lines[-ASK_SCAN_LINES:]
    ask = "\n".join(line for line in lines if _looks_like_ask(line))
    if len(ask) > 2 * EDGE_CHARS:
        ask = ask[:EDGE_CHARS] + "\n" + ask[-EDGE_CHARS:]
    return ask


def edge_text(request: RequestText, outside: str | None = None) -> str:
    return f"{request.system[:EDGE_CHARS]}\n{ask_text(request.user, outside)}"


def _counted_block(hashes: np.ndarray, bits: int, offset: int, weight: float) -> tuple[np.ndarray, np.ndarray]:
    """Sublinear (log1p) counts of hashed tokens, L2-normalised, scaled by the block weight."""
    if hashes.size == 0:
        return np.empty(0, dtype=np.int64), np.empty(0)
    buckets = hashing.bucket(hashes, bits)
    counts = np.bincount(buckets, minlength=1 << bits)
    index = np.flatnonzero(counts > 0)
    values = np.log1p(counts[index].astype(np.float64))
    values *= weight / np.sqrt(values @ values)
    return index + offset, values


def _unigrams(text: str) -> np.ndarray:
    points = hashing.codepoints(text.lower())
    starts, ends = hashing.word_spans(points)
    return hashing.word_unigrams(hashing.prefix_hash(points), starts, ends, _WORD_SALT)


def _words(text: str, salt: int, bigrams: bool) -> np.ndarray:
    points = hashing.codepoints(text.lower())
    prefix = hashing.prefix_hash(points)
    starts, ends = hashing.word_spans(points)
    return hashing.word_hashes(prefix, starts, ends, salt, bigrams)


STRUCT_NAMES: tuple[str, ...] = (
    "log_chars", "log_lines", "fences", "alpha", "upper", "non_ascii",
    "curly_square", "parens", "semicolon", "colon", "comma", "equals", "angle", "quote", "pipe", "hash",
    "digit", "space", "newline",
    "indented_lines", "json_keys", "yaml_keys", "list_items", "csv_lines", "xml_tags", "sql_words", "code_words",
)  # fmt: skip

_SQL_WORDS = ("select", "from", "where", "insert", "into", "create", "table", "join", "group", "update")
_CODE_WORDS = ("def", "return", "import", "include", "function", "const", "class", "public", "fn", "var", "let")
_WORD_SALT = 1


def _keyword_hashes(words: tuple[str, ...]) -> np.ndarray:
    """Hashes of keywords as the word block hashes them, so keyword hits are an isin, not str.count."""
    hashes = []
    for word in words:
        points = hashing.codepoints(word)
        hashes.append(hashing.word_unigrams(hashing.prefix_hash(points), np.array([0]), np.array([len(word)]), _WORD_SALT)[0])
    return np.array(hashes, dtype=np.uint64)


_SQL_HASHES = _keyword_hashes(_SQL_WORDS)
_CODE_HASHES = _keyword_hashes(_CODE_WORDS)


# Character groups whose share of the text is a feature, as a (groups x 128) indicator matrix.
_CHAR_GROUPS = ("{}[]", "()", ";", ":", ",", "=", "<>", "\"'", "|", "#", "0123456789", " \t", "\n")
_GROUP_MATRIX = np.zeros((len(_CHAR_GROUPS), 128))
for _row, _chars in enumerate(_CHAR_GROUPS):
    _GROUP_MATRIX[_row, [ord(ch) for ch in _chars]] = 1.0


def structural_raw(text: str, words: np.ndarray | None = None) -> np.ndarray:
    """Unscaled structural statistics of the primary text (ratios are per character or per line).

    `words`: the text's lower-cased word hashes (computed here when not given).
    Only C-speed primitives (str.count, numpy) here: this runs on every request.
    """
    if words is None:
        words = _unigrams(text)
    points = hashing.codepoints(text)
    n = max(points.size, 1)
    ascii_hist = np.bincount(points[points < 128].astype(np.int64), minlength=128).astype(np.float64)
    shares = _GROUP_MATRIX @ ascii_hist / n
    newline = points == 10
    n_lines = int(ascii_hist[10]) + 1
    commas_per_line = np.bincount(np.cumsum(newline)[points == 44], minlength=n_lines)
    csv_lines = int(np.count_nonzero(commas_per_line >= 2))
    upper = ascii_hist[65:91].sum()
    alpha = upper + ascii_hist[97:123].sum()
    nl_text = "\n" + text
    indented = nl_text.count("\n    ") + nl_text.count("\n\t")
    list_items = nl_text.count("\n- ") + nl_text.count("\n* ") + nl_text.count("\n  - ")
    yaml_keys = text.count(":\n") + text.count(": ")
    per_line = np.array(
        [
            indented,
            min(text.count('":'), 50),
            yaml_keys,
            list_items,
            csv_lines,
            min(text.count("</") + text.count("/>"), 50),
            np.count_nonzero(words[:, None] == _SQL_HASHES),  # broadcast compare: cheaper than isin here
            np.count_nonzero(words[:, None] == _CODE_HASHES) + text.count("=>"),
        ]
    ) / n_lines
    head = np.array(
        [
            np.log1p(len(text)),
            np.log1p(n_lines),
            min(text.count("```"), 8),
            alpha / n,
            upper / max(alpha, 1.0),
            (n - ascii_hist.sum()) / n,
        ]
    )
    return np.concatenate((head, shares, per_line))


# Cues (classifier/cues.py): what the *reply* must be, phrased the way people ask it in any style
# (a judge template, a forum question, an essay assignment). Matched on the ask text only (system
# prompt + running text of the user message), so pasted code or data does not fire them. Binary.
CUE_HEAD, CUE_TAIL = 1000, 500


def cue_text(request: RequestText, outside: str | None = None) -> str:
    """System prompt + the user message outside fenced blocks, head and tail (where asks sit)."""
    user = unpasted(request.user) if outside is None else outside
    if len(user) > CUE_HEAD + CUE_TAIL:
        user = user[:CUE_HEAD] + "\n" + user[-CUE_TAIL:]
    return f"{request.system[:EDGE_CHARS]}\n{user}".strip()


def cue_values(request: RequestText, outside: str | None = None) -> np.ndarray:
    return cues.TABLE.values(cue_text(request, outside).lower())


def lexicon_values(request: RequestText, spec: FeatureSpec, ask: str | None = None,
                   tokens: hashing.Tokens | None = None) -> np.ndarray:  # fmt: skip
    """The ask's mean word vector (empty when the spec has no lexicon block). `ask`: lower-cased cue_text."""
    if not spec.lexicon_dim:
        return np.zeros(0)
    ask = cue_text(request).lower() if ask is None else ask
    return lexicon.for_digest(spec.lexicon_digest).mean_vector(ask, tokens) * spec.lexicon_weight


def featurize(request: RequestText, spec: FeatureSpec) -> tuple[np.ndarray, np.ndarray]:
    """Column indices and values of the request's sparse feature row (indices increase by block)."""
    char_off, word_off, edge_off, hist_off, struct_off = spec.offsets
    text = primary_text(request)
    outside = unpasted(request.user)  # shared by the ask block and the cues
    points = hashing.codepoints(text.lower())
    prefix = hashing.prefix_hash(points)
    starts, ends = hashing.word_spans(points)
    if points.size > 2 * CHAR_CLIP:
        points = np.concatenate((points[:CHAR_CLIP], points[-CHAR_CLIP:]))
        prefix_chars = hashing.prefix_hash(points)
    else:
        prefix_chars = prefix
    char_hashes = np.concatenate(
        [hashing.char_ngram_hashes(prefix_chars, n, salt=n * 7919) for n in spec.char_ngrams]
    )
    unigrams = hashing.word_unigrams(prefix, starts, ends, _WORD_SALT)
    blocks = [
        _counted_block(char_hashes, spec.char_bits, char_off, spec.char_weight),
        _counted_block(hashing.with_bigrams(unigrams), spec.word_bits, word_off, spec.word_weight),
        _counted_block(_words(edge_text(request, outside), 2, True), spec.edge_bits, edge_off, spec.edge_weight),
        _counted_block(
            _words(clip_long(request.history), 3, False), spec.history_bits, hist_off, spec.history_weight
        ),
    ]
    raw = structural_raw(text, unigrams)
    if spec.struct_mean:
        scaled = (raw - np.asarray(spec.struct_mean)) / np.asarray(spec.struct_scale) * spec.struct_weight
    else:  # not fitted yet: the featurizer fits the scaler on these raw values
        scaled = raw
    blocks.append((np.arange(len(STRUCT_NAMES)) + struct_off, scaled))
    ask = cue_text(request, outside).lower()
    ask_tokens = hashing.tokens(ask)  # shared by the cues and the word vectors
    cue_hits = cues.TABLE.values(ask, ask_tokens)
    cue_off = struct_off + len(STRUCT_NAMES)
    blocks.append((np.flatnonzero(cue_hits) + cue_off, cue_hits[cue_hits > 0] * spec.cue_weight))
    if spec.lexicon_dim:
        blocks.append((np.arange(spec.lexicon_dim) + cue_off + len(cues.CUE_NAMES), lexicon_values(request, spec, ask, ask_tokens)))
    return np.concatenate([b[0] for b in blocks]), np.concatenate([b[1] for b in blocks])
