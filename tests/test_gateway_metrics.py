"""/metrics parses with prometheus_client's parser and counts exactly the traffic sent."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gateway.http.app import create_app
from tests.fakes import FakeBackend, RecordingRouter, live_server


def scrape(base_url: str) -> dict[str, dict[tuple, float]]:
    response = httpx.get(base_url + "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def value(samples, name: str, **labels) -> float:
    return samples.get(name, {}).get(tuple(sorted(labels.items())), 0.0)


def test_metrics_count_the_requests_sent():
    backend = FakeBackend()
    with live_server(create_app(backend, router=RecordingRouter())) as server:
        url = server.base_url
        for _ in range(3):
            assert httpx.post(url + "/v1/chat/completions",
                              json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).status_code == 200
        assert httpx.post(url + "/v1/completions", json={"prompt": "abc", "max_tokens": 2, "stream": True}).status_code == 200
        assert httpx.post(url + "/v1/chat/completions", json={"messages": []}).status_code == 400
        assert httpx.get(url + "/nowhere").status_code == 404
        samples = scrape(url)

    chat_ok = dict(endpoint="chat_completions", engine="mtp", status="200")
    chat_ok["class"] = "code"
    assert value(samples, "switchyard_requests_total", **chat_ok) == 3
    comp_ok = dict(endpoint="completions", engine="mtp", status="200")
    comp_ok["class"] = "code"
    assert value(samples, "switchyard_requests_total", **comp_ok) == 1
    bad = dict(endpoint="chat_completions", engine="none", status="400")
    bad["class"] = "none"
    assert value(samples, "switchyard_requests_total", **bad) == 1
    missing = dict(endpoint="other", engine="none", status="404")
    missing["class"] = "none"
    assert value(samples, "switchyard_requests_total", **missing) == 1

    code_mtp = {"engine": "mtp", "class": "code"}
    assert value(samples, "switchyard_generation_tokens_total", **code_mtp) == 3 * 4 + 2
    chat_prompt = len("<|user|>hi<|assistant|>")
    assert value(samples, "switchyard_prompt_tokens_total", **code_mtp) == 3 * chat_prompt + 3
    assert value(samples, "switchyard_finish_reasons_total", reason="length") == 4
    assert value(samples, "switchyard_time_to_first_token_seconds_count", engine="mtp") == 4
    assert value(samples, "switchyard_e2e_request_latency_seconds_count", engine="mtp") == 4
    assert value(samples, "switchyard_e2e_request_latency_seconds_sum", engine="mtp") > 0
    assert value(samples, "switchyard_requests_waiting") == 0
    assert value(samples, "switchyard_worker_up") == 1
    # a stream that ran to its end is not a client disconnect
    assert value(samples, "switchyard_client_disconnects_total", endpoint="completions") == 0


# labels of the info gauges (switchyard_build_info, switchyard_policy_info): one series per process/policy
INFO_LABELS = {"version", "python_version", "mlx_version", "mlx_lm_version", "source", "exploration", "default_class"}


def test_metric_names_follow_conventions():
    with live_server(create_app(FakeBackend())) as server:
        httpx.post(server.base_url + "/v1/completions", json={"prompt": "a", "max_tokens": 1})
        text = httpx.get(server.base_url + "/metrics").text
    for family in text_string_to_metric_families(text):
        assert family.name.startswith("switchyard_"), family.name
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples)
        if family.type == "histogram":
            assert family.name.endswith(("_seconds", "_tokens_per_step"))  # a base unit, or a count of tokens
        for sample in family.samples:
            # every label has a small closed set of values (decoding: greedy/sampled; mode: pipelined/host)
            assert set(sample.labels) <= {"endpoint", "engine", "class", "status", "reason", "le", "position", "kind",
                                          "decoding", "mode", *INFO_LABELS}
