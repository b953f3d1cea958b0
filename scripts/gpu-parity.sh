#!/usr/bin/env bash
# The GPU parity matrix: every example packaged in f32, f16 and bf16 for
# head dims 64, 80, 128 and 64:32 and run by the runtime-only attnc-run
# against the fp64 reference (--matrix: dtypes x head dims x {prefill,
# decode, chunk} x {MHA 8/8, GQA 8/2, MQA 8/1}, with lengths 1, 77, 129,
# 1000..., BHSD/BSHD and ragged batches in rotation; docs/check.md); and
# the large head dims of the tensor-core form (f16 and bf16, D 256 and
# Dqk:Dv 192:128) in a prefill, a decode and a chunked case each.
#
#   scripts/gpu-parity.sh BUILD_DIR --emulator [EXAMPLE...]
#     on the GPU emulator (BUILD_DIR/lib/libattnc-emucuda.so, memcheck and
#     racecheck on every launch): the full matrix for sm_90 PTX, and for
#     sm_80 PTX one case per kernel once the script has checked that each
#     sm_80 kernel is the sm_90 one but for its .target line (else the full
#     matrix there too); then the full matrix again for sm_90a packages,
#     where f16/bf16 with head dims multiples of 64 run the wgmma form and
#     the rest the mma.sync and SIMT forms built for sm_90a. Needs no GPU.
#   scripts/gpu-parity.sh BUILD_DIR [EXAMPLE...]
#     on the CUDA device (the driver found as attnc-run finds it): the full
#     matrix for the device's target; exits 77 (a ctest skip), saying why,
#     without a driver or device.
set -uo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:?usage: gpu-parity.sh BUILD_DIR [--emulator] [EXAMPLE...]}" && pwd)"
shift
emulator=0
if [[ "${1:-}" == "--emulator" ]]; then
  emulator=1
  shift
fi
examples=("$@")
((${#examples[@]})) || examples=($(ls "$src"/examples/*.attn | xargs -n1 basename | sed 's/\.attn$//' | grep -v '^tour$'))
jobs="$(nproc 2>/dev/null || echo 2)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

if ((emulator)); then
  export ATTNC_LIBCUDA="$build/lib/libattnc-emucuda.so"
  # Examples run side by side, so each emulated launch uses one thread.
  export ATTNC_EMU_THREADS=1
  [[ -f "$ATTNC_LIBCUDA" ]] || { echo "FAIL: no emulator at $ATTNC_LIBCUDA"; exit 1; }
  targets="sm_80,sm_90"
else
  if ! info="$("$build/bin/attnc-run" --device-info 2>&1)"; then
    echo "SKIP: $info"
    exit 77
  fi
  echo "device: $info"
  cc="$(echo "$info" | grep -oE 'sm_[0-9]+' | head -1 | tr -d sm_)"
  targets=sm_80
  ((cc >= 86)) && targets=sm_86
  ((cc >= 89)) && targets=sm_89
  ((cc >= 90)) && targets=sm_90
fi

# Packages, in parallel.
printf '%s\n' "${examples[@]}" | xargs -P "$jobs" -I{} sh -c \
  '"$0/bin/attnc" compile "$1/examples/{}.attn" --emit=package --target="$2" \
     --dtypes=f32,f16,bf16 --head-dims=64,80,128,64:32 -o "$3/{}.json" \
     > "$3/{}.compile.txt" 2>&1 || echo "FAIL: cannot package {}" >> "$3/{}.compile.txt"' \
  "$build" "$src" "$targets" "$tmp"
if ((emulator)); then
  printf '%s\n' "${examples[@]}" | xargs -P "$jobs" -I{} sh -c \
    '"$0/bin/attnc" compile "$1/examples/{}.attn" --emit=package --target=sm_90a \
       --dtypes=f32,f16,bf16 --head-dims=64,80,128,64:32 -o "$2/{}.90a.json" \
       >> "$2/{}.compile.txt" 2>&1 || echo "FAIL: cannot package {} for sm_90a" >> "$2/{}.compile.txt"' \
    "$build" "$src" "$tmp"
fi
printf '%s\n' "${examples[@]}" | xargs -P "$jobs" -I{} sh -c \
  '"$0/bin/attnc" compile "$1/examples/{}.attn" --emit=package --target="$2" \
     --dtypes=f16,bf16 --head-dims=256,192:128 -o "$3/{}.large.json" \
     >> "$3/{}.compile.txt" 2>&1 || echo "FAIL: cannot package {} (large head dims)" >> "$3/{}.compile.txt"' \
  "$build" "$src" "${targets##*,}" "$tmp"
if ((emulator)); then
  printf '%s\n' "${examples[@]}" | xargs -P "$jobs" -I{} sh -c \
    '"$0/bin/attnc" compile "$1/examples/{}.attn" --emit=package --target=sm_90a \
       --dtypes=f16,bf16 --head-dims=256,192:128 -o "$2/{}.large90a.json" \
       >> "$2/{}.compile.txt" 2>&1 || echo "FAIL: cannot package {} for sm_90a (large head dims)" >> "$2/{}.compile.txt"' \
    "$build" "$src" "$tmp"
fi
bad=0
for n in "${examples[@]}"; do
  if grep -q FAIL "$tmp/$n.compile.txt"; then
    cat "$tmp/$n.compile.txt"
    bad=1
  fi
done

# One example per job; each writes its own log.
run_example() {
  local n="$1" log="$tmp/$1.log" status=0
  [[ -f "$tmp/$n.json" ]] || return 1
  if ((emulator)); then
    ATTNC_EMU_CC=90 "$build/bin/attnc-run" "$tmp/$n.json" --matrix > "$log" 2>&1 || status=1
    if python3 "$src/scripts/ptx-same-but-target.py" "$tmp/$n.json" >> "$log"; then
      # sm_80: the same PTX but for .target, so one case per kernel.
      echo "sm_80: every kernel is its sm_90 PTX but for .target: one case per kernel" >> "$log"
      for dt in f32 f16 bf16; do
        for d in 64:64 80:80 128:128 64:32; do
          ATTNC_EMU_CC=80 "$build/bin/attnc-run" "$tmp/$n.json" --dtype $dt \
            --head-dim "${d%:*}" --v-head-dim "${d#*:}" --mode chunk --q-len 77 \
            --kv-len 129 >> "$log" 2>&1 || status=1
        done
      done
    else
      echo "sm_80: the full matrix" >> "$log"
      ATTNC_EMU_CC=80 "$build/bin/attnc-run" "$tmp/$n.json" --matrix >> "$log" 2>&1 || status=1
    fi
    echo "sm_90a: the full matrix (the wgmma form where it applies)" >> "$log"
    ATTNC_EMU_CC=90 "$build/bin/attnc-run" "$tmp/$n.90a.json" --matrix >> "$log" 2>&1 || status=1
  else
    "$build/bin/attnc-run" "$tmp/$n.json" --matrix > "$log" 2>&1 || status=1
  fi
  # Large head dims: GQA 8/2, one case per mode and dtype.
  ((emulator)) && export ATTNC_EMU_CC=90
  for dt in f16 bf16; do
    for d in 256:256 192:128; do
      for m in "prefill --q-len 77 --kv-len 77" "decode --kv-len 300" "chunk --q-len 33 --kv-len 200"; do
        "$build/bin/attnc-run" "$tmp/$n.large.json" --dtype $dt --heads 8 \
          --kv-heads 2 --head-dim "${d%:*}" --v-head-dim "${d#*:}" --mode $m \
          >> "$log" 2>&1 || status=1
        if ((emulator)); then
          "$build/bin/attnc-run" "$tmp/$n.large90a.json" --dtype $dt --heads 8 \
            --kv-heads 2 --head-dim "${d%:*}" --v-head-dim "${d#*:}" --mode $m \
            >> "$log" 2>&1 || status=1
        fi
      done
    done
  done
  ((status == 0)) || touch "$tmp/$n.failed"
}
start=$SECONDS
for n in "${examples[@]}"; do
  run_example "$n" &
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n; done
done
wait
for n in "${examples[@]}"; do
  [[ -f "$tmp/$n.log" ]] || continue
  passed=$(grep -hoE '^[0-9]+ passed' "$tmp/$n.log" | awk '{s += $1} END {print s + 0}')
  failed=$(grep -hoE ', [0-9]+ failed' "$tmp/$n.log" | tr -dc '0-9\n' | awk '{s += $1} END {print s + 0}')
  echo "$n: $passed passed, $failed failed"
  if [[ -f "$tmp/$n.failed" ]] || ((failed)); then
    bad=1
    grep -A2 -E '\| FAIL|emucuda:|error' "$tmp/$n.log" | head -60
  fi
done
echo "matrix: $((SECONDS - start)) s"
exit $bad
