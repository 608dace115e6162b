"""API keys: Bearer auth with constant-time comparison, 401 in OpenAI shape, open /health, configurable
/metrics and admin views, and `serve` refusing a non-loopback bind without keys."""

from __future__ import annotations

import asyncio
import hmac
import os
import subprocess
import sys

import httpx
import openai
import pytest

from gateway.config import GatewayConfig
from gateway.http import auth
from gateway.http.app import create_app
from tests.fakes import FakeBackend, RecordingRouter, live_server
from tests.test_gateway_validation import assert_error

KEY = "sk-test-0123456789abcdef"
OTHER_KEY = "sk-other-0123456789abcdef"
CHAT = "/v1/chat/completions"
BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def server():
    config = GatewayConfig(api_keys=(KEY, OTHER_KEY))
    with live_server(create_app(FakeBackend(), router=RecordingRouter(), config=config)) as srv:
        yield srv


def assert_401(response: httpx.Response) -> None:
    assert_error(response, 401, code="invalid_api_key")
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_api_requires_a_valid_key(server):
    base = server.base_url
    assert_401(httpx.post(base + CHAT, json=BODY))
    assert_401(httpx.post(base + CHAT, json=BODY, headers=bearer("sk-wrong-0123456789abcdef")))
    assert_401(httpx.post(base + CHAT, json=BODY, headers={"Authorization": f"Basic {KEY}"}))
    assert_401(httpx.get(base + "/v1/models"))
    assert_401(httpx.get(base + "/no/such/route"))        # no route discovery without a key
    for key in (KEY, OTHER_KEY):
        assert httpx.post(base + CHAT, json=BODY, headers=bearer(key)).status_code == 200
    assert httpx.get(base + "/v1/models", headers=bearer(KEY)).status_code == 200
    metrics = httpx.get(base + "/metrics", headers=bearer(KEY)).text
    assert 'switchyard_requests_total{class="none",endpoint="chat_completions",engine="none",status="401"} 3.0' in metrics


def test_openai_client_with_and_without_key(server):
    good = openai.OpenAI(base_url=server.base_url + "/v1", api_key=KEY, max_retries=0)
    assert good.chat.completions.create(model="default", **BODY).choices[0].message.content
    bad = openai.OpenAI(base_url=server.base_url + "/v1", api_key="sk-nope-0123456789abcdef", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as err:
        bad.models.list()
    assert err.value.body["code"] == "invalid_api_key"


def test_health_and_openapi_stay_open_metrics_and_admin_need_a_key(server):
    base = server.base_url
    assert httpx.get(base + "/health").status_code == 200
    assert httpx.get(base + "/openapi.json").status_code == 200
    assert_401(httpx.get(base + "/metrics"))
    assert httpx.get(base + "/metrics", headers=bearer(KEY)).status_code == 200
    assert_401(httpx.get(base + "/v1/router/stats"))
    assert_401(httpx.post(base + "/admin/reload"))
    # with a key the request reaches the handler (no adaptive router here: a clean 404)
    assert httpx.post(base + "/admin/reload", headers=bearer(KEY)).status_code == 404


def _asgi_call(app, method: str, path: str, client_host: str, headers: dict | None = None) -> httpx.Response:
    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, client=(client_host, 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            return await client.request(method, path, headers=headers)

    return asyncio.run(call())


def test_open_metrics_and_open_admin_flags():
    config = GatewayConfig(api_keys=(KEY,), protect_metrics=False, protect_admin=False)
    app = create_app(FakeBackend(), router=RecordingRouter(), config=config)
    assert _asgi_call(app, "GET", "/metrics", "192.0.2.7").status_code == 200   # open, from anywhere
    # open admin = loopback clients without a key; remote ones still need a key
    assert _asgi_call(app, "POST", "/admin/reload", "127.0.0.1").status_code == 404
    remote = _asgi_call(app, "POST", "/admin/reload", "192.0.2.7")
    assert_error(remote, 403, code="forbidden")
    assert _asgi_call(app, "GET", "/v1/router/stats", "192.0.2.7").status_code == 403
    assert _asgi_call(app, "POST", "/admin/reload", "192.0.2.7", bearer(KEY)).status_code == 404
    assert_401(_asgi_call(app, "GET", "/v1/models", "192.0.2.7"))


def test_every_key_is_compared_in_constant_time(monkeypatch):
    calls = []
    real = hmac.compare_digest

    def counting(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", counting)
    checker = auth.KeyChecker([KEY, OTHER_KEY, "sk-third-0123456789abcdef"])
    assert checker.valid(KEY)                 # the first key matches, yet all three are compared
    assert len(calls) == 3
    calls.clear()
    assert not checker.valid("sk-nope")
    assert len(calls) == 3
    assert checker.valid(OTHER_KEY) and not checker.valid(KEY[:-1]) and not checker.valid(KEY + "x")


def test_keys_from_file_and_environment(tmp_path):
    key_file = tmp_path / "keys"
    key_file.write_text(f"# team keys\n{KEY}\n\n  {OTHER_KEY}  \n")
    env_key = "sk-env-0123456789abcdef"
    assert auth.load_keys(key_file, {auth.ENV_VAR: env_key}) == (KEY, OTHER_KEY, env_key)
    assert auth.load_keys(None, {auth.ENV_VAR: f"{KEY},{env_key}"}) == (KEY, env_key)
    assert auth.load_keys(None, {}) == ()
    with pytest.raises(auth.AuthConfigError, match="cannot read"):
        auth.load_keys(tmp_path / "missing", {})
    (tmp_path / "empty").write_text("# nothing\n")
    with pytest.raises(auth.AuthConfigError, match="no keys"):
        auth.load_keys(tmp_path / "empty", {})
    with pytest.raises(auth.AuthConfigError, match="at least"):
        auth.load_keys(None, {auth.ENV_VAR: "short"})


@pytest.mark.parametrize("host,loopback", [("127.0.0.1", True), ("127.1.2.3", True), ("::1", True),
                                           ("localhost", True), ("0.0.0.0", False), ("::", False),
                                           ("192.168.1.5", False), ("example.org", False)])
def test_non_loopback_bind_needs_keys(host, loopback):
    assert auth.is_loopback_host(host) is loopback
    auth.check_bind(host, [KEY])
    if loopback:
        auth.check_bind(host, [])
    else:
        with pytest.raises(auth.AuthConfigError, match="api-key-file"):
            auth.check_bind(host, [])


def test_serve_refuses_a_public_bind_without_keys_before_loading_anything(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != auth.ENV_VAR}
    env["PYTHONPATH"] = os.getcwd()
    proc = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--host", "0.0.0.0"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "api-key-file" in proc.stderr and "Traceback" not in proc.stderr
    assert "Loading model" not in proc.stderr


def test_auth_cli_flags_build_the_config(tmp_path, monkeypatch):
    import argparse

    from gateway.cli import serve as serve_cli

    monkeypatch.delenv(auth.ENV_VAR, raising=False)
    key_file = tmp_path / "keys"
    key_file.write_text(KEY + "\n")
    parser = argparse.ArgumentParser()
    serve_cli.register(parser.add_subparsers())
    args = parser.parse_args(["serve", "--host", "0.0.0.0", "--api-key-file", str(key_file), "--open-metrics",
                              "--open-admin"])
    config = serve_cli._config_from_args(args)
    assert config.api_keys == (KEY,) and not config.protect_metrics and not config.protect_admin
    assert KEY not in repr(config)                     # keys never end up in logs through the config
    with pytest.raises(auth.AuthConfigError):
        serve_cli._config_from_args(parser.parse_args(["serve", "--host", "0.0.0.0"]))
    monkeypatch.setenv(auth.ENV_VAR, OTHER_KEY)
    assert serve_cli._config_from_args(parser.parse_args(["serve", "--host", "0.0.0.0"])).api_keys == (OTHER_KEY,)
