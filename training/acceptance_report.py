"""Per-class greedy acceptance of the demo family with the MLX engines (issue 6, item 7).

For every prompt of a small hand-written set (code / prose / structured chat requests) this runs
raw, mtp and ddtree greedily to the same length and reports, per class:
  MTP     greedy acceptance = accepted drafts / drafts
  DDTree  mean tokens emitted per verify step (accepted + bonus)
and checks that both speculative engines emit exactly raw's tokens (lossless in greedy).

  switchyard-train acceptance [--model models/switchyard-demo/target] [--json out.json]   (MLX, not torch)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from contracts.engine import CancelToken
from contracts.sampling import SamplingParams
from engines.runtime import load_runtime

PROMPTS: dict[str, list[str]] = {
    "code": [
        "Write a Python function `is_prime(n)` that returns True if n is a prime number.",
        "Implement `read_lines(path)` in Python. It should return the lines of a text file without newlines.",
        "Write a Go function: Max returns the larger of x or y.",
        "Can you write a Python function called flatten? Flatten a nested list into a single list.",
        "In Go, implement `Reverse`. Reverse returns its argument string reversed rune-wise left to right.",
        "I need a Python helper `parse_header(line)`. Parse a header line of the form 'Name: value'.",
        "Write a Python function `quote(s)` that returns a shell-escaped version of the string s.",
        "Python: Return the number of seconds since the epoch. Write the function `now`.",
    ],
    "prose": [
        "Explain virtual memory.",
        "Tell me about the history of the printing press.",
        "Write a short paragraph about autumn in the mountains.",
        "What is a memory barrier?",
        "Describe the role of the scheduler in an operating system.",
        "Continue this text:\n\nThe old house stood at the end of the lane, its windows dark.",
        "Can you explain garbage collection to me?",
        "Give me a quote.",
    ],
    "structured": [
        "Convert this YAML to JSON:\n\n```yaml\nname: web\nports:\n  - 80\n  - 443\nenabled: true\n```",
        "Convert this CSV to JSON:\n\nid,name,price\n1,apple,0.5\n2,pear,0.75\n3,plum,1.25",
        "Write SQL to create a table named orders holding this data:\n\nid,customer,total\n1,alice,10.5\n2,bob,7",
        "Give the ISO 3166-1 record for France as JSON.",
        "Convert this JSON to YAML:\n\n```json\n{\"server\": {\"host\": \"localhost\", \"port\": 8080}}\n```",
        "Rewrite the following config as JSON:\n```yaml\n- hosts: all\n  tasks:\n    - name: install nginx\n"
        "      apt:\n        name: nginx\n        state: present\n```",
        "Give me these rows as JSON.\n\nyear,count\n2001,3\n2002,5\n2003,8",
        "What is the 639-3 entry for Welsh? Answer in JSON.",
    ],
}


def run(engine, prompt_ids: list[int], params: SamplingParams, eos: set[int]) -> tuple[list[int], int, int, int, int]:
    """Tokens (cut at EOS / max_tokens), verify steps, drafted, accepted and verify-emitted counts."""
    max_tokens = params.max_tokens
    tokens: list[int] = []
    steps = drafted = accepted = emitted = 0
    generator = engine.generate(prompt_ids, params, CancelToken())
    for step in generator:
        if step.drafted:
            steps += 1
            drafted += step.drafted
            accepted += step.accepted
            emitted += len(step.tokens)
        tokens += step.tokens
        if len(tokens) >= max_tokens or eos.intersection(step.tokens):
            break
    generator.close()
    cut = next((i + 1 for i, t in enumerate(tokens) if t in eos), len(tokens))
    return tokens[:min(cut, max_tokens)], steps, drafted, accepted, emitted


def lossless(row: dict, temperature: float) -> str:
    if temperature > 0:
        return "n/a (sampled)"
    return "yes" if row["lossless_mismatches"] == 0 else f"NO ({row['lossless_mismatches']} differ)"


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="target dir (default: the embedded demo family)")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--budget", type=int, default=4, help="DDTree budget")
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="0 = greedy (checks greedy == raw); > 0 samples with the model's top_p/top_k, seeded")
    parser.add_argument("--dtype", default=None, help="e.g. float32 (default: the checkpoint's bf16)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    runtime = load_runtime(args.model, tree_budget=args.budget, dtype=args.dtype)
    eos = set(runtime.bundle.eos_token_ids)
    tokenizer = runtime.bundle.tokenizer
    rows = {}
    for label, prompts in PROMPTS.items():
        totals = {"mtp_drafted": 0, "mtp_accepted": 0, "ddtree_steps": 0, "ddtree_tokens": 0, "ddtree_accepted": 0,
                  "mismatches": 0, "tokens": 0}
        for index, prompt in enumerate(prompts):
            text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                 add_generation_prompt=True)
            ids = list(tokenizer.encode(text, add_special_tokens=False))
            params = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens, seed=index)
            raw, *_ = run(runtime.engines["raw"], ids, params, eos)
            mtp, _, drafted, accepted, _ = run(runtime.engines["mtp"], ids, params, eos)
            tree, steps, _, tree_accepted, tree_emitted = run(runtime.engines["ddtree"], ids, params, eos)
            if params.greedy:  # sampled runs draw different (equally distributed) texts
                totals["mismatches"] += int(mtp != raw) + int(tree != raw)
            totals["tokens"] += len(raw)
            totals["mtp_drafted"] += drafted
            totals["mtp_accepted"] += accepted
            totals["ddtree_steps"] += steps
            totals["ddtree_accepted"] += tree_accepted
            totals["ddtree_tokens"] += tree_emitted  # each verify step emits its accepted path + 1 bonus
        rows[label] = {
            "prompts": len(prompts),
            "tokens": totals["tokens"],
            "mtp_acceptance": round(totals["mtp_accepted"] / max(1, totals["mtp_drafted"]), 3),
            "ddtree_tokens_per_step": round(totals["ddtree_tokens"] / max(1, totals["ddtree_steps"]), 3),
            "lossless_mismatches": totals["mismatches"],
        }
        print(f"{label:10s} {json.dumps(rows[label])}", flush=True)
    mode = "greedy" if args.temperature <= 0 else f"T={args.temperature}"
    print(f"\n| class | prompts | tokens | MTP acceptance ({mode}) | DDTree-b{args.budget} tokens/step | greedy == raw |")
    print("|---|---|---|---|---|---|")
    for label, row in rows.items():
        print(f"| {label} | {row['prompts']} | {row['tokens']} | {row['mtp_acceptance']:.3f} | "
              f"{row['ddtree_tokens_per_step']:.2f} | {lossless(row, args.temperature)} |")
    if args.json:
        args.json.write_text(json.dumps({"measured": time.strftime("%Y-%m-%d"), "budget": args.budget,
                                         "temperature": args.temperature,
                                         "max_tokens": args.max_tokens, "classes": rows}, indent=1))


if __name__ == "__main__":
    main()
