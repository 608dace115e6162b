"""An eleventh agent sweep: requests as the openai and anthropic SDKs (and the agents on them) send them,
against a served gateway. Each test is a gap the sweep found."""

from __future__ import annotations

import math

import anthropic
import mlx.core as mx

from contracts.sampling import SamplingParams
from engines.bundle import GenerationDefaults
from engines.sampling import Rng, SamplerConfig, candidates, choose, resolve
from tests.agent_sweeps import openai_client as _openai
from tests.agent_sweeps import post as _post
from tests.agent_sweeps import srv  # noqa: F401 - srv is the shared fixture

ASK = [{"role": "user", "content": "Weather in Paris?"}]


def _anthropic(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0)


def test_top_p_zero_keeps_only_the_most_likely_token(srv):
    """OpenAI takes top_p from 0 to 1, and clients that want determinism without temperature 0 send top_p 0;
    here it was a 400 ("greater than 0") on every API. top_p 0 is now the nucleus of the most likely token
    alone (as HF and vLLM keep at least one token): the one sampler keeps the top token (and any tied with it),
    so every engine's draws and verifies see the same one-token distribution."""
    client = _openai(srv)
    client.chat.completions.create(model="default", messages=ASK, max_tokens=2, top_p=0)
    assert srv.backend.calls[-1]["params"].top_p == 0.0
    client.completions.create(model="default", prompt="hi", max_tokens=1, top_p=0)
    client.responses.create(model="default", input="hi", max_output_tokens=16, top_p=0)
    assert srv.backend.calls[-1]["params"].top_p == 0.0
    _anthropic(srv).messages.create(model="default", max_tokens=8, messages=ASK, extra_body={"top_p": 0})
    assert srv.backend.calls[-1]["params"].top_p == 0.0
    for bad in (-0.1, 1.1):
        assert _post(srv, "/v1/chat/completions", {"messages": ASK, "top_p": bad}).status_code == 400

    cfg = resolve(SamplingParams(temperature=1.0, top_p=0.0), GenerationDefaults())
    logits = mx.array([[0.5, 3.0, 1.0, 3.0 - 1e-3], [2.0, -1.0, 2.0, 0.0]])
    dist = candidates(logits, cfg).dense(4)
    assert [[math.isfinite(v) for v in row] for row in dist.tolist()] == [[False, True, False, False],
                                                                        [True, False, True, False]]
    assert abs(math.exp(dist.tolist()[0][1]) - 1.0) < 1e-6   # all the mass on the top token
    with_top_k = candidates(logits, SamplerConfig(temperature=0.7, top_p=0.0, top_k=2, min_p=0.0)).dense(4)
    assert [math.isfinite(v) for v in with_top_k.tolist()[0]] == [False, True, False, False]
    assert choose(logits[:1], cfg, Rng(3)).tolist() == [1]
