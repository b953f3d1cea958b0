#!/usr/bin/env bash
# Compiles every example x {f16, bf16} x D in {64, 128} x {sm_80, sm_90} to
# PTX and assembles it with ptxas: fails on any ptxas error or spill, and
# prints the Markdown table of docs/kernels.md. Exits 77 (a ctest skip, with
# the reason) when ptxas is not installed.
#   usage: scripts/ptxas-table.sh BUILD_DIR
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:?usage: ptxas-table.sh BUILD_DIR}"
ptxas="$(command -v ptxas || true)"
[[ -z "$ptxas" && -x /usr/local/cuda/bin/ptxas ]] && ptxas=/usr/local/cuda/bin/ptxas
if [[ -z "$ptxas" ]]; then
  echo "SKIP: ptxas not found (install a CUDA toolkit to assemble the PTX)"
  exit 77
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "ptxas: $("$ptxas" --version | tail -1)"
echo
echo "| example | dtype | D | arch | registers | shared memory (bytes) | stack frame (bytes) | spill stores | spill loads |"
echo "|---|---|---:|---|---:|---:|---:|---:|---:|"
bad=0
for f in "$src"/examples/*.attn; do
  n="$(basename "$f" .attn)"
  [[ "$n" == tour ]] && continue # its variants are the other examples'
  for dt in f16 bf16; do for d in 64 128; do for sm in sm_80 sm_90; do
    "$build/bin/attnc" compile "$f" --emit=ptx --target=$sm --dtype $dt \
      --head-dim $d --v-head-dim $d > "$tmp/k.ptx"
    if ! out="$("$ptxas" -arch=$sm -v "$tmp/k.ptx" -o "$tmp/k.cubin" 2>&1)"; then
      echo "FAIL: $n $dt D=$d $sm: $out" >&2
      bad=1
      continue
    fi
    # The attention kernel's figures (not the block-mask builder's); spills
    # are checked over every entry.
    main="$(echo "$out" | awk '/Compiling entry function/ { keep = ($0 !~ /_block_mask/) } keep')"
    regs="$(echo "$main" | grep -oE 'Used [0-9]+ registers' | grep -oE '[0-9]+')"
    smem="$(echo "$main" | grep -oE '[0-9]+ bytes smem' | grep -oE '^[0-9]+')"
    stack="$(echo "$main" | grep -oE '[0-9]+ bytes stack frame' | grep -oE '^[0-9]+')"
    ss="$(echo "$out" | grep -oE '[0-9]+ bytes spill stores' | grep -oE '^[0-9]+' | awk '{ s += $1 } END { print s + 0 }')"
    sl="$(echo "$out" | grep -oE '[0-9]+ bytes spill loads' | grep -oE '^[0-9]+' | awk '{ s += $1 } END { print s + 0 }')"
    echo "| $n | $dt | $d | $sm | $regs | $smem | $stack | $ss | $sl |"
    if [[ "$ss" != 0 || "$sl" != 0 ]]; then
      echo "FAIL: $n $dt D=$d $sm spills ($ss stores, $sl loads)" >&2
      bad=1
    fi
  done; done; done
done
exit $bad
