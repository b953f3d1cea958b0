#!/usr/bin/env bash
# Builds the runtime and the emulator with clang's ThreadSanitizer and runs
# the thread stress test (runtime/stress/ThreadStress.cpp) on a package of
# two examples. Exits 77 (a ctest skip, with the reason) where clang cannot
# build with -fsanitize=thread.
#   usage: scripts/tsan.sh BUILD_DIR
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:?usage: tsan.sh BUILD_DIR}"
cxx="$(command -v clang++ || command -v clang++-14 || true)"
if [[ -z "$cxx" ]]; then
  echo "SKIP: clang++ not found; the ThreadSanitizer build needs clang"
  exit 77
fi
out="$build/tsan"
mkdir -p "$out"
echo 'int main(){return 0;}' > "$out/probe.cpp"
if ! "$cxx" -fsanitize=thread "$out/probe.cpp" -o "$out/probe" 2>/dev/null; then
  echo "SKIP: $cxx cannot link -fsanitize=thread"
  exit 77
fi
flags=(-std=c++17 -O1 -g -fsanitize=thread -fno-omit-frame-pointer -pthread)
# The emulator as the driver library (its CTA threads instrumented too).
"$cxx" "${flags[@]}" -fPIC -shared -I"$src/emulator" "$src"/emulator/*.cpp \
  -o "$out/libattnc-emucuda-tsan.so" &
emu=$!
# The runtime and the stress program.
"$cxx" "${flags[@]}" -I"$src/runtime/include" -I"$src/runtime/src" \
  "$src/runtime/stress/ThreadStress.cpp" "$src"/runtime/src/*.cpp \
  "$src"/runtime/src/cuda/*.cpp -lfmt -lcrypto -ldl -o "$out/attnc-thread-stress" &
stress=$!
wait "$emu"
wait "$stress"
"$build/bin/attnc" compile "$src/examples/causal.attn" --emit=package \
  --target=sm_80 --dtypes=f32,bf16 --head-dims=64 -o "$out/causal.json"
"$build/bin/attnc" compile "$src/examples/softcap.attn" --emit=package \
  --target=sm_80 --dtypes=f32,bf16 --head-dims=64 -o "$out/softcap.json"
# One package of both variants.
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
a = json.load(open(out + "/causal.json"))
b = json.load(open(out + "/softcap.json"))
a["variants"] += b["variants"]
json.dump(a, open(out + "/both.json", "w"))
PY
rm -rf "$out/cache"
# A race planted in a probe first: the sanitizer must report it (exit 66).
cat > "$out/race.cpp" <<'CPP'
#include <thread>
int shared = 0;
int main() {
  std::thread a([] { shared++; }), b([] { shared++; });
  a.join();
  b.join();
  return 0;
}
CPP
"$cxx" "${flags[@]}" "$out/race.cpp" -o "$out/race"
if TSAN_OPTIONS="exitcode=66" "$out/race" 2>/dev/null; then
  echo "FAIL: ThreadSanitizer did not report the planted race"
  exit 1
fi
TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1" \
ATTNC_EMU_QUIET=1 \
  "$out/attnc-thread-stress" "$out/both.json" "$out/libattnc-emucuda-tsan.so" \
  "$out/cache" | tee "$out/stress.log"
grep -q "under ThreadSanitizer" "$out/stress.log"
