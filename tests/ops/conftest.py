"""Shared by the ops' tests: outputs poisoned, and the plan options that take
each kernel of a row-wise op on small rows (the registers kernels with
their rows staged in shared memory or not)."""
import pytest

from moye.ops import rows

# plan_options per kernel: the defaults (registers, a block or a few lanes per
# row); a small register budget, so that rows of a few thousand take the loop
# kernel; clusters of small blocks, so that they take the cluster path; and
# the registers kernels again, staging their rows in shared memory (in a ring of
# two stages; in clusters of up to 16 blocks, the H100's non-portable size, in
# one stage, where the norms keep their weight and bias in shared memory, and
# in three with layer_norm's backward keeping its dbias sums there too)
PATHS = {
    "registers": {},
    "loop": {"elements": 4, "max_threads": 32},
    "cluster": {"elements": 8, "max_threads": 32, "max_cluster": 8},
    "staged": {"staged": 2},
    "cluster_staged": {"elements": 4, "max_threads": 32, "max_cluster": 16, "staged": True,
                       "keep": True},
    "cluster_sums_staged": {"elements": 4, "max_threads": 32, "max_cluster": 16,
                            "staged": 3, "keep": "sums"},
}


@pytest.fixture(autouse=True)
def poisoned_outputs(poisoned_ops_outputs):
    """Every test here runs with the ops' outputs poisoned (conftest.py)."""


@pytest.fixture(params=list(PATHS))
def path(request):
    """Each kernel path in turn, inside its plan_options; yields its name."""
    with rows.plan_options(**PATHS[request.param]):
        yield request.param
