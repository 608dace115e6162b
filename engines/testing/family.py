"""A target + drafter pair written side by side (`<dir>/target`, `<dir>/drafter`).

Used as the server's no-model default until the trained demo model exists. Writing is idempotent
(a stamp records what was written) and atomic (written to a temporary sibling, then renamed),
so concurrent first starts cannot leave a half-written model behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from engines.testing.drafter import write_drafter_checkpoint
from engines.testing.target import write_target_checkpoint

STAMP = "family.json"


def generator_fingerprint() -> str:
    """Hash of the generator's own sources: any change to them regenerates cached families."""
    digest = hashlib.sha256()
    for source in sorted(Path(__file__).parent.glob("*.py")):
        if source.name != "measure.py":
            digest.update(source.name.encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()[:16]


def write_demo_family(directory: str | Path, *, seed: int = 0, variant: str = "agree") -> Path:
    """Write (or keep, if already current) `<directory>/target` and `<directory>/drafter`."""
    directory = Path(directory)
    stamp = {"generator": generator_fingerprint(), "seed": seed, "variant": variant}
    stamp_file = directory / STAMP
    if stamp_file.exists() and _read_json(stamp_file) == stamp:
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    try:
        target = write_target_checkpoint(staging / "target", seed=seed, variant=variant)
        write_drafter_checkpoint(staging / "drafter", target, seed=seed, variant=variant)
        (staging / STAMP).write_text(json.dumps(stamp) + "\n")
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(staging, directory)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return directory


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
