"""The training steps end to end on the CPU at tiny sizes (a few hundred tokens a step): family (target,
MTP head, drafter through the one step loop), distill on the tiny target's own replies, export; the
exported family is read back by the engines' MLX-free readers. Runs where PyTorch and transformers'
Qwen3.5 are installed (`pip install -e '.[training]'`); skipped otherwise (CI has no torch:
tests/test_training_package.py checks the package there)."""

from __future__ import annotations

import json
import lzma
import math
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers.models.qwen3_5")

from engines.checkpoint import has_mtp_tensors, layer_types, read_config, serving_hints  # noqa: E402
from engines.dflash_config import DrafterConfig  # noqa: E402
from tests.training_corpus import write_corpus  # noqa: E402
from training.cli import main  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TOKENIZER = REPO / "models" / "switchyard-demo" / "target" / "tokenizer.json"


@pytest.fixture(scope="module")
def family(tmp_path_factory) -> Path:
    corpus = tmp_path_factory.mktemp("corpus")
    write_corpus(corpus, code_mb=0.5, records=600)
    out = tmp_path_factory.mktemp("family")
    assert main(["family", "--tiny", "--corpus", str(corpus), "--tokenizer", str(TOKENIZER), "--out", str(out)]) == 0
    return out


def test_family_trains_every_phase_through_the_one_loop(family):
    report = json.loads((family / "report.json").read_text())
    assert report["files"] == ["target-00.safetensors", "mtp-00.safetensors", "drafter-00.safetensors"]
    for name, steps in (("target", 6), ("mtp", 4), ("drafter", 4)):
        phase = report[name]
        assert phase["steps"] == steps and phase["tokens"] == steps * 4 * 64, name
        assert math.isfinite(phase["final_loss"]) and phase["heldout"], name
    assert report["target"]["final_loss"] < math.log(8192)   # it learned something in 6 steps


def test_distill_and_export_give_a_family_the_engines_read(family, tmp_path):
    distilled = tmp_path / "distilled"
    assert main(["distill", "--tiny", "--out", str(distilled), "--tokenizer", str(TOKENIZER), "--target-shards",
                 str(family), "--drafter-init", str(family), "--max-prompts", "16", "--modes", "greedy",
                 "--drafter-block", "3", "--eval-init", "--train-classes", "code,structured",
                 "--drafter-layers", "2"]) == 0
    report = json.loads((distilled / "report.json").read_text())
    assert report["generation"]["greedy"]["replies"] == 16 and report["drafter"]["steps"] == 4
    # trained on code and structured conversations only, evaluated on every class held out
    assert set(report["train_tokens"]) == {"code", "structured"}
    # the starting drafter was measured on the same held-out blocks, at the new block size
    assert report["drafter"]["heldout_init"].keys() == report["drafter"]["heldout"].keys()
    assert all(len(d["per_position_agreement"]) == 2 for d in report["drafter"]["heldout_init"].values())

    out = tmp_path / "export"
    assert main(["export", "--shards", str(family), "--out", str(out), "--tokenizer-dir", str(TOKENIZER.parent)]) == 0
    assert main(["export", "--shards", str(distilled), "--out", str(out), "--drafter-only"]) == 0
    target = read_config(out / "target")
    assert target["layer_types"] == layer_types({**target, "layer_types": None})
    assert has_mtp_tensors(out / "target")
    drafter = DrafterConfig.from_dict(read_config(out / "drafter"))
    assert len(drafter.layer_types) == drafter.num_hidden_layers == 2    # grown from the family's 1
    assert drafter.block_size == 3
    assert read_config(out / "drafter")["num_target_layers"] == target["num_hidden_layers"] == 4
    assert max(drafter.target_layer_ids) < target["num_hidden_layers"]
    hints = serving_hints(out / "target")       # the engines' reader of the windows export wrote
    assert (hints.mtp_prompt_window, hints.drafter_context_window) == (64, 64)   # --tiny trains on 64 tokens


def test_a_grown_drafter_drafts_what_the_smaller_one_did(family):
    """--drafter-layers with --drafter-init: the added layers start as identities (zero output
    projections), so training starts from the smaller drafter's function, not from noise."""
    import torch

    from training.torch_dflash import DFlashDrafter
    from training.train_common import load_shards
    from training.train_family import build_parser, finish_args, load_grown

    args = finish_args(build_parser().parse_args(["--tiny", "--out", "/unused"]))
    small = DFlashDrafter(args.drafter_config)
    small.load_state_dict({k: v.float() for k, v in load_shards(family, "drafter").items()})
    big = DFlashDrafter({**args.drafter_config, "num_hidden_layers": 3, "layer_types": ["full_attention"] * 3})
    assert load_grown(big, {k: v.float() for k, v in load_shards(family, "drafter").items()}) == [1, 2]
    torch.manual_seed(0)
    hidden, rows, ctx_len = args.drafter_config["hidden_size"], 3, 5
    embeds, ctx = torch.randn(2, rows, hidden), torch.randn(2, ctx_len, hidden)
    block_pos, ctx_pos = torch.arange(ctx_len, ctx_len + rows), torch.arange(ctx_len)
    mask = torch.ones(1, 1, rows, ctx_len + rows, dtype=torch.bool)
    with torch.no_grad():
        assert torch.allclose(small(embeds, block_pos, ctx, ctx_pos, mask), big(embeds, block_pos, ctx, ctx_pos, mask),
                              atol=1e-6)
        big.layers[2].mlp.down_proj.weight.add_(0.1)   # and the check can fail: a non-identity layer differs
        assert not torch.allclose(small(embeds, block_pos, ctx, ctx_pos, mask),
                                  big(embeds, block_pos, ctx, ctx_pos, mask), atol=1e-6)


def test_every_generation_mode_gets_replies_when_the_budget_is_already_spent(family, tmp_path):
    """A mode that overruns its share (a GPU shared with another job) must not leave the next ones nothing."""
    out = tmp_path / "distilled"
    assert main(["distill", "--tiny", "--out", str(out), "--tokenizer", str(TOKENIZER), "--target-shards",
                 str(family), "--max-prompts", "24", "--modes", "greedy,t0.7,t1.0",
                 "--gen-seconds", "0", "--drafter-steps", "2"]) == 0
    generation = json.loads((out / "report.json").read_text())["generation"]
    assert {mode: g["replies"] for mode, g in generation.items()} == {"greedy": 16, "t0.7": 16, "t1.0": 16}   # one batch of 16 (--tiny) each


def test_distill_reads_prompts_whose_text_holds_unicode_line_separators(tmp_path):
    """Real prompts (written with ensure_ascii=False) may hold U+2028 / U+0085 inside a JSON string;
    str.splitlines broke such a line in two and the run died on a JSONDecodeError."""
    from training.distill import load_prompts

    rows = [{"text": "first\u2028second\x85third", "label": "prose"}, {"text": "print(1)", "label": "code"}]
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    loaded = load_prompts(path, None)
    assert sorted(p["text"] for p in loaded) == sorted(r["text"] for r in rows)


def test_unlikelihood_penalises_the_tokens_the_window_already_holds_but_not_the_next_one():
    import torch

    from training.train_family import unlikelihood

    batch = torch.tensor([[3, 5, 3, 7]])                  # inputs 3 5 3, next tokens 5 3 7
    vocab = 8
    flat = torch.zeros(1, 3, vocab)                       # uniform: p = 1/8 everywhere
    per_token = -math.log(1 - 1 / 8)
    # position 0 has seen {3}; 1 has seen {3, 5} but 3 comes next; 2 has seen {3, 5}: 1 + 1 + 2 tokens
    assert unlikelihood(flat, batch).item() == pytest.approx(per_token * 4 / 3)
    loop = flat.clone()
    loop[0, 2, 5] = 10.0                                  # sure of a token it already wrote
    fresh = flat.clone()
    fresh[0, 2, 7] = 10.0                                 # sure of the true, unseen next token
    assert unlikelihood(loop, batch) > unlikelihood(flat, batch) > unlikelihood(fresh, batch)


def test_a_target_continued_with_unlikelihood_trains_and_saves(tmp_path, family, capfd):
    corpus = tmp_path / "corpus"
    write_corpus(corpus, code_mb=0.2, records=200)
    out = tmp_path / "ul"
    assert main(["family", "--tiny", "--corpus", str(corpus), "--tokenizer", str(TOKENIZER), "--out", str(out),
                 "--target-init", str(family), "--unlikelihood", "1.0", "--target-only"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["files"] == ["target-00.safetensors"] and report["args"]["unlikelihood"] == 1.0
    assert report["target"]["steps"] == 6 and math.isfinite(report["target"]["final_loss"])
    log = capfd.readouterr().out
    assert f"[target] loaded 55 tensors from {family}" in log and " nll " in log and " ul " in log


def _recurrent_delta_rule(query, key, value, g=None, beta=None, scale=None, initial_state=None,
                          output_final_state=False, use_qk_l2norm_in_kernel=False, cu_seqlens=None):
    """The gated delta rule token by token, in fla's calling convention (state [B, H, K, V])."""
    import torch
    import torch.nn.functional as F

    q, k = (F.normalize(x, dim=-1, eps=1e-6) if use_qk_l2norm_in_kernel else x for x in (query, key))
    b, t, h, dk = k.shape
    state = initial_state if initial_state is not None else q.new_zeros(b, h, dk, value.shape[-1])
    outs = []
    for i in range(t):
        state = state * g[:, i].exp()[..., None, None]
        delta = beta[:, i][..., None] * (value[:, i] - torch.einsum("bhk,bhkv->bhv", k[:, i], state))
        state = state + torch.einsum("bhk,bhv->bhkv", k[:, i], delta)
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, i] * scale, state))
    return torch.stack(outs, 1), (state if output_final_state else None)


def test_a_zero_padded_key_head_changes_no_output_state_or_gradient():
    import torch

    from training.fla_kernels import gradient_check, pad_key_dim

    torch.manual_seed(0)
    b, t, h, dk, dv = 1, 12, 2, 16, 8
    base = [torch.randn(b, t, h, dk), torch.randn(b, t, h, dk), torch.randn(b, t, h, dv),
            -torch.rand(b, t, h), torch.rand(b, t, h), torch.randn(b, h, dk, dv)]
    results = []
    for kernel in (lambda *a, **kw: _recurrent_delta_rule(*a, scale=dk ** -0.5, **kw), pad_key_dim(_recurrent_delta_rule)):
        x = [tensor.clone().requires_grad_() for tensor in base]
        out, state = kernel(x[0], x[1], x[2], g=x[3], beta=x[4], initial_state=x[5], output_final_state=True,
                            use_qk_l2norm_in_kernel=True)
        assert state.shape == (b, h, dk, dv)
        (out.sum() + state.square().sum()).backward()
        results.append([out, state] + [tensor.grad for tensor in x])
    for plain, padded in zip(*results):
        torch.testing.assert_close(padded, plain, rtol=1e-5, atol=1e-5)
    # the check that guards training passes this kernel and fails one that keeps the padded head's own scale
    assert gradient_check(pad_key_dim(_recurrent_delta_rule), shape=(1, 64, 2, 2, 16, 16))
    own_scale = pad_key_dim(lambda *a, scale=None, **kw: _recurrent_delta_rule(*a, scale=128 ** -0.5, **kw))
    assert not gradient_check(own_scale, shape=(1, 64, 2, 2, 16, 16))


def test_the_kernel_runs_only_where_autograd_records():
    import torch

    from training.fla_kernels import when_training

    chosen = when_training(lambda x: "kernel", lambda x: "reference")
    assert chosen(1) == "kernel"
    with torch.no_grad():
        assert chosen(1) == "reference"


def test_the_two_device_calls_give_a_family_the_engines_read(tmp_path):
    """training/device_family.sh's two calls, here on the CPU with tiny sizes (no fla: the reference kernels),
    then export of what they send back, as the device would run them."""
    import os
    import shutil
    import subprocess
    import sys
    import tarfile

    from training.export import main as export

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "CORPUS": str(tmp_path / "corpus")}
    write_corpus(tmp_path / "corpus")
    carry = tmp_path / "carry"
    (carry / "tok").mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(REPO / "models" / "switchyard-demo" / "target" / name, carry / "tok")
    shutil.copy(REPO / "classifier" / "data" / "prompts.jsonl", carry)

    def call(step: str, out: Path) -> None:
        result = subprocess.run(["bash", "training/device_family.sh", step, "--tiny"], cwd=REPO, capture_output=True,
                                text=True, env={**env, "CARRY": str(carry), "OUT": str(out)}, timeout=600)
        assert result.returncode == 0 and f"{step if step == 'target' else 'mtp'} rc=0" in result.stdout, result.stdout

    call("target", tmp_path / "call1")
    (carry / "target").mkdir()
    shutil.copy(tmp_path / "call1" / "report.json", carry / "target")
    for shard in (tmp_path / "call1").glob("target-*.safetensors"):   # carried xz-compressed, as here before call 2
        (carry / "target" / (shard.name + ".xz")).write_bytes(lzma.compress(shard.read_bytes()))
    call("heads", tmp_path / "call2")
    with tarfile.open(tmp_path / "call2" / "heads.tgz") as archive:
        archive.extractall(tmp_path, filter="data")
    family = tmp_path / "shards"
    family.mkdir()
    for shard in [*(tmp_path / "call1").glob("target-*.safetensors"), *(tmp_path / "heads").glob("*.safetensors")]:
        shutil.copy(shard, family)
    shutil.copy(tmp_path / "heads" / "report_mtp.json", family / "report.json")
    export(["--shards", str(family), "--out", str(tmp_path / "family"),
            "--tokenizer-dir", str(REPO / "models" / "switchyard-demo" / "target")])
    assert (tmp_path / "family" / "drafter" / "model.safetensors").exists()
    assert (tmp_path / "family" / "target" / "model.safetensors").exists()


def test_a_timed_phase_stops_at_its_deadline_when_the_device_slows_after_the_probe(monkeypatch, capsys):
    import training.train_common as common

    clock = [1000.0]
    monkeypatch.setattr(common.time, "time", lambda: clock[0])
    budget = common.StepBudget(seconds=100.0, steps=None, probe=2)
    for step in range(1, 4):      # probe: 1 s per step -> ~97 more steps planned
        clock[0] += 1.0
        budget.after_step(step)
    planned = budget.planned(-1)
    assert 90 < planned < 110 and not budget.done(3)
    clock[0] += 10 * 100.0        # a job sharing the device makes the next step take 1000 s
    assert budget.done(4)         # stopped long before the planned steps
    assert budget.done(4) and budget.planned(-1) == 4   # the loop's test and its last log line read it too
    assert capsys.readouterr().out.count("stopped at step 4") == 1   # said once
    exact = common.StepBudget(seconds=100.0, steps=50)
    clock[0] += 10 * 100.0        # an explicit step count is kept however long it takes
    assert not exact.done(49) and exact.done(50)


def test_a_timed_phase_plans_and_stops_by_the_process_stop_time(monkeypatch, capsys):
    """Start-up before a phase (fla's compilation) is unknown in advance: the device script sets a stop
    time so the shards are saved before its timeout, whatever the phase's own seconds say."""
    import training.train_common as common

    clock = [1000.0]
    monkeypatch.setattr(common.time, "time", lambda: clock[0])
    monkeypatch.setenv(common.STOP_AT_ENV, "1050")
    budget = common.StepBudget(seconds=100.0, steps=None, probe=2)
    for step in range(1, 4):      # probe: 1 s per step; 47 s to the stop time, 97 s of the phase's own
        clock[0] += 1.0
        budget.after_step(step)
    assert budget.planned(-1) == 3 + 47
    assert "47 s left before" in capsys.readouterr().out
    clock[0] += 60.0              # slower than probed: stopped at the stop time, not at 1.2x 100 s
    assert budget.done(10) and budget.planned(-1) == 10
    monkeypatch.delenv(common.STOP_AT_ENV)
    unbounded = common.StepBudget(seconds=100.0, steps=None, probe=2)
    assert unbounded.deadline == clock[0] + 120.0
