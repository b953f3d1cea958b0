#!/usr/bin/env bash
# `ptxas -arch=ARCH -v PTX -o CUBIN`, read back from a cache of assembled
# images when $ATTNC_PTXAS_CACHE names a folder: the static SASS model
# (bench/sassmodel/toolchain.py) and the ptxas table (scripts/ptxas-table.sh)
# assemble many of the same kernels, and ctest gives both one folder
# (test/CMakeLists.txt). The key is a SHA-256 of this ptxas's
# `--version`, the arch and the PTX text, so an entry is that ptxas's own
# output for that input; the entry holds the cubin and ptxas's report,
# which is printed as ptxas printed it. A failed assembly is never stored.
# Without $ATTNC_PTXAS_CACHE this is plain ptxas.
#   usage: ptxas-cached.sh PTXAS ARCH PTX CUBIN
set -uo pipefail
ptxas="${1:?usage: ptxas-cached.sh PTXAS ARCH PTX CUBIN}"
arch="${2:?usage: ptxas-cached.sh PTXAS ARCH PTX CUBIN}"
ptx="${3:?usage: ptxas-cached.sh PTXAS ARCH PTX CUBIN}"
cubin="${4:?usage: ptxas-cached.sh PTXAS ARCH PTX CUBIN}"
dir="${ATTNC_PTXAS_CACHE:-}"
if [[ -z "$dir" ]]; then
  exec "$ptxas" -arch="$arch" -v "$ptx" -o "$cubin"
fi
mkdir -p -m 700 "$dir" || exit 1
key="$({ printf 'ptxas-cached v1\n'; "$ptxas" --version; printf -- '-arch=%s -v\n' "$arch"; cat "$ptx"; } |
  sha256sum | cut -c1-64)"
entry="$dir/$key"
if [[ -f "$entry.cubin" && -f "$entry.log" ]]; then
  cp "$entry.cubin" "$cubin" && cat "$entry.log" && exit 0
fi
log="$(mktemp "$dir/.tmp.XXXXXX")"
"$ptxas" -arch="$arch" -v "$ptx" -o "$cubin" > "$log" 2>&1
status=$?
cat "$log"
if ((status == 0)); then
  # Cubin first, report last: a reader that finds the report finds the
  # cubin (each rename is atomic; parallel writers store the same bytes).
  tmpc="$(mktemp "$dir/.tmp.XXXXXX")" && cp "$cubin" "$tmpc" && mv -f "$tmpc" "$entry.cubin" &&
    mv -f "$log" "$entry.log"
fi
rm -f "$log"
exit $status
