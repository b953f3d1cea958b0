#!/usr/bin/env bash
# Compiles every example x {f16, bf16} x Dqk:Dv in {64, 128, 192:128, 256}
# x {sm_80, sm_90} to a package (the configuration table's tiles) and its
# PTX and assembles it with ptxas: fails on any ptxas error or spill, and
# prints the Markdown table of docs/kernels.md. A spill that the static
# SASS model (bench/sass_model.py, with the set-up's nvdisasm) finds only
# outside the tile loop (loop-invariant values stored once per work item
# and reloaded after the loop) is reported as a note instead; without the
# model every spill fails. Then every example's GPU
# backward (SIMT f32 D=64; tensor cores bf16 D=64 and 128; sm_90;
# docs/backward.md) assembles too, with its table (fails on any ptxas
# error; spills are reported, not failed). Kernels come through the
# kernel cache and ptxas through scripts/ptxas-cached.sh, so under ctest
# what the SASS model assembled is read back. Exits 77 (a ctest skip, with
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
model_py="$src/.venv/bin/python"
echo "ptxas: $("$ptxas" --version | tail -1)"
echo
echo "| example | dtype | Dqk:Dv | arch | kernel | registers | shared memory (bytes) | stack frame (bytes) | spill stores | spill loads |"
echo "|---|---|---:|---|---|---:|---:|---:|---:|---:|"
bad=0
for f in "$src"/examples/*.attn; do
  n="$(basename "$f" .attn)"
  [[ "$n" == tour ]] && continue # its variants are the other examples'
  # One package per example: every (target, dtype, D) kernel with the
  # configuration table's tiles and its shared-memory size.
  "$build/bin/attnc" compile "$f" --emit=package --target=sm_80,sm_90 \
    --dtypes=f16,bf16 --head-dims=64,128,192:128,256 -o "$tmp/p.json"
  python3 - "$tmp/p.json" "$tmp" > "$tmp/list" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
for i, k in enumerate(p["variants"][0]["kernels"]):
    path = "%s/k%d.ptx" % (sys.argv[2], i)
    open(path, "w").write(k["ptx"])
    w = k.get("tile_work", {})
    print(k["dtype"], "%d:%d" % (k["head_dim"], k["v_head_dim"]), k["target"], k["kernel"],
          k["shared_bytes"] + k["dynamic_shared_bytes"], path, w.get("mma", 0),
          w.get("async_copies", 0))
PY
  while read -r dt d sm kernel smem ptx mma copies; do
    if ! out="$("$src/scripts/ptxas-cached.sh" "$ptxas" "$sm" "$ptx" "$tmp/k.cubin" 2>&1)"; then
      echo "FAIL: $n $dt D=$d $sm: $out" >&2
      bad=1
      continue
    fi
    # The attention kernel's figures (not the block-mask builder's or the
    # split-KV merge's); spills
    # are checked over every entry.
    main="$(echo "$out" | awk '/Compiling entry function/ { keep = ($0 !~ /_block_mask|_merge/) } keep')"
    regs="$(echo "$main" | grep -oE 'Used [0-9]+ registers' | grep -oE '[0-9]+')"
    stack="$(echo "$main" | grep -oE '[0-9]+ bytes stack frame' | grep -oE '^[0-9]+')"
    ss="$(echo "$out" | grep -oE '[0-9]+ bytes spill stores' | grep -oE '^[0-9]+' | awk '{ s += $1 } END { print s + 0 }')"
    sl="$(echo "$out" | grep -oE '[0-9]+ bytes spill loads' | grep -oE '^[0-9]+' | awk '{ s += $1 } END { print s + 0 }')"
    echo "| $n | $dt | $d | $sm | \`$kernel\` | $regs | $smem | $stack | $ss | $sl |"
    if [[ "$ss" != 0 || "$sl" != 0 ]]; then
      where=""
      if [[ -x "$model_py" && "$mma" != 0 ]] &&
         where="$("$model_py" "$src/bench/sass_model.py" analyze "$ptx" --entry "$kernel" \
                    --target "$sm" --mma "$mma" --copies "$copies" 2>/dev/null |
                  python3 -c 'import json, sys; t = sys.stdin.read(); r = json.loads(t[:t.index("\n}") + 2]); print("outside" if r["loop_local_memory"] == 0 else "inside")' 2>/dev/null)" &&
         [[ "$where" == outside ]]; then
        echo "note: $n $dt D=$d $sm spills ($ss stores, $sl loads), none in the tile loop (the SASS model)" >&2
      else
        echo "FAIL: $n $dt D=$d $sm spills ($ss stores, $sl loads)${where:+, in the tile loop}" >&2
        bad=1
      fi
    fi
  done < "$tmp/list"
done
echo
n_bwd=0
echo "| example | backward | dtype | Dqk:Dv | entry | registers | stack frame (bytes) | spill stores | spill loads |"
echo "|---|---|---|---:|---|---:|---:|---:|---:|"
for f in "$src"/examples/*.attn; do
  n="$(basename "$f" .attn)"
  [[ "$n" == tour ]] && continue
  # SIMT (f32) and tensor cores (bf16 at 64- and 32-row tiles), packaged
  # (through the kernel cache, which the SASS model's packages fill).
  for cfg in "SIMT f32 64" "tensor-cores bf16 64,128"; do
    read -r form dt dims <<< "$cfg"
    if ! "$build/bin/attnc" compile "$f" --emit=package --backward --target=sm_90 \
        --dtypes="$dt" --head-dims="$dims" -o "$tmp/bwd.json"; then
      echo "FAIL: $n backward $dt D=$dims: cannot compile" >&2
      bad=1
      continue
    fi
    python3 - "$tmp/bwd.json" "$tmp" > "$tmp/bwd.list" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
for i, k in enumerate(p["variants"][0]["backward"]):
    path = "%s/b%d.ptx" % (sys.argv[2], i)
    open(path, "w").write(k["ptx"])
    print(k["head_dim"], path)
PY
    while read -r d ptx; do
      out=""
      if ! out="$("$src/scripts/ptxas-cached.sh" "$ptxas" sm_90 "$ptx" "$tmp/k.cubin" 2>&1)"; then
        echo "FAIL: $n backward $dt D=$d: $out" >&2
        bad=1
        continue
      fi
      echo "$out" | awk -v n="$n" -v form="$form" -v dt="$dt" -v d="$d" '
        /Compiling entry function/ { match($0, /_bwd_(q|kv)/); e = substr($0, RSTART + 1, RLENGTH - 1); keep = RSTART > 0 }
        keep && /bytes stack frame/ { split($0, a, " "); for (i in a) { if (a[i] == "stack") st = a[i-2]; if (a[i] == "stores,") ss = a[i-3]; if (a[i] == "loads") sl = a[i-3] } }
        keep && /Used [0-9]+ registers/ { match($0, /Used [0-9]+/); r = substr($0, RSTART + 5, RLENGTH - 5);
          printf "| %s | %s | %s | %s:%s | `%s` | %s | %s | %s | %s |\n", n, form, dt, d, d, e, r, st, ss, sl; keep = 0 }'
    done < "$tmp/bwd.list"
  done
  n_bwd=$((n_bwd + 1))
done
echo "backward: $n_bwd examples' GPU backward PTX (SIMT f32 D=64; tensor cores bf16 D=64 and 128; sm_90) assembles"
exit $bad
