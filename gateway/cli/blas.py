"""Linux CPU: run MLX on an installed OpenBLAS instead of the wheel's reference BLAS.

The `mlx[cpu]` wheel links netlib's single-threaded *reference* BLAS. Preloading a system OpenBLAS
(Debian/Ubuntu: `apt-get install libopenblas0-pthread`) makes its cblas_* symbols win; measured
here (bench/blas_probe.py, see bench/RESULTS-cpu.md) decode runs ~3x faster on the demo-sized model
and a multi-token verify costs much less relative to one step. LD_PRELOAD only takes effect at
process start, so `switchyard serve` re-executes itself once with it set.

Opt out with SWITCHYARD_NO_OPENBLAS=1. Choose a library with SWITCHYARD_OPENBLAS=/path/libopenblas.so.0.
No MLX import here: this runs before the model loads.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
from pathlib import Path

log = logging.getLogger("switchyard.blas")

OPT_OUT_ENV = "SWITCHYARD_NO_OPENBLAS"
LIBRARY_ENV = "SWITCHYARD_OPENBLAS"
REEXEC_MARKER_ENV = "SWITCHYARD_BLAS_REEXEC"   # set on the re-executed process: never loop

_LIB_DIRS = ("/usr/lib/{arch}-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")
_LIB_NAMES = ("libopenblas.so.0", "openblas-pthread/libopenblas.so.0", "openblas-openmp/libopenblas.so.0",
              "libopenblasp.so.0")


def find_openblas() -> Path | None:
    """An installed OpenBLAS shared library, or None."""
    chosen = os.environ.get(LIBRARY_ENV)
    if chosen:
        return Path(chosen) if Path(chosen).is_file() else None
    arch = platform.machine()
    for directory in _LIB_DIRS:
        for name in _LIB_NAMES:
            path = Path(directory.format(arch=arch)) / name
            if path.is_file():
                return path
    return None


def _opted_out() -> bool:
    return os.environ.get(OPT_OUT_ENV, "").strip().lower() not in ("", "0", "false", "no")


def openblas_preloaded() -> bool:
    return "openblas" in os.environ.get("LD_PRELOAD", "").lower()


def reexec_with_openblas(command_word: str | None = None, argv: list[str] | None = None) -> None:
    """On Linux, re-exec this process with OpenBLAS in LD_PRELOAD when one is installed, unless
    opted out, already preloaded, or already re-executed. `command_word`: only when the process was
    started with it on its command line (so a library caller, e.g. a test calling serve() in
    process, is never replaced). Returns only when nothing was done."""
    if sys.platform != "linux" or _opted_out() or openblas_preloaded() or os.environ.get(REEXEC_MARKER_ENV):
        return
    if command_word is not None and command_word not in sys.orig_argv:
        return
    library = find_openblas()
    if library is None:
        return
    env = dict(os.environ)
    env["LD_PRELOAD"] = ":".join(p for p in (str(library), env.get("LD_PRELOAD", "")) if p)
    env[REEXEC_MARKER_ENV] = "1"
    command = argv if argv is not None else [sys.executable, *sys.orig_argv[1:]]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(command[0], command, env)
    except OSError as exc:  # cannot re-exec: carry on with the wheel's BLAS
        log.warning("could not re-exec with OpenBLAS (%s); continuing with the bundled BLAS", exc)


def blas_in_use() -> str:
    """What BLAS this process runs on, for the startup log line."""
    if sys.platform == "darwin":
        return "Accelerate (macOS)"
    maps = Path("/proc/self/maps")
    libraries = set()
    if maps.exists():
        for line in maps.read_text().splitlines():
            name = line.split()[-1] if line.split() else ""
            if "blas" in name.lower():
                libraries.add(Path(name).name)
    if any("openblas" in lib for lib in libraries) and openblas_preloaded():
        return f"OpenBLAS ({os.environ['LD_PRELOAD']}, preloaded)"
    reason = ("opted out via SWITCHYARD_NO_OPENBLAS" if _opted_out()
              else "no OpenBLAS found; install libopenblas0-pthread for ~3x CPU decode" if find_openblas() is None
              else "not preloaded")
    return f"the mlx wheel's bundled reference BLAS ({reason})"
