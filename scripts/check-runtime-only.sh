#!/usr/bin/env bash
# Configures and builds the runtime alone (-DATTNC_ENABLE_COMPILER=OFF) in a
# scratch folder, runs its tests, and checks that nothing links LLVM or MLIR.
# Given the full build's Python package and the emulated driver, it also
# builds the runtime-only Python package and runs kernel packages through it
# (python/tests/runtime_only): packages made by the full build's compiler,
# run on the emulated GPU by the package with no compiler.
#   usage: scripts/check-runtime-only.sh SCRATCH_DIR [PYTHON FULL_PYTHONPATH EMUCUDA_LIB]
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: check-runtime-only.sh SCRATCH_DIR [PYTHON FULL_PYTHONPATH EMUCUDA_LIB]}"
python="${2:-}"
cmake -S "$src" -B "$out" -G Ninja -DATTNC_ENABLE_COMPILER=OFF \
  ${python:+-DPython_EXECUTABLE="$python"} >/dev/null
if grep -q '^MLIR_DIR:' "$out/CMakeCache.txt"; then
  echo "FAIL: the runtime-only configure looked for MLIR"; exit 1
fi
cmake --build "$out"
for exe in "$out"/bin/* "$out"/python/attnc/*.so; do
  [ -e "$exe" ] || continue
  if ldd "$exe" | grep -Ei 'libLLVM|libMLIR'; then
    echo "FAIL: $exe links LLVM/MLIR"; exit 1
  fi
done
(cd "$out" && ctest --output-on-failure | tail -n 3)
if [ -n "$python" ]; then
  full="${3:?the python folder of the full build}"
  emu="${4:?libattnc-emucuda.so}"
  ls "$out"/python/attnc/_attnc*.so >/dev/null || {
    echo "FAIL: the runtime-only Python package was not built"; exit 1; }
  packages="$out/test-packages"
  mkdir -p "$packages"
  PYTHONPATH="$full" "$python" "$src/python/tests/runtime_only/make_packages.py" "$packages"
  PYTHONPATH="$out/python" ATTNC_TEST_PACKAGES="$packages" ATTNC_LIBCUDA="$emu" \
    ATTNC_TEST_REQUIRE_CUDA=1 "$python" -m pytest -q -p no:cacheprovider \
    "$src/python/tests/runtime_only"
fi
echo "runtime-only build: OK (no LLVM/MLIR linked)"
