"""What the sm_90a conformance tests share: the emulator's settings
(compute capability 9.0, reports kept quiet), this folder on the module
path, and the `emulator_only` mark for what a device would not report
(skipped when the tests run against a real driver,
ATTNC_CONFORMANCE_ON_DEVICE=1)."""
import os
import sys

import pytest

os.environ.setdefault("TRITON_DISABLE_LINE_INFO", "1")
os.environ["ATTNC_EMU_CC"] = "90"
os.environ.setdefault("ATTNC_EMU_QUIET", "1")
sys.path.insert(0, os.path.dirname(__file__))

from emudriver import ON_DEVICE  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "emulator_only: what only the emulator reports (skipped on a device)")


def pytest_collection_modifyitems(config, items):
    if not ON_DEVICE:
        return
    skip = pytest.mark.skip(reason="what only the emulator reports")
    for item in items:
        if "emulator_only" in item.keywords:
            item.add_marker(skip)
