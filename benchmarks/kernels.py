"""GPU benchmarks of the seeds' kernels against torch in the same run.

    python benchmarks/kernels.py [--json out.json] [--quick]

- copy and transpose of 8192x8192 float32 (GB/s counting bytes read and
  written) against torch.clone, x.t().contiguous() and the device-to-device
  copy bandwidth measured here;
- the shared-memory matmul and the tiled matmul (TFLOP/s) against torch.mm
  in float32 with TF32 off;
- trace + compile time of the tiled matmul, cold and from the disk cache
  (each in a fresh process), and the host overhead of launching a trivial
  kernel against an empty torch op and a bare cuLaunchKernel.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def warm_up(torch, seconds=2.0):
    """Bring the GPU to its working clocks before anything is timed."""
    a = torch.randn(4096, 4096, device="cuda")
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


def cuda_time(torch, fn, iters=50, warmup=5):
    """Median milliseconds of fn() measured with CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    # events are recorded back to back and read after one synchronization, so
    # the host's launch time overlaps the previous run instead of idling the GPU
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(iters)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    times = sorted(start.elapsed_time(end) for start, end in events)
    return times[len(times) // 2]


def bench_copies(torch, n, rounds=3):
    """Each workload's bandwidth against a device-to-device copy timed right
    next to it (the card's state drifts over a run), median of `rounds`."""
    from moye.examples import copy_kernel, transpose
    src = torch.randn(n, n, device="cuda").t()          # column-major, as in the seed
    dst = torch.empty(n, n, device="cuda").t()
    dst_t = torch.empty(n, n, device="cuda").t()
    x = torch.randn(n, n, device="cuda")
    nbytes = 2 * src.numel() * 4

    def d2d():
        return cuda_time(torch, lambda: dst.copy_(src))

    workloads = [
        ("moye copy_kernel (seed 003, 32x32 tiles through smem)",
         lambda: copy_kernel.launch(dst, src), lambda: torch.equal(dst, src)),
        ("moye copy_kernel, padded smem", lambda: copy_kernel.launch(dst, src, padded=True),
         lambda: torch.equal(dst, src)),
        ("moye copy_vec_kernel (16-byte TiledCopy)", lambda: copy_kernel.launch_vec(dst, src),
         lambda: torch.equal(dst, src)),
        ("torch.clone", lambda: src.clone(), lambda: True),
        ("moye transpose (seed 003, (32,32):(1,33) smem)", lambda: transpose.launch(dst_t, src),
         lambda: torch.equal(dst_t, src.t())),
        ("moye transpose, (32,64) tiles", lambda: transpose.launch(dst_t, src, tile=(32, 64)),
         lambda: torch.equal(dst_t, src.t())),
        ("moye transpose, diagonal block order",
         lambda: transpose.launch(dst_t, src, diagonal=True), lambda: torch.equal(dst_t, src.t())),
        ("torch x.t().contiguous()", lambda: x.t().contiguous(), lambda: True),
    ]
    rows = []
    for name, run, check in workloads:
        dst.fill_(float("nan"))
        dst_t.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        assert check(), name
        fractions, rates = [], []
        for _ in range(rounds):
            before = d2d()
            t = cuda_time(torch, run)
            after = d2d()
            fractions.append((before + after) / 2 / t)
            rates.append(nbytes / t / 1e6)
        fractions.sort()
        rates.sort()
        rows.append({"workload": name, "GB/s": rates[len(rates) // 2],
                     "fraction_of_d2d": fractions[len(fractions) // 2],
                     "fraction_range": [fractions[0], fractions[-1]],
                     "size": f"{n}x{n} float32"})
    rows.insert(0, {"workload": "device-to-device copy (torch copy_)", "GB/s": nbytes / d2d() / 1e6,
                    "size": f"{n}x{n} float32"})
    return rows


def bench_matmuls(torch, shapes):
    from moye.examples import matmul_smem, tiled_matmul
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for M, N, K in shapes:
        A = torch.randn(K, M, device="cuda").t()
        B = torch.randn(K, N, device="cuda").t()
        C = torch.empty(N, M, device="cuda").t()
        flops = 2 * M * N * K
        ref_ms = cuda_time(torch, lambda: torch.mm(A, B.t()), iters=10)
        for name, mod in (("moye matmul_smem (seed 002)", matmul_smem),
                          ("moye tiled_matmul (seed 000)", tiled_matmul)):
            C.fill_(float("nan"))
            ms = cuda_time(torch, lambda: mod.launch(A, B, C), iters=10)
            ref = A.double() @ B.double().t()
            err = float((C.double() - ref).norm() / ref.norm())
            assert err < 1e-5, (name, err)
            rows.append({"workload": name, "shape": f"{M}x{N}x{K}", "TFLOP/s": flops / ms / 1e9,
                         "torch_TFLOP/s": flops / ref_ms / 1e9, "ratio": ref_ms / ms,
                         "rel_error": err})
    return rows


_COMPILE_SNIPPET = """
import time, torch
t0 = time.perf_counter()
import moye
from moye.examples import tiled_matmul as tm
A = torch.randn(256, 256, device="cuda").t(); B = torch.randn(256, 256, device="cuda").t()
C = torch.empty(256, 256, device="cuda").t()
t1 = time.perf_counter()
sA, cA, sB, cB, mma = tm.make_config(moye.Float32)
tm.matmul_kernel.compile(A, sA, cA, B, sB, cB, C, mma, block=256)
t2 = time.perf_counter()
print(t2 - t1)
"""


def bench_compile():
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as cache:
        env["MOYE_CACHE_DIR"] = cache
        cold = float(subprocess.check_output([sys.executable, "-c", _COMPILE_SNIPPET], env=env))
        warm = float(subprocess.check_output([sys.executable, "-c", _COMPILE_SNIPPET], env=env))
    return [{"workload": "tiled_matmul trace + compile, cold", "seconds": cold},
            {"workload": "tiled_matmul trace + load, from the disk cache", "seconds": warm}]


def bench_launch(torch):
    import moye

    @moye.kernel
    def nothing(x):
        pass

    x = torch.zeros(1, device="cuda")
    nothing[1, 1](x)
    torch.cuda.synchronize()

    def host_us(fn, n=2000):
        for _ in range(100):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = (time.perf_counter() - t0) / n * 1e6
        torch.cuda.synchronize()
        return t

    launch = nothing[1, 1]
    moye_us = host_us(lambda: launch(x))
    torch_us = host_us(lambda: x.add_(0))
    bare_us = _bare_launch_us(torch, host_us)
    rows = [{"workload": "moye launch of an empty kernel", "host_us": moye_us},
            {"workload": "torch x.add_(0)", "host_us": torch_us}]
    if bare_us is not None:
        rows.append({"workload": "bare cuLaunchKernel via cuda.bindings", "host_us": bare_us})
        rows[0]["vs_bare"] = moye_us / bare_us
    return rows


def _bare_launch_us(torch, host_us):
    """Host time of cuLaunchKernel through cuda.bindings on an empty kernel."""
    try:
        import ctypes

        from cuda.bindings import driver as cu
        from moye.backend.cuda import driver, nvrtc
    except ImportError:
        return None
    src = 'extern "C" __global__ void empty_kernel(float* x) {}'
    mod = driver.load_module(nvrtc.compile_cuda(src, ["empty_kernel"], driver.device_arch()).cubin)
    fn = mod.get_function("empty_kernel")
    x = torch.zeros(1, device="cuda")
    ptr = ctypes.c_uint64(x.data_ptr())
    params = (ctypes.c_void_p * 1)(ctypes.addressof(ptr))
    stream = torch.cuda.current_stream().cuda_stream
    handle = getattr(fn, "handle", fn)
    return host_us(lambda: cu.cuLaunchKernel(handle, 1, 1, 1, 1, 1, 1, 0, stream,
                                             ctypes.addressof(params), 0))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    args = parser.parse_args()
    import torch
    device = torch.cuda.get_device_name()
    n = 4096 if args.quick else 8192
    shapes = [(2048, 2048, 256)] if args.quick else [(2048, 2048, 256), (4096, 4096, 4096),
                                                     (8192, 8192, 8192)]
    results = {"device": device}
    warm_up(torch)
    results["copies"] = bench_copies(torch, n)
    results["matmuls"] = bench_matmuls(torch, shapes)
    results["compile"] = bench_compile()
    results["launch"] = bench_launch(torch)
    print(f"device: {device}")
    for section, rows in results.items():
        if section == "device":
            continue
        print(f"\n{section}")
        for r in rows:
            print("  " + ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                   for k, v in r.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
