#!/usr/bin/env bash
# Builds attnc with AddressSanitizer and UndefinedBehaviorSanitizer in a
# scratch folder and runs the tests that cover the compiler, the runtime,
# the emulator, the package and .npy readers and the tools: every Catch2
# suite and the lit tests of the front end, the analyses and the runtime
# tools. Any report fails (halt on the first error).
#   usage: scripts/check-sanitizers.sh SCRATCH_DIR
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: check-sanitizers.sh SCRATCH_DIR}"
# -O1 with line tables only: instrumented MLIR-heavy sources compile several
# times faster than with full debug info, and reports still name lines.
# Warnings are errors in the main build; here they stay warnings (GCC's
# -O1 with sanitizers, where clang 22 is missing, warns falsely inside
# libstdc++'s <regex>).
# clang 22 (the set-up installs it with its sanitizer runtimes): its
# instrumented build took 581 s of CPU on the 2-core VM (2026-11-29), its
# compile jobs 883 s in ninja's log where GCC's took 2838 s (GCC's in a
# ctest run beside other tests); without it, the default compiler.
cxx=()
command -v clang++-22 >/dev/null && cxx=(-DCMAKE_CXX_COMPILER=clang++-22)
# A folder configured for another compiler (a checkout from before clang
# 22, or one where it was missing) starts over: CMake would drop its cache
# and the options below with it.
choice="${cxx[*]:-default}"
if [[ -f "$out/CMakeCache.txt" && "$(cat "$out/.sanitize-compiler" 2>/dev/null)" != "$choice" ]]; then
  rm -rf "$out"
fi
mkdir -p "$out"
echo "$choice" > "$out/.sanitize-compiler"
cmake -S "$src" -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cxx[@]}" \
  -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1" \
  -DATTNC_SANITIZE=address,undefined -DATTNC_WERROR=OFF -DATTNC_ENABLE_PYTHON=OFF \
  -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
  -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit >/dev/null
cmake --build "$out" --target attnc attn-opt attnc-run attnc-embed-example \
  attnc-runtime-tests attnc-frontend-tests attnc-cpu-tests attnc-emucuda \
  attnc-emucuda-tests
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1"
export LSAN_OPTIONS="suppressions=$src/scripts/sanitizer-suppressions.txt:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
# The emulator, in the instrumented tools: one host thread keeps reports
# readable and the run within CI's time.
export ATTNC_EMU_THREADS=1
# The heaviest matrices on a representative subset (test/unit/
# Representative.h: the examples with their own compiler paths, a rotation
# over forms, dtypes and head dims; lit's `sanitized` feature leaves out
# the emulated sweeps whose host code their sibling files reach). Under
# ASan on one worker the Catch2 suites took 972 s and lit 1728 s
# (2026-11-29, a 2-core VM); the subset takes about 850 s of that out. The
# main build runs every case.
export ATTNC_TEST_REPRESENTATIVE=1
for t in attnc-runtime-tests attnc-frontend-tests attnc-cpu-tests attnc-emucuda-tests; do
  echo "== $t"
  "$out/bin/$t" | tail -n 2
done
echo "== lit (Frontend, Analysis, Runtime)"
/usr/lib/llvm-22/bin/lit -s "$out/test/Frontend" "$out/test/Analysis" "$out/test/Runtime"
echo "sanitizers: no report"
