"""A small byte-level BPE tokenizer that behaves like Qwen's, trained locally in milliseconds.

For `model_type: qwen3_5` transformers ignores `tokenizer_class` and rebuilds the tokenizer
from `tokenizer.json`'s vocab and merges with its own Qwen pre-tokenizer (regex pre-split, then
byte-level) and NFC normaliser. A BPE trained with any other pre-tokenizer would load without
error and then tokenize differently, so we train with exactly Qwen's pipeline.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer

from engines.testing.corpus import CORPUS

# Qwen3.5's pre-split regex (transformers models/qwen3_5/tokenization_qwen3_5.py). The Qwen2 one
# lacks the \p{M} (combining mark) classes; the qwen3_5 class is what transformers builds here.
QWEN_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"""
    r"""| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
MASK = "<|mask|>"  # reserved for the DFlash drafter's block positions
SPECIAL_TOKENS: tuple[str, ...] = (ENDOFTEXT, IM_START, IM_END, MASK)

DEFAULT_VOCAB_SIZE = 1024
# Qwen3.5/3.6 add these as single, non-special tokens (decoded into the text): thinking and tool calls.
AGENT_TOKENS: tuple[str, ...] = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
                                 "</tool_response>")
TEMPLATES = Path(__file__).parent / "templates"
CHAT_FORMATS = ("plain", "qwen3.6")

# ChatML, as Qwen uses it (without the tool-calling and thinking branches).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def chat_template(chat: str = "plain") -> str:
    """"plain": ChatML only; "qwen3.6": the published Qwen3.6 template (tools, tool results,
    thinking on by default), copied verbatim from the model's tokenizer config."""
    if chat not in CHAT_FORMATS:
        raise ValueError(f"chat must be one of {CHAT_FORMATS}, got {chat!r}")
    return CHAT_TEMPLATE if chat == "plain" else (TEMPLATES / "qwen3_6.jinja").read_text()


def _added_tokens(chat: str) -> list[AddedToken]:
    agent = AGENT_TOKENS if chat == "qwen3.6" else ()
    return [AddedToken(t, special=t in SPECIAL_TOKENS, normalized=False) for t in (*SPECIAL_TOKENS, *agent)]


def build_tokenizer(vocab_size: int = DEFAULT_VOCAB_SIZE, chat: str = "plain") -> Tokenizer:
    """Train the Qwen-style byte-level BPE on the shipped corpus. Special tokens get ids 0..3
    (with chat "qwen3.6" the thinking and tool-call tokens follow them)."""
    tokenizer = Tokenizer(BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                              fuse_unk=False, byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        show_progress=False,
        special_tokens=_added_tokens(chat),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(CORPUS.splitlines(keepends=True), trainer=trainer)
    return tokenizer


def tokenizer_config(model_max_length: int = 32768, chat: str = "plain") -> dict:
    """tokenizer_config.json contents: the chat template, <|im_end|> ends a turn, <|endoftext|> pads."""
    added = {}
    for index, token in enumerate(_added_tokens(chat)):
        added[str(index)] = {"content": token.content, "lstrip": False, "normalized": False, "rstrip": False,
                             "single_word": False, "special": token.special}
    return {
        "tokenizer_class": "Qwen2Tokenizer",
        "added_tokens_decoder": added,
        "additional_special_tokens": [IM_START, IM_END, MASK],
        "bos_token": None,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "split_special_tokens": False,
        "add_prefix_space": False,
        "model_max_length": model_max_length,
        "chat_template": chat_template(chat),
    }


def write_tokenizer(path: str | Path, vocab_size: int = DEFAULT_VOCAB_SIZE, chat: str = "plain") -> Tokenizer:
    """Write tokenizer.json + tokenizer_config.json into `path`; returns the tokenizer."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(vocab_size, chat)
    tokenizer.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(chat=chat), indent=2) + "\n")
    return tokenizer


def mask_token_id(tokenizer: Tokenizer) -> int:
    token_id = tokenizer.token_to_id(MASK)
    assert token_id is not None, "the test tokenizer always has the mask token"
    return token_id
