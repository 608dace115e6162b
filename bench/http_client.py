"""The real gateway over loopback: create_app + uvicorn in a thread, and a streaming SSE client.

The client is stdlib http.client (no extra dependency) and times each SSE content frame as it
arrives: TTFT = first content frame, decode = first to last content frame.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from dataclasses import dataclass

from contracts.sampling import SamplingParams

from .measure import Arrivals, RequestRecord


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LoopbackGateway:
    """Serve `app` with uvicorn on 127.0.0.1:<free port> in a daemon thread (lifespan on)."""

    def __init__(self, app, startup_timeout: float = 30.0):
        import uvicorn

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    lifespan="on", access_log=False))
        self.thread = threading.Thread(target=self.server.run, name="bench-gateway", daemon=True)
        self.startup_timeout = startup_timeout

    def __enter__(self) -> "LoopbackGateway":
        self.thread.start()
        deadline = time.monotonic() + self.startup_timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the loopback gateway did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


@dataclass(frozen=True)
class HttpResult:
    status: int
    headers: dict[str, str]
    body: str = ""


def request_body(messages: list[dict], params: SamplingParams, engine: str) -> dict:
    body: dict = {
        "messages": list(messages),
        "max_tokens": params.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "engine": engine,
    }
    for name in ("temperature", "top_p", "top_k", "seed"):
        value = getattr(params, name)
        if value is not None:
            body[name] = value
    return body


def time_http(port: int, messages: list[dict], params: SamplingParams, engine: str,
              record: RequestRecord, timeout: float = 600.0) -> RequestRecord:
    """POST /v1/chat/completions (stream) and time the content frames."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        arrivals = Arrivals()
        conn.request("POST", "/v1/chat/completions", body=json.dumps(request_body(messages, params, engine)),
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        headers = {k.lower(): v for k, v in response.getheaders()}
        record.route_engine = headers.get("x-switchyard-engine")
        record.route_class = headers.get("x-switchyard-class")
        record.route_reason = headers.get("x-switchyard-route-reason")
        if response.status != 200:
            record.error = f"HTTP {response.status}: {response.read().decode(errors='replace')[:300]}"
            return record
        usage: dict = {}
        finish = None
        for raw in response:  # SSE: one "data: ..." line per event, blank lines between
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            event = json.loads(payload)
            if "error" in event:
                record.error = str(event["error"])[:300]
                continue
            if event.get("usage"):
                usage = event["usage"]
            for choice in event.get("choices", []):
                finish = choice.get("finish_reason") or finish
                if choice.get("delta", {}).get("content"):
                    # token counts per frame are not on the wire: mark the arrival; totals from usage
                    arrivals.add([], count=1)
        record.finish_reason = finish
        record.prompt_tokens = int(usage.get("prompt_tokens", 0))
        arrivals.fill(record, completion_tokens=int(usage.get("completion_tokens", 0)))
        # every engine's first step emits exactly one token (the prefill's); the rest is decode
        record.first_tokens = 1 if record.completion_tokens else 0
        return record
    finally:
        conn.close()


def get_json(port: int, path: str) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return json.loads(response.read().decode())
    finally:
        conn.close()
