"""Shared by the tests: CUDA tests need a driver. ctest points
ATTNC_LIBCUDA at the emulated driver (libattnc-emucuda.so) and sets
ATTNC_TEST_REQUIRE_CUDA=1, so there a missing driver fails the suite
instead of skipping the CUDA tests."""
import os

import pytest

import attnc


@pytest.fixture(scope="session")
def cuda_device():
    try:
        return attnc.cuda.device(0)
    except attnc.Error as e:
        if os.environ.get("ATTNC_TEST_REQUIRE_CUDA") == "1":
            pytest.fail("ATTNC_TEST_REQUIRE_CUDA=1 but no CUDA device: %s" % e)
        pytest.skip("no CUDA driver or device (set ATTNC_LIBCUDA to "
                    "build/lib/libattnc-emucuda.so for the emulated one): %s" % e)
