"""Host time of a kernel launch through moye's driver layer, against a bare
cuLaunchKernel through cuda.bindings with a prebuilt parameter array.

Target: driver.launch and driver.Launcher within 1.25x of the bare call.
Each figure is the median over 7 batches of 2000 launches of a kernel that
returns at once (grid 1, block 32); the device is synchronized between
batches, outside the timing.

    python benchmarks/launch_overhead.py [--json out.json]
"""
import argparse
import ctypes as C
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from moye.backend.cuda import driver, nvrtc  # noqa: E402

SOURCE = r"""
struct __align__(64) Desc { int v[32]; };
extern "C" __global__ void four(float* out, const float* in, int n, float alpha) {
  if (n > 0) out[0] = in[0] * alpha;
}
extern "C" __global__ void ten(float* out, signed char a, short b, int c, long long d, float e,
                               double f, unsigned long long p, Desc desc, unsigned char g) {
  if (c < 0) out[0] = a + b + d + e + f + p + desc.v[0] + g;
}
"""
BATCH, REPEATS = 2000, 7


def per_launch_us(fn):
    for _ in range(200):
        fn()
    driver.synchronize()
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for _ in range(BATCH):
            fn()
        times.append((time.perf_counter() - t0) / BATCH * 1e6)
        driver.synchronize()
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    args = parser.parse_args()
    from cuda.bindings import driver as cu

    m = nvrtc.compile_cuda(SOURCE, ["four", "ten"], driver.device_arch())
    module = driver.load_module(m.cubin)
    four, ten = module.get_function("four"), module.get_function("ten")
    buf = driver.alloc(256)
    desc = bytes(128)
    kinds4 = (C.c_uint64, C.c_uint64, C.c_int32, C.c_float)
    values4 = [buf, buf, 0, 2.0]
    kinds10 = (C.c_uint64, C.c_int8, C.c_int16, C.c_int32, C.c_int64, C.c_float, C.c_double,
               C.c_uint64, C.c_char * 128, C.c_uint8)
    values10 = [buf, 1, 2, 3, 4, 5.0, 6.0, 7, desc, 9]
    rows = []
    for name, fn, kinds, values in [("4 parameters", four, kinds4, values4),
                                    ("10 parameters (one 128-byte struct)", ten, kinds10,
                                     values10)]:
        params, holders = driver.pack(kinds, values)
        addr = C.addressof(params)
        handle = fn.handle
        raw = driver.raw_launch()
        pairs = list(zip(kinds, values))
        launcher = driver.Launcher(fn, kinds)
        grid, block = (1, 1, 1), (32, 1, 1)
        bare = per_launch_us(lambda: cu.cuLaunchKernel(handle, 1, 1, 1, 32, 1, 1, 0, 0, addr, 0))
        figures = {
            "bare ctypes libcuda": per_launch_us(
                lambda: raw(fn.address, 1, 1, 1, 32, 1, 1, 0, 0, addr, None)),
            "driver.launch((ctype, value) pairs)": per_launch_us(
                lambda: driver.launch(fn, grid, block, pairs)),
            "driver.Launcher": per_launch_us(lambda: launcher(grid, block, values)),
        }
        for what, us in figures.items():
            rows.append({"workload": f"{name}: {what}", "us": us, "bare_us": bare,
                         "ratio": us / bare})
    driver.free(buf)
    device = driver.device_name()
    print(f"device: {device}   (bare = cuda.bindings cuLaunchKernel, prebuilt params)")
    print(f"{'workload':62} {'us':>7} {'bare us':>8} {'ratio':>6}")
    for r in rows:
        print(f"{r['workload']:62} {r['us']:7.2f} {r['bare_us']:8.2f} {r['ratio']:6.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
