"""The peak rate of one tensor-core instruction on this GPU: warps issuing
independent mma.sync (or, for comparison, nothing else) from registers, no
memory traffic. The ceiling any mma.sync GEMM can reach, to set beside
cuBLAS (which uses wgmma on Hopper).

    python benchmarks/mma_peak.py [--json out.json]
"""
import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from moye.backend.cuda import driver, nvrtc  # noqa: E402

# each warp runs CHAINS independent accumulator chains of m16n8k16 (f32 += f16 * f16)
SOURCE = r"""
extern "C" __global__ void __launch_bounds__(THREADS) mma_loop(float* out, int iters) {
  unsigned a[4] = {threadIdx.x, threadIdx.x + 1, threadIdx.x + 2, threadIdx.x + 3};
  unsigned b[2] = {threadIdx.x * 3, threadIdx.x * 5};
  float acc[CHAINS][4] = {};
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) {
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.DTYPE.DTYPE.f32 "
                   "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                   : "+f"(acc[c][0]), "+f"(acc[c][1]), "+f"(acc[c][2]), "+f"(acc[c][3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
  }
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < CHAINS; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  if (s == 1.2345f) out[0] = s;     // keeps the loop; never true for these inputs
}
"""


def measure(dtype, chains, threads, blocks_per_sm, iters=4096, reps=5):
    src = (SOURCE.replace("THREADS", str(threads)).replace("CHAINS", str(chains))
           .replace("DTYPE", dtype))
    m = nvrtc.compile_cuda(src, ["mma_loop"], driver.device_arch())
    fn = driver.load_module(m.cubin).get_function("mma_loop")
    sms = _sm_count()
    grid = sms * blocks_per_sm
    out = driver.alloc(4)
    args = [(ctypes.c_uint64, out), (ctypes.c_int32, iters)]
    driver.launch(fn, grid, threads, args)
    driver.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        driver.launch(fn, grid, threads, args)
        driver.synchronize()
        times.append(time.perf_counter() - t0)
    driver.free(out)
    t = statistics.median(times)
    flop = 2.0 * 16 * 8 * 16 * chains * iters * (threads // 32) * grid
    return flop / t / 1e12


def _sm_count():
    cu = driver._cu()
    driver.init()
    err, dev = cu.cuCtxGetDevice()
    err, n = cu.cuDeviceGetAttribute(
        cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)
    return n


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
        print(f"peak mma.sync {dtype}: {best:.1f} TFLOP/s")
    device = driver.device_name()
    print(f"device: {device}")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
