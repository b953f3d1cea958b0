"""Run by the full build's attnc (the compiler built in): compiles what
test_runtime_only.py runs with the runtime-only package, into OUTDIR.

  PYTHONPATH=build/python python make_packages.py OUTDIR
"""
import os
import sys

import attnc

sys.path.insert(0, os.path.dirname(__file__))
from closures import with_bias, window  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")
out = sys.argv[1]
options = dict(targets=["sm_80"], dtypes=["f32", "bf16"], head_dims=[64])
attnc.compile_package(os.path.join(ROOT, "examples", "synaptic.attn"),
                      os.path.join(out, "synaptic.json"), **options)
# Tracing needs only the captures' dtypes and ranks, not their values.
import numpy as np  # noqa: E402
attnc.flex.export_package(os.path.join(out, "flex.json"),
                          with_bias(np.zeros(7, np.float32)), window(8),
                          targets=["sm_80"], dtypes=["f32"], head_dims=[64])
print("packages in", out)
