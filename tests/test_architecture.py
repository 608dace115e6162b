"""The import rules of docs/architecture.md, enforced on the source tree.

Every import statement counts, also the ones inside functions (a lazy import is still an arrow).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIRST_PARTY = ("contracts", "engines", "gateway", "classifier", "bench", "training", "tests")

# room -> the first-party modules it may import (prefix match on dotted names). The most specific
# room a module belongs to decides. Nothing but tests imports tests; nothing at run time (contracts,
# engines, classifier, gateway) imports training, bench or engines.testing.
ALLOWED: dict[str, tuple[str, ...]] = {
    "contracts": ("contracts",),
    "engines": ("contracts", "engines"),
    "engines.testing": ("contracts", "engines"),
    "classifier": ("contracts", "classifier"),
    "gateway.config": (),
    "gateway.worker": ("contracts", "gateway.worker", "gateway.routing.interface"),
    "gateway.routing": ("contracts", "gateway.routing", "classifier"),
    "gateway.observability": ("contracts", "gateway.observability", "gateway.routing"),
    "gateway.http": ("contracts", "gateway.config", "gateway.http", "gateway.worker", "gateway.routing",
                     "gateway.observability"),
    # the CLI wires everything; it reaches the engines only through engines.runtime (the Backend) and
    # the MLX-free checkpoint readers (`inspect`)
    "gateway.cli": ("contracts", "gateway", "engines.runtime", "engines.checkpoint", "engines.checkpoint_info"),
    "gateway": ("gateway",),
    "bench": ("contracts", "engines", "gateway", "classifier", "bench"),
    # training's PyTorch code reuses only the MLX-free engine modules (checkpoint layout, drafter config,
    # tokenizer pipeline); the acceptance report measures the MLX engines themselves
    "training": ("contracts", "engines.checkpoint", "engines.dflash_config", "engines.qwen_tokenizer", "training"),
    "training.acceptance_report": ("contracts", "engines", "training"),
    "tests": FIRST_PARTY,
}
# no MLX, ever, in these rooms (engines.runtime is the only door to it, opened by `serve`)
NO_MLX = ("contracts", "classifier", "gateway")
RUNTIME_MUST_NOT_IMPORT = ("tests", "training", "bench", "engines.testing")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, name: str | None = None) -> set[str]:
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                found.add(".".join(base + ([node.module] if node.module else [])))
            else:
                found.add(node.module or "")
    return found


def room_of(module: str) -> str:
    return max((room for room in ALLOWED if module == room or module.startswith(room + ".")), key=len)


def matches(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def source_files() -> list[Path]:
    return sorted(p for top in FIRST_PARTY for p in (REPO / top).rglob("*.py"))


def test_every_module_belongs_to_a_room():
    assert source_files()
    for path in source_files():
        room_of(module_name(path))  # raises (max of nothing) if a top-level package has no room


def violations(module: str, imports: set[str]) -> list[str]:
    room = room_of(module)
    runtime = not any(matches(module, r) for r in ("tests", "bench", "training", "engines.testing"))
    found = []
    for imported in sorted(imports):
        if imported.split(".")[0] not in FIRST_PARTY:
            if any(matches(module, r) for r in NO_MLX) and imported.split(".")[0] in ("mlx", "mlx_lm"):
                found.append(f"{module} imports {imported}: no MLX in {room}")
            continue
        if not any(matches(imported, allowed) for allowed in ALLOWED[room]):
            found.append(f"{module} (room {room}) imports {imported}; allowed: {ALLOWED[room]}")
        elif runtime and any(matches(imported, bad) for bad in RUNTIME_MUST_NOT_IMPORT):
            found.append(f"{module} imports {imported} at run time")
    return found


@pytest.mark.parametrize("path", source_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_imports_follow_the_arrows(path):
    assert violations(module_name(path), imported_modules(path)) == [], "see docs/architecture.md"


def test_the_rules_catch_violations(tmp_path):
    """Negative control: the same check flags MLX in the gateway, an engine reaching into the gateway,
    run-time code importing test factories, and a relative import resolved into a foreign room."""
    bad = tmp_path / "bad.py"
    bad.write_text("import mlx.core as mx\nfrom gateway.http.app import create_app\n"
                   "def f():\n    from engines.testing import spec\n")
    imports = imported_modules(bad, name="gateway.routing.bad")
    assert imports == {"mlx.core", "gateway.http.app", "engines.testing"}
    assert len(violations("gateway.routing.bad", imports)) == 3
    assert violations("engines.raw", {"gateway.http.app"}) and violations("engines.runtime", {"engines.testing"})
    assert violations("gateway.worker.pipeline", {"gateway.http.errors"})
    relative = tmp_path / "rel.py"
    relative.write_text("from ..http import errors\n")
    assert imported_modules(relative, name="gateway.worker.rel") == {"gateway.http"}
    assert violations("gateway.worker.rel", {"gateway.http"})
    assert not violations("gateway.cli.serve", {"engines.runtime", "gateway.http.app"})


def test_training_is_a_room_of_its_own():
    """training/ is a package whose every module is checked by the arrows above (the runtime rooms may
    not import it; it reaches the engines only through their MLX-free modules)."""
    modules = [module_name(p) for p in source_files() if module_name(p).split(".")[0] == "training"]
    assert "training" in modules and "training.train_family" in modules and "training.train_common" in modules
    assert {room_of(m) for m in modules} == {"training", "training.acceptance_report"}
    assert violations("training.train_family", {"engines.dflash"})      # MLX engine code from the torch side
    assert not violations("training.train_family", {"engines.dflash_config", "training.train_common"})
    assert violations("engines.runtime", {"training.family_config"})
    assert violations("gateway.cli.serve", {"training.cli"})


def test_importing_every_mlx_free_module_loads_no_mlx():
    """Dynamic check of the same rule: import every module of the MLX-free rooms in a fresh process."""
    modules = [module_name(p) for p in source_files()
               if any(matches(module_name(p), r) for r in NO_MLX) and not p.name == "__main__.py"]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_lm'))\n"
        "assert not loaded, loaded\n"
        f"assert not [m for m in sys.modules if m.split('.')[0] in {RUNTIME_MUST_NOT_IMPORT[:3]!r}]\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
