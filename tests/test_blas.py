"""gateway/blas.py: `switchyard serve` re-executes itself once with an installed OpenBLAS preloaded
(Linux), never loops, honours the opt-out, and leaves in-process callers alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli import blas

REPO = Path(__file__).resolve().parent.parent

SCRIPT = """
import os, sys
from gateway.cli.blas import reexec_with_openblas
print("run", os.environ.get("LD_PRELOAD", ""), os.environ.get("SWITCHYARD_BLAS_REEXEC", ""), flush=True)
reexec_with_openblas({word!r})
print("kept", flush=True)
"""


def _run(tmp_path: Path, word: str | None, **env: str) -> list[str]:
    fake = tmp_path / "libopenblas.so.0"
    fake.write_bytes(b"not an ELF: the loader reports it and ignores it")
    full = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", blas.OPT_OUT_ENV, blas.REEXEC_MARKER_ENV)}
    full.update(PYTHONPATH=str(REPO), **{blas.LIBRARY_ENV: str(fake)}, **env)
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(word=word), "serve"], env=full, cwd=REPO,
                         capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if line.startswith(("run", "kept"))]


@pytest.mark.skipif(sys.platform != "linux", reason="LD_PRELOAD re-exec is Linux-only (macOS uses Accelerate)")
def test_reexecs_once_with_the_library_preloaded(tmp_path):
    lines = _run(tmp_path, "serve")
    assert lines[0] == "run  "                       # first exec: nothing preloaded
    assert lines[1].startswith("run ") and "libopenblas.so.0" in lines[1] and lines[1].endswith(" 1")
    assert lines[2] == "kept" and len(lines) == 3    # the re-executed process does not re-exec again


@pytest.mark.skipif(sys.platform != "linux", reason="LD_PRELOAD re-exec is Linux-only (macOS uses Accelerate)")
def test_opt_out_and_foreign_command_lines_are_left_alone(tmp_path):
    assert _run(tmp_path, "serve", **{blas.OPT_OUT_ENV: "1"}) == ["run  ", "kept"]
    assert _run(tmp_path, "bench") == ["run  ", "kept"]   # not started as `... bench`: no re-exec


def test_find_openblas_honours_the_override(tmp_path, monkeypatch):
    lib = tmp_path / "libopenblas.so.0"
    lib.write_bytes(b"x")
    monkeypatch.setenv(blas.LIBRARY_ENV, str(lib))
    assert blas.find_openblas() == lib
    monkeypatch.setenv(blas.LIBRARY_ENV, str(tmp_path / "missing.so"))
    assert blas.find_openblas() is None


def test_blas_in_use_names_the_reason(monkeypatch):
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.setenv(blas.OPT_OUT_ENV, "1")
    text = blas.blas_in_use()
    assert ("opted out" in text) if sys.platform == "linux" else ("Accelerate" in text)


PROFILES = ("profile_step", "profile_verify", "profile_host", "profile_batch", "profile_mtp_cycle", "profile_consumer")


@pytest.mark.skipif(sys.platform != "linux", reason="LD_PRELOAD re-exec is Linux-only (macOS uses Accelerate)")
@pytest.mark.parametrize("module", PROFILES)
def test_profiles_run_on_the_blas_serve_runs(tmp_path, module):
    """A CPU profile timed under the wheel's reference BLAS describes a server nobody runs: each
    profiling script re-executes itself with the OpenBLAS `serve` would preload (here a fake one,
    which the loader names on stderr when it is preloaded), and honours the opt-out."""
    fake = tmp_path / "libopenblas.so.0"
    fake.write_bytes(b"not an ELF: the loader reports it and ignores it")
    base = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", blas.OPT_OUT_ENV, blas.REEXEC_MARKER_ENV)}
    base.update(PYTHONPATH=str(REPO), **{blas.LIBRARY_ENV: str(fake)})

    def stderr(**env: str) -> str:
        return subprocess.run([sys.executable, "-m", f"bench.{module}", "--help"], env={**base, **env}, cwd=REPO,
                              capture_output=True, text=True, check=True).stderr

    assert str(fake) in stderr()
    assert str(fake) not in stderr(**{blas.OPT_OUT_ENV: "1"})
