"""The PTX approximations on a GPU: within the PTX ISA's bounds of float64
NumPy (the bounds the CPU backend emulates), by name and by fast_math."""
import numpy as np
import pytest

from ..kernel.test_fastmath_cpu import (N, approximations, check_bounds, check_ftz, fast, ftz_inputs,
                                        ftz_powers, inputs, ulps)

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("kern", [approximations, fast], ids=["by_name", "fast_math"])
def test_approximations_within_their_bounds(torch, kern):
    x, y = inputs(11)
    out = torch.full((6, N), float("nan"), device="cuda", dtype=torch.float32)   # poison
    kern[N // 128, 128](out, torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda())
    torch.cuda.synchronize()
    got = out.cpu().numpy()
    if kern is fast:            # 1.0 / y is div.approx there (2 ulp), rcp.approx by name
        assert ulps(got[3], 1 / y.astype(np.float64)).max() <= 2
        got[3] = 1 / y.astype(np.float64)
    check_bounds(got, x, y)


def test_exp2_ftz_flushes_subnormals(torch):
    """ex2.approx.ftz.f32 on the GPU: the bound where 2^x is normal, 0 where
    it is not, as the CPU backend gives it."""
    x = ftz_inputs(8)
    out = torch.full((2, N), float("nan"), device="cuda", dtype=torch.float32)   # poison
    ftz_powers[N // 128, 128](out, torch.from_numpy(x).cuda())
    torch.cuda.synchronize()
    check_ftz(out.cpu().numpy(), x)
