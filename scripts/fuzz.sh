#!/usr/bin/env bash
# Builds a libFuzzer target with clang + ASan/UBSan and runs it for a
# bounded time over a seeded corpus. Exits 77 (a ctest skip, with the
# reason) when clang or libFuzzer is missing (scripts/setup.sh installs
# them).
#   usage: scripts/fuzz.sh parser|package|npy BUILD_DIR [SECONDS]
#     parser   the .attn front end (lexer, parser, sema, diagnostics)
#     package  the kernel package reader and the modifier-program interpreter
#     npy      the .npy reader
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
target="${1:?usage: fuzz.sh parser|package|npy BUILD_DIR [SECONDS]}"
build="${2:?usage: fuzz.sh parser|package|npy BUILD_DIR [SECONDS]}"
seconds="${3:-60}"
cxx="$(command -v clang++ || command -v clang++-14 || true)"
if [[ -z "$cxx" ]]; then
  echo "SKIP: clang++ not found; the fuzzers need clang's libFuzzer"
  exit 77
fi
out="$build/fuzz/$target"
mkdir -p "$out/corpus"
probe="$out/probe.cpp"
echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long){return 0;}' > "$probe"
if ! "$cxx" -fsanitize=fuzzer "$probe" -o "$out/probe" 2>/dev/null; then
  echo "SKIP: $cxx cannot link -fsanitize=fuzzer (install libclang-rt-dev)"
  exit 77
fi
flags=(-std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined)
rt="$src/runtime/src"
case "$target" in
  parser)
    "$cxx" "${flags[@]}" -I"$src/compiler/include" \
      "$src/compiler/fuzz/ParserFuzzer.cpp" "$src"/compiler/lib/Frontend/*.cpp \
      -o "$out/fuzzer"
    cp "$src"/examples/*.attn "$out/corpus/"
    find "$src/test/Frontend" -name '*.attn' -exec cp {} "$out/corpus/" \;
    maxlen=4096 ;;
  package)
    "$cxx" "${flags[@]}" -I"$src/runtime/include" \
      "$src/runtime/fuzz/PackageFuzzer.cpp" "$rt/Package.cpp" "$rt/PackageBackward.cpp" \
      "$rt/ModProgram.cpp" \
      "$rt/DType.cpp" "$rt/Status.cpp" "$rt/FileIO.cpp" "$rt/TensorView.cpp" \
      -lfmt -o "$out/fuzzer"
    # Real packages, one kernel each (their PTX makes them large), and
    # two with the backward images of format 5.
    for n in causal document_mask synaptic; do
      "$build/bin/attnc" compile "$src/examples/$n.attn" --emit=package \
        --target=sm_80 --dtypes=f16 --head-dims=64 -o "$out/corpus/$n.json"
    done
    for n in causal synaptic; do
      "$build/bin/attnc" compile "$src/examples/$n.attn" --emit=package \
        --backward --target=sm_80 --dtypes=bf16 --head-dims=64 \
        -o "$out/corpus/$n-backward.json"
    done
    maxlen=200000 ;;
  npy)
    "$cxx" "${flags[@]}" -I"$src/runtime/include" \
      "$src/runtime/fuzz/NpyFuzzer.cpp" "$rt/Npy.cpp" "$rt/DType.cpp" \
      "$rt/Status.cpp" "$rt/FileIO.cpp" -lfmt -o "$out/fuzzer"
    python3 "$src/test/Runtime/Inputs/write_npy.py" "$out/corpus/a.npy" 2 3 4
    python3 "$src/test/Runtime/Inputs/write_npy.py" "$out/corpus/b.npy" 5
    maxlen=1024 ;;
  *) echo "unknown fuzz target '$target'"; exit 2 ;;
esac
"$out/fuzzer" "$out/corpus" -max_total_time="$seconds" -max_len="$maxlen" \
  -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 2>&1 | tail -n 15
echo "fuzzing $target finished: no crash in ${seconds}s"
