"""Shared pieces of the operations tests: a speculative fake backend, the app as `serve` wires it,
and a /metrics scraper."""

from __future__ import annotations

import shutil
import socket
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Sequence

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.router_sim import LabelFromUserText
from contracts.engine import CancelToken, GenerationChunk
from contracts.sampling import SamplingParams
from gateway.config import GatewayConfig
from gateway.http.app import create_app
from gateway.routing.router import AdaptiveRouter
from tests.fakes import FakeBackend

REPO = Path(__file__).resolve().parent.parent
DRAFT_SIZE = {"mtp": 1, "ddtree": 4}


def accepted_at(engine: str, step: int) -> int:
    """Deterministic acceptance pattern of SpeculativeFake: mtp 1,0,1,0,...; ddtree 0,1,2,0,1,2,..."""
    return step % 2 == 0 if engine == "mtp" else step % 3


@dataclass
class SpeculativeFake(FakeBackend):
    """FakeBackend whose mtp/ddtree steps report drafts and acceptances (see accepted_at), and
    which hands a request to raw after `handoff_after` steps, like the mid-request fallback."""

    engine_names: tuple[str, ...] = ("raw", "mtp", "ddtree")
    handoff_after: int | None = None
    memory: dict[str, int] = field(default_factory=lambda: {"parameters": 1000, "active": 2048, "peak": 4096})

    def memory_bytes(self) -> dict[str, int]:
        return dict(self.memory)

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, engine: str, cancel: CancelToken, **extra: Any
    ) -> Iterator[GenerationChunk]:
        for i, chunk in enumerate(super().generate(prompt_ids, params, engine, cancel, **extra)):
            step = chunk.step
            if step is not None and engine in DRAFT_SIZE:
                if self.handoff_after is not None and i >= self.handoff_after:
                    step = replace(step, engine="raw")
                else:
                    accepted = int(accepted_at(engine, i))
                    depth = DRAFT_SIZE[engine] if engine == "mtp" else 3
                    step = replace(step, drafted=DRAFT_SIZE[engine], accepted=accepted,
                                   accepted_positions=[d < accepted for d in range(depth)])
                chunk = replace(chunk, step=step)
            yield chunk


POLICY = "exploration: {kind: none}\nstate: {path: %s, persist_interval_seconds: 3600}\n"


def serve_like_app(backend: FakeBackend, policy_path: Path, state_path: Path | None = None,
                   config: GatewayConfig = GatewayConfig()):
    """The app as `switchyard serve` builds it: adaptive router (classifier = the user text; create_app
    registers its collectors). Returns (app, router)."""
    policy_path.write_text(POLICY % (str(state_path) if state_path else "null"))
    router = AdaptiveRouter.from_policy_file(policy_path, backend.engine_names, LabelFromUserText())
    app = create_app(backend, router=router, config=config)
    return app, router


def scrape(base_url: str) -> dict[str, dict[tuple, float]]:
    """name -> {sorted label items -> value} from a live /metrics."""
    response = httpx.get(base_url + "/metrics", timeout=10)
    assert response.status_code == 200, response.text
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def value(samples: dict[str, dict[tuple, float]], name: str, **labels: str) -> float:
    return samples.get(name, {}).get(tuple(sorted(labels.items())), 0.0)


def total(samples: dict[str, dict[tuple, float]], name: str, **labels: str) -> float:
    """Sum of every series of `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for key, v in samples.get(name, {}).items() if want <= set(key))


def drive_traffic(url: str, backend: SpeculativeFake) -> None:
    """Traffic that makes every series the dashboard and the alert rules read exist: every engine
    and class, a stream, a hand-off (needs handoff_after=3), a client disconnect, a rejected request."""
    def chat(user: str, max_tokens: int, **extra) -> None:
        body = {"messages": [{"role": "user", "content": user}], "max_tokens": max_tokens, **extra}
        assert httpx.post(url + "/v1/chat/completions", json=body, timeout=30).status_code == 200

    chat("code", 3, engine="mtp")
    chat("prose", 3, engine="ddtree")
    chat("structured", 3, engine="raw")
    chat("code", 3)                      # routed by the monitor
    chat("prose", 6, engine="ddtree")    # hands off to raw after 3 steps
    with httpx.stream("POST", url + "/v1/completions", timeout=30,
                      json={"prompt": "code", "max_tokens": 3, "stream": True, "engine": "mtp"}) as response:
        assert response.read().decode().rstrip().endswith("data: [DONE]")
    assert httpx.post(url + "/v1/chat/completions", json={"messages": []}, timeout=30).status_code == 400
    backend.step_seconds = 0.05          # slow enough to hang up mid-stream
    try:
        with httpx.stream("POST", url + "/v1/completions", timeout=30,
                          json={"prompt": "prose", "max_tokens": 15, "stream": True}) as response:
            next(response.iter_bytes())
    finally:
        backend.step_seconds = 0.0
    deadline = time.monotonic() + 10
    while not scrape(url).get("switchyard_client_disconnects_total") and time.monotonic() < deadline:
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tool(name: str) -> str | None:
    """Absolute path of a system tool (PATH, then the sbin dirs Debian puts admin tools in)."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin")
