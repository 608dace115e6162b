#!/usr/bin/env bash
# On the device, in the repo root: rebuild the payload from "$stash"/part_* (earlier calls) and
# the carried .mlxpN/part_* (this call), and install MLX-CUDA, mlx-lm and the gateway's wheels into
# /tmp/site. No-op when /tmp/site already imports mlx (a warm machine). See bench/device_stage.sh.
set -euo pipefail
site=${SITE:-/tmp/site}
stash=${STASH:-/root/stash}
register_commands() {  # `switchyard <command>` finds its subcommands through entry points: declare ours
  python3 - "$site" <<'PY'
import pathlib, sys, tomllib
project = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]
info = pathlib.Path(sys.argv[1]) / f"switchyard-{project['version']}.dist-info"
info.mkdir(parents=True, exist_ok=True)
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: switchyard\nVersion: {project['version']}\n")
groups = project["entry-points"]
(info / "entry_points.txt").write_text("".join(
    f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in items.items()) for group, items in groups.items()))
PY
}
if PYTHONPATH=$site python3 -c "import mlx.core, starlette, pydantic" 2>/dev/null; then
  register_commands
  exit 0
fi
mkdir -p "$site" /tmp/payload
cat $(ls "$stash"/part_* .mlxp*/part_* 2>/dev/null | sort -t_ -k2 -u) | tar -C /tmp/payload -xf -
xz -dc /tmp/payload/mlx_cuda.tar.xz | tar -C "$site" -xf -
for wheel in /tmp/payload/*.whl; do
  python3 -m zipfile -e "$wheel" "$site"
done
rm -rf /tmp/payload
register_commands
PYTHONPATH=$site python3 -c "import mlx.core as mx; print('mlx', mx.__version__, mx.default_device(), 'cuda', mx.cuda.is_available())"
