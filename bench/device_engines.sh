#!/usr/bin/env bash
# Second device run (same staging as bench/device_verify.sh): the fp32 path diagnostic and the engine
# benchmark (reference vs CUDA-kernel path), kept short to fit the device budget. Logs go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p /tmp/site "$OUT"
cat /root/stash/xzpart_0 /root/stash/xzpart_1 /root/stash/xzpart_2 /root/stash/xzpart_3 .mlxs5/xzpart_4 \
  | python3 -c "import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall('/tmp/site')" || exit 3
for w in .mlxs5/mlx-*.whl .mlxs5/mlx_lm-*.whl; do python3 -m zipfile -e "$w" /tmp/site || exit 4; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 30 python3 -m bench.diag_gpu_fp32 2>&1 | tee "$OUT/diag.txt"
timeout ${ENGINE_TIMEOUT:-150} python3 -m bench.verify_engines --modes reference,cuda --per-class 2 --tokens 64 \
  --json "$OUT/engines.json" 2>&1 | grep -v rope_parameters | tee "$OUT/engines.txt"
