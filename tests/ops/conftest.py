"""Shared by the ops' tests: outputs poisoned, and the plan options that take
each kernel of a row-wise op on small rows."""
import pytest

from moye.ops import rows

# plan_options per kernel: the defaults (registers, a block or a few lanes per
# row); a small register budget, so that rows of a few thousand take the loop
# kernel; and clusters of small blocks, so that they take the cluster path
PATHS = {
    "registers": {},
    "loop": {"elements": 4, "max_threads": 32},
    "cluster": {"elements": 8, "max_threads": 32, "max_cluster": 8},
}


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    """Every output the ops allocate starts as NaN, so an element a kernel
    does not write fails the comparison."""
    allocate = rows.empty

    def poisoned(like, shape, dtype=None):
        out = allocate(like, shape, dtype)
        out[...] = float("nan") if "float" in str(out.dtype) else -(2**62)
        return out
    monkeypatch.setattr(rows, "empty", poisoned)


@pytest.fixture(params=list(PATHS))
def path(request):
    """Each kernel path in turn, inside its plan_options; yields its name."""
    with rows.plan_options(**PATHS[request.param]):
        yield request.param
