#!/usr/bin/env bash
# Runs on the GPU machine from the repository root, with .device/ carried
# (scripts/device-bundle.sh): attnc-run --tune over the candidate packages
# (every tile configuration of bf16 D=64 and D=128), each candidate checked
# against the fp64 reference and then timed on prefill at 2k and 8k tokens
# and on decode over an 8k cache. The records go to $OUT/tune-*.jsonl;
# back on the build machine,
#   attnc tune gpu-logs/tune-*.jsonl -o bench/tuning/<gpu>.json
# picks the configurations and
#   attnc compile FILE --emit=package --tuning bench/tuning/<gpu>.json
# builds with them. TUNE_PREFILL and TUNE_DECODE override the sweeps
# (e.g. tiny ones on the emulator, to try the script).
set -uo pipefail
prefill="${TUNE_PREFILL:-2048,8192}"
decode="${TUNE_DECODE:-8192}"
dev="$(cd "$(dirname "$0")" && pwd)"
# The bundle's packages travel gzipped (device-bundle.sh: the carry's
# 64 MiB); unpacked in place the first time a script runs.
find "$dev" -name '*.json.gz' -exec gunzip -f {} + 2>/dev/null || true
out="${OUT:-gpu-logs}"
mkdir -p "$out"
run="$dev/bin/attnc-run"
status=0
for p in "$dev"/candidates/*.json; do
  n="$(basename "$p" .json)"
  for d in 64 128; do
    "$run" "$p" --tune --dtype bf16 --head-dim $d --batch 4 --heads 16 \
      --mode prefill --sweep "$prefill" --records "$out/tune-$n-d$d-prefill.jsonl" \
      2>> "$out/tune.log" || status=1
    "$run" "$p" --tune --dtype bf16 --head-dim $d --batch 16 --heads 16 \
      --kv-heads 4 --mode decode --sweep "$decode" \
      --records "$out/tune-$n-d$d-decode.jsonl" 2>> "$out/tune.log" || status=1
  done
done
tail -5 "$out/tune.log"
exit $status
