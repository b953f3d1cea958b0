#!/usr/bin/env bash
# The GPU parity matrix: every example packaged for the device's target in
# f32, f16 and bf16 (D = 64, 80, 128 and Dqk:Dv = 64:32) and run by the
# runtime-only attnc-run against the fp64 reference (--suite: MHA/GQA/MQA x
# prefill/decode/chunk x dtypes, GQA 6:1, D=80, Dv != Dqk, BSHD, lengths
# that are not tile multiples). Exits 77 (a ctest skip) with the reason when
# there is no CUDA driver or device.
#   usage: scripts/gpu-parity.sh BUILD_DIR [EXAMPLE...]
set -uo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:?usage: gpu-parity.sh BUILD_DIR [EXAMPLE...]}"
shift
if ! info="$("$build/bin/attnc-run" --device-info)"; then
  echo "SKIP: $info"
  exit 77
fi
echo "device: $info"
cc="$(echo "$info" | grep -oE 'sm_[0-9]+' | head -1 | tr -d sm_)"
target=sm_80
((cc >= 86)) && target=sm_86
((cc >= 89)) && target=sm_89
((cc >= 90)) && target=sm_90
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
examples=("$@")
((${#examples[@]})) || examples=($(ls "$src"/examples/*.attn | xargs -n1 basename | sed 's/\.attn$//' | grep -v '^tour$'))
bad=0
for n in "${examples[@]}"; do
  "$build/bin/attnc" compile "$src/examples/$n.attn" --emit=package \
    --target=$target --dtypes=f32,f16,bf16 --head-dims=64,80,128,64:32 \
    -o "$tmp/$n.json" || { bad=1; continue; }
  "$build/bin/attnc-run" "$tmp/$n.json" --suite || bad=1
  "$build/bin/attnc-run" "$tmp/$n.json" --suite --head-dim 128 --v-head-dim 128 || bad=1
done
exit $bad
