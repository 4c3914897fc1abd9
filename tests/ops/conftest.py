"""Shared by the ops' tests: outputs poisoned, and the plan options that take
each kernel of a row-wise op on small rows (and, for the norms' backwards,
with their inputs staged in shared memory or not)."""
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
def poisoned_outputs(poisoned_ops_outputs):
    """Every test here runs with the ops' outputs poisoned (conftest.py)."""


# the norms' backwards also stage their inputs in shared memory, or not
NORM_PATHS = PATHS | {"staged": {"staged": True},
                      "cluster_staged": {**PATHS["cluster"], "staged": True}}


@pytest.fixture(params=list(PATHS))
def path(request):
    """Each kernel path in turn, inside its plan_options; yields its name."""
    with rows.plan_options(**PATHS[request.param]):
        yield request.param


@pytest.fixture(params=list(NORM_PATHS))
def norm_path(request):
    """path, with the norms' staged backwards as two more paths."""
    with rows.plan_options(**NORM_PATHS[request.param]):
        yield request.param
