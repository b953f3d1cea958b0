#!/usr/bin/env bash
# On the GPU machine (no LLVM, no network): builds the runtime-only Python
# package from the working tree with what .device/ carries (the portable
# runtime library, libcrypto.a, nanobind's source tree) and this machine's
# python3. device-bundle.sh copies this script to .device/build-python.sh.
#   usage: .device/build-python.sh [BUILD_DIR]     (default /tmp/attnc-python)
# then:   PYTHONPATH=BUILD_DIR python3 -c "import attnc"
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"   # .device
src="$(cd "$here/.." && pwd)"
out="${1:-/tmp/attnc-python}"
python="${PYTHON:-$(command -v python3)}"
cmake -S "$src/python/device" -B "$out" -DPython_EXECUTABLE="$python" \
  -Dnanobind_DIR="$here/nanobind/cmake" \
  -DATTNC_RUNTIME_LIB="$here/lib/libAttncRuntime.a" \
  -DATTNC_CRYPTO_LIB="$here/lib/libcrypto.a" >/dev/null
cmake --build "$out" -j "$(nproc)"
PYTHONPATH="$out" "$python" -c "import attnc; assert not attnc.has_compiler; print('attnc runtime-only package:', '$out')"
