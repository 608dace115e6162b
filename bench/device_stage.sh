#!/usr/bin/env bash
# Here (not on the device): split MLX-CUDA + mlx-lm + the gateway's wheels into git-ignored folders
# `.mlxp1 .. .mlxpN`, each small enough to travel next to the tracked tree (64 MiB per device call).
#
# Device calls, each within 30 s of the previous one returning (a machine idle for 30 s goes back):
#   calls 1..N-1: carry [".mlxpK"]   command: mkdir -p /root/stash && cp .mlxpK/* /root/stash/
#   call N:       carry [".mlxpN"]   command: bash bench/device_run.sh <task> ...
# With SLIM=1 (the tracked tree is ~55 MiB, mostly the demo model; bench/device_slim.sh): run
# `bash bench/device_slim.sh on` first, make every call 1..N a staging call (2 calls for ~76 MiB),
# then `bash bench/device_slim.sh off` and call N+1 carries nothing: bash bench/device_run.sh <task>.
# bench/device_run.sh reassembles the parts into /tmp/site (bench/device_setup.sh) before its task.
# Later calls on the same warm machine find /tmp/site and skip the setup.
#
# The MLX-CUDA wheel's contents are packed as one tar.xz (built once, cached in $STAGE_CACHE).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
cache=${STAGE_CACHE:-/tmp/switchyard-stage}
mlx=${MLX_VERSION:-0.32.4}
mlx_lm=${MLX_LM_VERSION:-0.32.2}
mkdir -p "$cache"
pip_get() {  # wheels for the device's Python 3.12 / x86-64
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$cache" "$@"
}
if [ ! -f "$cache/mlx_cuda.tar.xz" ]; then
  pip_get "mlx-cuda-13==$mlx"
  unpacked=$(mktemp -d)
  python3 -m zipfile -e "$cache"/mlx_cuda_13-*.whl "$unpacked"
  tar -C "$unpacked" -cf - . | xz -6 -T0 > "$cache/mlx_cuda.tar.xz"
  rm -rf "$unpacked"
fi
# what the device image lacks (it has numpy, transformers, httpx, anyio, click, prometheus-client,
# pyyaml, matplotlib, scikit-learn: see the device library's KINDS.md)
pip_get "mlx==$mlx" "mlx-lm==$mlx_lm" starlette==1.10.0 uvicorn==0.54.0 pydantic==2.14.3 pydantic_core==2.50.4 \
  annotated-types==0.8.0 typing-inspection==0.4.5 sniffio==1.3.1 typing_extensions==4.16.0

payload=$(mktemp)
tar -C "$cache" -cf "$payload" mlx_cuda.tar.xz $(cd "$cache" && ls *.whl | grep -v '^mlx_cuda_13-')
if [ "${SLIM:-0}" = 1 ]; then
  # every part travels in a staging call made with the slim tree (bench/device_slim.sh on); the run
  # call after them (device_slim.sh off) carries no part: device_setup.sh finds them all in the stash
  tree_bytes=$(git ls-files -z -- . ':!models' ':!classifier/data' ':!classifier/model' ':!bench/results' \
               | xargs -0 du -cb | tail -1 | cut -f1)
else
  tree_bytes=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
fi
part=$(( 64 * 1024 * 1024 - tree_bytes - 512 * 1024 ))   # 512 KiB spare for files added later
total=$(stat -c %s "$payload")
count=$(( (total + part - 1) / part ))
rm -rf .mlxp[0-9]*
for k in $(seq 1 "$count"); do
  mkdir -p ".mlxp$k"
  exclude="$(git rev-parse --git-dir)/info/exclude"; mkdir -p "$(dirname "$exclude")"
  grep -qxF "/.mlxp$k/" "$exclude" 2>/dev/null || echo "/.mlxp$k/" >> "$exclude"
  dd if="$payload" of=".mlxp$k/part_$(printf %02d "$k")" bs=1M iflag=skip_bytes,count_bytes \
     skip=$(( (k - 1) * part )) count="$part" status=none
done
rm -f "$payload"
echo "tree $tree_bytes bytes; $count parts of <= $part bytes: .mlxp1 .. .mlxp$count"
