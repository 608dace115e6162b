"""A follow-up that only asks to go on with, or change, the previous reply is answered in its kind.

Chat UIs and agents resend the conversation, and many turns are short: "Continue", "Make it
shorter", "Add Porto and Faro", "Sort it by the count too". Their words say nothing of the reply's
kind (the model read "Continue" after a Python function as prose at 0.97, "Add TLS settings" after a
YAML file as code), but the reply before them does: it is what they extend. So when the last user
message is a short request to continue or to edit what came before — and names no kind of its own
(a format, a question about it, a new thing to write) — the class is the previous reply's, read from
its form: a fenced JSON / YAML / CSV / XML / SQL block, a Markdown table or a JSON value is
structured, any other fenced block code, anything else prose.
"""

from __future__ import annotations

import json
import re

from contracts.request_text import RequestText

MAX_WORDS = 16
_WORD = re.compile(r"[a-z][a-z'+#-]*")
# words that carry no request: dropped before the first word is read
_FILLER = frozenset("ok okay so and now then please pls thanks thank you great nice cool good hmm alright right yes "
                    "yeah sure can could would will you u just".split())
# a request to go on: every word is one of these (after the filler)
_GO_ON = frozenset("continue go on more keep going carry next finish it ahead proceed another one again resume rest "
                   "the same".split())
# an edit of what came before, by its first word
_EDITS = frozenset("make add use change remove drop delete rename include shorten extend expand improve simplify "
                   "optimize optimise sort order filter update replace refactor fix handle support do try limit only "
                   "keep split merge move return put switch swap also it instead reduce increase lengthen cut "
                   "tighten reword rephrase rewrite redo revise edit polish tweak adjust".split())
# the ask names its own kind or asks something new: the model decides
_OWN_KIND = frozenset("json yaml yml csv tsv xml toml sql table tables markdown html explain why what how when where "
                      "who which is are does did describe summarize summarise compare write create implement generate "
                      "build draft compose translate convert essay poem story letter script function class program "
                      "code test tests".split())
_STRUCTURED_FENCES = frozenset("json jsonl json5 yaml yml csv tsv xml toml ini sql graphql".split())
_PLAIN_FENCES = frozenset("text txt markdown md plain plaintext".split())
_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+#.-]*)", re.MULTILINE)
_TABLE_RULE = re.compile(r"^[ \t]*\|?[ \t]*:?-{3,}:?[ \t]*\|", re.MULTILINE)


def follow_up(request: RequestText) -> str | None:
    """The previous reply's class when the last user message only asks to continue or change it."""
    if not request.last_reply.strip() or not _goes_on_or_edits(request.user):
        return None
    return reply_kind(request.last_reply)


def _goes_on_or_edits(ask: str) -> bool:
    if len(ask) > 200 or "\n" in ask.strip() or "`" in ask:
        return False
    words = [w for w in _WORD.findall(ask.lower()) if w not in _FILLER]
    if not words or len(words) > MAX_WORDS or _OWN_KIND.intersection(words):
        return False
    return all(w in _GO_ON for w in words) or words[0] in _EDITS


def reply_kind(reply: str) -> str:
    """code / prose / structured, read from the form of an assistant message."""
    fences = _FENCE.findall(reply)[::2]   # opening fences (each block opens and closes)
    langs = {lang.lower() for lang in fences}
    if langs & _STRUCTURED_FENCES or _TABLE_RULE.search(reply):
        return "structured"
    if langs - _PLAIN_FENCES:   # a fenced block in a programming language, or in none
        return "code"
    stripped = reply.strip()
    if stripped[:1] in ("{", "["):
        try:
            json.loads(stripped)
            return "structured"
        except ValueError:
            pass
    return "prose"
