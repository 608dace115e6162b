"""Time one request through one path and turn the arrival times into a RequestRecord.

Four paths produce the same record shape:
  * `time_runtime`: engines.runtime.Runtime.generate (the backend code path the gateway runs:
    engine steps + detokenizer + stop/max_tokens), in this thread;
  * `time_pipeline`: what the gateway's worker runs for one request (gateway.pipeline.run_request:
    the OpenAI request validated into a RequestSpec, classify, route, generate, feed the monitor),
    in this thread: `auto` measured on the same footing as the fixed engines;
  * `time_anchor`: mlx-lm's own `stream_generate` on the same model object and prompt ids;
  * `time_http` (bench/http_client.py): the real HTTP gateway over loopback.
Decode rate excludes the prefill: tokens after the first chunk / time after the first chunk.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass, field
from typing import Sequence

from contracts.engine import CancelToken, Pause, StepResult
from contracts.sampling import SamplingParams


@dataclass
class RequestRecord:
    """One request through one engine/path. Times in seconds, memory in bytes."""

    prompt_id: str
    klass: str
    engine: str                 # raw | mtp | ddtree | ddtree1 | anchor | raw@http | auto
    mode: str                   # greedy | sampled
    repeat: int
    sequence: int = 0           # global order in the run (for "over time" plots)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    first_tokens: int = 0       # tokens in the first chunk (prefill's token)
    ttft_s: float = float("nan")
    total_s: float = float("nan")
    decode_s: float = float("nan")
    steps: int = 0              # engine steps after the first (prefill) step
    drafted: int = 0
    accepted: int = 0
    step_s: float = float("nan")  # mean engine step seconds, first step excluded
    finish_reason: str | None = None
    peak_memory: int = 0
    digest: str = ""            # hash of the emitted token ids (losslessness check, greedy)
    route_class: str | None = None
    route_engine: str | None = None
    route_reason: str | None = None
    engines_used: dict[str, int] = field(default_factory=dict)  # engine -> steps (mid-request fallback shows here)
    # engine -> mean seconds of its steps after the first, as the monitor would time them (probing and
    # batch-interleaved steps left out): a request that changed engine shows each engine's own step cost
    engine_step_s: dict[str, float] = field(default_factory=dict)
    error: str | None = None

    @property
    def decode_tokens(self) -> int:
        return self.completion_tokens - self.first_tokens

    @property
    def decode_tps(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 and self.decode_tokens > 0 else float("nan")

    @property
    def e2e_tps(self) -> float:
        return self.completion_tokens / self.total_s if self.total_s > 0 else float("nan")

    @property
    def accepted_per_step(self) -> float:
        return self.accepted / self.steps if self.steps else float("nan")

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else float("nan")

    def as_json(self) -> dict:
        row = asdict(self)
        row.update(decode_tps=self.decode_tps, e2e_tps=self.e2e_tps, decode_tokens=self.decode_tokens,
                   accepted_per_step=self.accepted_per_step, acceptance=self.acceptance)
        return row


def digest(tokens: Sequence[int]) -> str:
    return hashlib.sha1(",".join(map(str, tokens)).encode()).hexdigest()[:16]


class Arrivals:
    """Collects (arrival time, tokens, step) per chunk and fills a record's timing fields."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.tokens: list[int] = []
        self.first_tokens = 0
        self.steps: list[StepResult] = []

    def add(self, tokens: Sequence[int], step: StepResult | None = None, count: int | None = None) -> None:
        """`count` overrides len(tokens) where only a token count is known (HTTP)."""
        now = time.perf_counter()
        n = len(tokens) if count is None else count
        if step is not None:
            self.steps.append(step)
        if n <= 0:
            return
        self.tokens.extend(tokens)
        if self.first_at is None:
            self.first_at, self.first_tokens = now, n
        self.last_at = now

    def fill(self, record: RequestRecord, completion_tokens: int | None = None) -> RequestRecord:
        end = time.perf_counter()
        record.completion_tokens = len(self.tokens) if completion_tokens is None else completion_tokens
        record.first_tokens = self.first_tokens
        record.total_s = end - self.started
        if self.first_at is not None:
            record.ttft_s = self.first_at - self.started
            record.decode_s = (self.last_at or self.first_at) - self.first_at
        timed = self.steps[1:]  # the first step's time includes the prefill
        record.steps = len(timed)
        record.drafted = sum(s.drafted for s in timed)
        record.accepted = sum(s.accepted for s in timed)
        if timed:
            record.step_s = sum(s.seconds for s in timed) / len(timed)
        used: dict[str, int] = {}
        for s in self.steps:
            used[s.engine] = used.get(s.engine, 0) + 1
        record.engines_used = used
        seconds: dict[str, list[float]] = {}
        for s in timed:
            if not s.probing and not s.interleaved and s.batch_rows <= 1:
                seconds.setdefault(s.engine, []).append(s.seconds)
        record.engine_step_s = {engine: sum(v) / len(v) for engine, v in seconds.items()}
        record.digest = digest(self.tokens) if self.tokens else ""
        return record


def time_runtime(runtime, prompt_ids: Sequence[int], params: SamplingParams, engine: str,
                 record: RequestRecord) -> RequestRecord:
    """Runtime.generate: the gateway's backend path without HTTP."""
    arrivals = Arrivals()
    finish = None
    for chunk in runtime.generate(list(prompt_ids), params, engine, CancelToken()):
        if isinstance(chunk, Pause):
            continue
        arrivals.add(chunk.token_ids, chunk.step)
        finish = chunk.finish_reason or finish
    record.prompt_tokens = len(prompt_ids)
    record.finish_reason = finish
    return arrivals.fill(record)


def time_pipeline(backend, router, body: dict, record: RequestRecord) -> RequestRecord:
    """gateway.pipeline.run_request for an OpenAI chat body (validated as the HTTP endpoint does)."""
    from gateway.config import GatewayConfig
    from gateway.http.request_spec import chat_spec, resolve_engine
    from gateway.http.schemas import ChatCompletionRequest
    from gateway.worker.pipeline import ChoiceStart, Routed, run_request

    request = ChatCompletionRequest.model_validate(body)
    spec = chat_spec(request, resolve_engine(request.engine, None, tuple(backend.engine_names)), GatewayConfig())
    arrivals = Arrivals()
    finish = None
    for item in run_request(backend, router, spec, CancelToken(), queue_depth=0):
        if isinstance(item, Routed):
            record.route_engine, record.route_class = item.decision.engine, item.decision.klass
            record.route_reason, record.prompt_tokens = item.decision.reason, item.prompt_tokens
            continue
        if isinstance(item, (ChoiceStart, Pause)):   # a Pause: between the pieces of a long prompt's prefill
            continue
        arrivals.add(item.token_ids, item.step)
        finish = item.finish_reason or finish
    record.finish_reason = finish
    return arrivals.fill(record)


def anchor_sampler(params: SamplingParams):
    from mlx_lm.sample_utils import make_sampler

    if params.greedy:
        return make_sampler(temp=0.0)
    return make_sampler(temp=params.temperature or 1.0, top_p=params.top_p or 0.0, top_k=params.top_k or 0,
                        min_p=params.min_p or 0.0)


def time_anchor(model, tokenizer, prompt_ids: Sequence[int], params: SamplingParams,
                record: RequestRecord) -> RequestRecord:
    """mlx-lm's stream_generate on the same model object: the outside anchor."""
    import mlx.core as mx
    from mlx_lm.generate import stream_generate

    if params.seed is not None:
        mx.random.seed(params.seed)
    arrivals = Arrivals()
    finish = None
    for response in stream_generate(model, tokenizer, list(prompt_ids), max_tokens=params.max_tokens,
                                     sampler=anchor_sampler(params)):
        # mlx-lm's final response repeats the EOS token (finish "stop") or carries the last token
        # (finish "length"); the gateway never emits EOS, so neither is counted here.
        finish = response.finish_reason
        if finish != "stop":
            arrivals.add([int(response.token)])
    record.prompt_tokens = len(prompt_ids)
    record.finish_reason = finish
    return arrivals.fill(record)

