#!/usr/bin/env bash
# Installs what attnc needs from Debian's packages (only what is missing) and
# configures build/ with Ninja. Idempotent; runs as root or through sudo.
#   scripts/setup.sh                 compiler + runtime (LLVM/MLIR 22)
#   scripts/setup.sh --runtime-only  runtime alone, no LLVM, into build-runtime/
set -euo pipefail
cd "$(dirname "$0")/.."

runtime_only=0
[[ "${1:-}" == "--runtime-only" ]] && runtime_only=1

packages=(cmake ninja-build g++ catch2 libfmt-dev nlohmann-json3-dev libssl-dev python3)
# The Python package: headers for the extension, venv for its environment.
[[ $runtime_only == 0 ]] && packages+=(python3-dev python3-venv)
if [[ $runtime_only == 0 ]]; then
  packages+=(llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools libopenblas-dev python3-matplotlib
             clang libclang-rt-dev clang-22 libclang-rt-22-dev)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done

if ((${#missing[@]})); then
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [[ $runtime_only == 1 ]]; then
  cmake -S . -B build-runtime -G Ninja -DATTNC_ENABLE_COMPILER=OFF
else
  # Python packages from PyPI into .venv: nanobind and scikit-build-core
  # (the binding), numpy, pytest, torch (python/requirements-dev.txt).
  [[ -x .venv/bin/python ]] || /usr/bin/python3 -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check \
    -r python/requirements-dev.txt
  cmake -S . -B build -G Ninja \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DPython_EXECUTABLE="$PWD/.venv/bin/python"
fi
