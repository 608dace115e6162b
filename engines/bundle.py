"""ModelBundle: the ONE loaded copy of the target (mlx-lm), shared by every engine."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx import nn
from mlx.utils import tree_flatten

from contracts.errors import ModelLoadError

from . import gdn_prefill
from .checkpoint import read_config, text_config
from .cycle_modes import CycleModes
from .request_cost import kv_bytes_per_token

SUPPORTED_MODEL_TYPES = ("qwen3_5", "qwen3_5_moe")
# Qwen3.5's multimodal RoPE layout keys: transformers' Qwen3_5TextConfig ignores them when it checks
# rope_parameters, but a flat (un-nested) qwen3_5 config.json is checked by the top-level config class,
# which does not, and every tokenizer load then warns about its own model's keys.
_QWEN_MROPE_KEYS = {"mrope_section", "mrope_interleaved"}


class _QwenMropeWarningFilter(logging.Filter):
    """Drops exactly transformers' "Unrecognized keys in `rope_parameters`" warning when the keys it
    names are only Qwen3.5's mrope keys (any other unrecognised key still warns)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith("Unrecognized keys in `rope_parameters`"):
            return True
        named = {key for key in _QWEN_MROPE_KEYS if repr(key) in message}
        listed = message.rsplit(":", 1)[-1].count("'") // 2
        return not (named and len(named) == listed)


logging.getLogger("transformers.modeling_rope_utils").addFilter(_QwenMropeWarningFilter())


@dataclass(frozen=True)
class GenerationDefaults:
    """Sampling defaults from generation_config.json (used when a request is silent)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0

    @classmethod
    def from_dir(cls, path: Path) -> GenerationDefaults:
        file = path / "generation_config.json"
        if not file.exists():
            return cls()
        raw = json.loads(file.read_text())
        if raw.get("do_sample") is False:
            return cls(temperature=0.0)
        return cls(
            temperature=float(raw.get("temperature", 1.0)),
            top_p=float(raw.get("top_p", 1.0)),
            top_k=int(raw.get("top_k", 0) or 0),
            min_p=float(raw.get("min_p", 0.0) or 0.0),
        )


class ModelBundle:
    """The target model, its tokenizer and the pieces the engines share by reference."""

    def __init__(self, path: Path, model: nn.Module, tokenizer: Any, config: dict[str, Any]):
        gdn_prefill.install()   # a prompt's GatedDeltaNet in chunks where mlx-lm would loop per token
        self.path = path
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self.text_config = text_config(config)
        self.generation = GenerationDefaults.from_dir(path)
        language_model = getattr(model, "language_model", model)
        self.language_model = language_model          # has .model (decoder stack) and lm_head
        self.decoder = language_model.model           # embed_tokens, layers, norm
        self.eos_token_ids: frozenset[int] = frozenset(int(t) for t in tokenizer.eos_token_ids)
        self.decode_batch: Any = None   # engines.batch.DecodeBatch once the runtime turns batching on
        self.cycle_modes = CycleModes()  # per speculative engine: pipelined or host cycles, measured
        # a tokenizer_config's model_max_length is not the model's window (the demo's says 4096, its
        # positions go to 8192): transformers warned of "indexing errors" at prompts the runtime serves
        hf_tokenizer = getattr(tokenizer, "_tokenizer", None)
        if hf_tokenizer is not None and hasattr(hf_tokenizer, "model_max_length"):
            hf_tokenizer.model_max_length = self.context_length

    # -- shared pieces (engines reference these; nothing of the target is copied) ---------------
    @property
    def vocab_size(self) -> int:
        """Width of the target's logits."""
        return int(self.text_config["vocab_size"])

    @property
    def layers(self) -> list[nn.Module]:
        return self.language_model.layers

    @property
    def embed_tokens(self) -> nn.Module:
        return self.decoder.embed_tokens

    def lm_head(self, hidden: mx.array) -> mx.array:
        """Logits from final-norm hidden states (tied or untied head)."""
        if self.language_model.args.tie_word_embeddings:
            return self.decoder.embed_tokens.as_linear(hidden)
        return self.language_model.lm_head(hidden)

    def make_cache(self) -> list[Any]:
        return self.model.make_cache()

    @property
    def dtype(self) -> mx.Dtype:
        """Compute dtype (a quantized embedding stores uint32 weights; its scales carry the dtype)."""
        embed = self.decoder.embed_tokens
        return embed.scales.dtype if hasattr(embed, "scales") else embed.weight.dtype

    @property
    def context_length(self) -> int:
        return int(self.text_config.get("max_position_embeddings", 32768))

    @property
    def hidden_size(self) -> int:
        return int(self.text_config["hidden_size"])

    def parameter_bytes(self) -> int:
        return sum(v.nbytes for _, v in tree_flatten(self.model.parameters()))

    def kv_bytes_per_token(self) -> int:
        """Attention-cache bytes one token of context adds (engines.request_cost)."""
        return kv_bytes_per_token(self.text_config, self.dtype.size)


def _physical_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def auto_dtype(model: nn.Module) -> str | None:
    """On the CPU, half-precision weights miss the BLAS path (MLX runs its own slower matmul):
    cast an unquantized bf16/f16 model to float32 when the float32 copy takes at most a quarter
    of RAM. Elsewhere (Metal, CUDA) keep the checkpoint's dtype."""
    if mx.default_device() != mx.cpu:
        return None
    weights = [v for _, v in tree_flatten(model.parameters())]
    if any(v.dtype == mx.uint32 for v in weights):  # quantized
        return None
    half = sum(v.size for v in weights if v.dtype in (mx.bfloat16, mx.float16))
    if not half or half * 4 > _physical_memory_bytes() // 4:
        return None
    return "float32"


def load_bundle(path: str | os.PathLike[str], *, dtype: str | None = None) -> ModelBundle:
    """Load a local Qwen3.5-family checkpoint with mlx-lm (never downloads).

    dtype: None keeps the stored dtype; "auto" applies `auto_dtype`; else a float dtype name."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    model_dir = Path(path).expanduser().resolve()
    config = read_config(model_dir)
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ModelLoadError(
            f"{model_dir}: model_type {model_type!r} is not supported (expected one of {SUPPORTED_MODEL_TYPES})"
        )
    if not any(model_dir.glob("*.safetensors")):
        raise ModelLoadError(f"{model_dir} holds no *.safetensors weights")
    from mlx_lm.utils import load

    try:
        model, tokenizer = load(str(model_dir))
    except (FileNotFoundError, ValueError, KeyError, OSError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"cannot load {model_dir}: {exc}") from exc
    if dtype == "auto":
        dtype = auto_dtype(model)
    if dtype is not None:
        target = getattr(mx, dtype)
        model.set_dtype(target, lambda current: mx.issubdtype(current, mx.floating))
    mx.eval(model.parameters())
    return ModelBundle(model_dir, model, tokenizer, config)
