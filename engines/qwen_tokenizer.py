"""The Qwen3.5/3.6 byte-level BPE pipeline and tokenizer_config.json, as transformers rebuilds them for
`model_type: qwen3_5` (it ignores `tokenizer_class` and recreates the pre-tokenizer and normaliser
from tokenizer.json's vocab and merges). A BPE trained with any other pipeline loads without error and
then tokenizes differently, so every tokenizer we build — the demo family's (training/) and the test
checkpoints' (engines/testing/) — starts here. `tokenizers` only; no MLX.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

# transformers/models/qwen3_5/tokenization_qwen3_5.py PRETOKENIZE_REGEX: Qwen2's plus the \p{M}
# (combining mark) classes
QWEN_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"""
    r"""| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
MASK = "<|mask|>"  # the DFlash drafter's block positions
SPECIAL_TOKENS: tuple[str, ...] = (ENDOFTEXT, IM_START, IM_END, MASK)


def empty_bpe() -> Tokenizer:
    """An untrained BPE with Qwen's normaliser (NFC), pre-split regex + byte level, and decoder."""
    tokenizer = Tokenizer(models.BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                                     fuse_unk=False, byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def tokenizer_config(added: dict[int, tuple[str, bool]], chat_template: str, model_max_length: int,
                     **extra: object) -> dict:
    """tokenizer_config.json: `added` maps token id -> (content, special); <|im_end|> ends a turn,
    <|endoftext|> pads."""
    return {
        "tokenizer_class": "Qwen2Tokenizer",
        "added_tokens_decoder": {str(i): {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": special}
                                 for i, (content, special) in added.items()},
        "additional_special_tokens": [IM_START, IM_END, MASK],
        "bos_token": None,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "split_special_tokens": False,
        **extra,
        "model_max_length": model_max_length,
        "chat_template": chat_template,
    }
