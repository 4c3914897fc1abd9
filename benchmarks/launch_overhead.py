"""Host time of a kernel launch: moye's `kern[grid, block](y, x)` on torch
tensors and on CuPy arrays, and moye's driver layer, against a bare
cuLaunchKernel through cuda.bindings with a prebuilt parameter array.

Targets: each within 1.25x of the bare call (issue 5); moye's launch on
torch tensors at most torch's own `y.add_(x)`, timed in the same rounds
(issue 17).
Each figure is the median over 9 rounds; a round times a batch of 2000
launches of each workload in turn (so drift of the card or the host falls
on all alike); the device is synchronized between batches, outside the
timing. Kernels return at once (grid 1, block 32).

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

try:                    # before moye compiles: see tests/conftest.py
    import torch  # noqa: E402,F401
except ImportError:
    pass
import moye  # noqa: E402
from moye import sync_threads  # noqa: E402
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
BATCH, ROUNDS = 2000, 9


@moye.kernel
def copy1(y, x):
    y[0] = x[0]


@moye.kernel
def trivial(n):
    """The trivial kernel: one runtime int, no work."""
    if n < 0:
        sync_threads()


def per_launch_us(workloads):
    """{name: microseconds per call} for {name: fn}, rounds interleaved."""
    for fn in workloads.values():
        for _ in range(200):
            fn()
    driver.synchronize()
    times = {name: [] for name in workloads}
    for _ in range(ROUNDS):
        for name, fn in workloads.items():
            t0 = time.perf_counter()
            for _ in range(BATCH):
                fn()
            times[name].append((time.perf_counter() - t0) / BATCH * 1e6)
            driver.synchronize()
    return {name: statistics.median(t) for name, t in times.items()}


def bare_launch(function, kinds, values):
    """cuLaunchKernel through cuda.bindings, parameters packed beforehand."""
    from cuda.bindings import driver as cu
    params, holders = driver.pack(kinds, values)
    address, handle = C.addressof(params), function.handle

    def launch():
        cu.cuLaunchKernel(handle, 1, 1, 1, 32, 1, 1, 0, 0, address, 0)
    launch.keep = params, holders
    return launch


def moye_workloads():
    """moye's kern[1, 32](y, x) with torch tensors and CuPy arrays (those
    installed), and the bare launch of the same compiled kernel."""
    from moye.backend.cuda.backend import _ctype
    out = {}
    arrays = {}
    try:
        import torch
        arrays["torch tensors"] = (torch.zeros(1024, device="cuda"),
                                   torch.zeros(1024, device="cuda"))
    except ImportError:
        pass
    try:
        import cupy
        arrays["CuPy arrays"] = (cupy.zeros(1024, cupy.float32), cupy.zeros(1024, cupy.float32))
    except ImportError:
        pass
    if "torch tensors" in arrays:       # issue 17's yardstick: torch's own launch path
        y, x = arrays["torch tensors"]
        out["torch y.add_(x)"] = lambda y=y, x=x: y.add_(x)
    for what, (y, x) in arrays.items():
        copy1[1, 32](y, x)
        out[f"moye copy1[1, 32](y, x), {what}"] = lambda y=y, x=x: copy1[1, 32](y, x)
        f = copy1[1, 32]
        out[f"moye f(y, x), f = copy1[1, 32], {what}"] = lambda f=f, y=y, x=x: f(y, x)
    if not arrays:
        return None, out
    exe = next(iter(copy1._compiled.values()))
    kinds = [_ctype(t) for t in exe.param_types]
    buf = driver.alloc(4096)
    bare = bare_launch(exe.function, kinds, [buf, 1024, buf, 1024])
    bare.buffer = buf
    return bare, out


def trivial_workloads():
    """moye's trivial[1, 32](7) (no arrays) and the bare launch of its kernel."""
    from moye.backend.cuda.backend import _ctype
    trivial[1, 32](7)
    exe = next(iter(trivial._compiled.values()))
    bare = bare_launch(exe.function, [_ctype(t) for t in exe.param_types], [7])
    f = trivial[1, 32]
    return ("moye trivial kernel launch (1 int parameter)", bare,
            {"moye trivial[1, 32](7)": lambda: trivial[1, 32](7),
             "moye f(7), f = trivial[1, 32]": lambda: f(7)})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    args = parser.parse_args()

    m = nvrtc.compile_cuda(SOURCE, ["four", "ten"], driver.device_arch())
    module = driver.load_module(m.cubin)
    four, ten = module.get_function("four"), module.get_function("ten")
    buf = driver.alloc(256)
    kinds4 = (C.c_uint64, C.c_uint64, C.c_int32, C.c_float)
    values4 = [buf, buf, 0, 2.0]
    kinds10 = (C.c_uint64, C.c_int8, C.c_int16, C.c_int32, C.c_int64, C.c_float, C.c_double,
               C.c_uint64, C.c_char * 128, C.c_uint8)
    values10 = [buf, 1, 2, 3, 4, 5.0, 6.0, 7, bytes(128), 9]
    groups = []
    bare_moye, moye_rows = moye_workloads()
    if bare_moye is not None:
        groups.append(("moye kernel launch, two arrays (4 parameters)", bare_moye, moye_rows))
    groups.append(trivial_workloads())
    for name, fn, kinds, values in [("driver layer, 4 parameters", four, kinds4, values4),
                                    ("driver layer, 10 parameters (one 128-byte struct)", ten,
                                     kinds10, values10)]:
        pairs = list(zip(kinds, values))
        launcher = driver.Launcher(fn, kinds)
        grid, block = (1, 1, 1), (32, 1, 1)
        groups.append((name, bare_launch(fn, kinds, values), {
            "driver.launch((ctype, value) pairs)":
                lambda fn=fn, pairs=pairs: driver.launch(fn, grid, block, pairs),
            "driver.Launcher": lambda launcher=launcher, values=values:
                launcher(grid, block, values)}))
    rows = []
    for group, bare, workloads in groups:
        us = per_launch_us({"bare": bare, **workloads})
        for what, t in us.items():
            if what != "bare":
                rows.append({"group": group, "workload": what, "us": t, "bare_us": us["bare"],
                             "ratio": t / us["bare"]})
    driver.free(buf)
    if bare_moye is not None:
        driver.free(bare_moye.buffer)
    device = driver.device_name()
    print(f"device: {device}   (bare = cuda.bindings cuLaunchKernel, prebuilt params, "
          "same kernel, same round)")
    print(f"{'workload':58} {'us':>7} {'bare us':>8} {'ratio':>6}")
    for group in dict.fromkeys(r["group"] for r in rows):
        print(group)
        for r in rows:
            if r["group"] == group:
                print(f"  {r['workload']:56} {r['us']:7.2f} {r['bare_us']:8.2f} "
                      f"{r['ratio']:6.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
