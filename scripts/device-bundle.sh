#!/usr/bin/env bash
# Prepares .device/ (git-ignored) for a machine with a GPU but no LLVM/MLIR:
# portable runtime-only binaries (attnc-run, the embedding example), one
# kernel package per example for TARGET (and, with BUNDLE_LARGE=1, one of
# its large head dims, f16/bf16 D 256 and 192:128, under large/), the backward's kernels of three
# of them (f32/f16/bf16, D 64, 80, 128 and 64:32, under backward/), causal's
# and synaptic's key-offset kernels (forward and backward, under
# key-offsets/), causal's backward with one K/V stage in _bwd_q
# (backward-s1/, bf16 D 64 and 128: the ring's A/B), four examples'
# kernels in the persistent wgmma form (packages-persistent/, bf16 D 64 and
# 128: its A/B against packages/), and
# run-gpu-validation.sh, which
# runs the parity matrix (attnc-run --matrix, as ctest gpu-parity does on
# the emulator) and compute-sanitizer there and writes its logs under $OUT;
# and the tuner's inputs: candidate packages (every tile configuration of
# bf16 D=64 and D=128) for run-gpu-tune.sh; and what build-python.sh needs to
# build the runtime-only Python package there (the runtime as a static PIC
# library, libcrypto.a, nanobind's source tree from .venv).
# Pass `.device` in the device tool's `carry`.
#   usage: scripts/device-bundle.sh [TARGET]        (default sm_90a: on an
#   H100 or H200 the wgmma form where it applies, the mma.sync and SIMT
#   forms elsewhere). packages-mma/ adds full's and causal's mma.sync
#   kernels (sm_90, bf16, D 64 and 128) for timing the two forms side by
#   side; with BUNDLE_S2=1, packages-s2/ four examples' sm_90a
#   kernels with two stages (--stages 2: no softmax/PV overlap) beside the
#   default three. The
#   tuner's candidates (16 MB) come only with BUNDLE_TUNE=1 and the large
#   head dims only with BUNDLE_LARGE=1, which keeps the bundle and the
#   working tree under 64 MiB together (the device tool's carry limit).
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
target="${1:-sm_90a}"
first="$target"
out="$src/.device"
cmake -S "$src" -B "$src/build-device" -G Ninja -DATTNC_ENABLE_COMPILER=OFF \
  -DATTNC_PORTABLE=ON >/dev/null
cmake --build "$src/build-device"
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/packages" "$out/packages-mma" \
  "$out/large" \
  "$out/candidates" "$out/backward" "$out/key-offsets"
cp "$src/build-device/bin/attnc-run" "$out/bin/"
cp "$src/build-device/bin/attnc-embed-example" "$out/bin/"
for f in "$src"/examples/*.attn; do
  n="$(basename "$f" .attn)"
  [[ "$n" == tour ]] && continue
  "$src/build/bin/attnc" compile "$f" --emit=package --target="$target" \
    --dtypes=f32,f16,bf16 --head-dims=64,80,128,64:32 -o "$out/packages/$n.json"
  # Large head dims (7 MB) only when asked: BUNDLE_LARGE=1.
  [[ "${BUNDLE_LARGE:-0}" == 1 ]] &&
    "$src/build/bin/attnc" compile "$f" --emit=package --target="$first" \
      --dtypes=f16,bf16 --head-dims=256,192:128 -o "$out/large/$n.json"
  # The mma.sync kernels the session times and ncu's (full, causal).
  case "$n" in full | causal)
    "$src/build/bin/attnc" compile "$f" --emit=package --target=sm_90 \
      --dtypes=bf16 --head-dims=64,128 -o "$out/packages-mma/$n.json" ;;
  esac
  # The persistent form's A/B (attnc compile --form wgmma-persistent):
  # each block takes work items a grid apart, one block per SM.
  case "$n" in full | causal | sliding_window | document_mask)
    mkdir -p "$out/packages-persistent"
    "$src/build/bin/attnc" compile "$f" --emit=package --target=sm_90a \
      --dtypes=bf16 --head-dims=64,128 --form wgmma-persistent \
      -o "$out/packages-persistent/$n.json" ;;
  esac
  # The two-stage A/B (1.2 MB) only when asked: BUNDLE_S2=1.
  [[ "${BUNDLE_S2:-0}" == 1 ]] || continue
  case "$n" in full | causal | document_mask | softcap)
    mkdir -p "$out/packages-s2"
    "$src/build/bin/attnc" compile "$f" --emit=package --target=sm_90a \
      --dtypes=bf16 --head-dims=64,128 --stages 2 -o "$out/packages-s2/$n.json" ;;
  esac
done
# The backward (forward kernels included: attnc-run --backward runs both),
# with f32 D=64 key-offset kernels beside the others for the suite's
# key-block case (the runtime picks by what a call needs).
for n in causal document_mask synaptic; do
  "$src/build/bin/attnc" compile "$src/examples/$n.attn" --emit=package \
    --backward --target="$first" --dtypes=f32,f16,bf16 \
    --head-dims=64,80,128,64:32 -o "$out/backward/$n.json"
  "$src/build/bin/attnc" compile "$src/examples/$n.attn" --emit=package \
    --backward --key-offsets --target="$first" --dtypes=f32 --head-dims=64 \
    -o "$out/backward/$n.kvoff.json"
  "$src/scripts/merge-packages.py" "$out/backward/$n.json" \
    "$out/backward/$n.json" "$out/backward/$n.kvoff.json"
  rm "$out/backward/$n.kvoff.json"
done
# The backward's K/V ring A/B: _bwd_q with one stage (--backward-stages 1:
# each tile's copy waited for before its products) beside backward/'s two.
mkdir -p "$out/backward-s1"
"$src/build/bin/attnc" compile "$src/examples/causal.attn" --emit=package \
  --backward --backward-stages 1 --target="$first" --dtypes=bf16 \
  --head-dims=64,128 -o "$out/backward-s1/causal.json"
# Key-offset kernels (a key block at its true positions: context
# parallelism), forward and backward, for the chunk cases with --kv-offsets.
for n in causal synaptic; do
  "$src/build/bin/attnc" compile "$src/examples/$n.attn" --emit=package \
    --backward --key-offsets --target="$first" --dtypes=f32,bf16 \
    --head-dims=64,128 -o "$out/key-offsets/$n.json"
done
# The tuner's candidates (16 MB) only when asked: BUNDLE_TUNE=1.
if [[ "${BUNDLE_TUNE:-0}" == 1 ]]; then
  for n in full causal sliding_window document_mask synaptic; do
    "$src/build/bin/attnc" compile "$src/examples/$n.attn" --emit=package \
      --target="$first" --dtypes=bf16 --head-dims=64,128 --tile-candidates \
      -o "$out/candidates/$n.json"
  done
fi
cp "$src/scripts/run-gpu-validation.sh" "$src/scripts/run-gpu-tune.sh" \
   "$src/scripts/run-gpu-session.sh" "$out/"
# The emulator's probes, run on the device against the documented layouts,
# and its sm_90a conformance kernels as this machine's Triton compiles them
# (recorded while the tests run on the emulator; the device replays them
# against its driver: run-gpu-session.sh).
mkdir -p "$out/probes"
cp "$src/emulator/tests/sm90/tma_probe.py" "$src/emulator/tests/sm90/emudriver.py" \
   "$out/probes/"
if [ -x "$src/.venv/bin/python" ] && [ -f "$src/build/lib/libattnc-emucuda.so" ]; then
  rm -f "$out/probes/triton-ptx.json"
  ATTNC_TRITON_PTX_RECORD="$out/probes/triton-ptx.json" \
  ATTNC_EMUCUDA="$src/build/lib/libattnc-emucuda.so" \
    "$src/.venv/bin/python" -m pytest -q -p no:cacheprovider "$src/emulator/tests/sm90" \
    > /dev/null || echo "device-bundle: the sm_90a conformance tests failed on the emulator" >&2
fi
cp "$src/scripts/device-python.sh" "$out/build-python.sh"
cp "$src/build-device/lib/libAttncRuntime.a" "$out/lib/"
cp "$(sed -n 's/^OPENSSL_CRYPTO_LIBRARY:FILEPATH=//p' "$src/build-device/CMakeCache.txt")" \
   "$out/lib/libcrypto.a"
nanobind="$("$src/.venv/bin/python" -c 'import nanobind, os; print(os.path.dirname(nanobind.__file__))')"
cp -r "$nanobind" "$out/nanobind"
# FlexAttention closures of the GPU pytest, exported with the compiler.
mkdir -p "$out/python-packages"
PYTHONPATH="$src/build/python" "$src/.venv/bin/python" \
  "$src/python/tests/gpu/make_packages.py" "$out/python-packages" "$first"
# The packages are built from the working tree: -dirty says it had changes.
git -C "$src" describe --always --dirty --abbrev=12 > "$out/COMMIT"
# Kernel packages are PTX in JSON (about 6x smaller gzipped): they travel
# gzipped and the device scripts unpack them where they start.
find "$out/packages"* "$out/backward"* "$out/key-offsets" "$out/large" \
  "$out/candidates" -name '*.json' -exec gzip -9 -f {} +
du -sh "$out"
# The device tool carries the working tree and .device together, 64 MiB at
# most (2026-11-27: 65.4 MiB with the embedding example and two A/B
# packages, before they were gzipped); say so here rather than on the
# device.
tree=$(cd "$src" && git ls-files -z --cached --others --exclude-standard |
       xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
bundle=$(du -sb "$out" | cut -f1)
total=$(( (tree + bundle) / 1048576 ))
echo "bundle $(( bundle / 1048576 )) MiB + working tree $(( tree / 1048576 )) MiB = $total MiB (carry limit 64)"
(( tree + bundle < 64 * 1048576 )) || { echo "device-bundle: over the carry limit: leave out BUNDLE_* extras" >&2; exit 1; }
