"""Doctests see the whole public API of moye, as a user's session would."""
import importlib.util

import numpy as np
import pytest

import moye


@pytest.fixture(autouse=True)
def _moye_doctest_namespace(doctest_namespace):
    import builtins
    doctest_namespace.update({n: getattr(moye, n) for n in dir(moye)
                              if not n.startswith("_") and not hasattr(builtins, n)})
    doctest_namespace["np"] = np

@pytest.fixture
def poisoned_ops_outputs(monkeypatch):
    """Every output moye.ops allocates (replay.output: results, statistics,
    partials, in full calls and replayed ones) starts as NaN (integers:
    -2**62), so an element a kernel does not write fails the comparison;
    but those made zero-filled (a kernel counts on their zeros). NumPy
    arrays and torch tensors alike."""
    from moye.ops import replay
    note = replay.output

    def poisoned(out, zeroed=False, remake=None):
        if not zeroed:
            out[...] = float("nan") if "float" in str(out.dtype) else -(2**62)
        return note(out, zeroed, remake)
    monkeypatch.setattr(replay, "output", poisoned)


collect_ignore = ["moye/__main__.py"]
if importlib.util.find_spec("torch") is None:
    # torch is optional: without it, no doctests of the PyTorch ops
    collect_ignore += ["moye/ops/torch_ops.py", "docs/ops.md"]
# test-data generators run by hand with optional tools (CuTe's Python DSL)
collect_ignore_glob = ["tests/*/cute_reference/*"]


def _gpu_available():
    try:
        from moye.backend.cuda import driver
        return driver.device_count() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
