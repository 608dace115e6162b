"""A chat reply's text, split the way the model's chat template writes it: the thinking block,
the answer, and tool calls (parsed by the tool parser mlx-lm picks from the chat template).

The split runs on the detokenized text after stop sequences (mlx-lm's TextStateMachine, which
holds back text that may be the start of a marker), so every engine's reply is read the same way.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from mlx_lm.generate import TextStateMachine

from contracts.chat import ANSWER, MARKUP, REASONING, CallDelta, ReplyFormat, ToolCall
from contracts.engine import GenerationChunk, Pause

from .call_stream import CallReader
from .cut_call import cut_call, json_text, without_partial_marker
from .forced_call import XML, parser_view, tool_call_style

log = logging.getLogger("switchyard.reply")


@dataclass
class ReplyPiece:
    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    call_deltas: list[CallDelta] = field(default_factory=list)


@dataclass
class _OpenCall:
    """A call being written whose opening was sent (its name is an offered tool's)."""

    index: int
    id: str
    name: str
    sent: str = ""   # the start of its arguments' JSON text sent so far


def _transitions(tokenizer: Any, reply: ReplyFormat) -> dict[str, list[tuple[str, str]]]:
    transitions: dict[str, list[tuple[str, str]]] = {"normal": []}
    if tokenizer.has_thinking:
        transitions["normal"].append((tokenizer.think_start, "reasoning"))
        transitions["reasoning"] = [(tokenizer.think_end, "normal")]
    if reply.parse_tools and tokenizer.has_tool_calling:
        transitions["normal"].append((tokenizer.tool_call_start, "tool"))
        if tokenizer.has_thinking:   # a call may start before the thinking block is closed
            transitions["reasoning"].append((tokenizer.tool_call_start, "tool"))
        transitions["tool"] = [(tokenizer.tool_call_end, "normal")] if tokenizer.tool_call_end else []
    return transitions


def stop_skips(tokenizer: Any, reply: ReplyFormat) -> tuple[tuple[tuple[str, str], ...], tuple[str, str] | None]:
    """The parts of the reply that are no answer text, as (opening, closing) markers, inside which stop
    strings are not looked for (engines.text.StopMatcher): the thinking block, and tool calls where they are
    read (no tools or tool_choice none: call markup is text). And the part the reply starts in: a forced
    call the prompt opened, or the thinking block the generation prompt opened."""
    pairs: list[tuple[str, str]] = []
    if tokenizer.has_thinking:
        pairs.append((tokenizer.think_start, tokenizer.think_end))
    if reply.parse_tools and tokenizer.has_tool_calling and tokenizer.tool_call_end:
        call = (tokenizer.tool_call_start, tokenizer.tool_call_end)
        pairs.append(call)
        if reply.prefix.rfind(call[0]) > reply.prefix.rfind(call[1]):
            return tuple(pairs), call
    return tuple(pairs), pairs[0] if reply.opens_in_reasoning and tokenizer.has_thinking else None


def _start_state(tokenizer: Any, reply: ReplyFormat) -> str:
    return "reasoning" if reply.opens_in_reasoning and tokenizer.has_thinking else "normal"


class TokenParts:
    """Which part of the reply each generated token is in (contracts.chat REASONING / ANSWER / MARKUP),
    read from the token ids with the markers ReplySplitter reads the text with (usage's reasoning_tokens,
    the Responses API's output_text logprobs). Exact where each marker is one token, as Qwen's special
    tokens are; of a marker of several tokens only the last counts as markup, the others go with the
    part before it. Markup that turns out to be no call is not given back to the answer."""

    def __init__(self, tokenizer: Any, reply: ReplyFormat):
        self.tokenizer = tokenizer
        self.moves = {state: [(tuple(tokenizer.encode(marker, add_special_tokens=False)), to) for marker, to in moves]
                      for state, moves in _transitions(tokenizer, reply).items()}
        self.longest = max((len(m) for moves in self.moves.values() for m, _ in moves), default=1)
        self.state, self.recent = _start_state(tokenizer, reply), []
        self.answer_started = reply.continues
        for token in tokenizer.encode(reply.prefix, add_special_tokens=False) if reply.prefix else ():
            self._part(token)   # a forced call's start, already in the prompt

    def feed(self, tokens: list[int]) -> tuple[str, ...]:
        return tuple(self._part(token) for token in tokens)

    def _part(self, token: int) -> str:
        self.recent = [*self.recent, token][-self.longest:]
        for marker, to in self.moves.get(self.state, ()):
            if marker and tuple(self.recent[-len(marker):]) == marker:
                self.state, self.recent = to, []
                return MARKUP
        if self.state == "reasoning":
            return REASONING
        if self.state == "tool":
            return MARKUP
        if not self.answer_started:   # the template's blank lines after </think>, as the splitter strips them
            if not self.tokenizer.decode([token]).strip():
                return MARKUP
            self.answer_started = True
        return ANSWER


class ReplySplitter:
    """Feeds text, returns what of it is answer, reasoning and completed tool calls, and the calls'
    progress (CallDelta): a call opens once its name is written, and its arguments follow as they
    settle (engines.call_stream). Markup naming an offered tool is a call: should it not parse, it is
    returned with its arguments as far as they read, as a call max_tokens cut off is."""

    def __init__(self, tokenizer: Any, reply: ReplyFormat, follow_calls: bool = True):
        self.tokenizer, self.reply = tokenizer, reply
        self.follow_calls = follow_calls and not reply.refuse_calls   # False: calls are read whole
        self.machine = TextStateMachine(_transitions(tokenizer, reply))
        self.state = self.machine.make_state(_start_state(tokenizer, reply))
        self.tool_text = ""
        self.pending_prefix = reply.prefix
        # the XML parser converts values by each property's type: given it through $refs and nullable unions
        tools = list(reply.tools)
        self.style = tool_call_style(tokenizer)
        self.parse_tools = (parser_view(tools) if self.style == XML else tools) or None
        tools = self.parse_tools
        self.reader = CallReader(self.style, tools, lambda call: tokenizer.tool_parser(call.strip(), tools)) \
            if tools else None
        self.open_call: _OpenCall | None = None
        self.returned = 0   # calls read so far (returned unless refused): the next call's index
        # the template puts blank lines after </think>: not part of the answer, unless the reply continues
        # the client's prefill, where a leading space is the next word's
        self.answer_started = reply.continues
        # where calls are read, the answer's trailing whitespace is held until more answer follows: the
        # template's blank line before a call is not part of the answer, and a stream must not send what the
        # whole reply leaves out
        self.holds_space = bool(reply.parse_tools and tokenizer.has_tool_calling)
        self.held = ""

    def feed(self, text: str) -> ReplyPiece:
        return self._refused(self._feed(text))

    def _refused(self, piece: ReplyPiece) -> ReplyPiece:
        """tool_choice none: a call is read (its markup is no answer) but not returned."""
        if self.reply.refuse_calls:
            piece.tool_calls, piece.call_deltas = [], []
        return piece

    @property
    def returned_calls(self) -> bool:
        return bool(self.returned) and not self.reply.refuse_calls

    def _feed(self, text: str) -> ReplyPiece:
        if self.pending_prefix:  # the forced start of a tool call is part of the reply, not of its output
            text, self.pending_prefix = self.pending_prefix + text, ""
        self.state, segments = TextStateMachine.split(self.state, text)
        piece = ReplyPiece()
        for index, (state, segment) in enumerate(segments):
            closed = index < len(segments) - 1   # every segment but the last ended with a marker
            self._take(piece, state, segment, closed)
        return piece

    def finish(self) -> ReplyPiece:
        """The end of the generation: flush what was held back (an unterminated call stays text)."""
        self.state, rest, state = TextStateMachine.flush(self.state)
        piece = ReplyPiece()
        self._take(piece, state, rest, closed=False)
        if self.tool_text:   # a call the generation never closed (max_tokens cut it)
            self._follow(piece, closing=True)
            text, self.tool_text = self.tool_text, ""
            calls = self._unclosed(text)
            if self.open_call is not None:
                self._settle(piece, calls)
            elif calls:
                self._whole(piece, calls)
            elif not self.reply.prefix:   # not known to be a call: give the text back as it was
                self._answer(piece, self.tokenizer.tool_call_start + text)
            # a forced call cut before it named its tool: no call to return, and its markup is no answer
        if not self.returned:   # a reply without calls keeps its whitespace to the end
            piece.text, self.held = piece.text + self.held, ""
        return self._refused(piece)

    def _unclosed(self, text: str) -> list[ToolCall]:
        """A call cut off: whole when only its closing marker was cut, else the offered tool it calls
        with its arguments so far (engines.cut_call); [] when it names no offered tool."""
        whole = self._parse(without_partial_marker(text, self.tokenizer.tool_call_end or ""), quiet=True)
        if whole:
            return whole
        tools = self.parse_tools or []
        cut = cut_call(text, self.style, tools, lambda call: self.tokenizer.tool_parser(call.strip(), tools))
        if cut is None:
            return []
        return [ToolCall(id=_call_id(), name=cut.name, arguments=cut.arguments)]

    def _take(self, piece: ReplyPiece, state: str | None, segment: str, closed: bool) -> None:
        if state == "reasoning":
            piece.reasoning += segment
        elif state == "tool":
            self.tool_text += segment
            if not closed:
                self._follow(piece)
            else:
                # the whole call read as a stream reads it, so that its arguments come out the same however
                # its text came in chunks (also where it does not parse: naming an offered tool, it is a call)
                self._follow(piece, closing=True)
                text, self.tool_text = self.tool_text, ""
                calls = self._parse(text)
                if self.open_call is not None:
                    self._settle(piece, calls)
                elif calls:
                    self._whole(piece, calls)
                else:  # not a call after all: the markup and all stay in the answer
                    self._answer(piece, self.tokenizer.tool_call_start + text + (self.tokenizer.tool_call_end or ""))
        else:
            if not self.answer_started:
                segment = segment.lstrip()
                self.answer_started = bool(segment)
            self._answer(piece, segment)

    def _follow(self, piece: ReplyPiece, closing: bool = False) -> None:
        """A call being written: open it once its name is, and send its arguments as they settle. `closing`:
        the whole call, at its end (also where calls are not followed as they come, so that every splitter
        reads the same text the same way)."""
        if self.reader is None or not (self.follow_calls or closing):
            return
        reading = self.reader.read(self.tool_text)
        if reading is None:
            return
        call = self.open_call
        if call is None:
            call = self.open_call = _OpenCall(self.returned, _call_id(), reading.name, reading.arguments)
            piece.call_deltas.append(CallDelta(call.index, call.id, call.name, reading.arguments, opens=True))
        elif len(reading.arguments) > len(call.sent) and reading.arguments.startswith(call.sent):
            piece.call_deltas.append(CallDelta(call.index, call.id, call.name, reading.arguments[len(call.sent):]))
            call.sent = reading.arguments

    def _whole(self, piece: ReplyPiece, calls: list[ToolCall]) -> None:
        """Calls read whole when they closed: each in one delta."""
        for call in calls:
            piece.tool_calls.append(call)
            piece.call_deltas.append(CallDelta(self.returned, call.id, call.name, call.arguments, True, call))
            self.returned += 1

    def _settle(self, piece: ReplyPiece, calls: list[ToolCall]) -> None:
        """The open call ends: `calls` is the whole call's reading (the first is the open call's). Its
        arguments are the reading's when they begin with what was sent (they do, but where a parameter is
        written twice); else what was sent, closed where that makes an object."""
        opened, self.open_call = self.open_call, None
        assert opened is not None
        arguments = calls[0].arguments if calls else None
        if arguments is None or not arguments.startswith(opened.sent):
            if arguments is not None:
                log.warning("tool call %s: its whole reading does not continue its streamed arguments; "
                            "the streamed arguments stand", opened.name)
            arguments = _closed(opened.sent)
        call = ToolCall(opened.id, opened.name, arguments)
        piece.tool_calls.append(call)
        last = piece.call_deltas[-1] if piece.call_deltas else None
        if last is not None and last.opens and last.index == opened.index:   # opened in this piece: one delta
            piece.call_deltas[-1] = CallDelta(opened.index, opened.id, opened.name, arguments, True, call)
        else:
            piece.call_deltas.append(CallDelta(opened.index, opened.id, opened.name,
                                               arguments[len(opened.sent):], done=call))
        self.returned += 1
        self._whole(piece, calls[1:])

    def _answer(self, piece: ReplyPiece, text: str) -> None:
        if not self.holds_space:
            piece.text += text
            return
        text = self.held + text
        kept = text.rstrip()
        piece.text, self.held = piece.text + kept, text[len(kept):]

    def _parse(self, text: str, quiet: bool = False) -> list[ToolCall]:
        try:
            parsed = self.tokenizer.tool_parser(text.strip(), self.parse_tools)
        except Exception as exc:  # noqa: BLE001 - a malformed call is not a server error: keep it as text
            if not quiet:
                log.info("tool call did not parse (%s)", exc)
            return []
        calls = parsed if isinstance(parsed, list) else [parsed]
        out = []
        for call in calls:
            arguments = call.get("arguments", {})
            out.append(ToolCall(id=_call_id(), name=str(call.get("name", "")),
                                arguments=arguments if isinstance(arguments, str) else json_text(arguments)))
        return out


class FirstCallEnd:
    """parallel_tool_calls false, or tool_choice none (a call written anyway): fed the reply's text token by
    token (engines.text.stream_text's `ends`), says when its first tool call has closed, so that every engine
    ends the reply at the token raw decoding ends it at, whatever a speculative step wrote past it. It reads
    the text with a splitter of its own, exactly as split_reply will: markup that is no call after all does
    not end the reply."""

    def __init__(self, tokenizer: Any, reply: ReplyFormat):
        self.splitter = ReplySplitter(tokenizer, replace(reply, refuse_calls=False), follow_calls=False)

    @staticmethod
    def wanted(reply: ReplyFormat | None) -> bool:
        return reply is not None and (reply.one_call or reply.refuse_calls)

    def __call__(self, text: str) -> bool:
        return bool(self.splitter.feed(text).tool_calls)


def _closed(arguments: str) -> str:
    """Arguments sent as far as a call was readable: closed as an object where that makes one."""
    try:
        json.loads(arguments + "}")
    except json.JSONDecodeError:
        return arguments
    return arguments + "}"


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def split_reply(chunks: Iterator[GenerationChunk], splitter: ReplySplitter) -> Iterator[GenerationChunk]:
    """The text stream's chunks with their text split into answer, reasoning and tool calls, and their
    tokens told apart (GenerationChunk.parts); a generation that stopped after a tool call finishes
    with "tool_calls"."""
    parts = TokenParts(splitter.tokenizer, splitter.reply)
    for chunk in chunks:
        if isinstance(chunk, Pause):
            yield chunk
            continue
        piece = splitter.feed(chunk.text)
        if chunk.finish_reason is not None:
            rest = splitter.finish()
            piece = ReplyPiece(piece.text + rest.text, piece.reasoning + rest.reasoning,
                               piece.tool_calls + rest.tool_calls, piece.call_deltas + rest.call_deltas)
        finish = chunk.finish_reason
        if finish == "stop" and splitter.returned_calls:
            finish = "tool_calls"
        yield replace(chunk, text=piece.text, reasoning=piece.reasoning, tool_calls=piece.tool_calls,
                      call_deltas=piece.call_deltas,
                      finish_reason=finish, parts=parts.feed(chunk.token_ids))
