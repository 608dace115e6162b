"""Train the switchyard-demo family on one GPU: target, then MTP head, then DFlash drafter.

Each phase is time-budgeted (its step count is fixed after timing a few steps and printed; pass
--*-steps to replay a run exactly), seeded, prints progress, and writes its weights as bf16
safetensors shards (<= 14 MiB, HF names) plus report.json into --out. Every phase runs the one step
loop of train_common.train_loop. `switchyard-train export` turns the shards into
models/switchyard-demo/. See training/README.md for the semantics of every phase.

  python -m training.train_family --corpus training/corpus/pack --out $OUT          # on the device
  switchyard-train family --corpus training/corpus --out /tmp/t --tiny              # CPU smoke test
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from engines.checkpoint import is_mtp_tensor

from . import family_config as fc
from .data import BatchSampler, heldout_batches, load_streams
from .paths import demo_tokenizer_dir, in_checkout, path_option
from .torch_dflash import DFlashDrafter, block_mask
from .torch_mtp_head import MtpHead
from .train_common import (
    Phase,
    RunReport,
    StepOutput,
    autocast,
    freeze,
    load_shards,
    seed_everything,
    setup_device,
    train_loop,
)


def build_target(config_dict: dict, device: str):
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM

    config = Qwen3_5TextConfig(**fc.hf_text_config_kwargs(config_dict))
    config._attn_implementation = "sdpa"
    model = Qwen3_5ForCausalLM(config).to(device)
    return model, config


def lm_head_weight(target) -> torch.Tensor:
    return target.lm_head.weight


def phase(args, name: str, weight_decay: float, warmup: int, loss_name: str = "loss") -> Phase:
    """The schedule of phase `name` from its --NAME-lr / --NAME-seconds / --NAME-steps options."""
    return Phase(name, getattr(args, f"{name}_lr"), weight_decay, warmup, getattr(args, f"{name}_seconds"),
                 getattr(args, f"{name}_steps"), args.log_every, loss_name)


def batches(sampler: BatchSampler, size: int, device: str):
    """The phase's training batches, (size, T+1) on the device, drawn as the loop asks for them."""
    while True:
        yield torch.from_numpy(sampler.batch(size)).to(device, non_blocking=True)


# ----------------------------------------------------------------------------------------- target

def target_logits(target, batch: torch.Tensor, device: str) -> torch.Tensor:
    """The target's (B, T, V) logits on a (B, T+1) batch's inputs."""
    with autocast(device):
        return target(input_ids=batch[:, :-1]).logits


def next_token_nll(logits: torch.Tensor, batch: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of (B, T, V) logits against a (B, T+1) batch's next tokens."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction=reduction)


def target_nll(target, batch: torch.Tensor, device: str, reduction: str = "mean") -> torch.Tensor:
    """Next-token cross-entropy of the target on a (B, T+1) batch."""
    return next_token_nll(target_logits(target, batch, device), batch, reduction)


def unlikelihood(logits: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
    """Token-level unlikelihood (Welleck et al. 2019) of (B, T, V) logits on a (B, T+1) batch: at every
    position, -log(1 - p(c)) summed over the tokens c the window already holds, but the true next one.
    It pushes down what a greedy loop would repeat; mean over positions."""
    inputs, targets = batch[:, :-1], batch[:, 1:]
    seen = torch.zeros(logits.shape, dtype=torch.uint8, device=logits.device)
    seen.scatter_(2, inputs.unsqueeze(-1), 1)
    seen = torch.cummax(seen, dim=1).values          # every token of the window up to this position
    seen.scatter_(2, targets.unsqueeze(-1), 0)
    probs = torch.softmax(logits.float(), -1)
    penalty = -torch.log((1.0 - probs).clamp_min(1e-5)) * seen
    return penalty.sum(-1).mean()


def train_target(args, streams, device) -> tuple[torch.nn.Module, object, dict]:
    seed_everything(args.seed)
    target, config = build_target(args.target_config, device)
    if args.target_init is not None:   # continue a trained target (its shards or an exported dir)
        load_target_weights(target, args.target_init)
    print(f"[target] layer types {config.layer_types}", flush=True)
    sampler = BatchSampler(streams, args.seq, seed=args.seed)
    penalised = set(args.unlikelihood_domains.split(","))

    def step() -> StepOutput:
        rows, domains = sampler.batch_with_domains(args.batch)
        batch = torch.from_numpy(rows).to(device, non_blocking=True)
        logits = target_logits(target, batch, device)
        nll = next_token_nll(logits, batch)
        if not args.unlikelihood:
            return StepOutput(nll, batch[:, 1:].numel())
        chosen = torch.tensor([d in penalised for d in domains], device=device)
        ul = unlikelihood(logits[chosen], batch[chosen]) if bool(chosen.any()) else nll.new_zeros(())
        return StepOutput(nll + args.unlikelihood * ul, batch[:, 1:].numel(), {"nll": nll.detach(), "ul": ul.detach()})

    target.train()
    report = train_loop(phase(args, "target", weight_decay=0.1, warmup=args.warmup), target.parameters(), step)
    return freeze(target), config, report


@torch.no_grad()
def eval_target(target, heldout, args, device) -> dict:
    result = {}
    for domain, chunks in heldout_batches(heldout, args.seq, args.eval_tokens, args.batch):
        total_nll, count = 0.0, 0
        for chunk in chunks:
            batch = torch.from_numpy(chunk).to(device)
            total_nll += target_nll(target, batch, device, reduction="sum").item()
            count += batch[:, 1:].numel()
        result[domain] = {"ppl": round(float(np.exp(total_nll / count)), 3), "tokens": count}
        print(f"[eval] target {domain:10s} ppl {result[domain]['ppl']:.2f} over {count} tokens", flush=True)
    return result


def load_target_weights(target, shards: Path) -> None:
    """Training shards, or an exported target dir (its mtp.* tensors are skipped)."""
    state = {k: v for k, v in load_shards(shards, "target").items() if not is_mtp_tensor(k)}
    missing = target.load_state_dict({k: v.float() for k, v in state.items()}, strict=False).missing_keys
    assert set(missing) <= {"lm_head.weight"}, missing  # lm_head is tied to embed_tokens
    print(f"[target] loaded {len(state)} tensors from {shards}", flush=True)


def load_target(args, device):
    target, config = build_target(args.target_config, device)
    load_target_weights(target, args.target_shards)
    return freeze(target), config

# -------------------------------------------------------------------------------------------- MTP

def mtp_step(head, target, batch, device):
    """Returns (loss, agreement) of the head on a (B, T+1) batch; teacher = frozen target."""
    ids = batch[:, :-1]
    with torch.no_grad(), autocast(device):
        hidden = target.model(input_ids=ids).last_hidden_state  # after the final norm
        teacher = target.lm_head(hidden).float()
        next_embeds = target.model.embed_tokens(ids[:, 1:])
    length = ids.shape[1] - 1
    positions = torch.arange(1, length + 1, device=ids.device)  # row t sits at position t+1
    with autocast(device):
        states = head(next_embeds, hidden[:, :-1], positions)
        logits = F.linear(states, lm_head_weight(target)).float()
    teacher_next = teacher[:, 1:]  # target row t+1 predicts x[t+2]
    loss = F.kl_div(F.log_softmax(logits, -1), F.log_softmax(teacher_next, -1), log_target=True,
                    reduction="none").sum(-1).mean()
    agree = (logits.argmax(-1) == teacher_next.argmax(-1)).float().mean()
    return loss, agree


def train_mtp(args, target, config, streams, device) -> tuple[MtpHead, dict]:
    seed_everything(args.seed + 1)
    head = MtpHead(config).to(device)
    data = batches(BatchSampler(streams, args.mtp_seq, seed=args.seed + 1), args.mtp_batch, device)

    def step() -> StepOutput:
        batch = next(data)
        loss, agree = mtp_step(head, target, batch, device)
        return StepOutput(loss, batch[:, 1:].numel(), {"agree": agree})

    report = train_loop(phase(args, "mtp", weight_decay=0.01, warmup=args.warmup // 2, loss_name="kl"),
                        head.parameters(), step)
    head.eval()
    return head, report


@torch.no_grad()
def eval_mtp(head, target, heldout, args, device) -> dict:
    result = {}
    for domain, chunks in heldout_batches(heldout, args.mtp_seq, args.eval_tokens // 2, args.mtp_batch):
        agrees = [mtp_step(head, target, torch.from_numpy(chunk).to(device), device)[1].item() for chunk in chunks]
        result[domain] = {"greedy_agreement": round(float(np.mean(agrees)), 4)}
        print(f"[eval] mtp {domain:10s} head argmax == target argmax: {np.mean(agrees):.3f}", flush=True)
    return result


# ---------------------------------------------------------------------------------------- drafter

class LayerCapture:
    """Forward hooks that keep the outputs (residual stream) of the chosen target decoder layers."""

    def __init__(self, target, layer_ids: list[int]) -> None:
        self.outputs: dict[int, torch.Tensor] = {}
        self.handles = [target.model.layers[i].register_forward_hook(self.hook(i)) for i in layer_ids]
        self.layer_ids = layer_ids

    def hook(self, index: int):
        def keep(_module, _inputs, output):
            self.outputs[index] = output[0] if isinstance(output, tuple) else output
        return keep

    def concat(self) -> torch.Tensor:
        return torch.cat([self.outputs[i] for i in self.layer_ids], dim=-1)


def drafter_step(drafter, target, capture, batch, args, device, rng: np.random.Generator):
    """Loss and per-position agreement of the drafter on random blocks of a (B, T+1) batch."""
    block, mask_id = drafter.cfg.block_size, drafter.cfg.mask_token_id
    ids = batch[:, :-1]
    seq = ids.shape[1]
    n_anchor = min(args.anchors, seq - block)
    anchors = torch.from_numpy(np.sort(rng.choice(np.arange(1, seq - block + 1), n_anchor, replace=False))).to(device)
    with torch.no_grad(), autocast(device):
        hidden = target.model(input_ids=ids).last_hidden_state
        teacher = target.lm_head(hidden).float()
        captured = capture.concat()
    offsets = torch.arange(block, device=device)
    block_pos = (anchors[:, None] + offsets[None, :]).reshape(-1)  # (A*bs,)
    block_ids = torch.full((ids.shape[0], n_anchor, block), mask_id, device=device, dtype=ids.dtype)
    block_ids[:, :, 0] = ids[:, anchors]  # bonus token = x[P]
    with torch.no_grad():
        embeds = target.model.embed_tokens(block_ids.reshape(ids.shape[0], -1))
    mask = block_mask(anchors, seq, block, args.drafter_window)[None, None]
    with autocast(device):
        ctx = drafter.context(captured)
        states = drafter(embeds, block_pos, ctx, torch.arange(seq, device=device), mask)
        logits = F.linear(states, lm_head_weight(target)).float()
    logits = logits.view(ids.shape[0], n_anchor, block, -1)[:, :, 1:]
    # block row i predicts position P+i: the target's distribution at row P+i-1
    teacher_rows = (anchors[:, None] + offsets[None, :-1])  # (A, bs-1)
    teacher_blk = teacher[:, teacher_rows]  # (B, A, bs-1, V)
    kl = F.kl_div(F.log_softmax(logits, -1), F.log_softmax(teacher_blk, -1), log_target=True,
                  reduction="none").sum(-1)  # (B, A, bs-1)
    weights = torch.exp(-torch.arange(block - 1, device=device, dtype=torch.float32) / args.drafter_gamma)
    loss = (kl * weights).sum(-1).mean() / weights.sum()
    match = logits.argmax(-1) == teacher_blk.argmax(-1)  # (B, A, bs-1)
    accepted = torch.cumprod(match.int(), dim=-1).sum(-1).float()  # greedy chain accepted per block
    return loss, match.float().mean((0, 1)), accepted.mean()


def new_drafter(args, target, device) -> tuple[DFlashDrafter, LayerCapture]:
    seed_everything(args.seed + 2)
    drafter = DFlashDrafter(args.drafter_config).to(device)
    if args.drafter_init is not None:  # continue training a drafter (same seeds, fresh schedule)
        grown = load_grown(drafter, {k: v.float() for k, v in load_shards(args.drafter_init, "drafter").items()})
        print(f"[drafter] initialised from {args.drafter_init}"
              + (f"; layers {', '.join(map(str, grown))} added as identities" if grown else ""), flush=True)
    return drafter, LayerCapture(target, list(drafter.cfg.target_layer_ids))


def load_grown(drafter: DFlashDrafter, state: dict[str, torch.Tensor]) -> list[int]:
    """Load a drafter's weights into `drafter`, which may have more layers than they hold. The layers
    they lack start with zero output projections (o_proj, down_proj), so each is the identity on the
    residual stream and the grown drafter drafts exactly what the smaller one did; training then uses
    the added capacity. Returns the indices of the added layers."""
    missing, unexpected = drafter.load_state_dict(state, strict=False)
    loaded = {int(k.split(".")[1]) for k in state if k.startswith("layers.")}
    grown = sorted({int(k.split(".")[1]) for k in missing if k.startswith("layers.")} - loaded)
    stray = [k for k in missing if not (k.startswith("layers.") and int(k.split(".")[1]) in grown)]
    if unexpected or stray or (grown and grown[0] != len(loaded)):
        raise ValueError(f"drafter weights do not fit this drafter: unexpected {unexpected[:4]}, missing {stray[:4]}")
    with torch.no_grad():
        for index in grown:
            layer = drafter.layers[index]
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return grown


def train_drafter(args, target, streams, device, drafter: DFlashDrafter, capture: LayerCapture) -> dict:
    drafter.train()
    data = batches(BatchSampler(streams, args.drafter_seq, seed=args.seed + 2), args.drafter_batch, device)
    rng = np.random.default_rng(args.seed + 2)

    def step() -> StepOutput:
        batch = next(data)
        loss, per_pos, accepted = drafter_step(drafter, target, capture, batch, args, device, rng)
        return StepOutput(loss, batch[:, 1:].numel(), {"accepted/block": accepted, "pos1": per_pos[0]})

    report = train_loop(phase(args, "drafter", weight_decay=0.01, warmup=args.warmup, loss_name="kl"),
                        drafter.parameters(), step)
    drafter.eval()
    return report


@torch.no_grad()
def eval_drafter(drafter, target, capture, heldout, args, device, tag: str = "eval") -> dict:
    rng = np.random.default_rng(123)   # the same blocks for every call: before / after compare
    result = {}
    for domain, chunks in heldout_batches(heldout, args.drafter_seq, args.eval_tokens // 2, args.drafter_batch):
        positions, accepted = [], []
        for chunk in chunks:
            _, per_pos, acc = drafter_step(drafter, target, capture, torch.from_numpy(chunk).to(device), args,
                                           device, rng)
            positions.append(per_pos.cpu().numpy())
            accepted.append(acc.item())
        result[domain] = {"chain_accepted_per_block": round(float(np.mean(accepted)), 3),
                          "per_position_agreement": [round(float(x), 3) for x in np.mean(positions, 0)]}
        print(f"[{tag}] drafter {domain:10s} greedy chain accepted/block {np.mean(accepted):.2f} "
              f"per position {result[domain]['per_position_agreement']}", flush=True)
    return result


def drafter_phase(args, target, streams, heldout, device, report: RunReport) -> None:
    """Train the drafter, evaluate it on the held-out streams, save its shards (train_family's last
    phase and all of distill.py's training)."""
    drafter, capture = new_drafter(args, target, device)
    before = None
    if args.eval_init and args.drafter_init is not None:   # the starting drafter on the same held-out blocks
        drafter.eval()
        before = eval_drafter(drafter, target, capture, heldout, args, device, tag="eval-init")
    report["drafter"] = train_drafter(args, target, streams, device, drafter, capture)
    report["drafter"]["heldout"] = eval_drafter(drafter, target, capture, heldout, args, device)
    if before is not None:
        report["drafter"]["heldout_init"] = before
    report.save("drafter", drafter.state_dict())
    print(f"[done] files {report['files']}", flush=True)


# ------------------------------------------------------------------------------------------- main

def build_parser(description: str = __doc__, prog: str | None = None, corpus: bool = True) -> argparse.ArgumentParser:
    """Every phase's options (distill.py adds its own to the same parser, and reads no corpus)."""
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    if corpus:
        path_option(parser, "--corpus", in_checkout("training", "corpus", "pack"),
                    "folder of <domain>[.heldout].jsonl[.xz]")
    tokenizer_dir = demo_tokenizer_dir()
    path_option(parser, "--tokenizer", tokenizer_dir / "tokenizer.json" if tokenizer_dir else None, "tokenizer.json")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny", action="store_true", help="tiny sizes and few steps: a CPU smoke test")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--eval-tokens", type=int, default=262144)
    # each phase's schedule (read back by phase()): peak LR, seconds, or exactly --NAME-steps steps
    for name, lr, seconds in (("target", 3e-3, 300), ("mtp", 2e-3, 60), ("drafter", 2e-3, 120)):
        parser.add_argument(f"--{name}-lr", type=float, default=lr)
        parser.add_argument(f"--{name}-seconds", type=float, default=seconds)
        parser.add_argument(f"--{name}-steps", type=int)
    parser.add_argument("--target-shards", type=Path, help="skip target training: load its shards from here")
    parser.add_argument("--mtp-seq", type=int, default=512)
    parser.add_argument("--mtp-batch", type=int, default=64)
    parser.add_argument("--drafter-seq", type=int, default=1024)
    parser.add_argument("--drafter-batch", type=int, default=32)
    parser.add_argument("--anchors", type=int, default=32, help="blocks drawn per training sequence")
    parser.add_argument("--drafter-window", type=int, default=None, help="cap on ctx rows a block sees")
    parser.add_argument("--drafter-gamma", type=float, default=4.0, help="loss weight exp(-(i-1)/gamma)")
    parser.add_argument("--max-docs", type=int, default=None)
    parser.add_argument("--drafter-init", type=Path, help="start the drafter from drafter-*.safetensors here")
    parser.add_argument("--eval-init", action="store_true", help="also evaluate the --drafter-init drafter first")
    parser.add_argument("--drafter-block", type=int, default=None,
                        help="block size (1 + draft positions; default the family's 8): a DDTree of budget B "
                             "reads B positions, so a block of B + 1 trains exactly what it drafts")
    parser.add_argument("--drafter-layers", type=int, default=None,
                        help="drafter depth (default the family's 2); with --drafter-init from a shallower "
                             "drafter, the added layers start as identities")
    parser.add_argument("--skip-mtp", action="store_true", help="train only the drafter (with --target-shards)")
    parser.add_argument("--target-only", action="store_true", help="stop after the target phase")
    parser.add_argument("--skip-drafter", action="store_true", help="stop after the MTP phase")
    parser.add_argument("--target-init", type=Path, help="continue training the target from these shards / dir")
    parser.add_argument("--unlikelihood", type=float, default=0.0,
                        help="weight of token-level unlikelihood on the target (0: plain next-token loss)")
    parser.add_argument("--unlikelihood-domains", default="prose,chat", help="rows it applies to")
    return parser


def finish_args(args: argparse.Namespace) -> argparse.Namespace:
    """Configs of the family (tiny ones for a CPU smoke test)."""
    args.target_config = dict(fc.TARGET)
    args.drafter_config = json.loads(json.dumps(fc.DRAFTER))
    if args.tiny:
        args.target_config.update(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=2,
                                  num_key_value_heads=1, head_dim=32, linear_num_key_heads=2,
                                  linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16)
        args.drafter_config.update(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, head_dim=32)
        args.drafter_config["dflash_config"]["target_layer_ids"] = [1, 3]
        args.seq = args.mtp_seq = args.drafter_seq = 64
        args.batch = args.mtp_batch = args.drafter_batch = 4
        args.anchors, args.log_every, args.eval_tokens, args.warmup = 8, 2, 1024, 2
        args.target_steps = args.target_steps or 6
        args.mtp_steps = args.mtp_steps or 4
        args.drafter_steps = args.drafter_steps or 4
        args.max_docs = args.max_docs or 200
    if args.drafter_block is not None:
        args.drafter_config["dflash_config"]["block_size"] = args.drafter_block
    if args.drafter_layers is not None:
        args.drafter_config["num_hidden_layers"] = args.drafter_layers
    # the drafter's layers and the target it reads follow the sizes (the engine builds one layer per entry)
    args.drafter_config["layer_types"] = ["full_attention"] * args.drafter_config["num_hidden_layers"]
    args.drafter_config["num_target_layers"] = args.target_config["num_hidden_layers"]
    return args


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    args = finish_args(build_parser(prog=prog).parse_args(argv))
    device = setup_device(args.out)
    streams = load_streams(args.corpus, args.tokenizer, "train", args.max_docs)
    heldout = load_streams(args.corpus, args.tokenizer, "heldout", args.max_docs)
    report = RunReport(args.out, args, train_tokens_available={d: int(len(s.tokens)) for d, s in streams.items()})

    if args.target_shards is None:
        target, config, report["target"] = train_target(args, streams, device)
    else:  # resume: MTP and drafter against an already trained target
        target, config = load_target(args, device)
        previous = args.target_shards / "report.json"
        report["target"] = json.loads(previous.read_text())["target"] if previous.exists() else {}
    if args.target_shards is None:   # saved before the evaluation: a device call cut during it keeps them
        report.save("target", {k: v for k, v in target.state_dict().items()
                               if not (args.target_config["tie_word_embeddings"] and k == "lm_head.weight")})
    report["target"]["heldout"] = eval_target(target, heldout, args, device)
    report.write()

    if args.target_only:
        return
    if not args.skip_mtp:
        head, report["mtp"] = train_mtp(args, target, config, streams, device)
        report["mtp"]["heldout"] = eval_mtp(head, target, heldout, args, device)
        report.save("mtp", head.export_state())

    if not args.skip_drafter:
        drafter_phase(args, target, streams, heldout, device, report)


if __name__ == "__main__":
    main()
