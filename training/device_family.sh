#!/usr/bin/env bash
# A whole demo family in two device calls, on fla's GDN kernels (training/README.md, "A target trained longer").
# Here, before each call: put what it carries under training/out/ (git-ignored), then `bash bench/device_slim.sh on`
# and `off` after. On the device, from the repository root:
#
#   bash training/device_family.sh target [train_family options]   # call 1, carries training/out/{wheels,tok}
#       and training/corpus/pack: the target alone (TARGET_SECONDS, default 380), its shards saved before
#       its evaluation. Here, xz them into training/out/target (`xz -T2 -k`): bf16 weights shrink ~30 %, so
#       call 2's carry fits 64 MiB
#   bash training/device_family.sh heads [options for both]        # call 2, carries also training/out/target
#       (call 1's files) and training/out/prompts.jsonl: the MTP head (MTP_SECONDS, default 360) beside the
#       drafter distilled on the new target's replies (GEN_SECONDS 100, DRAFTER_SECONDS 300), in parallel
#
# wheels: fla-core, flash-linear-attention, einops, pydantic (+ pydantic-core, annotated-types,
# typing-inspection) for Python 3.12; tok: the demo tokenizer.json + tokenizer_config.json.
# Then here: call 1's target-*.safetensors, and heads/*.safetensors of call 2's heads.tgz with its
# heads/report_mtp.json as report.json, in one folder DIR: `switchyard-train export --shards DIR`.
# Seconds are budgets of the training loops, and every phase also stops by STOP_SECONDS (default 440) after
# the script starts, so a call stays under the device's 600 s whatever fla's start-up costs: its gradient check
# and first compilation took 100-340 s on the device (2026-11-28: 200 s before the target's phase, 144 s in its
# first step), which the phase's own seconds cannot know. Where fla's start-up is that slow, a 380-s target
# gets ~240 s of steps; KERNELS=reference (transformers' kernels, ~1/1.8 the target's tokens per second) starts
# in seconds. Off the device the same commands run on the CPU (fla absent: the reference kernels), e.g. with
# --tiny, which is how the plumbing is tested.
set -uo pipefail
OUT=${OUT:-/tmp/out}
CARRY=${CARRY:-training/out}
# a warm device keeps /tmp between calls: a reference call must not import the last call's fla
rm -rf /tmp/site
mkdir -p "$OUT" /tmp/site
for wheel in "$CARRY"/wheels/*.whl; do
  # transformers picks fla's kernel up by itself wherever fla imports (unpadded: refused on Hopper)
  case "${KERNELS:-fla}:$(basename "$wheel")" in reference:fla_core-*|reference:flash_linear_attention-*) continue ;; esac
  [ -e "$wheel" ] && python3 -m zipfile -e "$wheel" /tmp/site
done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
# Every timed phase stops by this wall-clock time (train_common.stop_at), whatever its start-up took (fla's
# gradient check and first compilation cost 100-340 s before and inside the phase), so the shards are saved
# before the jobs' timeouts; STOP_SECONDS is counted from here and leaves the call's last ~100 s for saving.
STOP_SECONDS=${STOP_SECONDS:-440}
export SWITCHYARD_TRAIN_STOP_AT=$(( $(date +%s) + STOP_SECONDS ))
# KERNELS=reference skips fla (its start-up cost ~340 s of a call on 2026-11-28): transformers' kernels.
if [ "${KERNELS:-fla}" = reference ]; then
  family=training.train_family distill=training.distill
else
  family="training.fla_kernels family" distill="training.fla_kernels distill"
fi
step=${1:?target or heads}
shift
tok="$CARRY/tok/tokenizer.json"
case "$step" in
  target)
    timeout $(( STOP_SECONDS + 90 )) python3 -m $family --target-only \
      --corpus "${CORPUS:-training/corpus/pack}" --tokenizer "$tok" --out "$OUT" \
      --target-seconds "${TARGET_SECONDS:-380}" --log-every 500 "$@" > "$OUT/target.log" 2>&1
    echo "target rc=$?"
    ;;
  heads)
    mkdir -p /tmp/target
    cp "$CARRY"/target/report.json /tmp/target/ 2>/dev/null
    cp "$CARRY"/tok/tokenizer*.json /tmp/target/
    cp "$CARRY"/target/target-*.safetensors /tmp/target/ 2>/dev/null
    for packed in "$CARRY"/target/target-*.safetensors.xz; do
      [ -e "$packed" ] && python3 -c "import lzma, sys; open(sys.argv[2], 'wb').write(lzma.decompress(open(sys.argv[1], 'rb').read()))" \
        "$packed" "/tmp/target/$(basename "$packed" .xz)"
    done
    # Phases stop at 1.2x their seconds or at the stop time, whichever comes first; the timeouts leave room
    # for saving and a short evaluation (the MTP job also evaluates the target before its phase: small
    # --eval-tokens keep that short).
    timeout $(( STOP_SECONDS + 90 )) python3 -m $family \
      --corpus "${CORPUS:-training/corpus/pack}" --tokenizer "$tok" --target-shards /tmp/target --out /tmp/mtp \
      --mtp-seconds "${MTP_SECONDS:-360}" --skip-drafter --eval-tokens 16384 --log-every 500 "$@" \
      > "$OUT/mtp.log" 2>&1 &
    mtp=$!
    timeout $(( STOP_SECONDS + 90 )) python3 -m $distill \
      --target-shards /tmp/target --tokenizer "$tok" --prompts "$CARRY/prompts.jsonl" --out /tmp/drafter \
      --gen-seconds "${GEN_SECONDS:-100}" --drafter-seconds "${DRAFTER_SECONDS:-300}" --eval-tokens 32768 \
      --log-every 500 "$@" > "$OUT/drafter.log" 2>&1
    echo "drafter rc=$?"
    wait "$mtp"
    echo "mtp rc=$?"
    mkdir -p /tmp/heads
    cp /tmp/mtp/mtp-*.safetensors /tmp/drafter/drafter-*.safetensors /tmp/heads/ 2>/dev/null
    cp /tmp/mtp/report.json /tmp/heads/report_mtp.json 2>/dev/null
    cp /tmp/drafter/report.json /tmp/heads/report_drafter.json 2>/dev/null
    tar -C /tmp -czf "$OUT/heads.tgz" heads
    ;;
  *)
    echo "usage: $0 target|heads [options]" >&2
    exit 2
    ;;
esac
ls -la "$OUT"
