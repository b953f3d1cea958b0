#!/usr/bin/env bash
# Configures and builds the runtime alone (-DATTNC_ENABLE_COMPILER=OFF) in a
# scratch folder, runs its tests, and checks that nothing links LLVM or MLIR.
#   usage: scripts/check-runtime-only.sh SCRATCH_DIR
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: check-runtime-only.sh SCRATCH_DIR}"
cmake -S "$src" -B "$out" -G Ninja -DATTNC_ENABLE_COMPILER=OFF >/dev/null
if grep -q '^MLIR_DIR:' "$out/CMakeCache.txt"; then
  echo "FAIL: the runtime-only configure looked for MLIR"; exit 1
fi
cmake --build "$out"
for exe in "$out"/bin/*; do
  if ldd "$exe" | grep -Ei 'libLLVM|libMLIR'; then
    echo "FAIL: $exe links LLVM/MLIR"; exit 1
  fi
done
(cd "$out" && ctest --output-on-failure | tail -n 3)
echo "runtime-only build: OK (no LLVM/MLIR linked)"
