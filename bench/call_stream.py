"""What streaming a tool call's arguments as they are written costs per token, side by side with reading
the call whole once it closes.

    python -m bench.call_stream [--chars 4000 16000 64000] [--rounds 3] [--json FILE]

A `write_file` call whose `content` is a file of `--chars` characters (Python, or HTML, full of "</" that may
begin Qwen's closing markup) is fed to engines.reply's ReplySplitter one token at a time (the token's text, as
the runtime hands it over), in the two call syntaxes: Qwen3.5/3.6's XML (a generated checkpoint's tokenizer
with Qwen3.6's template) and JSON in <tool_call> (the demo model's). Two ways, alternating which goes first each round: following the call (the server: a delta
each time its arguments settle more) and whole (the call read once, when it closes). Reported: microseconds
of splitter time per token for each (the best round), their difference, and the deltas a followed call
sent, and the token the client first hears of the call with (the call's name) each way. The difference in
time is host time the decode loop spends per token; compare it with a step's time.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from mlx_lm.utils import load_tokenizer

from bench.environment import describe_environment, print_table, record
from contracts.chat import ReplyFormat
from engines.reply import ReplySplitter
from engines.testing.target import write_target_checkpoint

REPO = Path(__file__).resolve().parents[1]
TOOLS = ({"type": "function", "function": {"name": "write_file", "parameters": {"type": "object", "properties": {
    "path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]}}},)
SOURCES = {   # what the file holds: code, and markup full of "</" (which may begin Qwen's closing markup)
    "python": 'def scale(values: list[float], by: float = 2.0) -> list[float]:\n    """Each "value" times by."""\n'
              "    return [value * by for value in values]  # C:\\\\path\n\n\n",
    "html": '<section class="card">\n  <h2>Scale</h2>\n  <p>Each <em>value</em> &times; 2 &lt; 10</p>\n</section>\n',
}
CASES = (("xml", "python"), ("xml", "html"), ("json", "python"))


def _call(style: str, source: str, chars: int) -> str:
    content = (SOURCES[source] * (chars // len(SOURCES[source]) + 1))[:chars]
    if style == "xml":
        return (f"<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/scale.py\n</parameter>\n"
                f"<parameter=content>\n{content}\n</parameter>\n</function>\n</tool_call>")
    call = {"name": "write_file", "arguments": {"path": "src/scale.py", "content": content}}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


def _pieces(tokenizer, text: str) -> list[str]:
    """The text as the runtime hands it over: each token's new text."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    detokenizer = tokenizer.detokenizer
    detokenizer.reset()
    pieces = []
    for token in ids:
        detokenizer.add_token(token)
        pieces.append(detokenizer.last_segment)
    detokenizer.finalize()
    pieces.append(detokenizer.last_segment)
    assert "".join(pieces) == text
    return pieces


def _run(tokenizer, pieces: list[str], follow: bool) -> tuple[float, int, int]:
    """Seconds in the splitter, deltas sent, and the token the call's first delta came with (1-based)."""
    splitter = ReplySplitter(tokenizer, ReplyFormat(tools=TOOLS, parse_tools=True), follow_calls=follow)
    deltas, calls, opened = 0, 0, 0
    start = time.perf_counter()
    for token, piece in enumerate([*pieces, None], 1):
        out = splitter.feed(piece) if piece is not None else splitter.finish()
        deltas, calls = deltas + len(out.call_deltas), calls + len(out.tool_calls)
        opened = opened or (token if out.call_deltas else 0)
    seconds = time.perf_counter() - start
    assert calls == 1, calls
    return seconds, deltas, opened


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chars", type=int, nargs="+", default=[4000, 16000, 64000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        tokenizers = {"xml": load_tokenizer(write_target_checkpoint(Path(scratch) / "qwen", seed=0, variant="random",
                                                                    chat="qwen3.6")),
                      "json": load_tokenizer(REPO / "models" / "switchyard-demo" / "target")}
    rows, results = [], []
    for style, source in CASES:
        tokenizer = tokenizers[style]
        for chars in args.chars:
            pieces = _pieces(tokenizer, _call(style, source, chars))
            best = {True: float("inf"), False: float("inf")}
            deltas, opened = 0, {}
            for round_ in range(args.rounds):
                for follow in ((True, False) if round_ % 2 == 0 else (False, True)):
                    seconds, sent, opened[follow] = _run(tokenizer, pieces, follow)
                    best[follow] = min(best[follow], seconds)
                    deltas = sent if follow else deltas
            per_token = {follow: best[follow] / len(pieces) * 1e6 for follow in best}
            results.append({"syntax": style, "content": source, "chars": chars, "tokens": len(pieces), "deltas": deltas,
                            "first_delta_token": {"followed": opened[True], "whole": opened[False]},
                            "followed_us_per_token": per_token[True], "whole_us_per_token": per_token[False]})
            rows.append([style, source, f"{chars:,}", f"{len(pieces):,}", f"{opened[True]} / {opened[False]:,}",
                         f"{deltas:,}", f"{per_token[True]:.1f}", f"{per_token[False]:.1f}",
                         f"{per_token[True] - per_token[False]:.1f}"])
    record({"model": "splitter only", "environment": describe_environment(), "rounds": args.rounds,
            "results": results}, args.json)
    print_table(["syntax", "content", "chars", "tokens", "first delta at token (followed / whole)", "deltas sent",
                 "followed, us/token", "whole, us/token", "cost of following, us/token"], rows)


if __name__ == "__main__":
    main()
