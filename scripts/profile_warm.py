"""Profile the warm start (disk cache) and the fast launch path on a GPU."""
import cProfile
import pstats
import sys
import time

import torch

import moye
from moye.examples import tiled_matmul as tm

A = torch.randn(256, 256, device="cuda").t()
B = torch.randn(256, 256, device="cuda").t()
C = torch.empty(256, 256, device="cuda").t()
sA, cA, sB, cB, mma = tm.make_config(moye.Float32)
t0 = time.perf_counter()
pr = cProfile.Profile()
pr.enable()
tm.matmul_kernel.compile(A, sA, cA, B, sB, cB, C, mma, block=256)
pr.disable()
print("warm compile", time.perf_counter() - t0)
pstats.Stats(pr).sort_stats("cumulative").print_stats(18)


@moye.kernel
def nothing(x):
    pass


x = torch.zeros(1, device="cuda")
launch = nothing[1, 1]
launch(x)
torch.cuda.synchronize()
pr = cProfile.Profile()
pr.enable()
for _ in range(20000):
    launch(x)
pr.disable()
torch.cuda.synchronize()
pstats.Stats(pr).sort_stats("tottime").print_stats(12)
