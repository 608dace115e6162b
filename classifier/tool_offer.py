"""Function calling: a request that offers the model functions to call.

Agents and function-calling clients send `tools` in the request body; clients without native tool
support (and evaluation harnesses) put the catalogue in the prompt — JSON definitions, YAML or
Markdown lists, signatures under "You can use these tools:" — and expect a call back: the reply is
the call's JSON arguments, a structured reply. The linear model reads such requests by their
everyday ask ("Book a table for four") as prose, or by the catalogue's brackets as code, and
templates of them taught it to read colons and schema words as structured elsewhere
(classifier/README.md, fourth pass). So an offer is found here, by the body or the catalogue's
form, and the classifier asks its model about the ask alone (`the_ask`): an ask surely for code
about the tools ("implement this handler") stays code; anything else is structured.
"""

from __future__ import annotations

import re

from contracts.request_text import RequestText

# a JSON function definition: a name, then (within the same object level) its parameter schema
_JSON_DEFINITION = re.compile(
    r'"name"\s*:\s*"[A-Za-z_][\w.\-]*"[^{}]{0,600}?"(?:parameters|input_schema|arguments)"\s*:\s*\{')
# an XML catalogue: <tools> / <functions> holding a <tool name=...> / <function name=...>
_XML_DEFINITION = re.compile(r"<(?:tool|function)\b[^>]{0,80}\bname\s*=", re.IGNORECASE)
# what an offer calls the things it offers (on lower-cased text)
_KINDS = r"(?:functions?|tools?|apis?|actions|operations|endpoints?)"
# a label line ("Tools:", "## Available operations", "| function |", "[tool] f(x)", "TOOLS"): a kind
# word with nothing but decoration (and "available") before it on its line, found by str.find and
# checked here; a multiline regex tried at every line start cost ~35 us per 4k prompt
_LABEL_KINDS = ("function", "tool", "api", "actions", "operations", "endpoint")
_LABEL_TAIL = re.compile(r"s?(?:\s+available(?:\s+to\s+you)?|\s+you\s+(?:can|may)\s+(?:call|use|take))?"
                         r"[ \t]*(?:[:=\]|]|->|\n|$)")
# phrases that offer tools, each found from an anchor literal (str.find) and checked there: what must
# come before the anchor (on the 40 characters before it) and from it on. One alternation of them all
# cost ~0.3 ms per 4k prompt, and patterns that start on an alternation scan every position
_Phrase = tuple[str, "re.Pattern[str] | None", "re.Pattern[str]"]
_KINDS_BEFORE = re.compile(_KINDS + r"\s+$")
_OFFER_PHRASES: tuple[_Phrase, ...] = tuple(
    (anchor, None if before is None else re.compile(before), re.compile(after)) for anchor, before, after in (
        ("available", None, r"available\s+(?:" + _KINDS + r"|to\s+you)"),
        ("access to", r"(?:you\s+have|with)\s+$",
         r"access\s+to\s+(?:the\s+|these\s+|this\s+)?(?:following\s+)?" + _KINDS),
        ("<tools>", None, "<"), ("<functions>", None, "<"),
        *((you, None, you.replace(" ", r"\s+") + r"\s+(?:(?:use|call|invoke)\s*(?::|(?:the\s+following|these|this"
           r"|one\s+of\s+these)\s+" + _KINDS + r")|(?:call|invoke)\s+`?[a-z_][\w.]*\()") for you in ("you can", "you may")),
        *((you, _KINDS_BEFORE.pattern, you.replace(" ", r"\s+") + r"\s+(?:call|use|take)")
          for you in ("you can", "you may")),
        ("called", r"(?:tool|function)\s+$", r"called\b"),
        ("above", _KINDS_BEFORE.pattern, "above"),
        *((verb + " ", None, verb + r"\s+(?:the\s+|a\s+|one\s+of\s+the\s+)?(?:appropriate\s+|right\s+)?"
           r"(?:tool|function)s?\b") for verb in ("use", "call", "invoke")),
        ("given", None, r"given\s+(?:the|these|this|the\s+following)\s+" + _KINDS),
        *((label, None, re.escape(label) + r"\s*`?[a-z_][\w.]*\(")
          for label in ("tools:", "tool:", "functions:", "function:", "apis:", "api:")),
        ("expose", None, r"expose\s+(?:one|an?|these|the\s+following)\s+" + _KINDS + r"?\s*(?:\w+\s+)?to\s+you"),
    ))
# in a system prompt, an instruction to use a listed signature offers it ("Use lookup(flight) to answer")
_SYSTEM_OFFER = re.compile(r"use\s+`?[a-z_][\w.]*\([^()\n]{0,200}\)`?\s+to\b")
# literals one of which every offer holds: a text with none is not lower-cased or searched
_OFFER_WORDS = ("unction", "ool", "api", "API", "Api", "ction", "peration", "ndpoint", "TOOL", "FUNCTION",
                "call", "Call", "CALL", "Use ", "use ")
# what a catalogue lists: a signature, or a snake_case / dotted (/ camelCase) name as a YAML, Markdown
# or table entry ("- name: find_x", "## find_x", "| find_x |", "`find_x`", "find_x:"), or an HTTP endpoint
_SIGNATURE = re.compile(r"\b[A-Za-z_][\w.]*\([^()\n]{0,200}\)")
_ENTRY_HEAD = r"[ \t]*(?:[-*|#]+[ \t]*|\d+[.)][ \t]*)?(?:name:[ \t]*)?`?[a-z][a-z0-9]*(?:[_.][a-z0-9]+"
_ENTRY_TAIL = r")+`?[ \t]*(?:[:|]|--|$)"
_NAMED_ENTRY = re.compile(r"(?:^|\n)" + _ENTRY_HEAD + r"|[A-Z][a-z0-9]+" + _ENTRY_TAIL
                          + r"|\b(?:GET|POST|PUT|PATCH|DELETE)[ \t]+/[\w/{}.-]*", re.MULTILINE)
# a catalogue line: JSON, XML, a table row, a listed signature or named entry, an indented YAML key
_CATALOGUE_LINE = re.compile(r'^\s*(?:[\[\]{}"<|]|[-*|#]?\s*`?[A-Za-z_][\w.]*\([^()\n]{0,200}\))'
                             r"|^" + _ENTRY_HEAD + _ENTRY_TAIL + r"|^[ \t]+[\w-]+:")


def _is_label(low: str, kind: str, at: int) -> bool:
    head = low[low.rfind("\n", 0, at) + 1:at].strip(" \t#*>|[-")
    return head in ("", "available") and _LABEL_TAIL.match(low, at + len(kind)) is not None


# `_label_line` and `_phrase` are the plain form of `_label_or_phrase` (below), which `_offers` runs;
# a test holds the two equal
def _label_line(low: str) -> bool:
    for kind in _LABEL_KINDS:
        at = low.find(kind)
        while at != -1:
            if _is_label(low, kind, at):
                return True
            at = low.find(kind, at + len(kind))
    return False


def _phrase(low: str) -> bool:
    for anchor, before, after in _OFFER_PHRASES:
        at = low.find(anchor)
        while at != -1:
            if (before is None or before.search(low, max(0, at - 40), at)) and after.match(low, at):
                return True
            at = low.find(anchor, at + 1)
    return False


# `_label_line(low) or _phrase(low)` in one pass: the 27 literals they search (~2 us a str.find over a
# 4k prompt, where most are absent) share prefixes, so the text is scanned for 17 literals and each
# hit is checked against the anchors (and label kind) that start with it. No literal overlaps itself,
# so stepping from one hit to the next finds the same positions as the per-anchor loops.
_Scan = tuple[str, bool, tuple[_Phrase, ...]]


def _scan_literal(anchor: str) -> str:
    shared = [kind for kind in ("function", "tool", "api") if anchor.startswith(kind)]
    if shared:
        return shared[0]
    return "you " if anchor.startswith("you ") else "call" if anchor.startswith("call") else anchor


def _scans() -> tuple[_Scan, ...]:
    groups: dict[str, list[_Phrase]] = {kind: [] for kind in _LABEL_KINDS}
    for phrase in _OFFER_PHRASES:
        groups.setdefault(_scan_literal(phrase[0]), []).append(phrase)
    return tuple((literal, literal in _LABEL_KINDS, tuple(phrases)) for literal, phrases in groups.items())


_SCANS = _scans()


def _label_or_phrase(low: str) -> bool:
    """`_label_line(low) or _phrase(low)`, in fewer scans of the text."""
    for literal, label, phrases in _SCANS:
        at = low.find(literal)
        while at != -1:
            if label and _is_label(low, literal, at):
                return True
            for anchor, before, after in phrases:
                if low.startswith(anchor, at) and (before is None or before.search(low, max(0, at - 40), at)) \
                        and after.match(low, at):
                    return True
            at = low.find(literal, at + 1)
    return False


def _offers(text: str, system: bool = False) -> bool:
    if ('"parameters"' in text or '"input_schema"' in text or '"arguments"' in text) \
            and _JSON_DEFINITION.search(text):
        return True
    if "name" in text and ("<tool" in text or "<function" in text) and _XML_DEFINITION.search(text):
        return True
    if not any(word in text for word in _OFFER_WORDS):
        return False
    low = text.lower()
    offered = _label_or_phrase(low) or (
        system and "use " in low and _SYSTEM_OFFER.search(low) is not None)
    return offered and (_SIGNATURE.search(text) is not None or _NAMED_ENTRY.search(text) is not None)


def offers_tools(request: RequestText) -> bool:
    """The request offers the model functions to call: in its body (`tools`, unless tool_choice is
    "none"), or listed in its system prompt or last user message."""
    return bool(request.tools) or _offers(request.system, system=True) or _offers(request.user)


def the_ask(request: RequestText) -> RequestText:
    """What the request asks, without the tools it offers: its last user message with the catalogue's
    lines (JSON, XML, listed signatures and names) and inline signatures taken out, or the system
    prompt so stripped where the user message holds nothing else. The classifier reads it to keep an
    ask for code about the tools ("implement this handler") code."""
    def strip(text: str) -> str:
        kept = "\n".join(line for line in text.splitlines() if not _CATALOGUE_LINE.match(line))
        return _SIGNATURE.sub("", kept).strip()

    # read as the ask's text either way (a model that reads the system prompt apart would not read it
    # as the ask)
    user = strip(request.user) or strip(request.system)
    return RequestText(user=user, history=request.history)
