"""A short schemathesis run of the generation endpoints against the REAL runtime (tiny checkpoint):
the tokenizer, chat template, sampler and engines see fuzzed text and parameters. No 5xx, every
error an OpenAI error object. (Schema-valid requests may still be refused here: a prompt can
exceed the tiny model's context, so positive_data_acceptance is left to the fake-backend run.)"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from gateway.config import GatewayConfig
from gateway.http.openapi import build_openapi
from tests.fuzz_checks import CHECKS, fuzz_config, positive_data_accepted

MAX_EXAMPLES = 25
CONFIG = GatewayConfig(max_tokens_limit=8, max_body_bytes=64 * 1024, request_timeout_seconds=60)
ENGINES = ("raw", "mtp", "ddtree")

schema = schemathesis.openapi.from_dict(build_openapi(CONFIG, ENGINES, ("default",)), config=fuzz_config()).include(
    path_regex="^/v1/(chat/)?completions$"
)


@pytest.fixture(scope="module")
def runtime_server(tiny_target, tiny_drafter):
    from engines.runtime import load_runtime
    from gateway.http.app import create_app
    from tests.fakes import live_server

    runtime = load_runtime(tiny_target, draft_dir=tiny_drafter)
    assert tuple(runtime.engine_names) == ENGINES
    with live_server(create_app(runtime, config=CONFIG)) as server:
        yield server


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_real_runtime_survives_fuzzed_requests(case, runtime_server):
    checks = [c for c in CHECKS if c is not positive_data_accepted]
    case.call_and_validate(base_url=runtime_server.base_url, checks=checks, timeout=60)
