#!/usr/bin/env bash
# One lent-GPU session's work in one call, each part time-boxed so the call
# ends inside the device tool's limit and every part reports:
#   0. smoke: one small case per kernel form (SIMT, mma.sync, the runtime's
#      choice, decode, the backward), 20 s each; a form that fails or
#      hangs is named first, and the forward's timings then use the
#      mma.sync packages;
#   A. correctness, in parallel (CPU-bound fp64 references on the device's
#      cores): the forward parity matrix of every packaged example, the
#      backward suite (never run on a GPU before 2026-11-26), key blocks at
#      their positions (key-offset kernels, forward and backward), compute-
#      sanitizer memcheck/racecheck of forward and backward, the runtime-only
#      Python package's GPU tests, the emulator's TMA layout probes and its
#      sm_90a conformance tests against the device's driver;
#   B. timings, one at a time: bench/compare_torch.py (flex_attention
#      compiled, SDPA, attnc: on an H100 the sm_90a wgmma form) on the gym
#      at 8k for D 64 and 128, decode, and the backward; then the mma.sync
#      form on the same shapes (packages-mma/); first of all, the sm_90a
#      form with three stages (the softmax overlapping the previous tile's
#      P V, packages/) against two (--stages 2, packages-s2/), interleaved,
#      and the backward's _bwd_q with two K/V stages (backward/) against
#      one (backward-s1/);
#   C. ncu on the headline kernel (full, bf16, D=128, 8k): tensor-pipe busy
#      and issue activity, to recalibrate the static SASS model;
#   D. cold start: a fresh process from package load to its first launch,
#      with the driver's PTX JIT cache off and on.
# Logs are packed into $OUT/<part>.tgz after each part (the device tool
# returns at most 8 files).
#   usage (on the device, .device carried): .device/run-gpu-session.sh
#         [--budget-a S] [--budget-b S]
set -uo pipefail
dev="$(cd "$(dirname "$0")" && pwd)"
# The bundle's packages travel gzipped (device-bundle.sh: the carry's
# 64 MiB); unpacked in place the first time a script runs.
find "$dev" -name '*.json.gz' -exec gunzip -f {} + 2>/dev/null || true
src="$(cd "$dev/.." && pwd)"
out="${OUT:-$src/gpu-logs}"
budget_a=150 budget_b=300 budget_c=45
while (($#)); do
  case "$1" in
    --budget-a) budget_a="$2"; shift 2 ;;
    --budget-b) budget_b="$2"; shift 2 ;;
    --budget-c) budget_c="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
logs=/tmp/attnc-session
rm -rf "$logs"; mkdir -p "$logs"/{a,b,c,d} "$out"
run="$dev/bin/attnc-run"
pack() { tar -C "$logs" -czf "$out/$1.tgz" "$1"; }
t0=$(date +%s)
{
  date -u
  echo "commit $(cat "$dev/COMMIT")"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  "$run" --device-info
} > "$logs/device.txt" 2>&1
cat "$logs/device.txt"
cp "$logs/device.txt" "$out/"

# 0: one small case per kernel form, 20 s each, so that a form that hangs
# (2026-11-27: the warp-specialized wgmma form, every f16/bf16 call) is
# named in the first seconds; the forward's timings then take the mma.sync
# packages instead of the hung form.
fwd_packages="$dev/packages"
smoke() {  # name, then attnc-run's arguments
  local name="$1"; shift
  if timeout 20 "$run" "$@" > "$logs/smoke-$name.txt" 2>&1; then
    echo "smoke $name: $(grep -hoE '[0-9]+ passed, [0-9]+ failed' "$logs/smoke-$name.txt")"
  else
    echo "smoke $name: FAILED or hung (exit $?): $(tail -1 "$logs/smoke-$name.txt")"
    return 1
  fi
}
{
  small=(--batch 1 --heads 2 --kv-heads 1 --q-len 100 --kv-len 100)
  smoke simt-f32 "$dev/packages/full.json" --dtype f32 "${small[@]}"
  [[ -f "$dev/packages-mma/full.json" ]] &&
    smoke mma-sync-bf16 "$dev/packages-mma/full.json" --dtype bf16 "${small[@]}"
  smoke runtime-choice-bf16 "$dev/packages/full.json" --dtype bf16 "${small[@]}" ||
    { [[ -d "$dev/packages-mma" ]] && fwd_packages="$dev/packages-mma" &&
      echo "forward timings from packages-mma/ (the runtime's choice failed)"; }
  smoke decode-bf16 "$dev/packages/full.json" --dtype bf16 --mode decode \
    --batch 1 --heads 8 --kv-heads 2 --kv-len 300
  smoke backward-bf16 "$dev/backward/causal.json" --backward --dtype bf16 "${small[@]}"
} > "$logs/smoke.txt" 2>&1  # not piped: fwd_packages stays set here
cat "$logs/smoke.txt"
cp "$logs/smoke.txt" "$out/"

# A: correctness, in parallel, bounded.
a=$logs/a
for p in "$dev"/packages/*.json; do
  n="$(basename "$p" .json)"
  timeout "$budget_a" "$run" "$p" --matrix > "$a/parity-$n.txt" 2>&1 &
done
for p in "$dev"/backward/*.json; do
  n="$(basename "$p" .json)"
  ( for dt in f32 f16 bf16; do
      for m in "prefill --q-len 77 --kv-len 77" "decode --kv-len 300" "chunk --q-len 33 --kv-len 200"; do
        "$run" "$p" --backward --dtype $dt --heads 8 --kv-heads 2 --head-dim 128 \
          --v-head-dim 128 --mode $m
      done
    done
    "$run" "$p" --backward --suite ) > "$a/backward-$n.txt" 2>&1 &
done
# Key blocks at their true positions (the kernels context parallelism
# runs), forward and backward, against the fp64 reference.
( for p in "$dev"/key-offsets/*.json; do
    for dt in f32 bf16; do
      for d in 64 128; do
        for kvo in 36 1000; do
          "$run" "$p" --dtype $dt --heads 8 --kv-heads 2 --head-dim $d \
            --v-head-dim $d --mode chunk --q-len 33 --kv-len 200 --kv-offsets $kvo
          "$run" "$p" --backward --dtype $dt --heads 8 --kv-heads 2 --head-dim $d \
            --v-head-dim $d --mode chunk --q-len 33 --kv-len 200 --kv-offsets $kvo
        done
      done
    done
  done ) > "$a/key-offsets.txt" 2>&1 &
# The emulator's TMA layout probes on the device (differences from the
# documented layout the emulator implements: docs/emulator.md).
timeout 60 python3 "$dev/probes/tma_probe.py" --lib libcuda.so.1 > "$a/tma-probe.txt" 2>&1 &
# The emulator's sm_90a conformance tests (wgmma, TMA, mbarriers, warp-
# specialized Triton kernels, compiled where the bundle was made) against
# this device's driver: what the emulator executes, the device must too.
if [ -f "$dev/probes/triton-ptx.json" ]; then
  ATTNC_CONFORMANCE_ON_DEVICE=1 ATTNC_EMUCUDA=libcuda.so.1 \
  ATTNC_TRITON_PTX_REPLAY="$dev/probes/triton-ptx.json" \
    timeout 120 python3 -m pytest -q -p no:cacheprovider "$src/emulator/tests/sm90" \
    > "$a/sm90-conformance.txt" 2>&1 &
fi
if command -v compute-sanitizer >/dev/null; then
  ( for n in causal synaptic document_mask; do
      echo "== memcheck backward $n"
      compute-sanitizer --tool memcheck --error-exitcode 9 "$run" \
        "$dev/backward/$n.json" --backward --q-len 100 --kv-len 100 --dtype bf16 \
        --heads 8 --kv-heads 2 2>&1 | tail -3
      echo "== memcheck forward $n"
      compute-sanitizer --tool memcheck --error-exitcode 9 "$run" \
        "$dev/packages/$n.json" --q-len 100 --kv-len 100 --dtype bf16 2>&1 | tail -3
    done
    echo "== racecheck backward synaptic"
    compute-sanitizer --tool racecheck --error-exitcode 9 "$run" \
      "$dev/backward/synaptic.json" --backward --q-len 100 --kv-len 100 \
      --dtype bf16 2>&1 | tail -3
    for d in 64 128; do
      echo "== racecheck forward causal D=$d"
      compute-sanitizer --tool racecheck --error-exitcode 9 "$run" \
        "$dev/packages/causal.json" --q-len 100 --kv-len 100 --dtype f16 \
        --head-dim $d --v-head-dim $d 2>&1 | tail -3
    done ) > "$a/sanitizer.txt" 2>&1 &
fi
( if "$dev/build-python.sh" /tmp/attnc-python > "$a/python-build.txt" 2>&1; then
    PYTHONPATH=/tmp/attnc-python ATTNC_TEST_PACKAGES="$dev/packages" \
      python3 -m pytest -q -p no:cacheprovider "$src/python/tests/gpu" > "$a/python-gpu.txt" 2>&1
  fi ) &
# Bounded: whatever has not finished by then is killed and reported so,
# the loops first (killing only their current attnc-run let a loop start
# the next case, and a hung kernel (2026-11-27) then held the call past
# its limit).
jobs_a="$(jobs -p)"
( sleep "$budget_a"; kill $jobs_a 2>/dev/null; pkill -f "$run" ; pkill -f compute-sanitizer
  pkill -f pytest ) &
killer=$!
wait $jobs_a 2>/dev/null
kill $killer 2>/dev/null
{
  for f in "$a"/parity-*.txt "$a"/backward-*.txt "$a"/key-offsets.txt; do
    echo "$(basename "$f" .txt): $(grep -hoE '^[0-9]+ passed, [0-9]+ failed' "$f" | awk '{p += $1; f += $3} END {print p + 0 " passed, " f + 0 " failed"}'); FAIL lines: $(grep -c FAIL "$f")"
  done
  cat "$a/sanitizer.txt" 2>/dev/null
  tail -3 "$a/python-build.txt" "$a/python-gpu.txt" 2>/dev/null
} > "$a/summary.txt"
cat "$a/summary.txt"
echo "A took $(( $(date +%s) - t0 )) s"
pack a

# B: timings, one at a time.
b=$logs/b
tb=$(date +%s)
# ab NAME "EXAMPLES" "HEAD_DIMS" SIDE_A SIDE_B [attnc-run options]: an
# A/B of two sides on the same shape (bf16, B=2, H=16, 8k, unless the
# options give another: the last of an option wins), alternating,
# twice; a side is a package folder of .device, with VAR=VALUE after a
# colon for the runtime's environment (packages-persistent:ATTNC_GRID=items);
# the medians into $b/NAME.jsonl and NAME.txt.
ab() {
  local name="$1" examples="$2" dims="$3" sa="$4" sb="$5"
  shift 5
  [[ -d "$dev/${sb%%:*}" ]] || return 0
  for round in 1 2; do
    for n in $examples; do
      for d in $dims; do
        for side in "$sa" "$sb"; do
          local pk="${side%%:*}" envs=""
          [[ "$side" == *:* ]] && envs="${side#*:}"
          r=$(env $envs timeout 30 "$run" "$dev/$pk/$n.json" --bench --json \
            --batch 2 --heads 16 --kv-heads 16 --q-len 8192 --kv-len 8192 \
            --head-dim $d --dtype bf16 "$@" 2>/dev/null | tail -1)
          [[ -n "$r" ]] && echo "{\"side\": \"$side\", \"row\": $r}" >> "$b/$name.jsonl"
        done
      done
    done
  done
  python3 -c "
import json, sys
for l in open(sys.argv[1]):
    g = json.loads(l); r = g['row']
    print('%s %-14s D=%-3d %.3f ms  %s  %s' % (sys.argv[2], r['variant'], r['D'], r['ms_median'], r['kernel'], g['side']))
" "$b/$name.jsonl" "$name" | tee "$b/$name.txt" | tee -a "$b/summary.txt"
  echo "B ($name) took $(( $(date +%s) - tb )) s"
}
# The overlap's A/B (issue #30): the same examples' sm_90a kernels with
# three stages (packages/) and two (packages-s2/, BUNDLE_S2=1).
ab overlap-ab "full causal document_mask softcap" "128 64" packages packages-s2 \
  --warmup 20 --iters 100
# The persistent form's A/B: the same examples' sm_90a kernels one block
# per work item (packages/) and one block per SM taking items a grid apart
# (packages-persistent/, attnc compile --form wgmma-persistent); then the
# persistent kernels launched one block per item (ATTNC_GRID=items) and one
# per SM: the item loop's own cost apart from the grid's.
ab persistent-ab "full causal sliding_window document_mask" "128 64" packages \
  packages-persistent --warmup 20 --iters 100
ab persistent-grid-ab "full sliding_window" "128 64" \
  packages-persistent:ATTNC_GRID=items packages-persistent --warmup 20 --iters 100
# The split-KV merge as the kernel's programmatic dependent (PDL, issue #29
# item 4: the default on sm_90+) and after it by stream order (ATTNC_PDL=0),
# on decode steps the planner splits (one query per sequence, 32 query
# heads over 8 KV heads, 32k keys; batch 1 and 8).
for bsz in 1 8; do
  ab pdl-ab-b$bsz "causal" "128" packages:ATTNC_PDL=0 packages \
    --warmup 20 --iters 200 --batch $bsz --heads 32 --kv-heads 8 --q-len 1 \
    --kv-len 32768
done
# The backward's K/V ring A/B: _bwd_q with two stages (backward/, the
# default since 2026-11-27) and one (backward-s1/); attnc-run times the
# backward (both kernels) per call.
ab backward-ab "causal" "64 128" backward backward-s1 \
  --backward --warmup 5 --iters 30
bench() {  # remaining-budget-bounded compare_torch run
  local left=$(( budget_b - ($(date +%s) - tb) ))
  (( left > 10 )) || { echo "B: no time left for $*"; return; }
  timeout "$left" python3 "$src/bench/compare_torch.py" --dtype bf16 \
    --attnc-run "$run" --out "$b" --warmup 20 --iters 100 "$@" \
    >> "$b/compare.txt" 2>&1
}
# The forward first; synaptic's backward last: flex's compile of it took
# longer than the time box in both calls of 2026-11-26 and cut decode and
# the D=64 gym after it.
bench --suite gym --lengths 8192 --head-dims 128 --packages "$fwd_packages"
bench --suite decode --lengths 8192,32768 --packages "$fwd_packages"
bench --suite gym --lengths 8192 --head-dims 64 --packages "$fwd_packages"
bench --suite gym --backward --lengths 8192 --head-dims 128 \
  --variants causal,document_mask --packages "$dev/backward"
bench --suite gym --backward --lengths 8192 --head-dims 64 \
  --variants causal,document_mask --packages "$dev/backward"
bench --suite gym --backward --lengths 8192 --head-dims 128 \
  --variants synaptic --packages "$dev/backward"
# The mma.sync form on the same shapes (packages-mma/: sm_90 kernels),
# beside the runtime's choice above (sm_90a: wgmma where it applies).
if [[ -d "$dev/packages-mma" ]]; then
  for n in full causal synaptic; do
    [[ -f "$dev/packages-mma/$n.json" ]] || continue
    for d in 128 64; do
      timeout 30 "$run" "$dev/packages-mma/$n.json" --bench --json --warmup 20 \
        --iters 100 --batch 2 --heads 16 --kv-heads 16 --q-len 8192 \
        --kv-len 8192 --head-dim $d --dtype bf16 >> "$b/mma-sync.jsonl" 2>/dev/null
    done
  done
  python3 -c "
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print('mma.sync %-10s D=%-3d T=%-5d %.3f ms  %s' % (r['variant'], r['D'], r['Lkv'], r['ms_median'], r['kernel']))
" "$b/mma-sync.jsonl" | tee -a "$b/summary.txt"
fi
echo "B took $(( $(date +%s) - tb )) s"
grep -h '^{' "$b/compare.txt" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    med = lambda k: r[k][0] if isinstance(r.get(k), list) else None
    a, f = med("attnc_ms"), med("flex_ms")
    s = min([med(k) for k in r if k.startswith("sdpa_") and k.endswith("_ms") and med(k)] or [0]) or None
    print("%-8s %-15s D=%-3d T=%-5d attnc %s flex %s sdpa %s  vs flex %s  %s" % (
        r.get("pass", "fwd"), r["variant"], r["D"], r["Lkv"], a, f, s,
        "%.2fx" % (f / a) if a and f else "-", r.get("attnc_error", "")))
' | tee -a "$b/summary.txt"
pack b

# C: ncu on the headline forward kernel (metrics by name; if this ncu
# refuses one, the sections that hold them instead).
c=$logs/c
metrics=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
metrics+=,smsp__issue_active.avg.pct_of_peak_sustained_active
metrics+=,smsp__inst_executed.sum,sm__inst_executed_pipe_tensor_op_hmma.sum
metrics+=,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active
metrics+=,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum
# The mma.sync kernels (packages-mma/) calibrate the model's sm_90
# constant; the runtime's choice (packages/: sm_90a's wgmma) its sm_90a one,
# with the whole tensor pipe's metric too (the H200's ncu of 2026-11-26
# refused sm__pipe_tensor_op_gmma_*; its hmma metric counted HGMMA).
gmma=sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active
if command -v ncu >/dev/null; then
  for dim in 128 64; do
    for pk in packages-mma packages; do
      [[ -f "$dev/$pk/full.json" ]] || continue
      shape=(--batch 2 --heads 16 --kv-heads 16 --q-len 8192 --kv-len 8192
             --head-dim $dim --dtype bf16)
      m="$metrics"
      [[ $pk == packages ]] && m+=",$gmma"
      timeout "$budget_c" ncu --launch-skip 3 --launch-count 1 --metrics "$m" \
        "$run" "$dev/$pk/full.json" --bench --warmup 3 --iters 1 "${shape[@]}" \
        > "$c/ncu-$pk-full-d$dim.txt" 2>&1 ||
      timeout "$budget_c" ncu --launch-skip 3 --launch-count 1 --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section SchedulerStats --section Occupancy \
        "$run" "$dev/$pk/full.json" --bench --warmup 3 --iters 1 "${shape[@]}" \
        >> "$c/ncu-$pk-full-d$dim.txt" 2>&1
    done
  done
  grep -hE "attnc_|pct|\.sum|registers|duration|Issue|Pipe|Busy" "$c"/ncu-*.txt | tail -40
fi
pack c

# D: cold start of a fresh process (package load, PTX JIT, first launch).
d=$logs/d
for cache in 1 0; do
  s=$(date +%s%N)
  CUDA_CACHE_DISABLE=$cache timeout 60 "$run" "$dev/packages/causal.json" --bench \
    --warmup 0 --iters 1 --q-len 1024 --kv-len 1024 --dtype bf16 \
    --head-dim 128 > "$d/cold-$cache.txt" 2>&1
  e=$(date +%s%N)
  echo "cold start (CUDA_CACHE_DISABLE=$cache): $(( (e - s) / 1000000 )) ms" | tee -a "$d/summary.txt"
done
pack d
echo "session took $(( $(date +%s) - t0 )) s"
