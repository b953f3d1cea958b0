#!/usr/bin/env bash
# Builds the .attn parser fuzzer with clang's libFuzzer + ASan/UBSan and runs
# it for a bounded time over a corpus seeded with examples/. Exits 77 (ctest
# reports a skip, with the reason) when clang or libFuzzer is missing.
#   usage: scripts/fuzz-parser.sh BUILD_DIR [SECONDS]
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:?usage: fuzz-parser.sh BUILD_DIR [SECONDS]}"
seconds="${2:-60}"
cxx="$(command -v clang++ || command -v clang++-14 || true)"
if [[ -z "$cxx" ]]; then
  echo "SKIP: clang++ not found; the parser fuzzer needs clang's libFuzzer"
  exit 77
fi
out="$build/fuzz"
mkdir -p "$out/corpus"
probe="$out/probe.cpp"
echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long){return 0;}' > "$probe"
if ! "$cxx" -fsanitize=fuzzer "$probe" -o "$out/probe" 2>/dev/null; then
  echo "SKIP: $cxx cannot link -fsanitize=fuzzer (install libclang-rt-dev)"
  exit 77
fi
"$cxx" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=undefined -I"$src/compiler/include" \
  "$src/compiler/fuzz/ParserFuzzer.cpp" "$src"/compiler/lib/Frontend/*.cpp \
  -o "$out/attnc-parser-fuzzer"
cp "$src"/examples/*.attn "$out/corpus/"
find "$src/test/Frontend" -name '*.attn' -exec cp {} "$out/corpus/" \;
"$out/attnc-parser-fuzzer" "$out/corpus" -max_total_time="$seconds" \
  -max_len=4096 -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 2>&1 |
  tail -n 15
echo "fuzzing finished: no crash in ${seconds}s"
