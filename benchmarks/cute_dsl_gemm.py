"""CuTe DSL's own Hopper persistent dense GEMM example (NVIDIA's
nvidia-cutlass-dsl, examples/python/CuTeDSL/cute/hopper/kernel/dense_gemm/
dense_gemm_persistent.py) against cuBLAS (torch.mm) on the same tensors, in
one run: the reference point for moye's Hopper GEMM (benchmarks/hopper_gemm.py).

    python benchmarks/cute_dsl_gemm.py --json out.json [--example PATH]
        [--shapes 4096x4096x4096,...] [--dtypes float16,bfloat16]
        [--configs 128x256:2x1,128x256:1x1,128x128:1x1]
    python benchmarks/cute_dsl_gemm.py --compile-only ...   (no GPU: compiles
        for sm_90a from fake tensors and reports the compile times)

The DSL and the example are not in this repository: scripts/fetch_cute_dsl.sh
packs them (gitignored) and scripts/gpu_check.sh's stage 'cutedsl' unpacks and
runs this. The example is loaded from its file; only its kernel class
(HopperWgmmaGemmPersistentKernel) is used, with cute.compile, as the example's
own run() does, but on our tensors instead of the ones run() makes.

C = A @ B.T with A (M, K) and B (N, K) row-major (K-major), C (M, N) row-major,
fp16 or bf16 in and out, fp32 accumulation, random normal data; the example's
(M, K, L=1) views of them are the layouts its run() makes (L stride M*K), with
dynamic layouts (is_dynamic_layout=True, assumed_align=16, as run()), so one
compile per (tile, cluster, dtype) serves every shape. Configurations
(tile M x N : cluster M x N): 128x256:2x1 (the one measured at 1.15x cuBLAS),
128x256:1x1 (the example's documented command line) and 128x128:1x1 (its
argparse defaults); swizzle size 1, raster along M (its defaults).

Every shape is checked first (C poisoned with NaN, ||C - ref|| / ||ref||
against a float64 product, and against torch.mm's own result), then the
example's kernel and torch.mm are timed alternately with CUDA events on the
current stream (5 rounds of median-of-N, N >= 20, after warm-up; L2 not
flushed), as benchmarks/hopper_gemm.py and benchmarks/matmuls.py do. The
compile time is cute.compile's wall time, cold (a fresh DSL cache dir).

Note: the example's own dtype check (is_valid_dtypes, called by its run())
lists Float16 but not BFloat16; its kernel and the DSL's sm90 MMA helper take
BFloat16, so bf16 runs here; the JSON records the example's verdict.
"""
import argparse
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024), (16384, 4096, 4096)]
CONFIGS = [((128, 256), (2, 1)), ((128, 256), (1, 1)), ((128, 128), (1, 1))]
TOL = {"float16": 2e-3, "bfloat16": 1e-2}
DEFAULT_EXAMPLE = ROOT / ".cute_dsl2" / "examples" / "dense_gemm_persistent.py"
MIN_ITERS = 20


def parse_shapes(text):
    """'4096x4096x4096,8192x8192x1024' -> [(4096, 4096, 4096), (8192, 8192, 1024)]"""
    shapes = [tuple(int(x) for x in s.split("x")) for s in text.split(",") if s]
    if not shapes or any(len(s) != 3 for s in shapes):
        raise argparse.ArgumentTypeError(f"shapes {text!r}: expected MxNxK,...")
    return shapes


def parse_configs(text):
    """'128x256:2x1,128x128:1x1' -> [((128, 256), (2, 1)), ((128, 128), (1, 1))]"""
    out = []
    for item in text.split(","):
        tile, cluster = item.split(":")
        out.append((tuple(int(x) for x in tile.split("x")),
                    tuple(int(x) for x in cluster.split("x"))))
    return out


def label(config):
    (tm, tn), (cm, cn) = config
    return f"tile {tm}x{tn} cluster {cm}x{cn}"


def load_example(path):
    spec = importlib.util.spec_from_file_location("cute_dsl_dense_gemm_persistent", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def source_info(path):
    path = Path(path)
    info = {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    src = path.parent / "SOURCE.txt"
    if src.exists():
        info["source"] = src.read_text()
    return info


def dsl_version():
    try:
        from importlib.metadata import version
        return version("nvidia-cutlass-dsl-libs-base")
    except Exception:
        import cutlass
        return getattr(cutlass, "__version__", "unknown")


def make_kernel(ex, config):
    import cutlass
    tile, cluster = config
    # the example's positional order: acc_dtype, tile_shape_mn, cluster_shape_mn,
    # swizzle_size, raster_along_m (its argparse defaults: 1, along_m)
    return ex.HopperWgmmaGemmPersistentKernel(cutlass.Float32, tile, cluster, 1, True)


def mkl(t):
    """(rows, cols) row-major -> the example's (rows, cols, L=1) view, L stride rows*cols."""
    return t.unsqueeze(0).permute(1, 2, 0)


def cute_tensor(t):
    """As the example's cutlass.torch.cute_tensor_like(..., is_dynamic_layout=True,
    assumed_align=16), on our tensor's memory."""
    from cutlass.cute.runtime import from_dlpack
    return from_dlpack(t, assumed_align=16).mark_layout_dynamic(leading_dim=1)


def compile_only(args, ex):
    """No GPU: compile every (config, dtype) for sm_90a from fake tensors."""
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor
    rows = []
    dt = {"float16": cutlass.Float16, "bfloat16": cutlass.BFloat16}
    for config in args.configs:
        for dtype in args.dtypes:
            def fake():
                shape = (cute.sym_int64(), cute.sym_int64(), 1)
                stride = (cute.sym_int64(divisibility=8), 1, cute.sym_int64(divisibility=8))
                return make_fake_tensor(dt[dtype], shape, stride, assumed_align=16)
            clusters = 132 // (config[1][0] * config[1][1])
            t0 = time.perf_counter()
            cute.compile(make_kernel(ex, config), fake(), fake(), fake(), clusters,
                         cuda.CUstream(0))
            rows.append({"config": label(config), "dtype": dtype,
                         "compile_s": time.perf_counter() - t0})
            print(f"compiled {label(config)} {dtype} for sm_90a in {rows[-1]['compile_s']:.2f} s",
                  flush=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="write the results here")
    p.add_argument("--example", default=os.environ.get("CUTE_DSL_EXAMPLE", str(DEFAULT_EXAMPLE)),
                   help="dense_gemm_persistent.py (default: %(default)s)")
    p.add_argument("--shapes", type=parse_shapes, default=SHAPES, help="MxNxK,...")
    p.add_argument("--dtypes", default="float16,bfloat16")
    p.add_argument("--configs", type=parse_configs, default=CONFIGS,
                   help="TMxTN:CMxCN,... (default: "
                        + ",".join(f"{t[0]}x{t[1]}:{c[0]}x{c[1]}" for t, c in CONFIGS) + ")")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--moye", action="store_true",
                   help="also time moye's hopper_gemm on the same tensors, in the same run")
    p.add_argument("--compile-only", action="store_true",
                   help="no GPU: compile for sm_90a from fake tensors, time it, stop")
    args = p.parse_args(argv)
    args.dtypes = args.dtypes.split(",")

    # a fresh, private compile cache: the compile times are cold ones
    cache = tempfile.mkdtemp(prefix="cute_dsl_cache_")
    os.environ.setdefault("CUTE_DSL_CACHE_DIR", cache)
    if args.compile_only:
        os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    else:
        # torch before the DSL, which appends its base_dsl folder (holding a torch.py)
        # to sys.path
        importlib.import_module("torch")
    t0 = time.perf_counter()
    importlib.import_module("cutlass.cute")         # the DSL, its compiler library
    import_s = time.perf_counter() - t0
    ex = load_example(args.example)
    results = {"dsl": "nvidia-cutlass-dsl " + dsl_version(), "example": source_info(args.example),
               "import_s": import_s, "swizzle_size": 1, "raster": "along_m",
               "acc_dtype": "float32", "layouts": "A (M,K) K-major, B (N,K) K-major, C (M,N) "
                                                  "N-major; L=1; dynamic layouts",
               "date": time.strftime("%Y-%m-%d")}
    print(f"{results['dsl']}, example {args.example}, import {import_s:.2f} s", flush=True)
    if args.compile_only:
        results["compile"] = compile_only(args, ex)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
        return 0

    try:
        return run_gpu(args, ex, results)
    except BaseException as e:          # keep what was measured: the JSON is still written
        traceback.print_exc()
        results["fatal"] = f"{type(e).__name__}: {e}"
        return 1
    finally:
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(results, indent=1))


def run_gpu(args, ex, results):
    """The check and the timings on the GPU; fills `results`, returns the exit status."""
    import torch
    import cuda.bindings.driver as cuda
    from kernels import alternate, median, warm_up
    import cutlass
    import cutlass.cute as cute
    import cutlass.utils

    torch_dt = {"float16": torch.float16, "bfloat16": torch.bfloat16}
    cute_dt = {"float16": cutlass.Float16, "bfloat16": cutlass.BFloat16}
    device = torch.cuda.get_device_name()
    results.update(device=device, torch=torch.__version__, cuda=torch.version.cuda,
                   capability=list(torch.cuda.get_device_capability()),
                   multiprocessors=torch.cuda.get_device_properties(0).multi_processor_count)
    results["example_dtype_check"] = {
        d: bool(ex.HopperWgmmaGemmPersistentKernel.is_valid_dtypes(
            cute_dt[d], cute_dt[d], cutlass.Float32, cute_dt[d], "k", "k")) for d in args.dtypes}
    print(f"device: {device}; the example's own dtype check: {results['example_dtype_check']}",
          flush=True)
    warm_up(torch)
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    hw = cutlass.utils.HardwareInfo()
    rows, compiles, failed = [], [], []
    results.update(rows=rows, compile=compiles, failed=failed)     # filled as they come
    compiled = {}                                   # (config, dtype) -> compiled function
    print(f"{'config':>26} {'dtype':>9} {'shape':>18} {'rel err':>9} {'vs torch':>9} "
          f"{'CuTe TF/s':>10} {'cuBLAS TF/s':>12} {'ratio':>6}", flush=True)
    for dtype in args.dtypes:
        dt = torch_dt[dtype]
        for shape in args.shapes:
            M, N, K = shape
            torch.manual_seed(0)
            A = torch.randn(M, K, device="cuda").to(dt)
            B = torch.randn(N, K, device="cuda").to(dt)
            C = torch.empty(M, N, device="cuda", dtype=dt)
            out = torch.empty(M, N, device="cuda", dtype=dt)
            ref = A.double() @ B.double().T
            ref_norm = ref.norm().item()
            torch.mm(A, B.T, out=out)
            torch.cuda.synchronize()
            cublas_err = ((out.double() - ref).norm() / ref_norm).item()
            a, b, c = cute_tensor(mkl(A)), cute_tensor(mkl(B)), cute_tensor(mkl(C))
            flop = 2.0 * M * N * K
            iters = max(MIN_ITERS, min(200, int(2e13 / flop)))
            for config in args.configs:
                key = (config, dtype)
                try:
                    fresh = key not in compiled
                    if fresh:
                        clusters = hw.get_max_active_clusters(config[1][0] * config[1][1])
                        t0 = time.perf_counter()
                        compiled[key] = cute.compile(make_kernel(ex, config), a, b, c,
                                                     clusters, stream)
                        compiles.append({"config": label(config), "dtype": dtype,
                                         "compile_s": time.perf_counter() - t0,
                                         "max_active_clusters": clusters})
                        print(f"compiled {label(config)} {dtype} in "
                              f"{compiles[-1]['compile_s']:.2f} s "
                              f"(max active clusters {clusters})", flush=True)
                    fn = compiled[key]
                    ours = lambda: fn(a, b, c, stream)                      # noqa: E731
                    theirs = lambda: torch.mm(A, B.T, out=out)              # noqa: E731
                    C.fill_(float("nan"))
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    ours()
                    torch.cuda.synchronize()
                    if fresh:       # the first call: module load, launch, run
                        compiles[-1]["first_call_s"] = time.perf_counter() - t0
                    err = ((C.double() - ref).norm() / ref_norm).item()
                    err_torch = ((C.double() - out.double()).norm()
                                 / out.double().norm()).item()
                    t_ours, t_theirs = alternate(torch, ours, theirs, iters, args.rounds)
                    ms_ours, ms_theirs = median(t_ours), median(t_theirs)
                except Exception as e:
                    traceback.print_exc()
                    what = f"{label(config)} {dtype} {M}x{N}x{K}: {type(e).__name__}: {e}"
                    print(f"FAILED {what}", flush=True)
                    failed.append(what)
                    continue
                good = err < TOL[dtype]
                row = {"config": label(config), "tile_mn": list(config[0]),
                       "cluster_mn": list(config[1]), "dtype": dtype, "M": M, "N": N, "K": K,
                       "rel_error": err, "rel_error_vs_torch": err_torch,
                       "cublas_rel_error": cublas_err, "tolerance": TOL[dtype], "ok": good,
                       "cute_ms": ms_ours, "cublas_ms": ms_theirs,
                       "cute_tflops": flop / ms_ours / 1e9,
                       "cublas_tflops": flop / ms_theirs / 1e9,
                       "ratio": ms_theirs / ms_ours, "iters": iters, "rounds": args.rounds,
                       "cute_rounds_ms": t_ours, "cublas_rounds_ms": t_theirs}
                rows.append(row)
                if not good:
                    failed.append(f"{label(config)} {dtype} {M}x{N}x{K}: relative error "
                                  f"{err:.2e} over {TOL[dtype]:.0e}")
                print(f"{label(config):>26} {dtype:>9} {f'{M}x{N}x{K}':>18} {err:9.2e} "
                      f"{err_torch:9.2e} {row['cute_tflops']:10.1f} "
                      f"{row['cublas_tflops']:12.1f} {row['ratio']:6.3f}"
                      + ("" if good else "  WRONG"), flush=True)
            if args.moye:
                rows.append(time_moye(torch, A, B, ref, ref_norm, out, iters,
                                      args.rounds, dtype))
                r = rows[-1]
                if not r["ok"]:
                    failed.append(f"moye {dtype} {M}x{N}x{K}: relative error {r['rel_error']:.2e}")
                print(f"{r['config']:>26} {dtype:>9} {f'{M}x{N}x{K}':>18} {r['rel_error']:9.2e} "
                      f"{'':>9} {r['moye_tflops']:10.1f} {r['cublas_tflops']:12.1f} "
                      f"{r['ratio']:6.3f}", flush=True)
            ours = theirs = fn = None
            A = B = C = out = ref = a = b = c = None
            torch.cuda.empty_cache()
    for f in failed:
        print(f"FAILED {f}")
    return 1 if failed else 0


def time_moye(torch, A, B, ref, ref_norm, out, iters, rounds, dtype):
    """moye's hopper_gemm on the same tensors, timed alternately with torch.mm."""
    from moye.examples import hopper_gemm as hg
    from kernels import alternate, median
    M, N, K = A.shape[0], B.shape[0], A.shape[1]
    C = torch.full((M, N), float("nan"), device="cuda", dtype=A.dtype)
    ours = hg.launch_function(*hg.launch_args(C, A, B))
    ours()
    torch.cuda.synchronize()
    err = ((C.double() - ref).norm() / ref_norm).item()
    times = alternate(torch, ours, lambda: torch.mm(A, B.T, out=out), iters, rounds)
    ms_ours, ms_theirs = map(median, times)
    flop = 2.0 * M * N * K
    return {"config": f"moye hopper_gemm {hg.BM}x{hg.BN}:{hg.CLUSTER}x1", "dtype": dtype,
            "M": M, "N": N, "K": K, "rel_error": err, "ok": err < TOL[dtype],
            "moye_ms": ms_ours, "cublas_ms": ms_theirs, "moye_tflops": flop / ms_ours / 1e9,
            "cublas_tflops": flop / ms_theirs / 1e9, "ratio": ms_theirs / ms_ours}


if __name__ == "__main__":
    sys.exit(main())
