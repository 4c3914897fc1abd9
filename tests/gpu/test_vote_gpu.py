"""moye.ballot on a GPU: every lane's mask against NumPy, for whole and
partial warps."""
import numpy as np
import pytest

from ..kernel.kernels_for_tests import vote
from ..kernel.test_vote_cpu import ballot_reference

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("block", [32, 64, 96, 48])
def test_ballot(torch, block):
    grid = 5
    x = torch.randn(grid * block, device="cuda", dtype=torch.float32)
    out = torch.full((grid * block,), 0x7EADBEEF, device="cuda", dtype=torch.int32)   # poison
    vote[grid, block](out, x)           # the UInt32 masks stored as Int32: the same bits
    torch.cuda.synchronize()
    got = out.cpu().numpy().view(np.uint32)
    np.testing.assert_array_equal(got, ballot_reference(x.cpu().numpy(), block))
