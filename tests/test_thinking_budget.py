"""A cap on thinking (vLLM's thinking_token_budget, Anthropic's thinking.budget_tokens): a Qwen3.6-template
model that opens its thinking block in the generation prompt thinks at most that many tokens, then the block's
closing token is forced and the answer follows. The cap is in the target's processed logits, per verified row,
so speculation stays lossless; clients see it through the openai and anthropic SDKs."""

from __future__ import annotations

import anthropic
import mlx.core as mx
import numpy as np
import openai
import pytest

from contracts.engine import CancelToken
from contracts.sampling import SamplingParams
from engines.processing import TargetProcessor, ThinkingBudget

ASK = [{"role": "user", "content": "Which is larger, 9.11 or 9.8?"}]


@pytest.fixture(scope="module")
def thinker(tmp_path_factory):
    """A target whose drafters agree with it often, with Qwen3.6's chat template (thinking on by default)."""
    from engines.runtime import load_runtime
    from engines.testing.drafter import write_drafter_checkpoint
    from engines.testing.target import write_target_checkpoint

    target = write_target_checkpoint(tmp_path_factory.mktemp("thinker"), seed=0, variant="agree", chat="qwen3.6")
    drafter = write_drafter_checkpoint(tmp_path_factory.mktemp("thinker_drafter"), target, seed=0, variant="agree")
    return load_runtime(str(target), draft_dir=str(drafter))


def test_the_budget_forces_the_closing_token_once_spent():
    budget = ThinkingBudget(3, 9)
    state = budget.after(budget.start_state, [1, 2])
    assert budget.forced(state) is None
    state = budget.after(state, [3])
    assert budget.forced(state) == 9
    assert budget.after(state, [9])[1] and budget.forced(budget.after(state, [9, 4])) is None
    assert budget.after(budget.start_state, [1, 9])[1]   # the model closed it itself: no cap left
    assert budget.forced(budget.after(budget.start_state, [1, 9, 2, 3, 4])) is None


def test_each_verified_row_is_capped_by_its_own_path(thinker):
    tokenizer, vocab = thinker.bundle.tokenizer, thinker.bundle.vocab_size
    end = tokenizer.encode(tokenizer.think_end, add_special_tokens=False)[0]
    params = SamplingParams(temperature=0.0, thinking_budget=2, opens_in_reasoning=True)
    processor = TargetProcessor(params, [1, 2], tokenizer, vocab)
    thought = [t for t in range(100, 110) if t != end][:2]
    processor.advance(thought[:1])
    rows = np.array(processor.apply(mx.zeros((3, vocab)), [[], thought[1:], [thought[1], end]]))
    assert not np.isneginf(rows[0]).any()                                       # 1 thought: free
    assert np.isneginf(rows[1]).sum() == vocab - 1 and rows[1, end] == 0.0      # 2 thought: </think> only
    assert not np.isneginf(rows[2]).any()                                       # closed: free again
    processor.advance([thought[1], end])
    assert not processor.active
    outside = TargetProcessor(SamplingParams(temperature=0.0, thinking_budget=2), [1], tokenizer, vocab)
    assert not outside.active   # the prompt opened no thinking block: nothing to cap


def _thinking(runtime, budget: int | None, engine: str) -> tuple[list[int], int]:
    """The greedy reply's tokens and how many drafts its verifies accepted."""
    chat = runtime.chat_prompt(ASK)
    assert chat.reply.opens_in_reasoning
    params = SamplingParams(temperature=0.0, max_tokens=24, thinking_budget=budget, opens_in_reasoning=True)
    chunks = list(runtime.generate(chat.ids, params, engine, CancelToken()))
    accepted = sum(sum(c.step.accepted_positions) for c in chunks if c.step is not None)
    return [t for c in chunks for t in c.token_ids], accepted


def test_greedy_speculation_equals_raw_under_the_budget(thinker):
    end = thinker.bundle.tokenizer.encode(thinker.bundle.tokenizer.think_end, add_special_tokens=False)[0]
    free, _ = _thinking(thinker, None, "raw")
    assert end not in free[:7], "the model must think past the budget, or this test proves nothing"
    capped, _ = _thinking(thinker, 6, "raw")
    assert capped[6] == end and capped[:6] == free[:6]
    for engine in ("mtp", "ddtree"):
        tokens, accepted = _thinking(thinker, 6, engine)
        assert tokens == capped and accepted > 0, engine


def test_clients_ask_for_the_budget(thinker):
    from gateway.http.app import create_app
    from tests.fakes import live_server

    with live_server(create_app(thinker)) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        free = client.chat.completions.create(model="default", messages=ASK, temperature=0, max_tokens=24)
        capped = client.chat.completions.create(model="default", messages=ASK, temperature=0, max_tokens=24,
                                                extra_body={"thinking_token_budget": 6})
        assert capped.choices[0].message.reasoning_content != free.choices[0].message.reasoning_content
        assert capped.usage.completion_tokens_details.reasoning_tokens <= 7   # 6 thought + the closing token
        assert capped.choices[0].message.content   # the answer follows
        claude = anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0)
        message = claude.messages.create(model="default", max_tokens=24, messages=ASK, extra_body={"temperature": 0},
                                         thinking={"type": "enabled", "budget_tokens": 6})
        thinking = [b.thinking for b in message.content if b.type == "thinking"]
        assert thinking == [capped.choices[0].message.reasoning_content]
