"""What a model directory holds, before committing memory to it: `switchyard inspect`, and the
facts `switchyard serve` logs at start. Reads configs and safetensors headers only (no tensor, no
MLX), so it is quick on a 27B checkpoint."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from contracts.errors import ModelLoadError

from .checkpoint import (
    INDEX_FILE,
    layer_counts,
    mtp_layer_count,
    mtp_tensor_names,
    read_config,
    safetensors_header,
    text_config,
)
from .dflash_config import DrafterConfig
from .request_cost import DrafterShape, RequestCost


def _size(count: int) -> str:
    return f"{count / (1 << 30):.2f} GiB" if count >= 1 << 30 else f"{count / (1 << 20):.1f} MiB"


DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "U32": 4, "I32": 4, "U8": 1, "I8": 1, "F64": 8, "I64": 8}


@dataclass
class Weights:
    files: int
    parameters: int            # stored elements (packed quantized words count as stored)
    bytes: int
    dtypes: dict[str, int]     # safetensors dtype -> tensors

    @classmethod
    def of(cls, files: list[Path], keep=lambda name: True) -> "Weights":
        params = size = 0
        dtypes: dict[str, int] = {}
        for file in files:
            for name, info in safetensors_header(file).items():
                if not keep(name):
                    continue
                count = 1
                for dim in info["shape"]:
                    count *= dim
                params += count
                size += count * DTYPE_BYTES.get(info["dtype"], 2)
                dtypes[info["dtype"]] = dtypes.get(info["dtype"], 0) + 1
        return cls(len(files), params, size, dtypes)


@dataclass
class Inspection:
    model: str
    model_type: str
    architectures: list[str]
    layers: int
    linear_attention_layers: int      # GatedDeltaNet
    full_attention_layers: int
    hidden_size: int
    vocab_size: int
    context_length: int
    experts: int | None                # MoE: experts per layer (None: dense)
    quantization: dict | None
    weights: Weights
    mtp: dict                          # found, where, layers, tensors, bytes / reason
    drafter: dict | None               # compatibility of the DFlash drafter, or None
    chat_template: str                 # where the template comes from, and whether it has tool calls
    generation_defaults: dict
    memory: dict[str, int] = field(default_factory=dict)   # bytes, per engine at `context` tokens
    memory_context: int = 0
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)

    def lines(self) -> list[str]:
        moe = f", MoE {self.experts} experts" if self.experts else ""
        quant = (f"{self.quantization.get('bits')}-bit, group {self.quantization.get('group_size')}"
                 if self.quantization else "none (" + ", ".join(sorted(self.weights.dtypes)) + ")")
        out = [
            f"model        {self.model}",
            f"architecture {self.model_type} {self.architectures}: {self.layers} layers ({self.linear_attention_layers} "
            f"GatedDeltaNet + {self.full_attention_layers} full attention), hidden {self.hidden_size}, vocab "
            f"{self.vocab_size}, context {self.context_length}{moe}",
            f"quantization {quant}",
            f"weights      {self.weights.files} file(s), {self.weights.parameters / 1e6:.1f} M stored elements, "
            f"{_size(self.weights.bytes)}",
        ]
        m = self.mtp
        if m["found"]:
            out.append(f"mtp head     found {m['where']}: {m['tensors']} tensors, {_size(m['bytes'])}")
        else:
            out.append(f"mtp head     not available: {m['reason']}")
        if self.drafter is None:
            out.append("drafter      none (ddtree off; --draft DIR)")
        else:
            d = self.drafter
            state = "compatible" if d["compatible"] else "INCOMPATIBLE: " + "; ".join(d["problems"])
            out.append(f"drafter      {d['path']}: {state}; {d['layers']} layers, block {d['block_size']}, target layers "
                       f"{d['target_layer_ids']}, mask token {d['mask_token_id']}, {d['rope']}")
        out.append(f"chat         {self.chat_template}")
        out.append(f"defaults     {self.generation_defaults or '(no generation_config.json)'}")
        mem = ", ".join(f"{k} {_size(v)}" for k, v in self.memory.items())
        out.append(f"memory       at {self.memory_context} tokens of context: {mem}")
        out += [f"warning      {w}" for w in self.warnings]
        return out


def _mtp(model_dir: Path, config: dict, mtp_weights: Path | None) -> dict:
    layers = mtp_layer_count(config)
    if layers == 0:
        return {"found": False, "reason": "the config declares no MTP layers (mtp_num_hidden_layers)", "layers": 0}
    for source, where in ((mtp_weights, "in --mtp-weights"), (model_dir, "in the checkpoint")):
        if source is None or not source.exists():
            continue
        names = mtp_tensor_names(source)
        if names:
            files = sorted(set(names.values()))
            weights = Weights.of(files, keep=lambda n: n in names)
            return {"found": True, "where": f"{where} ({', '.join(f.name for f in files)})", "layers": layers,
                    "tensors": len(names), "bytes": weights.bytes}
    hint = "pass --mtp-weights with the original checkpoint" if mtp_weights is None else "no mtp.* tensors there either"
    return {"found": False, "layers": layers,
            "reason": f"the config declares {layers} MTP layer(s) but no mtp.* tensors are stored ({hint}; "
                      "MLX conversions strip them)"}


def _drafter(draft_dir: Path | None, cfg: dict, model_dir: Path) -> dict | None:
    if draft_dir is None:
        candidate = model_dir.parent / "drafter"
        if not (candidate / "config.json").exists():
            return None
        draft_dir = candidate
    raw = json.loads((draft_dir / "config.json").read_text()) if (draft_dir / "config.json").exists() else {}
    problems: list[str] = []
    if "DFlashDraftModel" not in raw.get("architectures", []):
        return {"path": str(draft_dir), "compatible": False, "problems": ["not a DFlash drafter (architectures)"],
                "layers": 0, "block_size": 0, "target_layer_ids": [], "mask_token_id": None, "rope": "", "bytes": 0}
    try:
        d = DrafterConfig.from_dict(raw)
    except ModelLoadError as exc:
        return {"path": str(draft_dir), "compatible": False, "problems": [str(exc)], "layers": 0, "block_size": 0,
                "target_layer_ids": [], "mask_token_id": None, "rope": "", "bytes": 0}
    layers, vocab = int(cfg.get("num_hidden_layers", 0)), int(cfg.get("vocab_size", 0))
    if d.hidden_size != int(cfg.get("hidden_size", 0)):
        problems.append(f"hidden_size {d.hidden_size} != target {cfg.get('hidden_size')}")
    if not d.target_layer_ids or max(d.target_layer_ids) >= layers or min(d.target_layer_ids) < 0:
        problems.append(f"target_layer_ids {list(d.target_layer_ids)} out of range for {layers} target layers")
    if not 0 <= d.mask_token_id < vocab:
        problems.append(f"mask_token_id {d.mask_token_id} outside the target vocabulary ({vocab})")
    files = sorted(draft_dir.glob("*.safetensors"))
    if not files:
        problems.append("no *.safetensors weights")
    return {"path": str(draft_dir), "compatible": not problems, "problems": problems,
            "layers": d.num_hidden_layers, "block_size": d.block_size, "target_layer_ids": list(d.target_layer_ids),
            "mask_token_id": d.mask_token_id, "rope": d.rope.describe(), "bytes": Weights.of(files).bytes if files else 0,
            "kv_heads": d.num_key_value_heads, "head_dim": d.head_dim}


def _chat_template(model_dir: Path) -> str:
    jinja = model_dir / "chat_template.jinja"
    config_file = model_dir / "tokenizer_config.json"
    template, source = None, ""
    if jinja.exists():
        template, source = jinja.read_text(), "chat_template.jinja"
    elif config_file.exists():
        template = json.loads(config_file.read_text()).get("chat_template")
        source = "tokenizer_config.json"
    if not template:
        return "no chat template: chat requests are refused, completions work"
    if isinstance(template, list):  # named templates
        template = " ".join(t.get("template", "") for t in template if isinstance(t, dict))
    features = [f for f, marker in (("tools", "tool"), ("thinking", "think")) if marker in template]
    return f"{source} ({len(template)} chars; {', '.join(features) if features else 'plain chat'})"


def _memory(cfg: dict, weights: Weights, mtp: dict, drafter: dict | None, context: int, cpu: bool) -> dict[str, int]:
    """Weights plus one request's caches at `context` tokens (engines.request_cost, as the server reserves them).
    On the CPU unquantized weights run as float32 (`--dtype auto`): half-precision ones count twice."""
    quantized = bool(cfg.get("quantization") or cfg.get("quantization_config"))
    half = bool({"BF16", "F16"} & set(weights.dtypes))
    factor = 2 if cpu and half and not quantized and "F32" not in weights.dtypes else 1
    itemsize = 4 if (cpu and not quantized) or not half else 2   # the compute dtype's
    target = weights.bytes * factor - (mtp.get("bytes", 0) * factor if mtp.get("where", "").startswith("in the checkpoint") else 0)
    caches = RequestCost.of(cfg, itemsize).bytes(context)
    out = {"raw": target + caches}
    if mtp.get("found"):
        out["mtp"] = out["raw"] + mtp["bytes"] * factor + \
            RequestCost.of(cfg, itemsize, mtp=True).bytes(context) - caches
    if drafter and drafter.get("compatible"):
        shape = DrafterShape(drafter["layers"], drafter["kv_heads"], drafter["head_dim"])
        out["ddtree"] = out["raw"] + drafter["bytes"] * factor + \
            RequestCost.of(cfg, itemsize, drafter=shape).bytes(context) - caches
    out["all engines"] = out["raw"] + sum(out[e] - out["raw"] for e in ("mtp", "ddtree") if e in out)
    return out


def inspect_checkpoint(model_dir: str | Path, mtp_weights: str | Path | None = None, draft_dir: str | Path | None = None,
                       context: int = 32768, cpu: bool = False) -> Inspection:
    model_dir = Path(model_dir).expanduser()
    config = read_config(model_dir)
    cfg = text_config(config)
    index = model_dir / INDEX_FILE
    files = (sorted({model_dir / f for f in json.loads(index.read_text())["weight_map"].values()})
             if index.exists() else sorted(model_dir.glob("*.safetensors")))
    if not files:
        raise ModelLoadError(f"{model_dir} holds no *.safetensors weights")
    weights = Weights.of(files)
    mtp = _mtp(model_dir, config, Path(mtp_weights).expanduser() if mtp_weights else None)
    drafter = _drafter(Path(draft_dir).expanduser() if draft_dir else None, cfg, model_dir)
    linear, full = layer_counts(cfg)
    generation_file = model_dir / "generation_config.json"
    defaults = json.loads(generation_file.read_text()) if generation_file.exists() else {}
    warnings = []
    if config.get("model_type") not in ("qwen3_5", "qwen3_5_moe"):
        warnings.append(f"model_type {config.get('model_type')!r} is not a Qwen3.5-family model: serve will refuse it")
    if drafter and not drafter["compatible"]:
        warnings.append("the drafter will not load: " + "; ".join(drafter["problems"]))
    info = Inspection(
        model=str(model_dir), model_type=str(config.get("model_type")), architectures=list(config.get("architectures", [])),
        layers=int(cfg.get("num_hidden_layers", 0)), linear_attention_layers=linear, full_attention_layers=full,
        hidden_size=int(cfg.get("hidden_size", 0)), vocab_size=int(cfg.get("vocab_size", 0)),
        context_length=int(cfg.get("max_position_embeddings", 0)), experts=cfg.get("num_experts") or None,
        quantization=config.get("quantization") or config.get("quantization_config"), weights=weights, mtp=mtp,
        drafter=drafter, chat_template=_chat_template(model_dir),
        generation_defaults={k: v for k, v in defaults.items() if k in ("temperature", "top_p", "top_k", "min_p",
                                                                        "max_new_tokens", "eos_token_id")},
        memory_context=context, warnings=warnings,
    )
    info.memory = _memory(cfg, weights, mtp, drafter, context, cpu)
    return info
