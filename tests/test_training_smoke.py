"""The training steps end to end on the CPU at tiny sizes (a few hundred tokens a step): family (target,
MTP head, drafter through the one step loop), distill on the tiny target's own replies, export; the
exported family is read back by the engines' MLX-free readers. Runs where PyTorch and transformers'
Qwen3.5 are installed (`pip install -e '.[training]'`); skipped otherwise (CI has no torch:
tests/test_training_package.py checks the package there)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers.models.qwen3_5")

from engines.checkpoint import has_mtp_tensors, layer_types, read_config  # noqa: E402
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
                 "--drafter-block", "3", "--eval-init", "--train-classes", "code,structured"]) == 0
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
    assert len(drafter.layer_types) == drafter.num_hidden_layers == 1
    assert drafter.block_size == 3
    assert read_config(out / "drafter")["num_target_layers"] == target["num_hidden_layers"] == 4
    assert max(drafter.target_layer_ids) < target["num_hidden_layers"]
