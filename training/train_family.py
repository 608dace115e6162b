"""Train the switchyard-demo family on one GPU: target, then MTP head, then DFlash drafter.

Each phase is time-budgeted (its step count is fixed after timing a few steps and printed; pass
--*-steps to replay a run exactly), seeded, prints progress, and writes its weights as bf16
safetensors shards (<= 14 MiB, HF names) plus report.json into --out. training/export.py turns
those into models/switchyard-demo/. See training/README.md for the semantics of every phase.

  python training/train_family.py --corpus training/corpus/pack --out $OUT          # on the device
  python training/train_family.py --corpus training/corpus --out /tmp/t --tiny      # CPU smoke test
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import family_config as fc
from data import DOMAINS, BatchSampler, eval_windows, load_streams
from torch_dflash import DFlashDrafter, block_mask
from torch_mtp_head import MtpHead
from train_common import StepBudget, adamw, lr_at, save_shards, seed_everything

HERE = Path(__file__).resolve().parent


def build_target(config_dict: dict, device: str):
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM

    config = Qwen3_5TextConfig(**fc.hf_text_config_kwargs(config_dict))
    config._attn_implementation = "sdpa"
    model = Qwen3_5ForCausalLM(config).to(device)
    return model, config


def autocast(device: str):
    return torch.autocast(device_type="cuda" if device.startswith("cuda") else "cpu", dtype=torch.bfloat16)


def lm_head_weight(target) -> torch.Tensor:
    return target.lm_head.weight


# ----------------------------------------------------------------------------------------- target

def train_target(args, streams, device) -> tuple[torch.nn.Module, object, dict]:
    seed_everything(args.seed)
    target, config = build_target(args.target_config, device)
    params = [p for p in target.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in {id(p): p for p in params}.values())
    print(f"[target] {n_params / 1e6:.2f}M parameters, layer types {config.layer_types}", flush=True)
    optimizer = adamw(params, args.target_lr, weight_decay=0.1)
    sampler = BatchSampler(streams, args.seq, seed=args.seed)
    budget = StepBudget(args.target_seconds, args.target_steps)
    step, tokens, start = 0, 0, time.time()
    target.train()
    while not budget.done(step):
        lr = lr_at(step, budget.planned(10**9), args.target_lr, args.warmup)
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = torch.from_numpy(sampler.batch(args.batch)).to(device, non_blocking=True)
        with autocast(device):
            logits = target(input_ids=batch[:, :-1]).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        step += 1
        tokens += batch[:, 1:].numel()
        budget.after_step(step)
        if step % args.log_every == 0 or budget.done(step):
            elapsed = time.time() - start
            print(f"[target] step {step}/{budget.planned(-1)} loss {loss.item():.4f} gnorm {grad_norm.item():.2f} "
                  f"lr {lr:.2e} {tokens / elapsed / 1e3:.0f}k tok/s {elapsed:.0f}s", flush=True)
    target.eval()
    for p in target.parameters():
        p.requires_grad_(False)
    return target, config, {"steps": step, "tokens": tokens, "seconds": round(time.time() - start, 1),
                            "parameters": n_params, "final_loss": round(loss.item(), 4)}


@torch.no_grad()
def eval_target(target, heldout, args, device) -> dict:
    result = {}
    for domain in [d for d in DOMAINS if d in heldout]:
        windows = eval_windows(heldout[domain], args.seq, args.eval_tokens)
        if len(windows) == 0:
            continue
        total_nll, count = 0.0, 0
        for chunk in np.array_split(windows, max(1, len(windows) // args.batch)):
            batch = torch.from_numpy(chunk).to(device)
            with autocast(device):
                logits = target(input_ids=batch[:, :-1]).logits
            total_nll += F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1),
                                         reduction="sum").item()
            count += batch[:, 1:].numel()
        result[domain] = {"ppl": round(float(np.exp(total_nll / count)), 3), "tokens": count}
        print(f"[eval] target {domain:10s} ppl {result[domain]['ppl']:.2f} over {count} tokens", flush=True)
    return result


def load_target(args, device):
    from safetensors.torch import load_file

    target, config = build_target(args.target_config, device)
    state = {}
    paths = sorted(args.target_shards.glob("target-*.safetensors")) or [args.target_shards / "model.safetensors"]
    for path in paths:  # training shards, or an exported target dir (its mtp.* tensors are skipped)
        state.update({k: v for k, v in load_file(str(path)).items() if not k.startswith("mtp.")})
    missing = target.load_state_dict({k: v.float() for k, v in state.items()}, strict=False).missing_keys
    assert set(missing) <= {"lm_head.weight"}, missing  # lm_head is tied to embed_tokens
    target.eval()
    for p in target.parameters():
        p.requires_grad_(False)
    print(f"[target] loaded {len(state)} tensors from {args.target_shards}", flush=True)
    return target, config


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
    params = list(head.parameters())
    n_params = sum(p.numel() for p in params)
    print(f"[mtp] {n_params / 1e6:.2f}M parameters", flush=True)
    optimizer = adamw(params, args.mtp_lr, weight_decay=0.01)
    sampler = BatchSampler(streams, args.mtp_seq, seed=args.seed + 1)
    budget = StepBudget(args.mtp_seconds, args.mtp_steps)
    step, start = 0, time.time()
    while not budget.done(step):
        lr = lr_at(step, budget.planned(10**9), args.mtp_lr, args.warmup // 2)
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = torch.from_numpy(sampler.batch(args.mtp_batch)).to(device)
        loss, agree = mtp_step(head, target, batch, device)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        step += 1
        budget.after_step(step)
        if step % args.log_every == 0 or budget.done(step):
            print(f"[mtp] step {step}/{budget.planned(-1)} kl {loss.item():.4f} agree {agree.item():.3f} "
                  f"lr {lr:.2e} {time.time() - start:.0f}s", flush=True)
    head.eval()
    return head, {"steps": step, "seconds": round(time.time() - start, 1), "parameters": n_params}


@torch.no_grad()
def eval_mtp(head, target, heldout, args, device) -> dict:
    result = {}
    for domain in [d for d in DOMAINS if d in heldout]:
        windows = eval_windows(heldout[domain], args.mtp_seq, args.eval_tokens // 2)
        if len(windows) == 0:
            continue
        agrees = []
        for chunk in np.array_split(windows, max(1, len(windows) // args.mtp_batch)):
            _, agree = mtp_step(head, target, torch.from_numpy(chunk).to(device), device)
            agrees.append(agree.item())
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
    block = args.drafter_config["dflash_config"]["block_size"]
    mask_id = args.drafter_config["dflash_config"]["mask_token_id"]
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


def train_drafter(args, target, streams, device) -> tuple[DFlashDrafter, dict]:
    seed_everything(args.seed + 2)
    drafter = DFlashDrafter(args.drafter_config).to(device)
    if args.drafter_init is not None:  # continue training a drafter (same seeds, fresh schedule)
        from safetensors.torch import load_file

        state = {}
        for path in sorted(args.drafter_init.glob("drafter-*.safetensors")) or [args.drafter_init / "model.safetensors"]:
            state.update(load_file(str(path)))
        drafter.load_state_dict({k: v.float() for k, v in state.items()})
        print(f"[drafter] initialised from {args.drafter_init}", flush=True)
    params = list(drafter.parameters())
    n_params = sum(p.numel() for p in params)
    print(f"[drafter] {n_params / 1e6:.2f}M parameters", flush=True)
    capture = LayerCapture(target, args.drafter_config["dflash_config"]["target_layer_ids"])
    optimizer = adamw(params, args.drafter_lr, weight_decay=0.01)
    sampler = BatchSampler(streams, args.drafter_seq, seed=args.seed + 2)
    rng = np.random.default_rng(args.seed + 2)
    budget = StepBudget(args.drafter_seconds, args.drafter_steps)
    step, start = 0, time.time()
    while not budget.done(step):
        lr = lr_at(step, budget.planned(10**9), args.drafter_lr, args.warmup)
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = torch.from_numpy(sampler.batch(args.drafter_batch)).to(device)
        loss, per_pos, accepted = drafter_step(drafter, target, capture, batch, args, device, rng)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        step += 1
        budget.after_step(step)
        if step % args.log_every == 0 or budget.done(step):
            print(f"[drafter] step {step}/{budget.planned(-1)} kl {loss.item():.4f} accepted/block "
                  f"{accepted.item():.2f} pos1 {per_pos[0].item():.3f} lr {lr:.2e} {time.time() - start:.0f}s",
                  flush=True)
    drafter.eval()
    return drafter, {"steps": step, "seconds": round(time.time() - start, 1), "parameters": n_params}, capture


@torch.no_grad()
def eval_drafter(drafter, target, capture, heldout, args, device) -> dict:
    rng = np.random.default_rng(123)
    result = {}
    for domain in [d for d in DOMAINS if d in heldout]:
        windows = eval_windows(heldout[domain], args.drafter_seq, args.eval_tokens // 2)
        if len(windows) == 0:
            continue
        positions, accepted = [], []
        for chunk in np.array_split(windows, max(1, len(windows) // args.drafter_batch)):
            _, per_pos, acc = drafter_step(drafter, target, capture, torch.from_numpy(chunk).to(device), args,
                                           device, rng)
            positions.append(per_pos.cpu().numpy())
            accepted.append(acc.item())
        result[domain] = {"chain_accepted_per_block": round(float(np.mean(accepted)), 3),
                          "per_position_agreement": [round(float(x), 3) for x in np.mean(positions, 0)]}
        print(f"[eval] drafter {domain:10s} greedy chain accepted/block {np.mean(accepted):.2f} "
              f"per position {result[domain]['per_position_agreement']}", flush=True)
    return result


# ------------------------------------------------------------------------------------------- main

def build_parser(description: str = __doc__) -> argparse.ArgumentParser:
    """Every phase's options (distill.py adds its own to the same parser)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=HERE / "corpus" / "pack")
    parser.add_argument("--tokenizer", type=Path, default=HERE.parent / "models/switchyard-demo/target/tokenizer.json")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny", action="store_true", help="tiny sizes and few steps: a CPU smoke test")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--eval-tokens", type=int, default=262144)
    parser.add_argument("--target-lr", type=float, default=3e-3)
    parser.add_argument("--target-seconds", type=float, default=300)
    parser.add_argument("--target-steps", type=int)
    parser.add_argument("--target-shards", type=Path, help="skip target training: load its shards from here")
    parser.add_argument("--mtp-lr", type=float, default=2e-3)
    parser.add_argument("--mtp-seconds", type=float, default=60)
    parser.add_argument("--mtp-steps", type=int)
    parser.add_argument("--mtp-seq", type=int, default=512)
    parser.add_argument("--mtp-batch", type=int, default=64)
    parser.add_argument("--drafter-lr", type=float, default=2e-3)
    parser.add_argument("--drafter-seconds", type=float, default=120)
    parser.add_argument("--drafter-steps", type=int)
    parser.add_argument("--drafter-seq", type=int, default=1024)
    parser.add_argument("--drafter-batch", type=int, default=32)
    parser.add_argument("--anchors", type=int, default=32, help="blocks drawn per training sequence")
    parser.add_argument("--drafter-window", type=int, default=None, help="cap on ctx rows a block sees")
    parser.add_argument("--drafter-gamma", type=float, default=4.0, help="loss weight exp(-(i-1)/gamma)")
    parser.add_argument("--max-docs", type=int, default=None)
    parser.add_argument("--drafter-init", type=Path, help="start the drafter from drafter-*.safetensors here")
    parser.add_argument("--skip-mtp", action="store_true", help="train only the drafter (with --target-shards)")
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
    return args


def main() -> None:
    args = finish_args(build_parser().parse_args())
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"[setup] torch {torch.__version__} device {device} "
          f"{torch.cuda.get_device_name() if device == 'cuda' else ''}", flush=True)
    streams = load_streams(args.corpus, args.tokenizer, "train", args.max_docs)
    heldout = load_streams(args.corpus, args.tokenizer, "heldout", args.max_docs)
    report: dict = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                    "train_tokens_available": {d: int(len(s.tokens)) for d, s in streams.items()}}

    if args.target_shards is None:
        target, config, report["target"] = train_target(args, streams, device)
    else:  # resume: MTP and drafter against an already trained target
        target, config = load_target(args, device)
        previous = args.target_shards / "report.json"
        report["target"] = json.loads(previous.read_text())["target"] if previous.exists() else {}
    report["target"]["heldout"] = eval_target(target, heldout, args, device)
    state = {k: v for k, v in target.state_dict().items()
             if not (args.target_config["tie_word_embeddings"] and k == "lm_head.weight")}
    report["files"] = save_shards(state, args.out, "target") if args.target_shards is None else []
    (args.out / "report.json").write_text(json.dumps(report, indent=1))

    if not args.skip_mtp:
        head, report["mtp"] = train_mtp(args, target, config, streams, device)
        report["mtp"]["heldout"] = eval_mtp(head, target, heldout, args, device)
        report["files"] += save_shards(head.export_state(), args.out, "mtp")
        (args.out / "report.json").write_text(json.dumps(report, indent=1))

    drafter, report["drafter"], capture = train_drafter(args, target, streams, device)
    report["drafter"]["heldout"] = eval_drafter(drafter, target, capture, heldout, args, device)
    report["files"] += save_shards(drafter.state_dict(), args.out, "drafter")
    (args.out / "report.json").write_text(json.dumps(report, indent=1))
    print(f"[done] files {report['files']}", flush=True)


if __name__ == "__main__":
    main()
