#!/usr/bin/env bash
# On the device, in the repo root: rebuild the payload from "$stash"/part_* (earlier calls) and
# the carried .mlxpN/part_* (this call), and install MLX-CUDA, mlx-lm and the gateway's wheels into
# /tmp/site. No-op when /tmp/site already imports mlx (a warm machine). See bench/device_stage.sh.
set -euo pipefail
site=${SITE:-/tmp/site}
stash=${STASH:-/root/stash}
if PYTHONPATH=$site python3 -c "import mlx.core, starlette, pydantic" 2>/dev/null; then
  exit 0
fi
mkdir -p "$site" /tmp/payload
cat $(ls "$stash"/part_* .mlxp*/part_* 2>/dev/null | sort -t_ -k2 -u) | tar -C /tmp/payload -xf -
xz -dc /tmp/payload/mlx_cuda.tar.xz | tar -C "$site" -xf -
for wheel in /tmp/payload/*.whl; do
  python3 -m zipfile -e "$wheel" "$site"
done
rm -rf /tmp/payload
PYTHONPATH=$site python3 -c "import mlx.core as mx; print('mlx', mx.__version__, mx.default_device(), 'cuda', mx.cuda.is_available())"
