#!/usr/bin/env bash
# Runs on the GPU machine from the repository root, with .device/ carried
# (scripts/device-bundle.sh): the parity matrix (--matrix) of every packaged
# example and its large head dims (256, 192:128),
# compute-sanitizer memcheck over a subset and racecheck over one kernel per
# head dim; the backward's kernels of backward/ (attnc-run --backward) over
# the suite and D 128 per dtype and mode, with memcheck and racecheck.
# Logs go to $OUT (default ./gpu-logs).
set -uo pipefail
dev="$(cd "$(dirname "$0")" && pwd)"
# The bundle's packages travel gzipped (device-bundle.sh: the carry's
# 64 MiB); unpacked in place the first time a script runs.
find "$dev" -name '*.json.gz' -exec gunzip -f {} + 2>/dev/null || true
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
  # Large head dims (tensor cores only): GQA 8/2, one case per mode and dtype.
  # (large/ comes with BUNDLE_LARGE=1 only.)
  [[ -f "$dev/large/$n.json" ]] && for dt in f16 bf16; do
    for d in 256:256 192:128; do
      for m in "prefill --q-len 77 --kv-len 77" "decode --kv-len 300" "chunk --q-len 33 --kv-len 200"; do
        "$run" "$dev/large/$n.json" --dtype $dt --heads 8 --kv-heads 2 \
          --head-dim "${d%:*}" --v-head-dim "${d#*:}" --mode $m \
          >> "$out/parity-$n.txt" 2>&1 || status=1
      done
    done
  done
  echo "$n: $(grep -hoE '^[0-9]+ passed, [0-9]+ failed' "$out/parity-$n.txt" | awk '{p += $1; f += $3} END {print p + 0 " passed, " f + 0 " failed"}') (matrix + large head dims)"
done
# The backward: the suite (D 64, 80, 64:32), and D 128 per dtype and mode.
for p in "$dev"/backward/*.json; do
  n="$(basename "$p" .json)"
  "$run" "$p" --backward --suite > "$out/backward-$n.txt" 2>&1 || status=1
  for dt in f32 f16 bf16; do
    for m in "prefill --q-len 77 --kv-len 77" "decode --kv-len 300" "chunk --q-len 33 --kv-len 200"; do
      "$run" "$p" --backward --dtype $dt --heads 8 --kv-heads 2 --head-dim 128 \
        --v-head-dim 128 --mode $m >> "$out/backward-$n.txt" 2>&1 || status=1
    done
  done
  echo "$n backward: $(grep -hoE '^[0-9]+ passed, [0-9]+ failed' "$out/backward-$n.txt" | awk '{p += $1; f += $3} END {print p + 0 " passed, " f + 0 " failed"}')"
done
# The embedding example (device-bundle.sh carries it again since its
# packages travel gzipped).
if [[ -x "$dev/bin/attnc-embed-example" ]]; then
  "$dev/bin/attnc-embed-example" "$dev/packages/causal.json" > "$out/embed.txt" 2>&1 || status=1
  cat "$out/embed.txt"
fi
if command -v compute-sanitizer >/dev/null; then
  for n in causal document_mask synaptic; do
    compute-sanitizer --tool memcheck --error-exitcode 9 "$run" \
      "$dev/packages/$n.json" --q-len 100 --kv-len 100 --dtype bf16 \
      > "$out/memcheck-$n.txt" 2>&1 || status=1
    tail -2 "$out/memcheck-$n.txt"
  done
  for n in causal synaptic; do
    compute-sanitizer --tool memcheck --error-exitcode 9 "$run" \
      "$dev/backward/$n.json" --backward --q-len 100 --kv-len 100 --dtype bf16 \
      --heads 8 --kv-heads 2 > "$out/memcheck-backward-$n.txt" 2>&1 || status=1
    tail -2 "$out/memcheck-backward-$n.txt"
  done
  compute-sanitizer --tool racecheck --error-exitcode 9 "$run" \
    "$dev/backward/synaptic.json" --backward --q-len 100 --kv-len 100 \
    --dtype bf16 > "$out/racecheck-backward.txt" 2>&1 || status=1
  tail -2 "$out/racecheck-backward.txt"
  for d in 64 128; do
    compute-sanitizer --tool racecheck --error-exitcode 9 "$run" \
      "$dev/packages/causal.json" --q-len 100 --kv-len 100 --dtype f16 \
      --head-dim $d --v-head-dim $d > "$out/racecheck-d$d.txt" 2>&1 || status=1
    tail -2 "$out/racecheck-d$d.txt"
  done
fi
# The runtime-only Python package, built here, on torch CUDA tensors.
if command -v python3 >/dev/null && python3 -c "import torch" 2>/dev/null; then
  if "$dev/build-python.sh" /tmp/attnc-python > "$out/python-build.txt" 2>&1; then
    PYTHONPATH=/tmp/attnc-python ATTNC_TEST_PACKAGES="$dev/packages" \
      python3 -m pytest -q -p no:cacheprovider "$dev/../python/tests/gpu" \
      > "$out/python-gpu.txt" 2>&1 || status=1
  else
    status=1
  fi
  tail -3 "$out/python-build.txt" "$out/python-gpu.txt" 2>/dev/null
fi
exit $status
