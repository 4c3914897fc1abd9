"""Hypothesis profiles: "ci" (the default) keeps the suite fast on 2 cores;
"thorough" (HYPOTHESIS_PROFILE=thorough) runs the property tests far longer.
The GPU tests' fixtures: `torch` (with a CUDA device) and `hopper_only`."""
import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", deadline=None, max_examples=150,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", deadline=None, max_examples=3000,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _import_torch_first():
    """On a GPU machine, import torch before any test compiles with NVRTC:
    on the H100 machine, `import torch` after moye had initialized the driver
    and compiled failed now and then inside torch's own schema parser
    ("expected ident ... annotate(strtag)"); importing it first avoids it."""
    import ctypes.util
    if ctypes.util.find_library("cuda") is None:
        return
    try:
        import torch  # noqa: F401
    except ImportError:
        pass


_import_torch_first()


@pytest.fixture(scope="module")
def torch():
    """torch with a CUDA device, for the GPU tests; skipped where there is none."""
    import torch as t
    if not t.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    return t


@pytest.fixture(scope="module")
def hopper_only(torch):
    """Skips below sm_90 (TMA, wgmma)."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90)")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A private, empty disk cache for one test ($MOYE_CACHE_DIR), with
    moye's in-memory copies of cached entries dropped before and after."""
    from moye.backend.cuda import cache
    monkeypatch.setenv("MOYE_CACHE_DIR", str(tmp_path))
    cache.clear_memory()
    yield tmp_path
    cache.clear_memory()
