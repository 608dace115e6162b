#!/usr/bin/env bash
# Runs on the lent GPU (MLX-CUDA): install MLX from the staged parts, check the CUDA tree-GDN kernel
# against the ops reference, profile the verify cost (demo + random 0.8B) and benchmark the engines.
# Staging (bench/RESULTS-verify.md): calls 1-4 each carry one `.mlxsN` folder and copy it to
# /root/stash; this call carries `.mlxs5` (last part + the mlx and mlx-lm wheels). Logs go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p /tmp/site "$OUT"
cat /root/stash/xzpart_0 /root/stash/xzpart_1 /root/stash/xzpart_2 /root/stash/xzpart_3 .mlxs5/xzpart_4 \
  | python3 -c "import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall('/tmp/site')" || exit 3
for w in .mlxs5/mlx-*.whl .mlxs5/mlx_lm-*.whl; do python3 -m zipfile -e "$w" /tmp/site || exit 4; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c "import mlx.core as mx; print('mlx', mx.__version__, mx.default_device(), 'cuda', mx.cuda.is_available())" || exit 5
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv | tee "$OUT/gpu.txt"
timeout 60 python3 -m bench.check_gdn_kernel 2>&1 | grep -v rope_parameters | tee "$OUT/kernel_check.txt"
timeout 80 python3 -m bench.profile_verify --model demo --trials 25 --pieces --json "$OUT/pv_demo.json" 2>&1 \
  | grep -v rope_parameters | tee "$OUT/pv_demo.txt"
timeout 120 python3 -m bench.profile_verify --model random-0.8b --trials 15 --pieces --piece-trials 3 \
  --json "$OUT/pv_08b.json" 2>&1 | tee "$OUT/pv_08b.txt"
timeout ${ENGINE_TIMEOUT:-150} python3 -m bench.verify_engines --per-class 2 --tokens 96 --json "$OUT/engines.json" 2>&1 \
  | grep -v rope_parameters | tee "$OUT/engines.txt"
