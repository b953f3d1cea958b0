#!/usr/bin/env python3
"""The static SASS model of attnc's GPU kernels (bench/sassmodel): run,
check against the committed baseline, update it, analyze one kernel,
calibrate against ncu. `bench/sass_model.py --help` says more."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sassmodel.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
