#!/usr/bin/env bash
# The README's demo: compile the synaptic variant, show its attn IR and its
# tile classes, then run it on the CPU against the fp64 reference.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build --target attnc attn-opt
echo "== examples/synaptic.attn"
cat examples/synaptic.attn
echo
echo "== attnc compile examples/synaptic.attn --emit=attn"
build/bin/attnc compile examples/synaptic.attn --emit=attn
echo
echo "== attnc compile examples/synaptic.attn --emit=mask"
build/bin/attnc compile examples/synaptic.attn --emit=mask
echo
echo "== attnc check examples/synaptic.attn --suite   (JIT on this CPU vs fp64)"
build/bin/attnc check examples/synaptic.attn --suite
