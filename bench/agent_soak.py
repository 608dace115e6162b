"""Agent soak: several clients at once, speaking the agent APIs through the official SDKs.

    python -m bench.agent_soak --url http://127.0.0.1:8000 [--clients 8] [--turns 8] [--seed 0]

Each client runs one conversation shape (they take turns), its context growing with every turn:
- `chat`: OpenAI chat with tools; tool_choice auto / required / named / none, streamed or not, with
  logprobs, stop strings, a sampling seed or a forced engine at random. A forced call must come back
  as a call to an offered tool (the named one) whose arguments parse; calls and their results go back
  into the conversation.
- `messages`: Anthropic messages with tools (tool_use / tool_result blocks, tool_choice any / tool).
- `responses`: the Responses API with function tools (function_call / function_call_output items).
- `ollama`: Ollama's /api/chat through its client, tools, thinking on and off, options, format json.
- `misc`: n > 1, completions with logprobs, a prompt past the model's window (a 400 that names the
  context), a stream the client hangs up on, a JSON schema beside tools, documents embedded (a RAG indexer).
A 5xx, a connection error or a malformed reply is a failure; 400s and 429s are counted (a client's
mistake, a full queue under more clients than `--max-batch` + `--max-queue`), not failed. Prints a JSON summary; exit 1 on any failure. Found, on its first run: a forced
call or JSON answer with top_logprobs was a 500 (-inf alternatives), and its stream sent -Infinity.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import anthropic
import httpx
import ollama
import openai

FILLER = (Path(__file__).resolve().parents[1] / "engines" / "runtime.py").read_text()   # tool results, pasted files
CHAT_TOOLS = [
    {"type": "function", "function": {"name": "read_file", "description": "Read a file of the repository",
                                      "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                                     "required": ["path"]}}},
    {"type": "function", "function": {"name": "set_light", "description": "Set a light",
                                      "parameters": {"type": "object", "properties": {
                                          "room": {"type": "string", "enum": ["kitchen", "hall"]},
                                          "level": {"type": "integer", "minimum": 0, "maximum": 100}},
                                          "required": ["room", "level"]}}},
]
ASKS = ["Fix the failing test in tests/test_api.py.", "Dim the kitchen to 20.", "Write a haiku about autumn.",
        "List three prime numbers as JSON.", "def add(a, b):\n    return a - b\n\nThis is wrong, fix it."]


class Busy(Exception):
    """A raw HTTP request was answered 429: every slot and the queue were taken (a client-side outcome)."""


class OllamaClientError(Exception):
    """An Ollama call was answered 4xx (its client raises one ResponseError for every status)."""


CLIENT_ERRORS = (openai.BadRequestError, anthropic.BadRequestError, openai.RateLimitError, anthropic.RateLimitError,
                 Busy, OllamaClientError)


class Soak:
    def __init__(self, url: str, seed: int):
        self.url = url.rstrip("/")
        self.seed = seed
        self.counts: Counter[str] = Counter()
        self.failures: list[dict] = []
        self._lock = threading.Lock()

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key="soak", max_retries=0, timeout=300)

    def turn(self, shape: str, client: int, number: int, action: Callable[[], None]) -> None:
        try:
            action()
            outcome = "ok"
        except CLIENT_ERRORS:   # a 400 for the client's mistake, a 429 under load: counted, not failed
            outcome = "4xx"
        except Exception as exc:   # a 5xx, a dropped connection, a malformed reply: the server's failure
            outcome = "failed"
            with self._lock:
                self.failures.append({"shape": shape, "client": client, "turn": number, "error": repr(exc)[:400]})
        with self._lock:
            self.counts[f"{shape}:{outcome}"] += 1

    # -- conversation shapes ----------------------------------------------------------------------
    def chat(self, client: int, turns: int) -> None:
        rng = random.Random(self.seed * 1000 + client)
        api = self.openai()
        system = "You are a coding agent." + ("\nContext:\n" + FILLER[:6000] if rng.random() < 0.4 else "")
        messages = [{"role": "system", "content": system}, {"role": "user", "content": rng.choice(ASKS)}]
        names = [t["function"]["name"] for t in CHAT_TOOLS]
        for number in range(turns):
            choice = rng.choice(["auto", "auto", "required", "named", "none"])
            named = rng.choice(names) if choice == "named" else None
            kwargs = dict(model="default", messages=messages, tools=CHAT_TOOLS, max_tokens=rng.choice([16, 48, 96]),
                          tool_choice={"type": "function", "function": {"name": named}} if named else choice)
            if rng.random() < 0.5:
                kwargs |= {"temperature": rng.choice([0, 0.7, 1.0]), "seed": rng.randrange(1000)}
            if rng.random() < 0.2:
                kwargs["stop"] = ["\n\n"]
            if rng.random() < 0.2:
                kwargs |= {"logprobs": True, "top_logprobs": 2}
            if rng.random() < 0.5:
                kwargs["extra_body"] = {"engine": rng.choice(["raw", "mtp", "ddtree"])}
            stream = rng.random() < 0.5

            def once() -> None:
                text, calls, finish = self._chat_once(api, kwargs, stream)
                assert finish in ("stop", "length", "tool_calls"), finish
                if choice in ("required", "named"):
                    assert calls or finish == "length", (choice, text[:80])
                if choice == "none":
                    assert not calls, calls
                for call in calls if finish == "tool_calls" else ():
                    assert call["name"] in names and (named is None or call["name"] == named), call
                    assert isinstance(json.loads(call["arguments"]), dict), call
                if calls:
                    messages.append({"role": "assistant", "content": text or None, "tool_calls": [
                        {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                        for c in calls]})
                    messages.extend({"role": "tool", "tool_call_id": c["id"],
                                     "content": "ok\n" + FILLER[:rng.randrange(50, 1500)]} for c in calls)
                else:
                    messages.extend([{"role": "assistant", "content": text},
                                     {"role": "user", "content": rng.choice(ASKS)}])

            self.turn("chat", client, number, once)

    @staticmethod
    def _chat_once(api: openai.OpenAI, kwargs: dict, stream: bool) -> tuple[str, list[dict], str | None]:
        if not stream:
            reply = api.chat.completions.create(**kwargs)
            message = reply.choices[0].message
            assert reply.usage.completion_tokens <= kwargs["max_tokens"], reply.usage
            calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                     for c in message.tool_calls or []]
            return message.content or "", calls, reply.choices[0].finish_reason
        text, calls, finish = "", {}, None
        for chunk in api.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs):
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for delta in choice.delta.tool_calls or ():
                    call = calls.setdefault(delta.index, {"id": delta.id, "name": "", "arguments": ""})
                    call["name"] += (delta.function and delta.function.name) or ""
                    call["arguments"] += (delta.function and delta.function.arguments) or ""
                finish = choice.finish_reason or finish
        return text, list(calls.values()), finish

    def messages(self, client: int, turns: int) -> None:
        rng = random.Random(self.seed * 1000 + client)
        api = anthropic.Anthropic(base_url=self.url, api_key="soak", max_retries=0, timeout=300)
        tools = [{"name": "read_file", "description": "Read a file",
                  "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
                 {"name": "bash", "description": "Run a command",
                  "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                                   "required": ["command"]}}]
        history = [{"role": "user", "content": "Look at engines/runtime.py and tell me what load_runtime does."}]
        for number in range(turns):
            kwargs = dict(model="default", max_tokens=rng.choice([24, 64]), messages=history, tools=tools,
                          system=[{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}])
            forced = rng.random() < 0.4
            if forced:
                kwargs["tool_choice"] = rng.choice([{"type": "any"}, {"type": "tool", "name": "bash"}])

            def once() -> None:
                if rng.random() < 0.5:
                    with api.messages.stream(**kwargs) as stream:
                        message = stream.get_final_message()
                else:
                    message = api.messages.create(**kwargs)
                assert message.stop_reason in ("end_turn", "max_tokens", "tool_use", "stop_sequence"), message
                uses = [block for block in message.content if block.type == "tool_use"]
                assert uses or not forced or message.stop_reason == "max_tokens", message
                assert all(isinstance(use.input, dict) for use in uses)
                content = [block.model_dump(exclude_none=True) for block in message.content]
                history.append({"role": "assistant", "content": content or [{"type": "text", "text": "..."}]})
                history.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": use.id, "content": FILLER[:rng.randrange(100, 3000)]}
                    for use in uses] or "continue"})

            self.turn("messages", client, number, once)

    def responses(self, client: int, turns: int) -> None:
        rng = random.Random(self.seed * 1000 + client)
        api = self.openai()
        tools = [{"type": "function", "name": "get_weather", "description": "Weather of a city",
                  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
        items: list[dict] = [{"role": "user", "content": "What's the weather in Oslo and Bergen?"}]
        for number in range(turns):
            kwargs = dict(model="default", input=items, tools=tools, max_output_tokens=rng.choice([24, 64]))
            if rng.random() < 0.3:
                kwargs["tool_choice"] = "required"

            def once() -> None:
                if rng.random() < 0.5:
                    events = list(api.responses.create(stream=True, **kwargs))
                    assert events[-1].type in ("response.completed", "response.incomplete"), events[-1].type
                    response = events[-1].response
                else:
                    response = api.responses.create(**kwargs)
                assert response.status in ("completed", "incomplete"), response.status
                calls = [item for item in response.output if item.type == "function_call"]
                items.extend(item.model_dump(exclude_none=True) for item in response.output)
                for call in calls:
                    if call.status == "completed":   # a call cut by max_output_tokens is marked incomplete
                        json.loads(call.arguments)
                    items.append({"type": "function_call_output", "call_id": call.call_id, "output": "12C, rain"})
                if not calls:
                    items.append({"role": "user", "content": "and tomorrow?"})

            self.turn("responses", client, number, once)

    def ollama(self, client: int, turns: int) -> None:
        """Ollama's native API through its client (Open WebUI, Ollama-only agents): tools, thinking on and off,
        options, streamed NDJSON or whole; calls and their results go back with Ollama's tool_name."""
        rng = random.Random(self.seed * 1000 + client)
        api = ollama.Client(host=self.url, timeout=300)
        names = [t["function"]["name"] for t in CHAT_TOOLS]
        messages = [{"role": "user", "content": rng.choice(ASKS)}]
        for number in range(turns):
            options = {"num_predict": rng.choice([16, 48, 96]), "temperature": rng.choice([0, 0.7, 1.0]),
                       "seed": rng.randrange(1000)}
            if rng.random() < 0.3:
                options |= {"top_k": 20, "repeat_penalty": 1.1, "num_ctx": 8192}
            kwargs = dict(model="default:latest", messages=messages, tools=CHAT_TOOLS, options=options,
                          think=rng.choice([None, True, False]))
            if rng.random() < 0.2:
                kwargs |= {"format": "json", "tools": None}
            stream = rng.random() < 0.5

            def once() -> None:
                try:
                    if stream:
                        parts = list(api.chat(stream=True, **kwargs))
                        assert parts and parts[-1].done and not any(p.done for p in parts[:-1]), parts[-1:]
                        text = "".join(p.message.content or "" for p in parts)
                        calls = [c for p in parts for c in p.message.tool_calls or ()]
                        final = parts[-1]
                    else:
                        final = api.chat(stream=False, **kwargs)
                        text, calls = final.message.content or "", list(final.message.tool_calls or ())
                except ollama.ResponseError as exc:
                    if 400 <= exc.status_code < 500:
                        raise OllamaClientError(exc.status_code) from exc
                    raise
                assert final.done_reason in ("stop", "length"), final.done_reason
                assert final.eval_count <= options["num_predict"], final.eval_count
                for call in calls:
                    assert call.function.name in names and isinstance(call.function.arguments, dict), call
                if kwargs.get("format") == "json" and final.done_reason == "stop":
                    json.loads(text)
                if calls:
                    messages.append({"role": "assistant", "content": text, "tool_calls": [
                        {"function": {"name": c.function.name, "arguments": c.function.arguments}} for c in calls]})
                    messages.extend({"role": "tool", "tool_name": c.function.name,
                                     "content": "ok\n" + FILLER[:rng.randrange(50, 1500)]} for c in calls)
                else:
                    messages.extend([{"role": "assistant", "content": text},
                                     {"role": "user", "content": rng.choice(ASKS)}])

            self.turn("ollama", client, number, once)

    def misc(self, client: int, turns: int) -> None:
        rng = random.Random(self.seed * 1000 + client)
        api = self.openai()
        for number in range(turns):
            kind = rng.choice(["n", "completion", "window", "hang_up", "json_beside_tools", "embed"])
            self.turn("misc", client, number, lambda: getattr(self, "_" + kind)(api))

    def _n(self, api: openai.OpenAI) -> None:
        reply = api.chat.completions.create(model="default", messages=[{"role": "user", "content": "Name a color."}],
                                            n=3, max_tokens=8, temperature=1.0)
        assert len(reply.choices) == 3

    def _completion(self, api: openai.OpenAI) -> None:
        reply = api.completions.create(model="default", prompt="def fib(n):", max_tokens=24, logprobs=2)
        assert len(reply.choices[0].logprobs.tokens) == reply.usage.completion_tokens

    def _window(self, api: openai.OpenAI) -> None:
        try:
            api.chat.completions.create(model="default", messages=[{"role": "user", "content": FILLER * 4}], max_tokens=16)
        except openai.BadRequestError as exc:
            assert "context" in str(exc).lower(), exc
            return
        raise AssertionError("a prompt past the model's window was accepted")

    def _hang_up(self, api: openai.OpenAI) -> None:
        body = {"model": "default", "messages": [{"role": "user", "content": "Tell me a long story."}],
                "max_tokens": 200, "stream": True}
        with httpx.stream("POST", self.url + "/v1/chat/completions", json=body, timeout=60) as response:
            if response.status_code == 429:
                raise Busy(response.headers.get("retry-after"))
            assert response.status_code == 200, response.status_code
            for index, _ in enumerate(response.iter_lines()):
                if index > 3:
                    break

    def _embed(self, api: openai.OpenAI) -> None:
        """A RAG indexer beside the chats: a batch of documents through the openai SDK (base64), one through Ollama's."""
        documents = [FILLER[:400], *ASKS[:3]]
        reply = api.embeddings.create(model="default", input=documents)
        assert [d.index for d in reply.data] == list(range(len(documents)))
        assert all(abs(sum(x * x for x in d.embedding) - 1) < 1e-3 for d in reply.data)
        try:
            vectors = ollama.Client(host=self.url, timeout=300).embed(model="default", input=ASKS[0]).embeddings
        except ollama.ResponseError as exc:
            if 400 <= exc.status_code < 500:
                raise OllamaClientError(exc.status_code) from exc
            raise
        assert len(vectors) == 1 and len(vectors[0]) == len(reply.data[0].embedding)

    def _json_beside_tools(self, api: openai.OpenAI) -> None:
        schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                  "required": ["name", "age"], "additionalProperties": False}
        reply = api.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "A user as JSON"}], max_tokens=48,
            response_format={"type": "json_schema", "json_schema": {"name": "user", "schema": schema}},
            tools=[{"type": "function", "function": {"name": "lookup", "parameters": {
                "type": "object", "properties": {"q": {"type": "string"}}}}}])
        choice = reply.choices[0]
        if choice.finish_reason == "stop" and not choice.message.tool_calls:
            json.loads(choice.message.content)


SHAPES = ("chat", "messages", "responses", "ollama", "misc")


def run_soak(url: str, clients: int = 8, turns: int = 8, seed: int = 0) -> dict:
    """Run `clients` conversations at once (shapes in turn) and return the summary."""
    soak = Soak(url, seed)
    threads = [threading.Thread(target=getattr(soak, SHAPES[i % len(SHAPES)]), args=(i, turns)) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # the server still answers after all that
    soak.turn("after", 0, 0, lambda: soak.openai().chat.completions.create(
        model="default", messages=[{"role": "user", "content": "hi"}], max_tokens=2))
    return {"seconds": round(time.perf_counter() - started, 1), "counts": dict(sorted(soak.counts.items())),
            "failures": soak.failures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    summary = run_soak(args.url, args.clients, args.turns, args.seed)
    print(json.dumps(summary, indent=2))
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
