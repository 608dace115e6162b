"""Train the demo model's byte-level BPE tokenizer on a balanced sample of the corpus.

Same pre-tokenizer (Qwen3.5 split regex + ByteLevel without its own regex) and normaliser (NFC) as
transformers' Qwen3.5 tokenizer, because transformers rebuilds that pipeline for model_type qwen3_5
regardless of tokenizer.json; anything else would tokenize differently without an error.
Special tokens sit after the learned vocabulary (as in Qwen): <|endoftext|>, <|im_start|>,
<|im_end|>, <|mask|> (the DFlash drafter's mask token).

Run:  switchyard-train tokenizer --out models/switchyard-demo/target   (= python -m training.train_tokenizer)
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator
from pathlib import Path

from tokenizers import pre_tokenizers, trainers

from engines.qwen_tokenizer import SPECIAL_TOKENS, empty_bpe  # the one Qwen BPE pipeline
from engines.qwen_tokenizer import tokenizer_config as qwen_tokenizer_config

from .data import jsonl_lines
from .family_config import SPECIAL_TOKEN_IDS, VOCAB_SIZE
from .paths import in_checkout, path_option

SAMPLE_MB_PER_FILE = {"code": 12, "prose": 10, "structured": 8, "chat": 5}
# ChatML as the demo was trained on; with `tools`, Hermes-style JSON tool calls (mlx-lm reads them with its
# json_tools parser): a chat without tools renders exactly as before.
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' and messages[0]['content'] is string %}"
    "{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions. Their signatures are inside <tools></tools>:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each call, reply with a JSON object inside <tool_call></tool_call> tags:\\n"
    "<tool_call>\\n{\"name\": <function-name>, \"arguments\": <arguments-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['content'] is string %}{%- set content = message['content'] %}"
    "{%- elif message['content'] is none or message['content'] is undefined %}{%- set content = '' %}"
    "{%- else %}{%- set content = message['content'] | map(attribute='text') | join('') %}{%- endif %}"
    "{%- if tools and loop.first and message['role'] == 'system' and message['content'] is string %}"
    "{%- elif message['role'] == 'assistant' and message.tool_calls %}"
    "{{- '<|im_start|>assistant\\n' + content }}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "{%- if content or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' + tool_call.name + '\", \"arguments\": ' + (tool_call.arguments | tojson) + '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def sample_texts(corpus: Path, seed: int) -> Iterator[str]:
    rng = random.Random(seed)
    for name, cap_mb in SAMPLE_MB_PER_FILE.items():
        lines = jsonl_lines(corpus / f"{name}.jsonl")
        rng.shuffle(lines)
        used = 0
        for line in lines:
            text = json.loads(line)["text"]
            used += len(text)
            if used > cap_mb << 20:
                break
            yield text


def tokenizer_config() -> dict:
    """Special tokens after the learned vocabulary (as in Qwen); the demo's 4k-token context."""
    added = {token_id: (token, True) for token, token_id in SPECIAL_TOKEN_IDS.items()}
    return qwen_tokenizer_config(added, CHAT_TEMPLATE, model_max_length=4096)


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    path_option(parser, "--corpus", in_checkout("training", "corpus"), "folder of code/prose/structured/chat.jsonl")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    tokenizer = empty_bpe()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE - len(SPECIAL_TOKENS), min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[],
                                  show_progress=False)
    tokenizer.train_from_iterator(sample_texts(args.corpus, args.seed), trainer=trainer)
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    assert tokenizer.get_vocab_size() == VOCAB_SIZE, tokenizer.get_vocab_size()
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(args.out / "tokenizer.json"))
    (args.out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), indent=2) + "\n")
    print({tok: tokenizer.token_to_id(tok) for tok in SPECIAL_TOKENS})


if __name__ == "__main__":
    main()
