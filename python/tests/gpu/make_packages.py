"""With the compiler (the full build's attnc): exports the closures of
closures.py into OUTDIR/flex.json for the GPU tests.

  PYTHONPATH=build/python python make_packages.py OUTDIR TARGET
"""
import os
import sys

import attnc

sys.path.insert(0, os.path.dirname(__file__))
from closures import causal, tilt  # noqa: E402

attnc.flex.export_package(os.path.join(sys.argv[1], "flex.json"), tilt, causal,
                          targets=[sys.argv[2]], dtypes=["bf16"], head_dims=[64])
