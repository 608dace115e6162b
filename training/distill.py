"""Distil the DFlash drafter on the target's OWN replies (demo family v2's drafter).

At inference the drafter predicts what the target itself generates, not corpus text; a drafter
trained teacher-forced on the corpus sees a different distribution of contexts. Here the frozen
target answers chat prompts (greedy, and sampled at the shipped temperature and at 1.0), and the
drafter is trained on those conversations with the same objective as train_family.py (KL to the
target's distribution at every block position; anchors anywhere in the windows), starting from the
shipped drafter.

Prompts: classifier/data/prompts.jsonl (our own labelled prompt set; its `test` split is held out
here too). Never the benchmark workloads (bench/workloads/), which measure the result.

  python -m training.distill --out $OUT --target-shards models/switchyard-demo/target \\
      --drafter-init models/switchyard-demo/drafter --prompts classifier/data/prompts.jsonl
  switchyard-train distill --tiny --out /tmp/d ...        # CPU smoke test (tiny sizes, few steps)
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from . import family_config as fc
from .data import jsonl_lines, stream_of
from .paths import classifier_prompts, path_option
from .train_common import RunReport, autocast, seed_everything, setup_device
from .train_family import build_parser, drafter_phase, finish_args, load_target

MODES = {  # name -> generate() sampling settings; the sampled ones use the shipped generation_config
    "greedy": {"do_sample": False},
    "t0.7": {"do_sample": True, "temperature": 0.7, "top_p": 0.9, "top_k": 40},
    "t1.0": {"do_sample": True, "temperature": 1.0, "top_p": 0.95, "top_k": 20},
}


def load_prompts(path: Path, limit: int | None) -> list[dict]:
    prompts = [json.loads(line) for line in jsonl_lines(path)]
    for item in prompts:
        item["messages"] = item.get("messages") or [{"role": "user", "content": item["text"]}]
    rng = np.random.default_rng(0)
    rng.shuffle(prompts)
    return prompts[:limit]


def encode_prompts(prompts: list[dict], tokenizer_dir: Path) -> list[list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    texts = [tokenizer.apply_chat_template(p["messages"], add_generation_prompt=True, tokenize=False) for p in prompts]
    return [tokenizer.encode(text, add_special_tokens=False) for text in texts]


@torch.no_grad()
def generate(target, prompt_ids: list[list[int]], mode: dict, args, device, deadline: float) -> list[list[int]]:
    """Replies (up to and including the first end-of-turn) for every prompt, batched by length."""
    order = sorted(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i]))
    replies: list[list[int] | None] = [None] * len(prompt_ids)
    eos = [fc.IM_END_ID, fc.EOT_ID]
    for start in range(0, len(order), args.gen_batch):
        if start and time.time() > deadline:   # every mode gets at least one batch
            break
        rows = order[start:start + args.gen_batch]
        width = max(len(prompt_ids[i]) for i in rows)
        batch = torch.full((len(rows), width), fc.EOT_ID, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, i in enumerate(rows):  # left padding: every prompt ends where generation starts
            batch[r, width - len(prompt_ids[i]):] = torch.tensor(prompt_ids[i])
            mask[r, width - len(prompt_ids[i]):] = 1
        with autocast(device):
            out = target.generate(input_ids=batch.to(device), attention_mask=mask.to(device),
                                  max_new_tokens=args.gen_tokens, eos_token_id=eos, pad_token_id=fc.EOT_ID, **mode)
        for r, i in enumerate(rows):
            reply = out[r, width:].tolist()
            ends = [k for k, t in enumerate(reply) if t in eos]
            replies[i] = reply[: ends[0] + 1] if ends else reply
    return [r for r in replies if r is not None]


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    parser = build_parser(__doc__, prog=prog, corpus=False)
    path_option(parser, "--prompts", classifier_prompts(), "chat prompts (.jsonl with label, split, text/messages)")
    parser.add_argument("--max-prompts", type=int, default=None)
    parser.add_argument("--modes", default="greedy,t0.7,t1.0", help=f"comma list of {', '.join(MODES)}")
    parser.add_argument("--gen-tokens", type=int, default=256)
    parser.add_argument("--gen-batch", type=int, default=512)
    parser.add_argument("--gen-seconds", type=float, default=240, help="generation budget (all modes)")
    parser.add_argument("--train-classes", default="code,prose,structured",
                        help="prompt classes whose conversations the drafter trains on (held-out evaluation "
                             "always covers every class): a code/structured drafter, like a drafter trained on "
                             "code-heavy data, is weaker on prose than the MTP head")
    args = finish_args(parser.parse_args(argv))
    if args.target_shards is None:
        parser.error("--target-shards is required: the target that answers the prompts")
    if args.tiny:
        args.max_prompts, args.gen_tokens, args.gen_batch = args.max_prompts or 48, 24, 16
    device = setup_device(args.out)
    seed_everything(args.seed)
    target, _ = load_target(args, device)

    prompts = load_prompts(args.prompts, args.max_prompts)
    ids = encode_prompts(prompts, args.target_shards if (args.target_shards / "tokenizer.json").exists()
                         else args.tokenizer.parent)
    report = RunReport(args.out, args, prompts=len(prompts), generation={})
    conversations: dict[tuple[str, str], list[list[int]]] = {}
    started, deadline = time.time(), time.time() + args.gen_seconds
    modes = [m for m in args.modes.split(",") if m]
    for n, mode in enumerate(modes):
        # an equal share of the time left: a mode that overran its share (one batch on a GPU another job
        # shares took 79 s of 33) left the next mode no time at all when shares were fixed in advance
        mode_deadline = time.time() + max(0.0, deadline - time.time()) / (len(modes) - n)
        replies = generate(target, ids, MODES[mode], args, device, mode_deadline)
        for prompt, prompt_ids, reply in zip(prompts, ids, replies):
            key = ("heldout" if prompt.get("split") == "test" else "train", prompt["label"])
            conversations.setdefault(key, []).append(list(prompt_ids) + reply)
        lengths = [len(r) for r in replies]
        report["generation"][mode] = {"replies": len(replies), "mean_tokens": round(float(np.mean(lengths)), 1),
                                      "seconds": round(time.time() - started, 1)}
        print(f"[gen] {mode}: {len(replies)} replies, mean {np.mean(lengths):.0f} tokens, "
              f"{time.time() - started:.0f}s", flush=True)

    train_classes = [c for c in args.train_classes.split(",") if c]
    streams = {label: stream_of(seqs) for (split, label), seqs in conversations.items()
               if split == "train" and label in train_classes}
    heldout = {label: stream_of(seqs) for (split, label), seqs in conversations.items() if split == "heldout"}
    for split, group in (("train", streams), ("heldout", heldout)):
        for label, stream in sorted(group.items()):
            print(f"[data] {split:7s} {label:10s} {len(stream.doc_starts):6d} conversations "
                  f"{len(stream.tokens) / 1e6:6.2f}M tokens", flush=True)
    report["train_tokens"] = {label: len(stream.tokens) for label, stream in sorted(streams.items())}
    drafter_phase(args, target, streams, heldout, device, report)


if __name__ == "__main__":
    main()
