#!/usr/bin/env bash
# On the lent GPU (MLX-CUDA), in the repo root, after the staging calls of bench/device_stage.sh:
#   bash bench/device_run.sh bench [switchyard bench options]   # the end-to-end benchmark (issue 7)
#   bash bench/device_run.sh verify                              # kernel check + verify-cost profile + engines
#   bash bench/device_run.sh engines                             # fp32 diagnostic + engines, reference vs CUDA paths
#   bash bench/device_run.sh profile                             # host vs device per step (pipelined and host
#                                                                #   cycles), verify costs, fp32 losslessness
#   bash bench/device_run.sh serveprof [profile_serving options]  # py-spy of `serve` under N clients (.whl/py_spy)
#   bash bench/device_run.sh hostprof [profile_host options]     # only profile_host, both cycle modes
#   bash bench/device_run.sh consumer [profile_consumer options] # the gateway's per-step work vs the engine alone
#   bash bench/device_run.sh multiturn                           # prefix cache: TTFT per turn vs mlx_lm.server
#   bash bench/device_run.sh clients                             # 1/2/4/8 concurrent clients: serial, batched, mlx_lm
#   bash bench/device_run.sh embed                               # embeddings: shared forwards vs one each
#   bash bench/device_run.sh prefill                             # prefill: GDN in chunks vs the per-token loop
#   bash bench/device_run.sh groups                              # a long context beside short streams: groups vs one batch
# SWITCHYARD_PIPELINED=0 before any of them runs the host cycle instead of the pipelined one (A/B).
# Logs and results go to $OUT (what the device tool brings back).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
bash "$(dirname "$0")/device_setup.sh" || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv | tee "$OUT/gpu.txt"
quiet() { grep -v rope_parameters; }   # mlx-lm's config warning, once per load
task=${1:-bench}
shift || true
case "$task" in
  bench)
    # at most 8 files come back: the report, JSON and plots travel as one archive
    rm -rf /tmp/bench-out   # a warm machine keeps the previous run's files
    python3 -m gateway.cli bench --out /tmp/bench-out "$@" 2>&1 | quiet | tee "$OUT/bench.log"
    tar -C /tmp -czf "$OUT/bench.tgz" bench-out
    ;;
  clients)
    # concurrent streaming clients: serve --max-batch 1 vs serve (batched) vs mlx_lm.server (issue 21)
    rm -rf /tmp/cl
    python3 -m gateway.cli bench --clients 1,2,4,8 --out /tmp/cl "$@" 2>&1 | quiet | tee "$OUT/clients.log"
    cp /tmp/cl/clients.md /tmp/cl/clients.json "$OUT/" 2>/dev/null
    ;;
  batchprof)
    # c(B) per batch size and engine-level serial vs batched throughput (no HTTP)
    timeout 300 python3 -m bench.profile_batch --json "$OUT/profile_batch.json" "$@" 2>&1 | quiet | tee "$OUT/profile_batch.txt"
    ;;
  multiturn)
    # TTFT per turn with / without the prefix cache and mlx_lm.server (issue 20)
    rm -rf /tmp/mt
    python3 -m gateway.cli bench --workload multiturn --out /tmp/mt "$@" 2>&1 | quiet | tee "$OUT/multiturn.log"
    cp /tmp/mt/multiturn.md /tmp/mt/multiturn.json "$OUT/" 2>/dev/null
    ;;
  prefill)
    # a prompt's GatedDeltaNet recurrence in chunks vs mlx-lm's per-token loop (demo, Qwen3.5-0.8B shapes)
    for model in demo random-0.8b; do
      timeout 200 python3 -m bench.prefill_gdn --model "$model" --tokens 512,2048 --rounds 3 \
        --json "$OUT/prefill_$model.json" 2>&1 | quiet | tee "$OUT/prefill_$model.txt"
    done
    ;;
  groups)
    # batching in groups of like context lengths vs one padded batch (Qwen3.5-0.8B shapes, a 16k-token context)
    timeout 280 python3 -m bench.batch_groups --model random-0.8b --long 16000 --short 7 --tokens 64 --rounds 2 \
      --json "$OUT/groups_08b.json" 2>&1 | quiet | tee "$OUT/groups_08b.txt"
    ;;
  embed)
    # embeddings: short texts sharing a right-padded forward vs one forward each (demo, Qwen3.5-0.8B shapes)
    for model in demo random-0.8b; do
      timeout 240 python3 -m bench.embeddings_throughput --model "$model" --texts 64 --rounds 3 \
        --json "$OUT/embed_$model.json" 2>&1 | quiet | tee "$OUT/embed_$model.txt"
    done
    ;;
  verify)
    timeout 60 python3 -m bench.check_gdn_kernel 2>&1 | quiet | tee "$OUT/kernel_check.txt"
    timeout 200 python3 -m bench.profile_verify --model demo --trials 25 --pieces --json "$OUT/pv_demo.json" 2>&1 \
      | quiet | tee "$OUT/pv_demo.txt"
    timeout 120 python3 -m bench.profile_verify --model random-0.8b --trials 15 --pieces --piece-trials 3 \
      --json "$OUT/pv_08b.json" 2>&1 | tee "$OUT/pv_08b.txt"
    timeout "${ENGINE_TIMEOUT:-150}" python3 -m bench.verify_engines --per-class 2 --tokens 96 \
      --json "$OUT/engines.json" 2>&1 | quiet | tee "$OUT/engines.txt"
    ;;
  engines)
    timeout 30 python3 -m bench.diag_gpu_fp32 2>&1 | tee "$OUT/diag.txt"
    timeout "${ENGINE_TIMEOUT:-150}" python3 -m bench.verify_engines --modes reference,cuda --per-class 2 \
      --tokens 64 --json "$OUT/engines.json" 2>&1 | quiet | tee "$OUT/engines.txt"
    ;;
  profile)
    # every speculative engine pipelined (verdict on the device) and with the host cycle, in one process (issue 18)
    timeout 240 python3 -m bench.profile_host --tokens 128 --per-class 2 --cycles pipelined,host \
      --json "$OUT/host.json" 2>&1 | quiet | tee "$OUT/host.txt"
    timeout 200 python3 -m bench.profile_verify --model demo --trials 25 --pieces --json "$OUT/pv_demo.json" 2>&1 \
      | quiet | tee "$OUT/pv_demo.txt"
    # greedy speculative output equals raw's only in exact arithmetic: float32 with TF32 matmuls off
    MLX_ENABLE_TF32=0 timeout 200 python3 -m gateway.cli bench --dtype float32 --engines raw,mtp,ddtree,ddtree1 \
      --no-anchor --no-http-raw --no-plots --per-class 6 --max-tokens 128 --out /tmp/lossless 2>&1 | quiet > "$OUT/lossless.log"
    grep -A1 "losslessness" /tmp/lossless/report.md | tee "$OUT/lossless.txt"
    ;;
  serveprof)
    # where the serving process spends its time under 8 streaming clients (py-spy from a carried .whl/)
    if ls .whl/py_spy-*.whl >/dev/null 2>&1 && [ ! -x /tmp/spy/bin/py-spy ]; then
      python3 -m pip install -q --no-index --no-deps --target /tmp/spy .whl/py_spy-*.whl
    fi
    export PATH=/tmp/spy/bin:$PATH
    rm -rf /tmp/ps
    timeout "${PROF_TIMEOUT:-150}" python3 -m bench.profile_serving --out /tmp/ps "$@" 2>&1 | quiet | tee "$OUT/serveprof.txt"
    cp /tmp/ps/profile_serving.json "$OUT/" 2>/dev/null
    ;;
  hostprof)
    # only the host-vs-device split per step, both cycle modes (the first part of `profile`)
    timeout "${PROF_TIMEOUT:-120}" python3 -m bench.profile_host --cycles pipelined,host "$@" \
      --json "$OUT/host.json" 2>&1 | quiet | tee "$OUT/host.txt"
    ;;
  consumer)
    # engine alone vs the gateway's worker path, per engine and mode (what a served step pays on top)
    timeout "${PROF_TIMEOUT:-300}" python3 -m bench.profile_consumer --json "$OUT/consumer.json" "$@" 2>&1 \
      | quiet | tee "$OUT/consumer.txt"
    ;;
  *)
    echo "unknown task $task (bench | verify | engines | profile | hostprof | consumer | multiturn | clients | batchprof)" >&2
    exit 2
    ;;
esac
