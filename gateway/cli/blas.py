"""Linux CPU: run MLX on OpenBLAS instead of the wheel's reference BLAS.

The `mlx[cpu]` wheel links netlib's single-threaded *reference* BLAS (its libmlx.so imports plain
`cblas_sgemm`, `sgetrf_`, ...). Preloading an OpenBLAS that exports those same names makes them win
for every MLX matmul: decode runs ~2-3x faster on the demo model and a multi-token verify costs much
less relative to one step (bench/blas_probe.py). LD_PRELOAD only takes effect at process start, so
`switchyard serve` (and `bench`) re-execute themselves once with it set.

Which OpenBLAS: an installed system one first (Debian/Ubuntu `libopenblas0-pthread`), else the
`cmeel-openblas` wheel that pip installs with switchyard on Linux. That wheel exports the plain
names (scipy-openblas32/64, the other PyPI OpenBLAS, prefixes them `scipy_cblas_*`: preloading it
would silently change nothing). It needs a `libgfortran.so.5`, which a bare machine lacks; the
`mlx[cpu]` wheel ships one under a hashed name, so a private directory of links gives the loader the
name it asks for (LD_LIBRARY_PATH of the re-executed process only).

Opt out with SWITCHYARD_NO_OPENBLAS=1. Choose with SWITCHYARD_OPENBLAS=/path/libopenblas.so.0, or
`system` / `pip` to force one source. No MLX import here: this runs before the model loads.
"""

from __future__ import annotations

import ctypes.util
import logging
import os
import platform
import sys
from importlib import metadata
from pathlib import Path

log = logging.getLogger("switchyard.blas")

OPT_OUT_ENV = "SWITCHYARD_NO_OPENBLAS"
LIBRARY_ENV = "SWITCHYARD_OPENBLAS"
REEXEC_MARKER_ENV = "SWITCHYARD_BLAS_REEXEC"   # set on the re-executed process: never loop

_LIB_DIRS = ("/usr/lib/{arch}-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")
_LIB_NAMES = ("libopenblas.so.0", "openblas-pthread/libopenblas.so.0", "openblas-openmp/libopenblas.so.0",
              "libopenblasp.so.0")
PIP_DISTRIBUTION = "cmeel-openblas"
PIP_LIBRARY = "cmeel.prefix/lib/libopenblas.so.0"
RUNTIME_DISTRIBUTION = "mlx-cpu"       # ships libgfortran/libquadmath under mlx_cpu.libs/


def system_openblas() -> Path | None:
    arch = platform.machine()
    for directory in _LIB_DIRS:
        for name in _LIB_NAMES:
            path = Path(directory.format(arch=arch)) / name
            if path.is_file():
                return path
    return None


def pip_openblas() -> Path | None:
    """The cmeel-openblas wheel's library, if installed."""
    try:
        path = Path(metadata.distribution(PIP_DISTRIBUTION).locate_file(PIP_LIBRARY))
    except metadata.PackageNotFoundError:
        return None
    return path if path.is_file() else None


def find_openblas() -> Path | None:
    """The OpenBLAS to preload: the override, else a system one, else the pip wheel's; None if none."""
    chosen = os.environ.get(LIBRARY_ENV, "").strip()
    if chosen == "system":
        return system_openblas()
    if chosen == "pip":
        return pip_openblas()
    if chosen:
        return Path(chosen) if Path(chosen).is_file() else None
    return system_openblas() or pip_openblas()


def _fortran_runtime_dir(library: Path) -> Path | None:
    """A directory to put on LD_LIBRARY_PATH so `library` finds libgfortran.so.5, or None when the
    system already has one. Links to the Fortran runtime the mlx[cpu] wheel ships."""
    if library != pip_openblas() or ctypes.util.find_library("gfortran"):
        return None
    try:
        files = metadata.distribution(RUNTIME_DISTRIBUTION).files or []
    except metadata.PackageNotFoundError:
        return None
    bundled = [Path(f.locate()) for f in files if f.parts[0].endswith(".libs") and ".so" in f.name]
    fortran = next((p for p in bundled if p.name.startswith("libgfortran")), None)
    if fortran is None:
        return None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "switchyard" / "fortran-runtime"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        links = {"libgfortran.so.5": fortran, **{p.name: p for p in bundled}}  # its own deps by their names
        for name, target in links.items():
            link = cache / name
            if not link.is_symlink() or Path(os.readlink(link)) != target:
                link.unlink(missing_ok=True)
                link.symlink_to(target)
    except OSError as exc:
        log.warning("cannot prepare the Fortran runtime links for the pip OpenBLAS (%s)", exc)
        return None
    return cache


def preload_env(library: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) with `library` preloaded, and its Fortran runtime findable."""
    out = dict(os.environ if env is None else env)
    out["LD_PRELOAD"] = ":".join(p for p in (str(library), out.get("LD_PRELOAD", "")) if p)
    runtime = _fortran_runtime_dir(library)
    if runtime is not None:
        out["LD_LIBRARY_PATH"] = ":".join(p for p in (str(runtime), out.get("LD_LIBRARY_PATH", "")) if p)
    return out


def _opted_out() -> bool:
    return os.environ.get(OPT_OUT_ENV, "").strip().lower() not in ("", "0", "false", "no")


def openblas_preloaded() -> bool:
    return "openblas" in os.environ.get("LD_PRELOAD", "").lower()


def reexec_with_openblas(command_word: str | None = None, argv: list[str] | None = None) -> None:
    """On Linux, re-exec this process with OpenBLAS in LD_PRELOAD, unless opted out, already
    preloaded, already re-executed or none is found. `command_word`: only when the process was
    started with it on its command line (so a library caller, e.g. a test calling serve() in
    process, is never replaced). Returns only when nothing was done."""
    if sys.platform != "linux" or _opted_out() or openblas_preloaded() or os.environ.get(REEXEC_MARKER_ENV):
        return
    if command_word is not None and command_word not in sys.orig_argv:
        return
    library = find_openblas()
    if library is None:
        return
    env = preload_env(library)
    env[REEXEC_MARKER_ENV] = "1"
    command = argv if argv is not None else [sys.executable, *sys.orig_argv[1:]]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(command[0], command, env)
    except OSError as exc:  # cannot re-exec: carry on with the wheel's BLAS
        log.warning("could not re-exec with OpenBLAS (%s); continuing with the bundled BLAS", exc)


def sgemm_provider() -> str | None:
    """The file that provides the process-wide `cblas_sgemm` MLX calls (what the loader bound)."""
    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

    try:
        process = ctypes.CDLL(None)
        symbol = ctypes.cast(process.cblas_sgemm, ctypes.c_void_p)
    except (OSError, AttributeError):  # not loaded yet (MLX not imported) or not Linux
        return None
    info = DlInfo()
    if not process.dladdr(symbol, ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.path.realpath(info.dli_fname.decode())


def blas_in_use() -> str:
    """What BLAS this process runs on, for the startup log line."""
    if sys.platform == "darwin":
        return "Accelerate (macOS)"
    provider = sgemm_provider()
    if provider and "openblas" in Path(provider).name.lower():
        source = "pip cmeel-openblas" if "cmeel.prefix" in provider else "system"
        return f"OpenBLAS ({provider}, {source}, preloaded)"
    reason = ("opted out via SWITCHYARD_NO_OPENBLAS" if _opted_out()
              else "no OpenBLAS found; `pip install cmeel-openblas` or apt-get install libopenblas0-pthread"
              if find_openblas() is None else "not preloaded")
    return f"the mlx wheel's bundled reference BLAS ({reason})"
