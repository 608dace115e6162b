"""Where a benchmark ran: hardware, software versions, commit and the BLAS actually mapped."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def as_served() -> None:
    """Re-exec a profiling script with the BLAS `switchyard serve` runs (Linux: an installed
    OpenBLAS preloaded, same opt-out), so its CPU timings are what users get; call it from
    `__main__` only. Under the wheel's reference BLAS a 5-token verify costs 3x a decode step
    instead of 1.8x, and the profile would describe a server nobody runs."""
    from gateway.cli.blas import reexec_with_openblas

    reexec_with_openblas()


def mapped_blas() -> str:
    """The BLAS library mapped into this process (Linux: /proc/self/maps), else what is known."""
    maps = Path("/proc/self/maps")
    if maps.exists():
        names = {line.split()[-1] for line in maps.read_text().splitlines() if "blas" in line.lower()}
        return ", ".join(sorted(Path(n).name for n in names)) or "none found"
    return "Accelerate" if platform.system() == "Darwin" else "unknown"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def describe_environment() -> dict:
    import mlx.core as mx

    from gateway.cli.blas import blas_in_use

    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "mlx": _version("mlx"),
        "mlx_lm": _version("mlx-lm"),
        "device": str(mx.default_device()),
        "blas": mapped_blas(),
        "sgemm": blas_in_use(),   # which of the mapped libraries MLX's matrix products run on
        "ld_preload": os.environ.get("LD_PRELOAD", ""),
        "commit": git_commit(),
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def print_table(columns: list[str], rows: list[list[str]]) -> None:
    """A markdown table on stdout: the benches' results, ready to paste into BENCHMARKS.md."""
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(row) + " |")


def record(results: dict, json_path: Path | None) -> None:
    """Write a bench's results as JSON (where asked) and print which model ran on which device, before its table."""
    if json_path is not None:
        json_path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"{results.get('model', '')}, {results['environment'].get('device', '')}")
