#!/usr/bin/env bash
# The README's demo: compile the synaptic variant and show its attn IR.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build --target attnc attn-opt
echo "== examples/synaptic.attn"
cat examples/synaptic.attn
echo
echo "== attnc compile examples/synaptic.attn --emit=attn"
build/bin/attnc compile examples/synaptic.attn --emit=attn
