"""Suite-wide guards."""

from __future__ import annotations

import gc
import sys

import pytest


@pytest.fixture(autouse=True, scope="module")
def no_ray_left_running():
    """Fails a test module that leaves a local Ray running in the pytest process, and shuts it
    down, so that the next modules start clean instead of failing with "ray.init twice"."""
    yield
    ray = sys.modules.get("ray")
    if ray is None:
        return
    gc.collect()  # objects of the module's tests that call into Ray when collected
    if ray.is_initialized():
        ray.shutdown()
        pytest.fail("the tests of this module left Ray running in the pytest process")
