"""A fast, quiet first run: OpenBLAS from pip alone on Linux (and proof the preload took), no stray
third-party warnings at startup, every dashboard series from the first scrape, and `switchyard
inspect` on the checkpoint shapes users bring."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engines.checkpoint_info import inspect_checkpoint
from engines.testing import write_drafter_checkpoint, write_target_checkpoint
from gateway.cli import blas
from gateway.http.app import create_app
from tests.fakes import FakeBackend, live_server
from tests.ops_helpers import REPO, serve_like_app

PROBE = """
import sys
from gateway.cli.blas import reexec_with_openblas, sgemm_provider
reexec_with_openblas("serve")
import mlx.core as mx
mx.eval(mx.ones((8, 8)) @ mx.ones((8, 8)))
print("provider", sgemm_provider())
"""


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", blas.REEXEC_MARKER_ENV, blas.OPT_OUT_ENV,
                                                             blas.LIBRARY_ENV)}
    return {**env, "PYTHONPATH": str(REPO), **extra}


@pytest.mark.skipif(sys.platform != "linux", reason="the OpenBLAS preload is Linux-only (macOS uses Accelerate)")
def test_pip_openblas_is_what_mlx_calls_after_the_reexec():
    """The cmeel-openblas wheel (a Linux dependency) exports the plain cblas names the mlx[cpu] wheel
    links, so after the re-exec MLX's cblas_sgemm resolves into it, not into the bundled reference
    BLAS (a prefixed-symbol wheel would leave the reference BLAS bound and fail this)."""
    library = blas.pip_openblas()
    assert library is not None, "cmeel-openblas is a Linux dependency of switchyard: reinstall the package"
    out = subprocess.run([sys.executable, "-c", PROBE, "serve"], env=_clean_env(**{blas.LIBRARY_ENV: "pip"}),
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    provider = next(line.split(" ", 1)[1] for line in out.stdout.splitlines() if line.startswith("provider"))
    assert Path(provider) == library.resolve()
    opted_out = subprocess.run([sys.executable, "-c", PROBE, "serve"],
                               env=_clean_env(**{blas.OPT_OUT_ENV: "1"}), cwd=REPO, capture_output=True, text=True,
                               timeout=120)
    assert "openblas" not in opted_out.stdout.split("provider", 1)[1].lower()   # the negative control


def test_system_openblas_is_preferred_to_the_pip_one(tmp_path, monkeypatch):
    system = tmp_path / "libopenblas.so.0"
    system.write_bytes(b"x")
    monkeypatch.delenv(blas.LIBRARY_ENV, raising=False)
    monkeypatch.setattr(blas, "system_openblas", lambda: system)
    assert blas.find_openblas() == system
    monkeypatch.setattr(blas, "system_openblas", lambda: None)
    assert blas.find_openblas() == blas.pip_openblas()
    monkeypatch.setenv(blas.LIBRARY_ENV, "pip")
    monkeypatch.setattr(blas, "system_openblas", lambda: system)
    assert blas.find_openblas() == blas.pip_openblas()


def _serve_output(model: Path, tmp_path: Path) -> str:
    """Everything `switchyard serve` prints until it is healthy, then SIGTERM."""
    import signal
    import time

    import httpx

    from tests.ops_helpers import free_port

    port = free_port()
    log = tmp_path / f"serve-{model.parent.name}.log"
    with open(log, "w") as handle:
        proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--model", str(model), "--port",
                                 str(port)], env=_clean_env(), cwd=REPO, stdout=handle, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    return log.read_text()


def test_startup_output_has_no_third_party_warnings(tmp_path, tiny_target):
    """The demo model and a generated flat-config checkpoint: the only output is our own log lines
    (uvicorn's INFO included); transformers' rope_parameters warning about Qwen3.5's mrope keys is gone."""
    for model in (REPO / "models" / "switchyard-demo" / "target", tiny_target):
        text = _serve_output(Path(model), tmp_path)
        assert "Unrecognized keys" not in text and "[transformers]" not in text, text
        assert not [line for line in text.splitlines() if re.search(r"warn", line, re.I)], text
        assert "switchyard.inspect" in text and "mtp head" in text   # the inspection is logged at start


def test_a_foreign_rope_key_still_warns(caplog):
    import logging

    import engines.bundle  # noqa: F401  installs the filter

    logger = logging.getLogger("transformers.modeling_rope_utils")
    # transformers' own logger may not propagate to the root (where caplog listens): listen on this one itself
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger=logger.name):
            logger.warning("Unrecognized keys in `rope_parameters` for 'rope_type'='default': {'mrope_section'}")
            logger.warning("Unrecognized keys in `rope_parameters` for 'rope_type'='default': "
                           "{'mrope_section', 'foo'}")
    finally:
        logger.removeHandler(caplog.handler)
    messages = [r.getMessage() for r in caplog.records]   # once, or twice where it propagates to the root too
    assert messages and all(m.endswith("'foo'}") for m in messages)


def _dashboard_series() -> set[str]:
    expressions: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            expressions.extend([node["expr"]] if "expr" in node else [])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads((REPO / "dashboards" / "switchyard.json").read_text()))
    return {name for expr in expressions for name in re.findall(r"switchyard_[a-z0-9_]+", expr)}


def test_every_dashboard_series_exists_on_the_first_scrape(tmp_path):
    """A fresh server (adaptive router, nothing served yet) already exposes every series any panel
    queries, with labelled counters at 0 for the known label values."""
    import httpx

    from tests.ops_helpers import SpeculativeFake

    app, router = serve_like_app(SpeculativeFake(), tmp_path / "policy.yaml")
    with live_server(app) as server:
        text = httpx.get(server.base_url + "/metrics", timeout=10).text
    present = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    missing = sorted(_dashboard_series() - present)
    assert not missing, missing
    for series in ('switchyard_engine_handoffs_total{engine="mtp"} 0.0',
                   'switchyard_client_disconnects_total{endpoint="chat_completions"} 0.0',
                   'switchyard_route_decisions_total{class="prose",engine="ddtree",reason="explore"} 0.0',
                   'switchyard_spec_accepted_tokens_total{class="code",engine="ddtree"} 0.0'):
        assert series in text, series
    plain = create_app(FakeBackend())   # without the adaptive router, the engine/class families still start at 0
    assert plain.state.gateway.metrics is not None


def _run_inspect(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "gateway.cli", "inspect", "--json", *args], env=_clean_env(),
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_inspect_reports_what_a_checkpoint_holds(tmp_path, tiny_target, tiny_drafter, tiny_sharded_target):
    dense = _run_inspect("--model", str(tiny_target), "--draft", str(tiny_drafter), "--context", "1024")
    assert (dense["model_type"], dense["layers"], dense["linear_attention_layers"], dense["full_attention_layers"]) \
        == ("qwen3_5", 4, 3, 1)
    assert dense["mtp"]["found"] and dense["mtp"]["where"].startswith("in the checkpoint")
    assert dense["drafter"]["compatible"] and dense["drafter"]["target_layer_ids"] == [0, 2]
    assert dense["quantization"] is None and set(dense["memory"]) == {"raw", "mtp", "ddtree", "all engines"}
    assert dense["memory"]["all engines"] > dense["memory"]["mtp"] > dense["memory"]["raw"] > 0
    sharded = inspect_checkpoint(tiny_sharded_target)
    assert sharded.weights.files == 2 and sharded.mtp["found"] and "model-00002" in sharded.mtp["where"]

    from mlx_lm import convert

    quantized = tmp_path / "q4"
    convert(str(tiny_target), mlx_path=str(quantized), quantize=True, q_bits=4, q_group_size=32)
    stripped = inspect_checkpoint(quantized)
    assert stripped.quantization["bits"] == 4 and not stripped.mtp["found"]
    assert "--mtp-weights" in stripped.mtp["reason"]
    with_sidecar = inspect_checkpoint(quantized, mtp_weights=tiny_target)
    assert with_sidecar.mtp["found"] and with_sidecar.mtp["where"].startswith("in --mtp-weights")

    bad = write_drafter_checkpoint(tmp_path / "bad_drafter", tiny_target, target_layer_ids=(0, 2))
    config = json.loads((bad / "config.json").read_text())
    config["dflash_config"]["target_layer_ids"] = [0, 9]
    config["dflash_config"]["mask_token_id"] = 10**6
    (bad / "config.json").write_text(json.dumps(config))
    mismatch = inspect_checkpoint(tiny_target, draft_dir=bad)
    assert not mismatch.drafter["compatible"] and len(mismatch.drafter["problems"]) == 2
    assert any("will not load" in w for w in mismatch.warnings)
    text = "\n".join(mismatch.lines())
    assert "INCOMPATIBLE" in text and "target_layer_ids [0, 9]" in text


def test_inspect_reads_moe_configs_and_refuses_clearly(tmp_path, tiny_target):
    moe = tmp_path / "moe"
    write_target_checkpoint(moe, seed=1)
    config = json.loads((moe / "config.json").read_text())
    config.update(num_experts=8, num_experts_per_tok=2, model_type="qwen3_5_moe")
    (moe / "config.json").write_text(json.dumps(config))
    assert inspect_checkpoint(moe).experts == 8
    out = subprocess.run([sys.executable, "-m", "gateway.cli", "inspect", "--model", str(tmp_path / "absent")],
                         env=_clean_env(), cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "not found" in out.stderr and "Traceback" not in out.stderr
