"""The peak rate of one tensor-core instruction on this GPU: warps issuing
independent mma.sync from registers, no memory traffic. The ceiling any
mma.sync GEMM can reach, to set beside cuBLAS (which uses wgmma on Hopper).

    python benchmarks/mma_peak.py [--json out.json]

Two figures: the burst rate (short launches, every chain multiplying the same
constant operands: the tensor cores barely switch, the clock stays at its
maximum) and the sustained rate with random normal operands (each chain its
own, as a GEMM's are) over several seconds, with the SM clock and board power
nvidia-smi saw meanwhile: where the board's power cap holds the clock down,
that rate, not the burst, is what a GEMM on random data can approach.
"""
import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from kernels import gpu_state  # noqa: E402

from moye.backend.cuda import driver, nvrtc  # noqa: E402

# each warp runs CHAINS independent accumulator chains of m16n8k16 (f32 += f16 * f16)
SOURCE = r"""
extern "C" __global__ void __launch_bounds__(THREADS) mma_loop(const unsigned* data, float* out,
                                                              int iters) {
  // each chain's A (4 registers) and B (2) fragments: from `data` (random), or constants
  unsigned a[CHAINS][4], b[CHAINS][2];
  const unsigned* mine = data + (blockIdx.x * THREADS + threadIdx.x) * CHAINS * 6;
#pragma unroll
  for (int c = 0; c < CHAINS; ++c) {
#pragma unroll
    for (int j = 0; j < 4; ++j) a[c][j] = RANDOM ? mine[c * 6 + j] : threadIdx.x + j;
#pragma unroll
    for (int j = 0; j < 2; ++j) b[c][j] = RANDOM ? mine[c * 6 + 4 + j] : threadIdx.x * (3 + 2 * j);
  }
  float acc[CHAINS][4] = {};
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) {
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.DTYPE.DTYPE.f32 "
                   "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                   : "+f"(acc[c][0]), "+f"(acc[c][1]), "+f"(acc[c][2]), "+f"(acc[c][3])
                   : "r"(a[c][0]), "r"(a[c][1]), "r"(a[c][2]), "r"(a[c][3]),
                     "r"(b[c][0]), "r"(b[c][1]));
    }
  }
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < CHAINS; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  if (s == 1.2345f) out[0] = s;     // keeps the loop; never true for these inputs
}
"""


class MmaLoop:
    """The loop kernel for one data type and shape, launched on every
    multiprocessor `blocks_per_sm` times, with constant or random operands."""

    def __init__(self, dtype, chains, threads, blocks_per_sm, random=False):
        src = (SOURCE.replace("THREADS", str(threads)).replace("CHAINS", str(chains))
               .replace("DTYPE", dtype).replace("RANDOM", "true" if random else "false"))
        m = nvrtc.compile_cuda(src, ["mma_loop"], driver.device_arch())
        self.fn = driver.load_module(m.cubin).get_function("mma_loop")
        self.grid, self.threads = driver.multiprocessor_count() * blocks_per_sm, threads
        self.flop_per_iter = 2.0 * 16 * 8 * 16 * chains * (threads // 32) * self.grid
        words = self.grid * threads * chains * 6
        values = np.random.default_rng(0).standard_normal(2 * words)
        halves = values.astype(np.float16 if dtype == "f16" else ml_dtypes.bfloat16)
        self.data = driver.alloc(4 * words)
        driver.copy_to_device(self.data, halves.view(np.uint32))
        self.out = driver.alloc(4)

    def run(self, iters):
        """One launch of `iters` iterations, waited for; its seconds."""
        t0 = time.perf_counter()
        driver.launch(self.fn, self.grid, self.threads,
                      [(ctypes.c_uint64, self.data), (ctypes.c_uint64, self.out),
                       (ctypes.c_int32, iters)])
        driver.synchronize()
        return time.perf_counter() - t0

    def free(self):
        driver.free(self.data)
        driver.free(self.out)


def measure(dtype, chains, threads, blocks_per_sm, iters=4096, reps=5):
    """TFLOP/s of short launches with constant operands (the burst rate)."""
    loop = MmaLoop(dtype, chains, threads, blocks_per_sm)
    loop.run(iters)
    t = statistics.median(loop.run(iters) for _ in range(reps))
    loop.free()
    return loop.flop_per_iter * iters / t / 1e12


def sustained(dtype, random, seconds=4.0, chains=8, threads=256, blocks_per_sm=2):
    """TFLOP/s over `seconds` of back-to-back launches of about 50 ms, and
    the clock and power meanwhile (kernels.gpu_state)."""
    loop = MmaLoop(dtype, chains, threads, blocks_per_sm, random)
    iters = max(1, int(4096 * 0.05 / loop.run(4096)))
    state = gpu_state(lambda: loop.run(iters), seconds)
    loop.free()
    return {"tflops": loop.flop_per_iter * iters * state.pop("runs_per_s") / 1e12, **state}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    for dtype in ("f16", "bf16"):
        best = 0.0
        for chains, threads, per_sm in ((4, 128, 4), (8, 128, 4), (8, 256, 2), (16, 128, 2),
                                        (8, 512, 1)):
            tflops = measure(dtype, chains, threads, per_sm)
            best = max(best, tflops)
            rows.append({"dtype": dtype, "chains": chains, "threads": threads,
                         "blocks_per_sm": per_sm, "tflops": tflops})
            print(f"mma.sync m16n8k16 f32.{dtype}: {chains:2} chains/warp, {threads} threads, "
                  f"{per_sm} blocks/SM: {tflops:7.1f} TFLOP/s", flush=True)
        print(f"peak mma.sync {dtype} (burst, constant operands): {best:.1f} TFLOP/s")
        for random in (False, True):
            row = {"dtype": dtype, "sustained": True, "operands": "random normal" if random
                   else "constant", **sustained(dtype, random)}
            rows.append(row)
            print(f"sustained mma.sync {dtype}, {row['operands']} operands: "
                  f"{row['tflops']:.1f} TFLOP/s at {row.get('sm_clock_mhz', 0):.0f} MHz, "
                  f"{row.get('power_w', 0):.0f} W, power-capped: {row.get('power_capped')}",
                  flush=True)
    device = driver.device_name()
    print(f"device: {device}")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
