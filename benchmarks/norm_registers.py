"""The registers and spills of the norms' looping backward kernels, their
weight kept in shared memory or not (moye.ops.rows.backward_plan), from
ptxas through NVRTC for sm_90a: no GPU needed.

    python benchmarks/norm_registers.py
"""
import re

import ml_dtypes
import numpy as np

from moye import ir
from moye.backend.cuda import nvrtc
from moye.compiler.frontend import BACKENDS
from moye.ops import layer_norm_op, rms_norm_op, rows

BF16 = ml_dtypes.bfloat16
# (x's dtype, weight's dtype, N, plan knobs)
CASES = [(BF16, BF16, 65536, {"max_cluster": 8}), (BF16, np.float32, 65536, {"max_cluster": 8}),
         (BF16, np.float32, 262144, {"max_cluster": 16, "elements": 16}),
         (np.float32, np.float32, 262144, {"max_cluster": 16, "elements": 16}),
         (BF16, np.float32, 262144, {"max_cluster": 16, "max_threads": 512})]


def ptxas(kernel, args, threads):
    """'R registers, S bytes spilled' of `kernel` traced with `args` in blocks
    of `threads`, for sm_90a."""
    traced = kernel.trace(*args, block=threads)[0]
    source = BACKENDS["cuda"].source(traced, (threads, 1, 1))
    log = nvrtc.compile_cuda(source, [ir.symbol(traced.name)], "sm_90a",
                             options=("--ptxas-options=-v",)).log or ""
    regs = re.search(r"Used (\d+) registers", log).group(1)
    spills = re.search(r"(\d+) bytes spill stores", log).group(1)
    return f"{regs} registers, {spills} bytes spilled"


def main():
    for dtype, wdtype, n, knobs in CASES:
        p = rows.plan(np.dtype(dtype).name, n, "cuda", **knobs)
        a, w = np.ones((4, n), dtype), np.ones(n, wdtype)
        s, part = np.ones(4, np.float32), np.ones((4, n), np.float32)
        print(f"{np.dtype(dtype).name} x, {np.dtype(wdtype).name} weight, N = {n}: "
              f"{p.cluster} x {p.threads} x {p.vec * p.chunks}")
        for keep in (False, True):
            rms = ptxas(rms_norm_op.rms_norm_backward_registers,
                        (a, part, a, a, w, s, 1e-3, True, p.work, True, keep), p.threads)
            ln = ptxas(layer_norm_op.layer_norm_backward_registers,
                       (a, part, part, a, a, w, s, s, 1e-3, True, True, p.work, True, keep,
                        keep),
                       p.threads)
            print(f"  {'kept' if keep else 'not kept':8}  rms_norm {rms}; layer_norm {ln}")


if __name__ == "__main__":
    main()
