"""training/ as an installable package, checked without PyTorch (CI has none): it is declared in
pyproject.toml with its extra and its `switchyard-train` entry point, every step resolves to a module
with a main(argv, prog), the torch-free modules import without torch or MLX, the torch ones lack
nothing but torch, the defaults that only a checkout has become required options elsewhere, and the
torch-free steps run (tokenizer, pack) on a small corpus. tests/test_training_smoke.py trains where
torch is installed."""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import json
import lzma
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from tests.training_corpus import write_corpus

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
MODULES = sorted(p.stem for p in (REPO / "training").glob("*.py") if p.stem != "__main__")
# modules whose import needs PyTorch (and transformers at call time); everything else imports without it
TORCH_MODULES = {"distill", "export", "fla_kernels", "torch_dflash", "torch_mtp_head", "train_common", "train_family"}
DEMO_TARGET = REPO / "models" / "switchyard-demo" / "target"


def has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


def test_declared_as_a_package_with_its_extra_and_entry_point():
    assert "training" in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    extra = PYPROJECT["project"]["optional-dependencies"]["training"]
    assert {req.split(">")[0].split("=")[0] for req in extra} >= {"torch", "transformers"}
    assert PYPROJECT["project"]["scripts"]["switchyard-train"] == "training.cli:main"
    module, _, name = PYPROJECT["project"]["scripts"]["switchyard-train"].partition(":")
    assert callable(getattr(importlib.import_module(module), name))
    assert (REPO / "training" / "__init__.py").exists() and (REPO / "training" / "__main__.py").exists()


def test_every_step_resolves_to_a_main():
    from training.cli import STEPS

    assert set(STEPS.values()) <= set(MODULES)
    for module in STEPS.values():
        assert importlib.util.find_spec(f"training.{module}") is not None
        tree = ast.parse((REPO / "training" / f"{module}.py").read_text())
        mains = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
        assert mains and [a.arg for a in mains[0].args.args] == ["argv", "prog"], module


def test_no_module_puts_itself_on_sys_path():
    for module in MODULES:
        source = (REPO / "training" / f"{module}.py").read_text()
        assert "sys.path" not in source, module
        assert "__file__" not in source or module == "paths", module   # locations come from paths.py


def test_torch_free_modules_import_without_torch_or_mlx():
    names = [f"training.{m}" for m in MODULES if m not in TORCH_MODULES | {"acceptance_report"}]
    code = ("import importlib, sys\n"
            f"for name in {names!r}:\n    importlib.import_module(name)\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'mlx', 'mlx_lm'))\n"
            "assert not heavy, heavy\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize("module", sorted(TORCH_MODULES | {"acceptance_report"}))
def test_torch_modules_lack_nothing_but_torch(module):
    """Imported here they either load (torch installed) or stop at `torch` itself: every other import
    (the package's own, the engines', relative ones) resolves."""
    try:
        importlib.import_module(f"training.{module}")
    except ModuleNotFoundError as exc:
        assert not has_torch() and exc.name == "torch", exc


def test_cli_lists_the_steps_and_refuses_unknown_ones():
    run = [sys.executable, "-m", "training"]
    listed = subprocess.run(run + ["--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and "python -m training.train_family" in listed.stdout
    unknown = subprocess.run(run + ["nope"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and "unknown step 'nope'" in unknown.stderr
    helped = subprocess.run(run + ["tokenizer", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: switchyard-train tokenizer")


def test_defaults_come_from_the_checkout_and_are_required_outside_it():
    from training import paths

    assert paths.CHECKOUT == REPO
    assert paths.demo_tokenizer_dir() == DEMO_TARGET
    assert paths.classifier_prompts() == REPO / "classifier" / "data" / "prompts.jsonl"
    inside, outside = argparse.ArgumentParser(), argparse.ArgumentParser()
    paths.path_option(inside, "--corpus", paths.in_checkout("training", "corpus"), "corpus")
    paths.path_option(outside, "--corpus", None, "corpus")
    assert inside.parse_args([]).corpus == REPO / "training" / "corpus"
    with pytest.raises(SystemExit):
        outside.parse_args([])
    assert outside.parse_args(["--corpus", "/x"]).corpus == Path("/x")


def test_family_config_takes_token_ids_and_layer_kinds_from_the_engines():
    from engines.checkpoint import layer_types
    from engines.qwen_tokenizer import SPECIAL_TOKENS
    from training import family_config as fc

    assert [fc.EOT_ID, fc.IM_START_ID, fc.IM_END_ID, fc.MASK_ID] == [8188, 8189, 8190, 8191]
    assert list(fc.SPECIAL_TOKEN_IDS) == list(SPECIAL_TOKENS)
    shipped = json.loads((DEMO_TARGET / "config.json").read_text())
    assert fc.layer_types(fc.TARGET) == shipped["layer_types"] == layer_types({**shipped, "layer_types": None})
    assert fc.exported_target_config()["layer_types"] == shipped["layer_types"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus")
    write_corpus(path)
    return path


def test_tokenizer_step_builds_the_family_tokenizer(corpus, tmp_path):
    from training.cli import main

    assert main(["tokenizer", "--corpus", str(corpus), "--out", str(tmp_path)]) == 0
    tokenizer = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == 8192
    assert [tokenizer.token_to_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>")] == \
        [8188, 8189, 8190, 8191]
    assert json.loads((tmp_path / "tokenizer_config.json").read_text()) == \
        json.loads((DEMO_TARGET / "tokenizer_config.json").read_text())


def test_pack_step_compresses_the_corpus(corpus, tmp_path):
    from training.cli import main

    assert main(["pack", "--corpus", str(corpus), "--out", str(tmp_path)]) == 0
    packed = sorted(p.name for p in tmp_path.iterdir())
    assert packed == sorted(p.name + ".xz" for p in corpus.glob("*.jsonl"))
    assert lzma.decompress((tmp_path / "code.jsonl.xz").read_bytes()) == (corpus / "code.jsonl").read_bytes()


def test_export_writes_the_windows_the_heads_were_trained_for(tmp_path):
    """export.py writes serving.json from the training run's sequence lengths (or measured windows
    passed to it); the engines' reader accepts it. Torch-free: the hints come from family_config."""
    from engines.checkpoint import ServingHints, serving_hints
    from training.family_config import serving_hints as hints_for

    trained = {"mtp_seq": 512, "drafter_seq": 1024}
    default = hints_for(trained)
    assert (default.mtp_prompt_window, default.drafter_context_window) == (512, 1024)
    measured = hints_for(trained, drafter_context_window=384, greedy_tree_temperature=0.7)
    assert (measured.mtp_prompt_window, measured.drafter_context_window) == (512, 384)
    assert (default.greedy_tree_temperature, measured.greedy_tree_temperature) == (1.0, 0.7)
    assert "measured" in measured.why and "measured" not in default.why
    (tmp_path / "target").mkdir()
    (tmp_path / "serving.json").write_text(measured.model_dump_json())
    assert serving_hints(tmp_path / "target") == ServingHints.model_validate(measured.model_dump())
