"""Reply cues: binary features saying what the *reply* must be, matched on words, not regexes.

A cue fires when the ask (system prompt + the user message outside pasted blocks, see
`features.cue_text`) contains one of its terms. Terms are words or two-word phrases, looked up
by the same polynomial word hashes the n-gram blocks use, so all cues of a prompt cost one
hashing pass and one sorted-array lookup (about 0.05 ms on a 4k-character prompt, where the
19 regexes this replaces took 0.3-0.5 ms). Kinds of cue:

* word cue — any of its terms occurs;
* near cue — a term of its `left` list is followed within `window` words by one of `right`
  ("write ... a Python function", "at least 300 words");
* line-start cue — a term opens a line of the ask ("What ...", "How ...");
* symbol cue — a substring or a short character-class regex (`=>`, `3 + 4`, `?` at a line end);
  also how Chinese, Japanese and Korean asks say "code", "essay", "table" (no spaces to split words on).

Every term is lower case; phrases are two words (the word block's bigram hash).
The cue list is part of the feature map: changing it needs a retrain.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from classifier import hashing

SALT = 5  # cue words are hashed apart from the word blocks (their hashes never meet)

_LANGS = ("python javascript typescript java c++ c# golang go rust ruby perl php swift kotlin bash shell powershell "
          "verilog vhdl haskell scala lua matlab julia react node node.js django pandas numpy sql-alchemy r cpp "
          "css html jquery flask numpy tensorflow pytorch spark excel-vba vba assembly fortran cobol dart elixir")  # fmt: skip
# "write" in the other languages of the template set (a request in Spanish still says "script")
_WRITE_VERBS = "escribe escribir écris écrivez schreibe schreib scrivi escreva escreve schrijf напиши напишите napisz"
_NUMBER_WORDS = "one two three four five six seven eight nine ten twelve fifteen twenty thirty fifty hundred"


@dataclass(frozen=True)
class Cue:
    name: str
    words: str = ""  # word cue terms, space-separated; a phrase joins its two words with "_"
    left: str = ""  # near cue: left terms ...
    right: str = ""  # ... followed within `window` words by a right term
    window: int = 0
    line_start: str = ""  # line-start cue terms
    symbols: tuple[str, ...] = ()  # substrings
    pattern: str = ""  # a short regex (character classes only: no word alternations)
    requires: tuple[str, ...] = ()  # conjunction cue: fires when all these (earlier) cues fire


CUES: tuple[Cue, ...] = (
    Cue("code_make",
        left="write create implement build generate make give_me design code develop fix refactor complete optimize "
             "convert translate port need want " + _WRITE_VERBS,
        right="function functions program programs script scripts class classes method methods module code snippet "
              "algorithm regex regular_expression circuit app component endpoint unit_test unit_tests test_cases "
              "loop implementation api cli decorator sort sorting parser trie linked_list "
              "binary_search hash_table stack queue tree heap iterator generator",
        window=8, symbols=("代码", "函数", "脚本", "程序", "コード", "関数", "스크립트", "코드", "함수")),
    # a unit of code specified by what it takes and gives ("This module takes ... and outputs ...")
    Cue("code_spec", left="module function class program method circuit subroutine procedure routine script block "
                           "component entity",
        right="takes take accepts receives returns return outputs implements computes should must assigns has "
              "produces generates drives selects",
        window=3),
    Cue("code_lang", left="in using with into to", right=_LANGS, window=1),
    Cue("code_lang_any", words=_LANGS),
    Cue("code_tokens", words="def printf println lambda struct async await stdin stdout argv console.log",
        symbols=("()", "=>", "::", "!=", "==", "->")),
    Cue("code_fix", words="bug bugs error errors exception traceback compile compiles compiled debug refactor "
                          "segfault stack_trace crash crashes"),
    Cue("hardware", words="module input_port output_port input inputs output outputs wire clk clock reset flip-flop "
                          "flipflop flip_flop flip_flops bit bits vector signal active_high active_low posedge testbench "
                          "multiplexer mux decoder encoder fsm"),
    Cue("fmt_name", words="json yaml yml csv tsv xml toml sql jsonl ini create_table"),
    Cue("fmt_config", words="config configuration kubernetes k8s ingress manifest docker-compose docker_compose helm "
                            "nginx systemd crontab dotenv"),
    Cue("fmt_demand",
        left="return output respond reply format formatted give provide generate produce emit as in into",
        right="json yaml csv xml table key-value key_value dictionary schema", window=6),
    Cue("fmt_keys", words="key keys field fields column columns row rows schema array object attribute attributes"),
    Cue("fmt_table", words="table tables spreadsheet tabular markdown_table", symbols=("表格", "表を", "표로")),
    Cue("prose_make",
        left="write compose draft create give_me generate tell craft need want " + _WRITE_VERBS,
        right="essay essays story stories poem poems letter email article blog post tweet speech review summary "
              "paragraph paragraphs song lyrics haiku limerick report outline proposal description dialogue joke "
              "slogan bio biography toast message caption novel chapter scene script narrative monologue sonnet "
              "ad advertisement pitch cover_letter rap riddle fable",
        window=8, symbols=("撰写", "写一篇", "写一份", "写一封", "文案", "作文", "文章", "作文を", "文章を", "글을")),
    Cue("prose_explain", words="explain describe summarize summarise discuss compare elaborate analyze analyse "
                               "evaluate justify reason opinion advice recommend suggest tell_me what_do you_think "
                               "why persuade argue reflect"),
    Cue("prose_wh", line_start="what why who whom whose when where which is are do does did can could should would "
                               "will have has how"),
    Cue("prose_count", left=f"{_NUMBER_WORDS} <num>",
        right="word words sentence sentences paragraph paragraphs character characters bullet bullets line lines "
              "section sections stanza stanzas",
        window=2),
    Cue("prose_constraint", words="keyword keywords sentence sentences word_count unique_words "
                                  "stop_words tone audience first_person third_person capital_letters all_lowercase "
                                  "all_capital highlighted placeholders postscript p.s bullet_points quotation "
                                  "wrap_your end_your your_response"),
    # not "you are": system prompts of every class open with it ("You are a coding assistant")
    Cue("roleplay", words="pretend act_as role-play roleplay role_play imagine style_of character "
                          "persona as_if in_character"),
    Cue("math", words="how_many how_much calculate solve compute sum product probability integer integers equation "
                      "equations percent percentage average ratio remainder digit digits area perimeter total cost "
                      "costs price prime divisible fraction",
        pattern=r"\d\s*[-+*/^=<>×÷]\s*\d"),
    Cue("code_domain", words="variable variables array arrays string strings dict dictionary hash hashes file files "
                             "filename directory directories regex loop loops function functions method methods "
                             "class classes object objects module modules library libraries package packages "
                             "compile compiler interpreter syntax integer float boolean byte bytes socket sockets "
                             "thread threads process processes stdin stdout stderr database api parse parser "
                             "exception iterate iterator recursion pointer pointers scalar scalars subroutine "
                             "script scripts program programs command commands shell terminal unix http url "
                             "cgi sql server"),
    Cue("howto", words="how_do how_can how_to how_would how_should how_does"),
    Cue("code_howto", requires=("howto", "code_domain")),
    Cue("question_mark", pattern=r"\?\s*(?:\n|$)"),
    Cue("options", words="options option choices choice", pattern=r"(?:^|\n)\s*\(?[a-e1-5][).]\s+\S"),
    # data the user holds, named but not pasted ("the data", "my spreadsheet", "the column"): only
    # code that reads it can answer
    Cue("data_held", words="the_data my_data our_data the_dataset my_dataset our_dataset the_dataframe my_dataframe "
                           "dataframe dataframes data_frame data_table the_column the_columns each_column "
                           "the_spreadsheet my_spreadsheet our_spreadsheet the_records time_series the_measurements "
                           "my_table our_table the_table this_table the_file my_file the_sheet"),
    # a chart of data (a plotting library's job), not a story's plot
    Cue("chart", left="make create draw generate produce show give_me want need plot",
        right="plot plots chart charts graph graphs histogram histograms figure scatterplot boxplot heatmap",
        window=4, words="visualize visualise visually visualization visualisation scatter_plot bar_chart line_chart "
                        "pie_chart bar_plot line_plot box_plot histogram"),
    # an aggregate per group ("the mean fare for each class", "total rainfall per month")
    Cue("group_agg", left="mean average median maximum minimum max min sum total number count share percentage "
                          "proportion distribution",
        right="each per", window=6),
    # wh-questions apart from how and yes/no openings (prose_wh lumps them)
    Cue("wh_open", line_start="what why who whom whose when where which"),
    # the tools and the practice of programming rather than a program's data ("install", "the docs",
    # "a debugger", "profile", "an IDE"): how-to questions about these are answered with advice
    Cue("tooling", words="install installed installing installation documentation docs tutorial tutorials "
                         "debugger debugging profiler profiling profile ide editor editors learn learning "
                         "beginner beginners release releases binary binaries executable executables standalone "
                         "stand-alone distribute distribution toolchain book books course courses support"),
    # an operation on a program's data structure ("select the rows of a DataFrame", "sort the column",
    # "merge two dicts", "convert the array"): the verb alone is everyday English (sort the laundry,
    # merge two teams), the object makes the reply code
    Cue("data_op", left="select filter sort merge join group convert drop extract rename combine reshape pivot "
                        "split replace remove delete append insert iterate slice index subset aggregate "
                        "transform reverse flatten concatenate concat count plot parse load read save store write",
        right="dataframe dataframes data_frame series array arrays ndarray tensor tensors matrix column columns "
              "row rows index dict dicts dictionary dictionaries hash hashes list lists tuple tuples set sets "
              "string strings substring regex file files filehandle dataset datasets dataarray frame tibble "
              "field fields key keys elements element items object objects variable variables",
        window=6),
)  # fmt: skip
CUE_NAMES: tuple[str, ...] = tuple(cue.name for cue in CUES)
assert len(CUES) <= 32  # one bit per cue in a uint32 mask

NUM = "<num>"  # stands for any word that starts with a digit


def _term_hash(term: str) -> int:
    parts = term.split("_")
    hashes = []
    for part in parts:
        points = hashing.codepoints(part)
        prefix = hashing.prefix_hash(points)
        starts, ends = hashing.word_spans(points)
        if len(starts) != 1:  # "c++", "node.js": several word runs; hashed as the tokenizer splits them
            return -1
        hashes.append(hashing.word_unigrams(prefix, starts, ends, SALT)[0])
    if len(hashes) == 1:
        return int(hashes[0])
    if len(hashes) == 2:
        return int(hashing.with_bigrams(np.array(hashes, dtype=np.uint64))[2])
    raise ValueError(f"cue term {term!r}: one or two words")


def _terms(text: str, single_letters: bool = False) -> list[str]:
    """Split a cue list; terms the word tokenizer would cut in several runs are kept by their parts
    ("node.js" -> the phrase "node js"; "c++" -> "c", kept only where `single_letters`, i.e. after
    "in"/"using": a lone "c" is an option letter more often than a language)."""
    out = []
    for term in text.split():
        if term == NUM:
            continue
        runs = re.findall(r"[a-z0-9\u0080-\uffff]+", term.replace("_", " "))
        if len(runs) == 1:
            if len(runs[0]) > 1 or single_letters:
                out.append(runs[0])
        elif len(runs) == 2:
            out.append("_".join(runs))
        else:
            raise ValueError(f"cue term {term!r}: one or two words")
    return out


_LINE_START = "(?:^|\\n)"


def _searcher(pattern: str) -> tuple[re.Pattern, str]:
    """The compiled pattern and a prefix to search it behind. A pattern that opens with (?:^|\\n)
    is searched as \\n... in "\\n" + text: the same matches, but with a literal first character
    `re` jumps from newline to newline instead of trying the pattern at every position (5x faster)."""
    if pattern.startswith(_LINE_START):
        return re.compile("\\n" + pattern[len(_LINE_START) :]), "\n"
    return re.compile(pattern), ""


def _alternation(symbols: tuple[str, ...]) -> re.Pattern | None:
    """One regex for "any of these substrings": one scan of the ask instead of one per symbol
    (code_tokens' six symbols: 6.8 -> 3.8 us on a 1,500-character ask). None for no symbols."""
    return re.compile("|".join(map(re.escape, symbols))) if symbols else None


def _or(masks: np.ndarray) -> int:
    return int(np.bitwise_or.reduce(masks, axis=None, initial=0))


class CueTable:
    """Sorted term hashes with, per hash, bit masks of the cues (and sides) that use it."""

    def __init__(self, cues: tuple[Cue, ...] = CUES):
        self.cues = cues
        table: dict[int, list[int]] = {}  # hash -> [word mask, left mask, right mask, line mask]
        for bit, cue in enumerate(cues):
            for slot, field in enumerate((cue.words, cue.left, cue.right, cue.line_start)):
                for term in _terms(field, single_letters=slot == 2):
                    key = _term_hash(term)
                    table.setdefault(key, [0, 0, 0, 0])[slot] |= 1 << bit
        keys = np.array(sorted(table), dtype=np.uint64)
        self.keys = keys
        self.index = hashing.KeyIndex(keys, bits=15)  # ~500 keys: 1 in 70 shares a slot
        self.masks = np.array([table[int(k)] for k in keys], dtype=np.int64).reshape(-1, 4)
        self.num_left = np.int64(sum(1 << bit for bit, cue in enumerate(cues) if NUM in cue.left.split()))
        # within[g]: the near cues whose window allows a right term g words after a left one
        self.max_window = max((cue.window for cue in cues), default=0)
        self.within = np.array(
            [sum(1 << bit for bit, cue in enumerate(cues) if 0 < g <= cue.window) for g in range(self.max_window + 2)],
            dtype=np.int64,
        )
        # (bit, any of its symbols, any of the ASCII ones: all an ASCII ask can contain)
        self.symbols = [(bit, _alternation(cue.symbols), _alternation(tuple(s for s in cue.symbols if s.isascii())))
                        for bit, cue in enumerate(cues) if cue.symbols]  # fmt: skip
        self.patterns = [(bit, *_searcher(cue.pattern)) for bit, cue in enumerate(cues) if cue.pattern]
        names = [cue.name for cue in cues]
        self.conjunctions = [
            (bit, sum(1 << names.index(req) for req in cue.requires)) for bit, cue in enumerate(cues) if cue.requires
        ]

    def values(self, ask: str, tokens: hashing.Tokens | None = None) -> np.ndarray:
        """0/1 per cue for a lower-cased ask text (`tokens`: `hashing.tokens(ask)` when the caller has them)."""
        points, prefix, starts, ends = tokens or hashing.tokens(ask)
        words = hashing.word_unigrams(prefix, starts, ends, SALT)
        hit = self.mask(ask, points, starts, words, hashing.pair_hashes(words))
        return np.array([(hit >> bit) & 1 for bit in range(len(self.cues))], dtype=np.float64)

    def mask(self, ask: str, points: np.ndarray, starts: np.ndarray, words: np.ndarray, pairs: np.ndarray) -> int:
        """Bit mask of the cues that fire on a lower-cased ask text.

        points: the ask's code points (unsigned); starts: its word starts in them; words, pairs: the
        SALT-salted word and bigram hashes (`hashing.word_unigrams`, `hashing.pair_hashes`).
        """
        hit = 0
        if words.size:
            hit = self._term_hits(points, starts, np.concatenate((words, pairs)))
        ascii_ask = ask.isascii()
        for bit, symbols, ascii_symbols in self.symbols:
            found = ascii_symbols if ascii_ask else symbols
            if not hit & (1 << bit) and found is not None and found.search(ask):
                hit |= 1 << bit
        for bit, pattern, prefix in self.patterns:
            if not hit & (1 << bit) and pattern.search(prefix + ask if prefix else ask):
                hit |= 1 << bit
        for bit, required in self.conjunctions:
            if hit & required == required:
                hit |= 1 << bit
        return hit

    def _term_hits(self, points: np.ndarray, starts: np.ndarray, grams: np.ndarray) -> int:
        """Word, line-start and near cues: one lookup (`hashing.KeyIndex`) of the ask's words and bigrams."""
        n = starts.size
        found, rows = self.index.find(grams)  # a handful of the prompt's words and bigrams
        masks = self.masks.take(rows, axis=0)
        unigram_rows = int(found.searchsorted(n))  # found increases: words first, then bigrams
        positions = found.copy()
        positions[unigram_rows:] -= n  # a bigram sits at its first word
        hit = _or(masks[:, 0])
        line_rows = masks[:unigram_rows, 3].nonzero()[0]
        if line_rows.size:  # is one of these terms the first word of its line?
            words = found.take(line_rows)
            newlines = (points == 10).nonzero()[0]
            line_of = newlines.searchsorted(starts.take(words))
            before = newlines.searchsorted(starts.take(words - 1))  # (word -1 is only read for word 0)
            hit |= _or(masks[:, 3].take(line_rows[(words == 0) | (line_of != before)]))
        return hit | self._near_hits(points, starts, masks, positions)

    def _near_hits(self, points: np.ndarray, starts: np.ndarray, masks: np.ndarray, positions: np.ndarray) -> int:
        """Near cues: a left term followed within the cue's window by a right term. Only rows with a
        left or a right mask can pair, so the gap matrix is lefts x rights, not terms x terms."""
        right_rows = masks[:, 2].nonzero()[0]
        if not right_rows.size:
            return 0
        left_rows = masks[:, 1].nonzero()[0]
        left_masks, left_positions = masks[:, 1].take(left_rows), positions.take(left_rows)
        if self.num_left:  # "<num>" left terms: any word that starts with a digit
            numbers = (points.take(starts) - 48 < 10).nonzero()[0]  # unsigned: below '0' wraps round
            if numbers.size:
                left_masks = np.concatenate((left_masks, np.full(numbers.size, self.num_left)))
                left_positions = np.concatenate((left_positions, numbers))
        if not left_masks.size:
            return 0
        gaps = positions.take(right_rows) - left_positions[:, None]
        # clip: a gap <= 0 reads within[0], one past the longest window within[-1]; both are 0
        return _or(left_masks[:, None] & masks[:, 2].take(right_rows) & self.within.take(gaps, mode="clip"))


TABLE = CueTable()
