"""GPU benchmarks of the seeds' kernels against torch in the same run.

    python benchmarks/kernels.py [--json out.json] [--quick]

- copy and transpose of 8192x8192 float32 (GB/s counting bytes read and
  written) against torch.clone, x.t().contiguous() and the device-to-device
  copy bandwidth measured here;
- the shared-memory matmul and the tiled matmul (TFLOP/s) against torch.mm
  in float32 with TF32 off;
- trace + compile time of the tiled matmul, cold and from the disk cache
  (each in a fresh process), and the host time of moye's kern[1, 32](y, x)
  against a bare cuLaunchKernel of the same kernel and an empty torch op.
"""
import argparse
import json
import os
import shutil
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


def gpu_state(run, seconds=4.0, settle=1.0):
    """Call `run` (which launches work and waits for it) back to back for
    `seconds` while nvidia-smi samples the SM clock, board power and the
    clock-throttle reasons every 100 ms. After the first `settle` seconds
    (the clocks settle): `run`s per second, the medians of the samples, and
    whether the software power cap held the clock down (throttle reason
    0x4) in most of them."""
    query = ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,clocks_throttle_reasons.active",
             "--format=csv,noheader,nounits", "-lms", "100"]
    sampler = subprocess.Popen(query, stdout=subprocess.PIPE, text=True) \
        if shutil.which("nvidia-smi") else None
    t0 = time.perf_counter()
    done = []
    while done[-1:] < [seconds]:
        run()
        done.append(time.perf_counter() - t0)
    lines = []
    if sampler is not None:
        sampler.terminate()
        lines = sampler.communicate()[0].splitlines()[int(settle * 10):]
    samples = []
    for line in lines:
        try:
            clock, power, reasons = (x.strip() for x in line.split(","))
            samples.append((float(clock), float(power), int(reasons, 16)))
        except ValueError:                      # a partial last line
            continue
    steady = [t for t in done if t > settle]
    state = {"runs_per_s": (len(steady) - 1) / (steady[-1] - steady[0])} if len(steady) > 1 else {}
    if samples:
        state.update(sm_clock_mhz=median([c for c, _, _ in samples]),
                     power_w=median([p for _, p, _ in samples]),
                     power_capped=sum(bool(r & 0x4) for _, _, r in samples) > len(samples) / 2)
    return state


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


def alternate(torch, ours, theirs, iters, rounds):
    """cuda_time of `ours` and of `theirs` in alternating rounds (the card's
    clocks drift over a run): the two lists of milliseconds, in round order."""
    t_ours, t_theirs = [], []
    for _ in range(rounds):
        t_ours.append(cuda_time(torch, ours, iters=iters))
        t_theirs.append(cuda_time(torch, theirs, iters=iters))
    return t_ours, t_theirs


def median(times):
    return sorted(times)[len(times) // 2]


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
    """Host time of a launch: moye's kern[1, 32](y, x) on torch tensors (and
    CuPy arrays where CuPy is installed) against a bare cuLaunchKernel of
    the same kernel and an empty torch op, rounds interleaved (see
    launch_overhead.py, which also times moye's driver layer)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import launch_overhead
    bare, workloads = launch_overhead.moye_workloads()
    x = torch.zeros(1, device="cuda")
    workloads["torch x.add_(0)"] = lambda: x.add_(0)
    us = launch_overhead.per_launch_us({"bare": bare, **workloads})
    bare_us = us.pop("bare")
    from moye.backend.cuda import driver
    driver.free(bare.buffer)
    rows = [{"workload": "bare cuLaunchKernel via cuda.bindings (same kernel, prebuilt params)",
             "host_us": bare_us}]
    rows += [{"workload": w, "host_us": t, "vs_bare": t / bare_us} for w, t in us.items()]
    return rows


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
