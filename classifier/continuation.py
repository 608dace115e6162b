"""Prompts that are an unfinished program or JSON document: the reply is its continuation.

Editor plugins and completion clients send the text before the cursor (`/v1/completions`, or a chat
message holding nothing but code): a function header and its docstring, a block opened with `{`, a
comment saying what comes next; a fill-in-the-middle prompt (prefix, suffix, middle markers) asks
for the code between. The linear model reads such a prompt by its words, and a docstring
is prose ("def word_lengths(sentence): \"\"\"Map every word of the sentence to its length.\"\"\""
read prose at 0.88). Here the form decides: every line is code, a comment or a docstring, and the
text stops where more code must follow — an open bracket, a line that opens a block, a definition
with no body yet, or only a preamble (imports, a shebang) so far. A JSON value cut off before its end
likewise asks for the rest of it (structured). SQL and config files, structured replies, are left
to the model, as is a complete snippet sent without an ask (it may be sent to be explained)
and anything with a line of running text outside comments.
"""

from __future__ import annotations

import json
import re

from contracts.request_text import RequestText

MAX_LINES = 400          # longer prompts: their first and last 200 lines are read
# four plain words in a row (all-capital words are SQL keywords, not prose)
_PROSE_RUN = re.compile(r"(?:\b[A-Z]*[a-z][A-Za-z']* ){3,}[A-Z]*[a-z][A-Za-z']*")
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|`[^`\n]*`')
_TRAILING_COMMENT = re.compile(r"\s(?:#|//|--)\s.*$")
_CODE_PUNCT = re.compile(r"[(){}\[\];=<>]|::|\\$|^@\w")
# "name: type" and a trailing comma are code inside a block (fields, arguments), labels and
# salutations at the margin ("Input: 3", "Hi Bob,")
_INDENTED_PUNCT = re.compile(r":\s|,$")
_SENTENCE_STOP = re.compile(r"[.?!]\s")
_DIRECTIVE = re.compile(r"#(?:include|define|if|ifdef|ifndef|endif|else|pragma|import|!)")
_KEYWORD = re.compile(
    r"(?:def|class|import|from\s+[\w.]+\s+import|return|if|elif|else|for|while|try|except|finally|with|async|await|yield|raise|"
    r"pass|break|continue|function|const|let|var|fn|pub|func|package|public|private|protected|static|final|"
    r"struct|enum|impl|trait|interface|module|use|typedef|namespace|export|switch|case|local|end|begin|"
    r"sub|my|val|fun|object|override|data|mod|template|defmodule|set)\b")
# SQL is a structured reply (as are config files, which have no keyword or definition here)
_SQL = re.compile(r"(?:CREATE|SELECT|INSERT|UPDATE|DELETE|WITH|ALTER|DROP|BEGIN)\b", re.IGNORECASE)
_HEADER = re.compile(
    r"(?:async\s+)?def\s+\w+|class\s+\w+|(?:export\s+)?(?:async\s+)?function\b|(?:pub(?:\([\w:]+\))?\s+)?"
    r"(?:async\s+)?(?:unsafe\s+)?fn\s+\w+|func\s+|fun\s+\w+|sub\s+\w+|local\s+function\b|\w+\s*::\s|"
    r"(?:(?:public|private|protected|static|final|abstract|override|internal|inline|"
    r"virtual|extern|const|unsigned|struct)\s+)*[\w:<>\*&,\[\]]+[\s\*&]+\**\w+\s*\([^;]*\)\s*(?:const\s*)?\{?$")
_PREAMBLE = re.compile(
    r"import\s+[\w.]+(?:\s+as\s+\w+)?(?:\s*,\s*[\w.]+(?:\s+as\s+\w+)?)*;?$|import\s+[{*\"']|"
    r"from\s+[\w.]+\s+import\s|package\s+[\w.]+;?$|use\s+[\w:{}, *]+;$|use\s+strict|using\s+[\w.]+;$|"
    r"#include|#!|<\?php|set\s+-\w+$|(?:const|let|var)\s+\w+\s*=\s*require\(")
_OPENERS = (":", "{", "(", "[", ",", "=", "\\", "->", "=>", "&&", "||", "+", " do", " then")
# fill-in-the-middle markers of the code models' prompt formats (Qwen / StarCoder, CodeLlama)
_FIM_MARKERS = ("<|fim_middle|>", "<fim_middle>", "<|fim_suffix|>", "<fim_suffix>", " <MID>", "<SUF>")
_COMMENT_STARTS = ("#", "//", "--", "/*", ";;", "<!--")   # "*" lines only inside a /* block


def continuation(request: RequestText, programs: bool = True) -> str | None:
    """"code" or "structured" when the first message of a request is an unfinished program or
    JSON value (its continuation is the reply), else None. `programs=False` checks JSON only (the
    program check reads every line: ~0.1-0.2 ms on 4k characters of code, so the classifier runs it
    only where its model does not already say code)."""
    if request.history or not request.user.strip():
        return None
    text = request.user
    if any(marker in text for marker in _FIM_MARKERS):
        return "code"   # a fill-in-the-middle prompt: an editor asks for the code between prefix and suffix
    if _open_json(text):
        return "structured"
    return "code" if programs and _open_program(text) else None


def _is_code(line: str, indented: bool) -> bool:
    """A line of a program: code punctuation or a leading keyword, and no run of plain words (code
    that reads like English, `if x is not None and y:`, passes when a keyword opens a block)."""
    keyword = _KEYWORD.match(line)
    if not (keyword or _CODE_PUNCT.search(line) or (indented and _INDENTED_PUNCT.search(line))):
        return False
    # a keyword-led declaration ("public static class TextTools") or block opener, not a sentence
    declares = (keyword is not None and not _SENTENCE_STOP.search(line)
                and (line.endswith((":", "{")) and line.count(" ") < 12 or len(line) <= 80))
    return line.count(" ") < 3 or not _PROSE_RUN.search(line) or declares or bool(_PREAMBLE.match(line))


def _open_json(text: str) -> bool:
    stripped = text.strip()
    if stripped[:1] not in ("{", "[") or len(stripped) < 8:
        return False
    try:
        json.loads(stripped)
    except json.JSONDecodeError as error:   # cut off: the parser ran out of text, or a string never closed
        return error.pos >= len(stripped) - 1 or error.msg.startswith("Unterminated string")
    return False


def _open_program(text: str) -> bool:
    if "\n" not in text.strip() and not text.rstrip().endswith(("{", ":", "(")):
        return False   # one line: a program only if it opens a block
    lines = text.split("\n")
    if len(lines) > MAX_LINES:
        lines = lines[: MAX_LINES // 2] + lines[-MAX_LINES // 2:]
    code: list[str] = []           # code lines, strings blanked and trailing comments cut
    after_header = None            # code lines seen since the last definition header (None: no header)
    in_docstring = in_block = False
    last_was_comment = False
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        if in_docstring or in_block:
            closing = '"""' if in_docstring == '"""' else "'''" if in_docstring else "*/"
            if closing in line:
                in_docstring = in_block = False
            last_was_comment = True
            continue
        for quotes in ('"""', "'''"):
            if line.lstrip("rbuRBU").startswith(quotes):
                if line.count(quotes) == 1:
                    in_docstring = quotes
                break
        else:
            if line.startswith("/*") and "*/" not in line:
                in_block = True
            elif not (line.startswith(_COMMENT_STARTS) and not _DIRECTIVE.match(line)):
                bare = _TRAILING_COMMENT.sub("", _STRING.sub('""', line))
                if not _is_code(bare, raw[:1] in (" ", "\t")):
                    return False   # running text outside comments: an ask or prose, the model's call
                code.append(bare)
                if _HEADER.match(bare):
                    after_header = 0
                elif after_header is not None:
                    after_header += 1
                last_was_comment = False
                continue
        last_was_comment = True
    if not code or _SQL.match(code[0]) or not any(_KEYWORD.match(line) or _HEADER.match(line) or _PREAMBLE.match(line)
                                                   for line in code):
        return False
    joined = "\n".join(code)
    unbalanced = any(joined.count(o) > joined.count(c) for o, c in (("{", "}"), ("(", ")"), ("[", "]")))
    return (unbalanced or in_docstring or in_block or code[-1].endswith(_OPENERS)
            or after_header == 0                                  # a definition with no body yet
            or all(_PREAMBLE.match(line) for line in code)        # only imports so far
            or (last_was_comment and len(code) >= 1 and after_header is not None))
