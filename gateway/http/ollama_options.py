"""Ollama's `options` object (its Modelfile parameters) as this server's sampling fields: read on Ollama's
/api/chat and /api/generate (gateway.http.ollama), and on chat and text completions, where clients that speak
Ollama send it too (a field given beside it at the top level wins)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from .errors import bad_request
from .schemas import Int, RepeatLastN

# Ollama's window of the repeat penalty where the options set the penalty but not the window (its documented default)
REPEAT_LAST_N = 64
# Ollama's sampling options with no sampler here, each with the value that leaves sampling as it is
NEUTRAL_OPTIONS = {"typical_p": 1.0, "tfs_z": 1.0, "mirostat": 0}


class OllamaOptions(BaseModel):
    """Ollama's `options` (its Modelfile parameters): the sampling ones mapped onto this server's fields."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: Int | None = None
    min_p: float | None = None
    seed: Int | None = None
    num_predict: Int | None = None        # -1: no limit, -2: fill the context (both: the server's default)
    stop: list[str] | str | None = None
    repeat_penalty: float | None = None
    # the penalty's window: the last n tokens (absent: Ollama's 64), -1 the whole context, 0 off
    repeat_last_n: RepeatLastN | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    typical_p: float | None = None
    tfs_z: float | None = None
    mirostat: Int | None = None
    mirostat_tau: float | None = None
    mirostat_eta: float | None = None
    # options that tune how Ollama runs a model (context size, threads, GPU layers, memory mapping): the server
    # here decides those, and none changes what is sampled, so they are accepted and ignored
    num_ctx: Int | None = None
    num_batch: Int | None = None
    num_gpu: Int | None = None
    main_gpu: Int | None = None
    num_thread: Int | None = None
    num_keep: Int | None = None
    use_mmap: bool | None = None
    use_mlock: bool | None = None
    numa: bool | None = None
    low_vram: bool | None = None
    f16_kv: bool | None = None
    vocab_only: bool | None = None
    logits_all: bool | None = None
    penalize_newline: bool | None = None

    # strict (no "1" for true, 0 for false), but a float reads an integer and an integer a whole float, as every
    # number field here does: Ollama clients send 0.7 and 1 alike
    model_config = ConfigDict(extra="forbid", strict=True)



def option_fields(o: OllamaOptions) -> dict[str, Any]:
    """The OpenAI request fields `o` stands for (a 400 naming an option that asks for what is not run here)."""
    body: dict[str, Any] = {}
    for name in ("temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty"):
        if getattr(o, name) is not None:
            body[name] = getattr(o, name)
    if o.num_predict is not None and o.num_predict > 0:
        body["max_tokens"] = o.num_predict
    if o.stop:
        body["stop"] = o.stop
    if o.repeat_penalty is not None and o.repeat_penalty != 1.0 and o.repeat_last_n != 0:
        body["repetition_penalty"] = o.repeat_penalty
        window = REPEAT_LAST_N if o.repeat_last_n is None else o.repeat_last_n
        if window > 0:   # -1: the whole context
            body["repeat_last_n"] = window
    for name, neutral in NEUTRAL_OPTIONS.items():
        value = getattr(o, name)
        if value is not None and value != neutral:
            raise bad_request(f"options.{name} is not supported (no such sampler here); send {neutral} or leave it "
                              "out.", param=f"options.{name}", code="unsupported_parameter")
    return body
