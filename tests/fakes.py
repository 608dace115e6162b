"""Fast stand-ins for gateway tests: a fake Backend, a recording Router, a live uvicorn server.

FakeBackend behaves like engines.runtime.Runtime as the gateway sees it: it yields one
GenerationChunk per step with stop sequences, max_tokens and finish_reason already applied,
polls the CancelToken each step, and can be told to block, fail mid-generation or kill the worker.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import uvicorn

from contracts.chat import ChatPrompt, PromptLogprobs, ReplyFormat, TokenLogprob, TopLogprob
from contracts.engine import (
    CancelToken,
    GenerationChunk,
    Pause,
    PrefixHint,
    Released,
    StepResult,
    SwitchRule,
    checked_token_ids,
)
from contracts.errors import EngineFailure, InvalidRequestError
from contracts.sampling import SamplingParams
from gateway.routing.interface import RouteDecision, RouteRequest

FAKE_VOCAB = 1000   # the fake tokenizer's ids: a character's code point modulo this
FAKE_START_OF_TEXT = 0   # what the fake generates an empty prompt from
DEFAULT_REPLY = "The quick brown fox jumps over the lazy dog and keeps on running far away"


class FatalWorkerError(BaseException):
    """Not an Exception: escapes the request and kills the worker thread (test hook)."""


def fake_chat_template(messages: list[dict]) -> str:
    return "".join(f"<|{m['role']}|>{m['content']}" for m in messages) + "<|assistant|>"


@dataclass
class FakeBackend:
    model_id: str = "/models/fake-model"
    engine_names: tuple[str, ...] = ("raw", "mtp")
    context_length: int = 4096
    default_temperature: float = 1.0
    embedding_size: int = 16
    reply: str = DEFAULT_REPLY           # one word per token, one token per step
    step_seconds: float = 0.0
    # (engine, prompt tokens) -> seconds each step sleeps, instead of step_seconds (an engine whose cost
    # depends on the context)
    step_seconds_for: Any = None
    fail_after_steps: int | None = None  # raise EngineFailure after this many steps
    fatal_after_steps: int | None = None  # raise FatalWorkerError (kills the worker)
    gate: threading.Event | None = None  # when set, generate() waits for it before the first step
    poll_cancel: bool = True             # False: ignore the CancelToken (tests the gateway's own stop)
    # a real mlx-lm tokenizer: chats render through its template and replies are split (reasoning,
    # tool calls) exactly as the runtime does; `reply` is then the model's raw text
    tokenizer: Any = None
    fills_in_middle: bool = False        # encode_prompt takes a suffix (fill-in-the-middle tokens)
    # observations
    calls: list[dict] = field(default_factory=list)
    threads: set[int] = field(default_factory=set)
    ended_threads: list[int] = field(default_factory=list)
    steps_after_cancel: list[int] = field(default_factory=list)
    steps_run: list[int] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)
    encoded: list[str] = field(default_factory=list)
    chats: list[dict] = field(default_factory=list)
    prefixes: list = field(default_factory=list)
    scored: list = field(default_factory=list)   # the prompts prompt_logprobs scored
    embedded: list = field(default_factory=list)   # the inputs embed embedded
    released: list[tuple[int, int]] = field(default_factory=list)   # (call, tokens written) at each release

    def encode_chat(self, messages: list[dict]) -> list[int]:
        self.threads.add(threading.get_ident())
        return self._encode(fake_chat_template(messages))

    def chat_prompt(self, messages: list[dict], tools: list[dict] | None = None, tool_choice: Any = None,
                    template_kwargs: dict[str, Any] | None = None, continue_final: bool = False, *,
                    answer_schema: dict[str, Any] | None = None) -> ChatPrompt:
        self.chats.append({"messages": messages, "tools": tools, "tool_choice": tool_choice,
                           "template_kwargs": template_kwargs, "continue_final": continue_final,
                           "answer_schema": answer_schema})
        if self.tokenizer is None:
            return ChatPrompt(self.encode_chat(messages))
        from engines.chat import refused_call_tokens, render_chat

        text, reply, grammar = render_chat(self.tokenizer, messages, tools, tool_choice, template_kwargs,
                                           continue_final, answer_schema=answer_schema)
        self.threads.add(threading.get_ident())
        return ChatPrompt(self._encode(text), reply, grammar=grammar,
                          banned=refused_call_tokens(self.tokenizer, tools, tool_choice))

    def encode_prompt(self, prompt: str | Sequence[int], suffix: str | None = None) -> list[int]:
        self.threads.add(threading.get_ident())
        if suffix:   # fill in the middle, in the fake's character tokens
            if not self.fills_in_middle:
                raise InvalidRequestError("suffix is not supported by this model: its tokenizer has no "
                                          "fill-in-the-middle tokens", param="suffix", code="unsupported_parameter")
            return self._encode(f"<|fim_prefix|>{self.prompt_text(prompt)}<|fim_suffix|>{suffix}<|fim_middle|>")
        if not isinstance(prompt, str):
            return checked_token_ids(prompt, FAKE_VOCAB)
        if prompt == "":
            return [FAKE_START_OF_TEXT]   # as the runtime generates an empty prompt from a start token
        return self._encode(prompt)

    def prompt_text(self, prompt: str | Sequence[int]) -> str:
        if isinstance(prompt, str):
            return prompt
        return "".join(chr(token) for token in checked_token_ids(prompt, FAKE_VOCAB))

    def prompt_logprobs(self, prompt_ids: Sequence[int], top: int) -> PromptLogprobs:
        """Each prompt token after the first at -1.0 (one alternative per `top`: itself)."""
        self.scored.append(list(prompt_ids))
        return PromptLogprobs(chr(prompt_ids[0]), b"", tuple(
            TokenLogprob(chr(t), t, -1.0, tuple(TopLogprob(chr(t), t, -1.0) for _ in range(min(top, 1))), rank=1)
            for t in prompt_ids[1:]))

    def embed(self, inputs: Sequence[Sequence[int]]) -> Iterator[Pause | dict[int, np.ndarray]]:
        """Each token a one-hot row of `embedding_size` (by id modulo it), averaged: texts with the same letters
        in any order embed alike. One input per forward, which pauses every 4 tokens (a long input's pieces)."""
        self.threads.add(threading.get_ident())
        if self.gate is not None:
            self.gate.wait(timeout=30)
        for index, ids in enumerate(inputs):
            self.embedded.append(list(ids))
            for done in range(4, len(ids), 4):
                time.sleep(self.step_seconds)
                yield Pause(done, len(ids))
            if self.fail_after_steps is not None:
                raise EngineFailure("raw", RuntimeError("embedding failed"))
            yield Pause(len(ids), len(ids))
            yield {index: np.bincount([t % self.embedding_size for t in ids],
                                      minlength=self.embedding_size).astype(np.float32) / len(ids)}

    def _encode(self, text: str) -> list[int]:
        if len(text) > self.context_length:
            raise InvalidRequestError("prompt is longer than the context", param="messages", code="context_length_exceeded")
        self.encoded.append(text)
        return [ord(c) % FAKE_VOCAB for c in text]

    def memory_bytes(self) -> dict[str, int]:
        return {"active": 0, "peak": 0}

    def request_bytes(self, tokens: int) -> int:
        return 1000 + 10 * tokens   # what the memory-budget tests size their budgets by

    def end_thread(self) -> None:
        self.ended_threads.append(threading.get_ident())

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, engine: str, cancel: CancelToken,
        switch: SwitchRule | None = None, reply: ReplyFormat | None = None, prefix: PrefixHint | None = None,
    ) -> Iterator[GenerationChunk]:
        self.prefixes.append(prefix)
        chunks = self._generate(prompt_ids, params, engine, cancel, switch, reply)
        if reply is None or self.tokenizer is None:
            return chunks
        from engines.reply import ReplySplitter, split_reply

        return split_reply(chunks, ReplySplitter(self.tokenizer, reply))

    def _generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, engine: str, cancel: CancelToken,
        switch: SwitchRule | None, reply: ReplyFormat | None,
    ) -> Iterator[GenerationChunk]:
        self.threads.add(threading.get_ident())
        self.calls.append({"prompt_ids": list(prompt_ids), "params": params, "engine": engine, "switch": switch,
                           "reply": reply})
        call = len(self.calls) - 1
        self.started.set()
        if self.gate is not None:
            self.gate.wait(timeout=30)
        words = self.reply.split(" ")
        text_so_far = ""
        produced = 0
        cancelled_at: int | None = None
        try:
            for i, word in enumerate(words):
                if cancel.cancelled and cancelled_at is None:
                    cancelled_at = produced
                if cancel.cancelled and self.poll_cancel:
                    yield GenerationChunk("", [], "cancelled", None, len(prompt_ids), produced)
                    return
                if cancel.release_asked:   # as engines.resume does: the caches go, the reply goes on later
                    cancel.released()
                    self.released.append((call, produced))
                    yield Released(produced, produced)
                if self.fail_after_steps is not None and i >= self.fail_after_steps:
                    raise EngineFailure(engine, RuntimeError("injected failure"))
                if self.fatal_after_steps is not None and i >= self.fatal_after_steps:
                    raise FatalWorkerError("injected worker crash")
                started = time.perf_counter()
                pause = self.step_seconds_for(engine, len(prompt_ids)) if self.step_seconds_for else self.step_seconds
                if pause:
                    time.sleep(pause)
                piece = word if i == 0 else " " + word
                step = StepResult(tokens=[1000 + i], seconds=time.perf_counter() - started, engine=engine)
                produced += 1
                # stop sequences: cut the text at the first match, finish "stop"
                candidate = text_so_far + piece
                hit, matched = min(((candidate.find(s), s) for s in params.stop if s in candidate), default=(-1, None))
                if hit >= 0:
                    yield GenerationChunk(candidate[len(text_so_far):hit], [1000 + i], "stop", step, len(prompt_ids),
                                          produced, stop_sequence=matched)
                    return
                text_so_far = candidate
                last = i == len(words) - 1
                finish = "length" if produced >= params.max_tokens else ("stop" if last else None)
                yield GenerationChunk(piece, [1000 + i], finish, step, len(prompt_ids), produced)
                if finish is not None:
                    return
        finally:
            if cancelled_at is None and cancel.cancelled:
                cancelled_at = produced
            if cancelled_at is not None:  # steps run after the cancel was visible at a step boundary
                self.steps_after_cancel.append(produced - cancelled_at)
            self.steps_run.append(produced)


@dataclass
class RecordingRouter:
    """A Router that answers a fixed decision (or the forced engine) and records every call."""

    decision: RouteDecision = field(default_factory=lambda: RouteDecision(engine="mtp", klass="code", reason="monitor"))
    requests: list[RouteRequest] = field(default_factory=list)
    observed: list[tuple[RouteDecision, StepResult]] = field(default_factory=list)
    finished_calls: list[tuple[RouteDecision, BaseException | None]] = field(default_factory=list)
    threads: set[int] = field(default_factory=set)

    def choose(self, request: RouteRequest) -> RouteDecision:
        self.requests.append(request)
        if request.forced_engine:
            return RouteDecision(engine=request.forced_engine, klass=self.decision.klass, reason="forced")
        return self.decision

    def observe(self, decision: RouteDecision, step: StepResult) -> None:
        self.threads.add(threading.get_ident())
        self.observed.append((decision, step))

    def finished(self, decision: RouteDecision, error: BaseException | None) -> None:
        self.threads.add(threading.get_ident())
        self.finished_calls.append((decision, error))


class LiveServer:
    """The real uvicorn server on 127.0.0.1 and a free port, in a background thread."""

    def __init__(self, app):
        self.app = app
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("test server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


@contextlib.contextmanager
def live_server(app) -> Iterator[LiveServer]:
    with LiveServer(app) as server:
        yield server


@contextlib.contextmanager
def served_demo() -> Iterator[tuple[LiveServer, Any]]:
    """The shipped demo family (target + drafter) loaded and served on a live port, with its runtime: what
    the client-level tests of real replies share."""
    from engines.runtime import load_runtime
    from gateway.http.app import create_app
    from tests.ops_helpers import REPO

    family = REPO / "models" / "switchyard-demo"
    runtime = load_runtime(str(family / "target"), draft_dir=str(family / "drafter"))
    with live_server(create_app(runtime)) as server:
        yield server, runtime
