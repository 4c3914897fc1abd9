"""The PTX approximations on a GPU: within the PTX ISA's bounds of float64
NumPy (the bounds the CPU backend emulates), by name and by fast_math."""
import ml_dtypes
import numpy as np
import pytest

import moye

from ..kernel.test_fastmath_cpu import (N, approximations, check_bounds, check_pairs, fast, inputs,
                                        pair_inputs, pair_powers, ulps)

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


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_exp2_of_a_pair_within_its_bound(torch, dtype):
    """ex2.approx.f16x2 / ftz.bf16x2 on the GPU, within the bounds the CPU
    backend emulates, special values included."""
    x = pair_inputs(9)
    out = torch.full((N,), float("nan"), device="cuda", dtype=getattr(torch, dtype))  # poison
    pair_powers[N // 128, 64](out, torch.from_numpy(x).cuda(),
                              moye.BFloat16 if dtype == "bfloat16" else moye.Float16)
    torch.cuda.synchronize()
    bits = out.cpu().view(torch.int16).numpy()
    check_pairs(bits.view(ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16), x, dtype)
