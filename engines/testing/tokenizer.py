"""A small byte-level BPE tokenizer that behaves like Qwen's, trained locally in milliseconds, on
exactly the pipeline transformers rebuilds for Qwen3.5 (engines.qwen_tokenizer)."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer

from engines.qwen_tokenizer import ENDOFTEXT, IM_END, IM_START, MASK, SPECIAL_TOKENS, empty_bpe
from engines.qwen_tokenizer import tokenizer_config as qwen_tokenizer_config
from engines.testing.corpus import CORPUS

__all__ = ["ENDOFTEXT", "IM_END", "IM_START", "MASK", "SPECIAL_TOKENS", "build_tokenizer", "write_tokenizer",
           "mask_token_id", "tokenizer_config", "chat_template"]

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
    tokenizer = empty_bpe()
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
    """tokenizer_config.json contents for the test tokenizer (special tokens first)."""
    added = {index: (token.content, token.special) for index, token in enumerate(_added_tokens(chat))}
    return qwen_tokenizer_config(added, chat_template(chat), model_max_length, add_prefix_space=False)


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
