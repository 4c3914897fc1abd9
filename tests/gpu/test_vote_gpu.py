"""moye.ballot, vote_any, vote_all and match_any on a GPU: every lane's
result against NumPy, for whole and partial warps."""
import numpy as np
import pytest

from ..kernel.kernels_for_tests import vote
from ..kernel.test_vote_cpu import ballot_reference, vote_reference, votes_and_matches

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


@pytest.mark.parametrize("block", [32, 96, 48])
def test_votes_and_match_any(torch, block):
    rng = np.random.default_rng(block)
    grid = 5
    n = grid * block
    x = rng.standard_normal(n).astype(np.float32)
    keys = rng.integers(0, 5, n).astype(np.int64) << 33
    anys = torch.full((n,), -7, device="cuda", dtype=torch.int32)
    alls = torch.full((n,), -7, device="cuda", dtype=torch.int32)
    matches = torch.full((n,), 0x7EADBEEF, device="cuda", dtype=torch.int32)
    votes_and_matches[grid, block](anys, alls, matches, torch.from_numpy(x).cuda(),
                                   torch.from_numpy(keys).cuda())
    torch.cuda.synchronize()
    want = vote_reference(x, keys, block)
    np.testing.assert_array_equal(anys.cpu().numpy(), want[0])
    np.testing.assert_array_equal(alls.cpu().numpy(), want[1])
    np.testing.assert_array_equal(matches.cpu().numpy().view(np.uint32), want[2])
