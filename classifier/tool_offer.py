"""Prompt-side function calling: a request whose text offers the model functions to call.

Clients without native tool support (and evaluation harnesses) put the tool catalogue in the prompt
— OpenAI-style JSON definitions, or signatures under "You can use these tools:" — and expect a call
back: the reply is the call's JSON arguments, a structured reply. The linear model reads such
requests by their everyday ask ("Book a table for four") as prose, or by the catalogue's brackets as
code, and templates of them taught it to read colons and schema words as structured elsewhere
(classifier/README.md, fourth pass). So a catalogue is found here by its form, and the classifier
asks its model about the rest of the request: an ask for code about the tools ("implement this
handler") stays code; anything else is structured.
"""

from __future__ import annotations

import re
from dataclasses import replace

from contracts.request_text import RequestText

# a JSON function definition: a name, then (within the same object level) its parameter schema
_JSON_DEFINITION = re.compile(
    r'"name"\s*:\s*"[A-Za-z_][\w.\-]*"[^{}]{0,600}?"(?:parameters|input_schema)"\s*:\s*\{')
# words that offer tools to the model (on lower-cased text), and a signature such an offer lists; no
# alternative starts with \b: with it the search cost ~0.4 ms per 4k prompt, starting on letters ~0.03 ms
_OFFER_LABEL = re.compile(r"^[ \t#*>-]*(?:available\s+)?(?:functions?|tools?|apis?)(?:\s+available)?\s*[:=]",
                          re.MULTILINE)   # a "Tools:" label line
_OFFER_PHRASE = re.compile(
    r"available\s+(?:functions|tools)\b|you\s+have\s+access\s+to\b|<tools>"
    r"|you\s+(?:can|may)\s+(?:use|call)\s+(?:the\s+following|these|this|one\s+of\s+these)\s+(?:functions?|tools?)\b"
    r"|call\s+(?:the|a|one\s+of\s+the)\s+(?:appropriate\s+|right\s+)?(?:function|tool)s?\b")
_OFFER_WORDS = ("unction", "ool", "api", "API", "Api")   # a cheap test before lower-casing 4k characters
# literals one of which every label line / phrase holds: the regexes run only where one is found
_LABEL_WORDS = ("tools:", "tool:", "functions:", "function:", "apis:", "api:", "available:", "tools =",
                "tools=", "functions =", "functions=", "tools :", "functions :")
_PHRASE_WORDS = ("available", "access to", "<tools>", "you can", "you may", "call ")
_SIGNATURE = re.compile(r"\b[A-Za-z_][\w.]*\([^()\n]{0,200}\)")
# a catalogue line: JSON, or a listed signature ("- send(to: str) -> dict: ...", "| find(a, b) |")
_CATALOGUE_LINE = re.compile(r'^\s*(?:[\[\]{}"]|[-*|]?\s*`?[A-Za-z_][\w.]*\([^()\n]{0,200}\))')


def _offers(text: str) -> bool:
    if ('"parameters"' in text or '"input_schema"' in text) and _JSON_DEFINITION.search(text):
        return True
    if not any(word in text for word in _OFFER_WORDS):
        return False
    low = text.lower()
    offered = (any(word in low for word in _LABEL_WORDS) and _OFFER_LABEL.search(low) is not None) or (
        any(word in low for word in _PHRASE_WORDS) and _OFFER_PHRASE.search(low) is not None)
    return offered and _SIGNATURE.search(text) is not None


def offers_tools(request: RequestText) -> bool:
    """The system prompt or the last user message lists functions for the model to call."""
    return _offers(request.system) or _offers(request.user)


def without_catalogue(request: RequestText) -> RequestText:
    """The request with its catalogue lines (JSON, listed signatures) taken out: the ask around them."""
    def strip(text: str) -> str:
        return "\n".join(line for line in text.splitlines() if not _CATALOGUE_LINE.match(line))

    return replace(request, system=strip(request.system), user=strip(request.user))
