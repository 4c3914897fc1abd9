"""cp.async from kernels on the CPU backend: cucopyto's choice of width, and
commit groups waited for one at a time (cp_async_wait(n))."""
import numpy as np

import moye
from moye import Layout, MoYeArray, parallelize, tile


@moye.kernel
def two_groups(out, x):
    s = moye.shared_array(x.dtype, Layout((32, 2)))
    t = moye.thread_idx.x
    gx = tile(MoYeArray(x), (32, 2), (0, 0))
    gout = tile(MoYeArray(out), (32, 2), (0, 0))
    mine_s = parallelize(s, Layout((32, 1)), t)         # (1, 2): this thread's row
    mine_x = parallelize(gx, Layout((32, 1)), t)
    mine_out = parallelize(gout, Layout((32, 1)), t)
    moye.cucopyto(mine_s[:, 0], mine_x[:, 0])           # group 0: one 4-byte cp.async
    moye.cp_async_commit()
    moye.cucopyto(mine_s[:, 1], mine_x[:, 1])           # group 1
    moye.cp_async_commit()
    moye.cp_async_wait(1)                               # group 0 has landed, maybe not 1
    mine_out[0, 0] = mine_s[0, 0]
    moye.cp_async_wait(0)
    mine_out[0, 1] = mine_s[0, 1]


def test_cucopyto_of_single_elements_and_groups_waited_one_at_a_time():
    x = np.asfortranarray(np.random.default_rng(3).standard_normal((32, 2)).astype(np.float32))
    out = np.asfortranarray(np.full((32, 2), np.nan, np.float32))
    two_groups[1, 32](out, x)
    np.testing.assert_array_equal(out, x)
    src = two_groups.cuda_source(out, x, block=32)
    assert src.count("cp.async.ca.shared.global [%0], [%1], 4;") == 2
    assert "cp.async.wait_group 1;" in src and "cp.async.wait_group 0;" in src
