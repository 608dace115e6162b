"""One Qwen BPE pipeline (engines.qwen_tokenizer) behind both tokenizers we build: the demo family's
(training/train_tokenizer.py) reproduces the shipped demo tokenizer's config and pipeline, and the test
checkpoints' uses the same pre-tokenizer, normaliser and decoder."""

from __future__ import annotations

import json

from tokenizers import Tokenizer

from engines.qwen_tokenizer import empty_bpe
from engines.testing.tokenizer import build_tokenizer
from tests.ops_helpers import REPO
from training.train_tokenizer import tokenizer_config

DEMO = REPO / "models" / "switchyard-demo" / "target"
PIPELINE = ("normalizer", "pre_tokenizer", "decoder")


def test_the_demo_tokenizer_is_what_training_writes():
    assert tokenizer_config() == json.loads((DEMO / "tokenizer_config.json").read_text())
    shipped = json.loads(Tokenizer.from_file(str(DEMO / "tokenizer.json")).to_str())
    built = json.loads(empty_bpe().to_str())
    assert {k: shipped[k] for k in PIPELINE} == {k: built[k] for k in PIPELINE}


def test_test_checkpoints_share_the_pipeline():
    test_tokenizer = json.loads(build_tokenizer(256).to_str())
    assert {k: test_tokenizer[k] for k in PIPELINE} == {k: json.loads(empty_bpe().to_str())[k] for k in PIPELINE}
