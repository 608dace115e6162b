"""Shared fixtures: tiny checkpoints in the real on-disk formats, generated once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.testing import write_drafter_checkpoint, write_target_checkpoint


@pytest.fixture(scope="session", autouse=True)
def private_home(tmp_path_factory):
    """A fresh HOME for the whole run (served subprocesses inherit it): the default router state file
    (~/.switchyard/router_state.json) and service files never touch, or are read from, the user's home."""
    import os

    home = tmp_path_factory.mktemp("home")
    saved = os.environ.get("HOME")
    os.environ["HOME"] = str(home)
    yield home
    if saved is None:
        os.environ.pop("HOME", None)
    else:
        os.environ["HOME"] = saved


@pytest.fixture(scope="session", autouse=True)
def pipelined_cycles():
    """Speculative engines run pipelined cycles in every test (as on a GPU; the CPU default is the host
    cycle, which the tests that ask for it, and penalised / constrained / probing requests, still run).
    Through the environment, so served subprocesses do the same."""
    import os

    saved = os.environ.get("SWITCHYARD_PIPELINED")
    os.environ["SWITCHYARD_PIPELINED"] = "1"
    yield
    if saved is None:
        os.environ.pop("SWITCHYARD_PIPELINED", None)
    else:
        os.environ["SWITCHYARD_PIPELINED"] = saved


@pytest.fixture(scope="session")
def tiny_target(tmp_path_factory) -> Path:
    """Random Qwen3.5 target (3 GatedDeltaNet + 1 attention layer, MTP head), float32, HF layout."""
    return write_target_checkpoint(tmp_path_factory.mktemp("tiny_target"), seed=0, variant="random")


@pytest.fixture(scope="session")
def tiny_drafter(tiny_target, tmp_path_factory) -> Path:
    """Random z-lab DFlash drafter bound to `tiny_target` (block 4, features of layers 0 and 2)."""
    return write_drafter_checkpoint(tmp_path_factory.mktemp("tiny_drafter"), tiny_target, seed=0, variant="random")


@pytest.fixture(scope="session")
def tiny_agree_target(tmp_path_factory) -> Path:
    """Target whose MTP head (and the matching drafter) agree with it often but not always."""
    return write_target_checkpoint(tmp_path_factory.mktemp("tiny_agree_target"), seed=0, variant="agree")


@pytest.fixture(scope="session")
def tiny_agree_drafter(tiny_agree_target, tmp_path_factory) -> Path:
    return write_drafter_checkpoint(tmp_path_factory.mktemp("tiny_agree_drafter"), tiny_agree_target, seed=0,
                                    variant="agree")


@pytest.fixture(scope="session")
def tiny_sharded_target(tmp_path_factory) -> Path:
    """`tiny_target`'s weights split over 2 shards + index; every `mtp.*` tensor in the last shard."""
    return write_target_checkpoint(tmp_path_factory.mktemp("tiny_sharded_target"), seed=0, variant="random", shards=2)


@pytest.fixture(scope="session")
def tiny_bundle(tiny_target):
    """`tiny_target` loaded once (engines never mutate a bundle: caches live per request)."""
    from engines.bundle import load_bundle  # MLX only for the tests that ask for a bundle

    return load_bundle(tiny_target)


@pytest.fixture(scope="session")
def tiny_agree_bundle(tiny_agree_target):
    from engines.bundle import load_bundle

    return load_bundle(tiny_agree_target)


@pytest.fixture(scope="session")
def tiny_qwen_chat_target(tmp_path_factory) -> Path:
    """`tiny_target`'s shape with Qwen3.6's published chat template (tools, tool results, thinking
    on by default) and its <think>/<tool_call>/<tool_response> tokens."""
    return write_target_checkpoint(tmp_path_factory.mktemp("tiny_qwen_chat"), seed=0, variant="random",
                                   chat="qwen3.6")


@pytest.fixture(scope="session")
def qwen_chat_tokenizer(tiny_qwen_chat_target):
    from mlx_lm.utils import load_tokenizer

    return load_tokenizer(tiny_qwen_chat_target)


@pytest.fixture(scope="session")
def demo_tokenizer():
    """The embedded demo model's tokenizer and template (Hermes-style JSON tool calls)."""
    from mlx_lm.utils import load_tokenizer

    from tests.ops_helpers import REPO

    return load_tokenizer(REPO / "models" / "switchyard-demo" / "target")
