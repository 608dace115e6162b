"""Where the steps find their default files. In a checkout of the repository the defaults are its
folders (training/corpus, models/switchyard-demo, classifier/data); in an installed copy there is no
such tree, so those options have no default and must be given."""

from __future__ import annotations

import argparse
from importlib.util import find_spec
from pathlib import Path

from engines.checkpoint import DEMO_FAMILY, REPO_ROOT

PACKAGE_DIR = Path(__file__).resolve().parent
# the repository this package sits in, if it does (an installed copy sits in site-packages)
CHECKOUT: Path | None = REPO_ROOT if (REPO_ROOT / "pyproject.toml").exists() and PACKAGE_DIR.parent == REPO_ROOT \
    else None


def in_checkout(*parts: str) -> Path | None:
    """CHECKOUT / parts, or None outside a checkout."""
    return CHECKOUT.joinpath(*parts) if CHECKOUT is not None else None


def demo_family() -> Path | None:
    """models/switchyard-demo of the checkout (engines.checkpoint's DEMO_FAMILY), if it is there."""
    return DEMO_FAMILY if CHECKOUT is not None and DEMO_FAMILY.is_dir() else None


def demo_tokenizer_dir() -> Path | None:
    family = demo_family()
    return family / "target" if family is not None else None


def classifier_prompts() -> Path | None:
    """The classifier's labelled prompt set (a data file it ships: found, not imported)."""
    spec = find_spec("classifier")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "prompts.jsonl"
    return path if path.exists() else None


def path_option(parser: argparse.ArgumentParser, flag: str, default: Path | None, help: str) -> None:
    """A path option whose default exists only in a checkout: required where it has none."""
    where = f" (default: {default})" if default is not None else " (required outside a checkout)"
    parser.add_argument(flag, type=Path, default=default, required=default is None, help=help + where)
