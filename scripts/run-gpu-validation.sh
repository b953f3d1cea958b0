#!/usr/bin/env bash
# Runs on the GPU machine from the repository root, with .device/ carried
# (scripts/device-bundle.sh): the parity matrix (--matrix) of every packaged
# example,
# compute-sanitizer memcheck over a subset and racecheck over one kernel per
# head dim. Logs go to $OUT (default ./gpu-logs).
set -uo pipefail
dev="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-gpu-logs}"
mkdir -p "$out"
run="$dev/bin/attnc-run"
{
  date -u
  echo "commit $(cat "$dev/COMMIT")"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$run" --device-info
} > "$out/device.txt" 2>&1
cat "$out/device.txt"
status=0
for p in "$dev"/packages/*.json; do
  n="$(basename "$p" .json)"
  "$run" "$p" --matrix > "$out/parity-$n.txt" 2>&1 || status=1
  tail -1 "$out/parity-$n.txt"
done
"$dev/bin/attnc-embed-example" "$dev/packages/causal.json" > "$out/embed.txt" 2>&1 || status=1
cat "$out/embed.txt"
if command -v compute-sanitizer >/dev/null; then
  for n in causal document_mask synaptic; do
    compute-sanitizer --tool memcheck --error-exitcode 9 "$run" \
      "$dev/packages/$n.json" --q-len 100 --kv-len 100 --dtype bf16 \
      > "$out/memcheck-$n.txt" 2>&1 || status=1
    tail -2 "$out/memcheck-$n.txt"
  done
  for d in 64 128; do
    compute-sanitizer --tool racecheck --error-exitcode 9 "$run" \
      "$dev/packages/causal.json" --q-len 100 --kv-len 100 --dtype f16 \
      --head-dim $d --v-head-dim $d > "$out/racecheck-d$d.txt" 2>&1 || status=1
    tail -2 "$out/racecheck-d$d.txt"
  done
fi
exit $status
