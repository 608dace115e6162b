"""`switchyard serve` argument handling and the no-MLX rule for gateway/."""

from __future__ import annotations

import os
import subprocess
import sys

from gateway.cli import build_parser


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args], env=env, capture_output=True, text=True, timeout=120)


def test_gateway_imports_no_mlx():
    code = ("import sys, gateway.http.app, gateway.cli.serve, gateway.cli; gateway.cli.build_parser(); "
            "assert not [m for m in sys.modules if m == 'mlx' or m.startswith('mlx.') or m.startswith('mlx_lm')], "
            "sorted(m for m in sys.modules if 'mlx' in m)")
    result = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": os.getcwd()},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_serve_defaults_are_loopback_8000():
    args = build_parser().parse_args(["serve"])
    assert (args.host, args.port, args.model, args.mtp, args.draft, args.tree_budget, args.policy) == (
        "127.0.0.1", 8000, None, None, None, 4, None
    )
    args = build_parser().parse_args(["serve", "--model", "m", "--no-mtp", "--draft", "d", "--tree-budget", "2",
                                      "--policy", "p.yaml", "--port", "9000", "--host", "0.0.0.0"])
    assert (args.model, args.mtp, args.draft, args.tree_budget, args.policy, args.port, args.host) == (
        "m", False, "d", 2, "p.yaml", 9000, "0.0.0.0"
    )


def test_missing_model_dir_is_a_one_line_error_exit_2(tmp_path):
    result = run_cli("serve", "--model", str(tmp_path / "absent"))
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "not found" in lines[0] and str(tmp_path / "absent") in lines[0]
    assert "Traceback" not in result.stderr


def test_malformed_model_dir_is_a_one_line_error_exit_2(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    result = run_cli("serve", "--model", str(tmp_path), "--port", "1")
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip() and "Loading model" not in line]
    assert len(lines) == 1 and "config.json" in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_serve_command_end_to_end_then_sigterm_exits_0(tiny_target, tmp_path):
    """`switchyard serve --model DIR --port P` with the adaptive router; the openai client gets an answer."""
    import signal
    import socket
    import time

    import httpx
    import openai

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "HOME": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--model", str(tiny_target), "--port", str(port),
                             "--log-level", "warning"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "server did not become healthy"
            time.sleep(0.2)
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)
        raw = client.chat.completions.with_raw_response.create(
            model=tiny_target.name, messages=[{"role": "user", "content": "hi"}], max_tokens=4, temperature=0)
        completion = raw.parse()
        assert completion.usage.completion_tokens >= 1
        assert raw.headers["x-switchyard-engine"] in ("raw", "mtp")
        assert raw.headers["x-switchyard-class"] in ("code", "prose", "structured")
        assert raw.headers["x-switchyard-route-reason"]
        # the path given on the command line is an accepted model name too
        assert client.completions.create(model=str(tiny_target), prompt="x", max_tokens=1).choices
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0  # graceful: uvicorn drains, then the router saves its state
        assert (tmp_path / ".switchyard" / "router_state.json").is_file()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
