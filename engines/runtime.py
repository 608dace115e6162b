"""Runtime: the loaded model plus its engines, as the gateway sees it (contracts.engine.Backend)."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from contracts.chat import ChatPrompt, PromptLogprobs, ReplyFormat
from contracts.engine import (
    CancelToken,
    Engine,
    GenerationChunk,
    Pause,
    PrefixHint,
    StepResult,
    SwitchRule,
    checked_token_ids,
)
from contracts.errors import (
    ContextLengthExceeded,
    EngineFailure,
    EngineUnavailableError,
    InvalidRequestError,
    SwitchyardError,
)
from contracts.names import SAMPLED_SUFFIX
from contracts.sampling import SamplingParams

from . import device_memory
from .batch import DecodeBatch
from .bundle import ModelBundle, load_bundle
from .chat import chat_prompt
from .checkpoint import default_model_dir, has_mtp_tensors, mtp_layer_count, serving_hints
from .ddtree import DDTreeEngine
from .dflash import load_drafter
from .embed import embeddings
from .mtp import MTPEngine
from .mtp_head import load_mtp_head
from .prefill import PrefixPlan
from .prefix_cache import PrefixCache
from .processing import ending_tokens
from .raw import RawEngine
from .reply import FirstCallEnd, ReplySplitter, split_reply, stop_skips
from .request_cost import DrafterShape, RequestCost
from .resume import resumable
from .rows import READS_NOTHING, widest
from .score import prompt_logprobs
from .text import fill_in_middle, fim_token_ids, start_of_text, stream_text

log = logging.getLogger("switchyard.runtime")

def default_draft_dir(model_dir: Path) -> Path | None:
    """A drafter shipped beside the target (`<family>/drafter`), if any."""
    candidate = model_dir.parent / "drafter"
    return candidate if (candidate / "config.json").exists() else None


@contextlib.contextmanager
def _fails_request(what: str, engine: str = "raw") -> Iterator[None]:
    """A model failure (an engine's, or a forward of the target outside them: scoring, embedding) fails the
    request as EngineFailure; it must never take the server down."""
    try:
        yield
    except SwitchyardError:
        raise
    except Exception as exc:
        log.exception("%s failed", what)
        raise EngineFailure(engine, exc) from exc


def request_cost(bundle: ModelBundle, mtp: Engine | None, ddtree: Engine | None) -> RequestCost:
    """What a request's caches hold with these engines loaded (engines.request_cost, from the config)."""
    itemsize, is_mtp = bundle.dtype.size, isinstance(mtp, MTPEngine)
    if not isinstance(ddtree, DDTreeEngine):
        return RequestCost.of(bundle.text_config, itemsize, mtp=is_mtp)
    cfg, window = ddtree.drafter.cfg, ddtree.context_window
    return RequestCost.of(bundle.text_config, itemsize, mtp=is_mtp,
                          drafter=DrafterShape(cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim),
                          drafter_rows=None if window is None else ddtree.context_sink + window)


class Runtime:
    """Implements contracts.engine.Backend. Everything but the properties runs on one worker thread."""

    def __init__(self, bundle: ModelBundle, engines: dict[str, Engine], model_id: str, prefix_cache_bytes: int = 0):
        self.bundle = bundle
        self.engines = engines
        self.model_id = model_id
        self.prefix_cache: PrefixCache | None = None
        self.set_prefix_cache(prefix_cache_bytes)
        self._batch_rows = 0   # what set_batching allowed (the policy may only lower it)
        mtp = engines.get("mtp")
        ddtree = engines.get("ddtree")
        self.mtp_head_bytes = mtp.head.nbytes() if isinstance(mtp, MTPEngine) else 0
        self.drafter_bytes = ddtree.drafter.nbytes() if isinstance(ddtree, DDTreeEngine) else 0
        self._request_cost = request_cost(bundle, mtp, ddtree)

    def set_tree_budget(self, budget: int) -> None:
        """Change the DDTree budget (from the live policy); no-op without a drafter."""
        ddtree = self.engines.get("ddtree")
        if isinstance(ddtree, DDTreeEngine) and budget != ddtree.budget:
            if budget < 1:
                raise ValueError("tree budget must be >= 1")
            log.info("ddtree budget %d -> %d", ddtree.budget, budget)
            ddtree.budget = budget

    @property
    def embedding_size(self) -> int:
        return self.bundle.hidden_size

    @property
    def engine_names(self) -> tuple[str, ...]:
        return tuple(self.engines)

    @property
    def context_length(self) -> int:
        return self.bundle.context_length

    @property
    def default_temperature(self) -> float:
        return self.bundle.generation.temperature

    def encode_chat(self, messages: list[dict]) -> list[int]:
        return self.chat_prompt(messages).ids

    def chat_prompt(self, messages: list[dict], tools: list[dict] | None = None, tool_choice: Any = None,
                    template_kwargs: dict[str, Any] | None = None, continue_final: bool = False, *,
                    answer_schema: dict[str, Any] | None = None) -> ChatPrompt:
        return chat_prompt(self.bundle.tokenizer, messages, tools, tool_choice, template_kwargs, continue_final,
                           answer_schema=answer_schema)

    @property
    def fills_in_middle(self) -> bool:
        return fim_token_ids(self.bundle.tokenizer) is not None

    def encode_prompt(self, prompt: str | Sequence[int], suffix: str | None = None) -> list[int]:
        if suffix:
            return fill_in_middle(self.bundle.tokenizer, self._encoded(prompt), self._encoded(suffix))
        if prompt == "":
            return start_of_text(self.bundle.tokenizer)
        return self._encoded(prompt)

    def _encoded(self, text: str | Sequence[int]) -> list[int]:
        if isinstance(text, str):
            return list(self.bundle.tokenizer.encode(text, add_special_tokens=False))
        return checked_token_ids(text, self.bundle.vocab_size)

    def prompt_text(self, prompt: str | Sequence[int]) -> str:
        if isinstance(prompt, str):
            return prompt
        return self.bundle.tokenizer.decode(checked_token_ids(prompt, self.bundle.vocab_size))

    def prompt_logprobs(self, prompt_ids: Sequence[int], top: int) -> PromptLogprobs:
        if not prompt_ids:
            raise InvalidRequestError("the prompt is empty", param="prompt")
        with _fails_request("scoring the prompt"):
            return prompt_logprobs(self.bundle, prompt_ids, top)

    def embed(self, inputs: Sequence[Sequence[int]]) -> Iterator[Pause | dict[int, np.ndarray]]:
        with _fails_request("embedding"):
            yield from embeddings(self.bundle, inputs)

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        engine: str,
        cancel: CancelToken,
        switch: SwitchRule | None = None,
        reply: ReplyFormat | None = None,
        prefix: PrefixHint | None = None,
    ) -> Iterator[GenerationChunk]:
        if engine not in self.engines:
            raise EngineUnavailableError(
                f"engine {engine!r} is not loaded; loaded engines: {', '.join(self.engines)}"
            )
        if not prompt_ids:
            raise InvalidRequestError("the prompt is empty", param="prompt")
        if len(prompt_ids) + params.max_tokens > self.context_length:
            raise ContextLengthExceeded(len(prompt_ids), self.context_length, params.max_tokens)
        plan = PrefixPlan(self.prefix_cache, prefix.scope, prefix.points) \
            if prefix is not None and self.prefix_cache is not None else None

        def start(written: tuple[int, ...], running: str, rule: SwitchRule | None) -> Iterator[StepResult | Pause]:
            peers = {name: e for name, e in self.engines.items() if name not in ("raw", running)}
            return self._counted(self.engines[running].generate(prompt_ids, params, cancel, switch=rule, peers=peers,
                                                                prefix=plan, written=written))

        steps = resumable(start, engine, switch, cancel)
        skip, inside = stop_skips(self.bundle.tokenizer, reply) if reply is not None else ((), None)
        chunks = stream_text(
            steps, self.bundle.tokenizer, eos_token_ids=ending_tokens(self.bundle.eos_token_ids, params),
            max_tokens=params.max_tokens, stops=params.stop, prompt_tokens=len(prompt_ids),
            cancelled=lambda: cancel.cancelled,
            ends=FirstCallEnd(self.bundle.tokenizer, reply) if FirstCallEnd.wanted(reply) else None,
            skip=skip, inside=inside, hidden=self._special_ids if params.skip_special_tokens else frozenset(),
            min_tokens=params.min_tokens,
        )
        if reply is not None:
            chunks = split_reply(chunks, ReplySplitter(self.bundle.tokenizer, reply))
        with _fails_request(f"engine {engine}", engine):
            yield from chunks

    @functools.cached_property
    def _special_ids(self) -> frozenset[int]:
        """The tokenizer's special tokens (<|im_end|>, <|endoftext|>, ...: not the reply's <think> / <tool_call>,
        which the splitter reads), left out of the text under skip_special_tokens."""
        return frozenset(int(t) for t in getattr(self.bundle.tokenizer, "all_special_ids", None) or ())

    def _counted(self, steps: Iterator[StepResult]) -> Iterator[StepResult]:
        """The engine's steps, with the request counted as generating while they run (the decode
        batch's load, which a speculative request weighs against its own cycles)."""
        batch = self.bundle.decode_batch
        if batch is None:
            yield from steps
            return
        with batch.generating():
            try:
                for step in steps:
                    # a step taken while others share the worker: only a batched step's own time is clean
                    shared = isinstance(step, StepResult) and batch.active > 1 and step.batch_rows == 1
                    yield replace(step, interleaved=True) if shared else step
            finally:
                steps.close()

    def set_batching(self, max_rows: int) -> None:
        """Raw decoders running at once share one forward per step, up to `max_rows` (< 2: off)."""
        self.bundle.decode_batch = DecodeBatch(self.bundle, max_rows) if max_rows >= 2 else None
        self._batch_rows = max_rows

    def set_batch_limit(self, rows: int) -> None:
        """The live policy's cap on rows per batched step (never above what set_batching allowed);
        rows already in the batch stay until they finish."""
        batch = self.bundle.decode_batch
        if batch is not None:
            batch.max_rows = max(2, min(rows, self._batch_rows))

    def batch_stats(self) -> dict[str, float] | None:
        batch = self.bundle.decode_batch
        if batch is None:
            return None
        return {"rows": len(batch.rows), "groups": len(batch.groups), "streams": batch.streams, "generating": batch.active,
                "steps": batch.steps, "row_steps": batch.row_steps, "max_rows": batch.max_rows}

    def cycle_mode_stats(self) -> dict[str, dict[str, float]]:
        """By engine name (`mtp`, `mtp/sampled`, ...): the cycle modes measured for its current shape
        (DDTree: its budget now), greedy and sampled apart."""
        measured = self.bundle.cycle_modes.stats()
        out: dict[str, dict[str, float]] = {}
        for name, engine in self.engines.items():
            key = getattr(engine, "cycle_key", None)
            for suffix in ("", SAMPLED_SUFFIX):
                if key is not None and key + suffix in measured:
                    out[name + suffix] = measured[key + suffix]
        return out

    def end_thread(self) -> None:
        """MLX 0.32 keeps streams and compile caches per thread and no longer frees them at exit on
        its own: a thread that ran MLX work must clear its streams before it ends, or their
        destructors run during interpreter shutdown and abort the process (exit 134)."""
        mx.synchronize()   # nothing of this thread's may still be running on a stream
        mx.clear_streams()

    def set_prefix_cache(self, max_bytes: int) -> None:
        """Turn the prefix cache on with a byte budget (0: off; entries held now are dropped)."""
        # one entry serves every engine: it keeps the layers any of them builds its state from
        capture = tuple(sorted({i for e in self.engines.values() for i in getattr(e, "capture", ())}))
        reads = widest(getattr(e, "reads", READS_NOTHING) for e in self.engines.values())
        self.prefix_cache = PrefixCache(max_bytes, capture, reads=reads) if max_bytes > 0 else None

    def prefix_cache_stats(self) -> dict[str, float] | None:
        store = self.prefix_cache
        if store is None:
            return None
        s = store.stats
        return {"lookups": s.lookups, "hits": s.hits, "cached_tokens": s.cached_tokens, "evictions": s.evictions,
                "inserts": s.inserts, "bytes": store.bytes, "entries": len(store.entries),
                "max_bytes": store.max_bytes}

    def request_bytes(self, tokens: int) -> int:
        return self._request_cost.bytes(tokens)

    def wire_memory(self) -> int | None:
        """Serving: keep the model's memory resident on Metal (engines.device_memory.wire_recommended)."""
        return device_memory.wire_recommended()

    def device_free_bytes(self) -> int | None:
        """Room the device has left for caches after loading (None: the device reports no limit)."""
        return device_memory.free_bytes()

    def memory_bytes(self) -> dict[str, int]:
        return {
            "parameters": self.bundle.parameter_bytes(),
            "mtp_head": self.mtp_head_bytes,
            "drafter": self.drafter_bytes,
            "prefix_cache": self.prefix_cache.bytes if self.prefix_cache is not None else 0,
            "active": int(mx.get_active_memory()),
            "peak": int(mx.get_peak_memory()),
        }


def warm_tree_layouts(engine: DDTreeEngine) -> DDTreeEngine:
    """On a GPU, trace every tree layout of the engine's budget now (kernel compiles for new shapes
    are dear there); on the CPU backend a layout's first use costs little and tests build many engines."""
    if mx.default_device() == mx.gpu:
        started = time.perf_counter()
        count = engine.warm_layouts()
        log.info("ddtree budget %d: %d tree layouts traced at load in %.1f s", engine.budget, count,
                 time.perf_counter() - started)
    return engine


def load_runtime(
    model_dir: str | os.PathLike[str] | None = None,
    *,
    mtp: bool | None = None,
    mtp_weights: str | os.PathLike[str] | None = None,
    draft_dir: str | os.PathLike[str] | None = None,
    tree_budget: int = 4,
    dtype: str | None = "auto",
    prefix_cache_bytes: int = 0,
) -> Runtime:
    """Load the target once and build every engine on top of it.

    mtp=None enables MTP when the checkpoint (or `mtp_weights`) has MTP tensors; draft_dir=None
    uses a drafter shipped beside the target, if any; dtype "auto" casts half-precision weights to
    float32 on the CPU (see bundle.auto_dtype), None keeps the stored dtype. The heads' context windows
    and DDTree's greedy tree temperature come from the family's serving.json, if any (ServingHints).
    """
    path = Path(model_dir) if model_dir is not None else default_model_dir()
    bundle = load_bundle(path, dtype=dtype)
    hints = serving_hints(path)
    engines: dict[str, Engine] = {"raw": RawEngine(bundle)}
    if mtp is None:  # auto: on when the checkpoint (or the sidecar) carries an MTP head
        source = Path(mtp_weights) if mtp_weights is not None else path
        mtp = mtp_layer_count(bundle.config) > 0 and source.exists() and has_mtp_tensors(source)
    if mtp:
        engines["mtp"] = MTPEngine(bundle, load_mtp_head(bundle, mtp_weights), prompt_window=hints.mtp_prompt_window)
    draft = Path(draft_dir) if draft_dir is not None else default_draft_dir(path)
    if draft is not None:
        drafter = load_drafter(draft, bundle)
        cfg = drafter.cfg
        log.info("drafter %s: %d layers, block %d, target layers %s, mask token %d, %s", draft, cfg.num_hidden_layers,
                 cfg.block_size, list(cfg.target_layer_ids), cfg.mask_token_id, cfg.rope.describe())
        engines["ddtree"] = warm_tree_layouts(DDTreeEngine(bundle, drafter, budget=tree_budget,
                                                           context_window=hints.drafter_context_window,
                                                           greedy_tree_temperature=hints.greedy_tree_temperature))
    log.info("loaded %s with engines %s", path, ", ".join(engines))
    return Runtime(bundle, engines, model_id=path.name if path.name != "target" else path.parent.name,
                   prefix_cache_bytes=prefix_cache_bytes)
