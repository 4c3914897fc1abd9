"""Compile times of moye's example kernels beside NVRTC compiling their
hand-written CUDA twins (benchmarks/twins/*.cu), against issue 17's targets.

    python benchmarks/compile_time.py [--arch sm_90a] [--repeat 3] [--only sgemm,gemm]
                                      [--json out.json]

Each figure is the least of `--repeat` fresh Python processes, so nothing
is warm but the operating system's file cache:
- import: `import moye`, its source byte-compiled first (in place, as
  `pip install` leaves it);
- cold: trace + C++ + NVRTC of one specialization for `--arch`, with an
  empty MOYE_CACHE_DIR: CudaBackend.build_specialization, what a first
  launch runs before loading the cubin (no GPU needed). NVRTC's library is
  loaded before the clock starts, here and for the twin;
- twin: NVRTC alone on the kernel's twin, same options and arch, empty cache;
- warm: the same specialization from the disk cache the cold run filled, in
  a new process, from asking for it to having the cubin; the first kernel of
  the process pays for what a process pays once (hashing moye's source for
  the cache key). On a GPU also `kern.compile(...)`, which loads it onto
  the device (its CUDA context made before the clock starts);
- lines: of the generated C++ (without the fixed 16-bit float prelude, a
  header as the twins' #includes are) and of the twin.
Targets (issue 17): cold at most 2x the twin for sgemm (and at most 1,500
lines of C++), 3x for every other kernel; warm at most 10 ms; import 0.3 s.

A kernel whose example module or twin file is missing is skipped: see CASES.
"""
import argparse
import compileall
import importlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TWINS = Path(__file__).resolve().parent / "twins"
sys.path.insert(0, str(ROOT))

IMPORT_TARGET_S = 0.3
WARM_TARGET_MS = 10.0


@dataclass(frozen=True)
class Case:
    """One kernel: its example module (under moye.examples), how to build
    one specialization from it (module -> (kernel, args, threads), with
    NumPy arrays: no GPU needed), its twin's file and its targets."""
    name: str
    module: str
    build: object
    twin: str
    ratio: float = 3.0
    max_lines: int = None


def _colmajor(shape, dtype="float32"):
    import numpy as np
    return np.asfortranarray(np.ones(shape, dtype))


def _copy(m):
    a, b = _colmajor((256, 256)), _colmajor((256, 256))
    return m.copy_kernel, (b, a, m.Layout((32, 32)), m.BLOCK, m.THREADS), 256


def _transpose(m):
    a, b = _colmajor((256, 256)), _colmajor((256, 256))
    return m.transpose_kernel, (b, a, m.SMEM, m.BLOCK, m.THREADS), 256


def _matmul_smem(m):
    A, B, C = _colmajor((256, 64)), _colmajor((128, 64)), _colmajor((256, 128))
    t, tile = m.Layout((32, 8)), m.Layout((128, 8))
    return m.matmul_kernel, (A, tile, t, B, tile, t, C, m.Layout((128, 128)), t), 256


def _tiled_matmul(m):
    A, B, C = _colmajor((256, 64)), _colmajor((128, 64)), _colmajor((256, 128))
    sA, cA, sB, cB, mma = m.make_config(m.moye.Float32)
    return m.matmul_kernel, (A, sA, cA, B, sB, cB, C, mma), 256


def _sgemm(m):
    args, threads = m.make_config()
    A, C = _colmajor((256, 64)), _colmajor((256, 256))
    return m.sgemm_kernel, (A, A, C, *args), threads


def _gemm(m):
    import numpy as np
    args, threads = m.make_config("Float16", "K", "K")
    A, D = np.ones((256, 128), np.float16), np.zeros((256, 256), np.float16)
    return m.gemm_kernel, (A, A, D, D, 1.0, 0.0, *args), threads


def _tma_copy(m):
    import numpy as np
    src, dst = np.zeros((256, 256), np.float16), np.zeros((256, 256), np.float16)
    tile = m.swizzled_tile(64, np.float16)
    return m.tma_copy_kernel, (m.moye.make_tma_copy(m.moye.TMA_LOAD, src, tile),
                               m.moye.make_tma_copy(m.moye.TMA_STORE, dst, tile)), m.THREADS


def _wgmma_matmul(m):
    import numpy as np
    A, B = np.ones((128, 128), np.float16), np.ones((128, 128), np.float16)
    load_a, load_b, mma = m.tiles(A, B, 128)
    return m.wgmma_matmul_kernel, (np.zeros((128, 128), np.float32), load_a, load_b, mma, 2), \
        m.THREADS


def _hopper_gemm(m):
    import numpy as np
    A, B, C = np.zeros((512, 128), np.float16), np.zeros((512, 128), np.float16), \
        np.zeros((512, 512), np.float16)
    return m.hopper_gemm_kernel, m.launch_args(C, A, B, blocks=132, cluster=1)[2], m.THREADS


def _attention(m, dtype):
    import numpy as np
    q = np.ones((2, 128, m.HEAD_DIM), dtype)
    o = np.zeros((2, 128, m.HEAD_DIM), np.float32)
    return m.attention_kernel, (q, q, q, o, 0.18, *m.make_config()), m.THREADS


CASES = [
    Case("sgemm", "sgemm", _sgemm, "sgemm.cu", ratio=2.0, max_lines=1500),
    Case("copy_kernel", "copy_kernel", _copy, "copy_kernel.cu"),
    Case("transpose", "transpose", _transpose, "transpose.cu"),
    Case("matmul_smem", "matmul_smem", _matmul_smem, "matmul_smem.cu"),
    Case("tiled_matmul", "tiled_matmul", _tiled_matmul, "tiled_matmul.cu"),
    Case("gemm", "gemm", _gemm, "gemm.cu"),
    Case("tma_copy", "tma_copy", _tma_copy, "tma_copy.cu"),
    Case("wgmma_matmul", "wgmma_matmul", _wgmma_matmul, "wgmma_matmul.cu"),
    Case("hopper_gemm", "hopper_gemm", _hopper_gemm, "hopper_gemm.cu"),
    Case("attention_simt", "attention_simt", lambda m: _attention(m, "float32"),
         "attention_simt.cu"),
    Case("attention_mma", "attention_mma", lambda m: _attention(m, "float16"),
         "attention_mma.cu"),
]


def twin_symbols(source):
    """The names of a twin's extern "C" kernels."""
    return re.findall(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?'
                      r'(?://[^\n]*\n\s*)?(\w+)\s*\(', source)


# -- what runs in each fresh process --------------------------------------------------
def child(mode, name, arch):
    """One measurement in this (fresh) process, as a dict."""
    clock = time.perf_counter
    if mode == "import":
        t0 = clock()
        import moye  # noqa: F401
        return {"import_s": clock() - t0}
    from moye.backend.cuda import nvrtc
    if mode == "twin":
        source = (TWINS / case_named(name).twin).read_text()
        nvrtc.supported_archs()                     # load NVRTC before the clock
        t0 = clock()
        nvrtc.compile_cuda(source, twin_symbols(source), arch)
        return {"twin_s": clock() - t0, "twin_lines": len(source.splitlines())}
    from moye.backend.cuda.float16 import PRELUDE as FLOAT16_PRELUDE
    from moye.compiler.binder import bind_arguments
    from moye.compiler.frontend import BACKENDS
    case = case_named(name)
    kern, args, threads = case.build(importlib.import_module(f"moye.examples.{case.module}"))
    block = (threads, 1, 1)
    if mode == "launch":                            # warm, onto the GPU
        from moye.backend.cuda import driver
        driver.init()                               # the CUDA context, as a torch user has it
        t0 = clock()
        kern.compile(*args, block=threads, backend="cuda", arch=arch)
        return {"warm_gpu_ms": (clock() - t0) * 1e3}
    if mode == "cold":
        nvrtc.supported_archs()
    traced = {}

    def trace():
        t = clock()
        kernel = kern.trace(*args, block=threads)[0]
        traced["trace_s"] = clock() - t
        return kernel

    t0 = clock()
    binding = bind_arguments(kern.signature, kern.constexpr_names, args)
    built = BACKENDS["cuda"].build_specialization(kern.specialization_text(binding, block),
                                                  trace, block, arch)
    seconds = clock() - t0
    if mode == "warm":
        if built.kernel is not None:
            raise RuntimeError(f"{name}: the warm run traced again: not served from the disk cache")
        return {"warm_ms": seconds * 1e3}
    own = built.source.removeprefix(FLOAT16_PRELUDE)     # a header, as the twins' includes
    return {"cold_s": seconds, **traced, "lines": len(own.splitlines())}


def case_named(name):
    return next(c for c in CASES if c.name == name)


# -- the parent: fresh processes, least of the repeats, the table ---------------------------
def run_child(mode, name, arch, cache):
    env = {**os.environ, "MOYE_CACHE_DIR": cache, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    out = subprocess.run([sys.executable, __file__, "--child", mode, name or "-", "--arch", arch],
                         env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"compile_time: {mode} {name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def least(runs):
    """Per key, the least value over the runs."""
    return {k: min(r[k] for r in runs) for k in runs[0]}


def skip_reason(case):
    if not (ROOT / "moye" / "examples" / f"{case.module}.py").is_file():
        return f"no moye/examples/{case.module}.py"
    if not (TWINS / case.twin).is_file():
        return f"no benchmarks/twins/{case.twin}"
    return None


def measure(case, arch, repeat, gpu):
    runs = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as twin_cache:
            r = run_child("cold", case.name, arch, cache)
            r.update(run_child("warm", case.name, arch, cache))
            if gpu:
                r.update(run_child("launch", case.name, arch, cache))
            r.update(run_child("twin", case.name, arch, twin_cache))
        runs.append(r)
    row = {"kernel": case.name, **least(runs)}
    row["ratio"] = row["cold_s"] / row["twin_s"]
    row["target_ratio"] = case.ratio
    row["max_lines"] = case.max_lines
    row["ok"] = (row["ratio"] <= case.ratio and row["warm_ms"] <= WARM_TARGET_MS
                 and (case.max_lines is None or row["lines"] <= case.max_lines))
    return row


def machine():
    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version()}


def gpu_name():
    try:
        from moye.backend.cuda import driver
        return driver.device_name() if driver.device_count() > 0 else None
    except Exception:
        return None


def print_table(result):
    print(f"compile times for {result['arch']}, least of {result['repeat']} fresh processes; "
          f"{result['machine']['cores']} cores, {result['machine']['cpu']}"
          + (f", {result['gpu']}" if result["gpu"] else ""))
    print(f"{result['nvrtc']}")
    imp = result["import_s"]
    print(f"import moye, byte-compiled: {imp:.3f} s (target {IMPORT_TARGET_S} s: "
          f"{'ok' if imp <= IMPORT_TARGET_S else 'FAIL'})")
    gpu = result["gpu"] is not None
    head = (f"{'kernel':<15} {'moye cold s':>11} {'trace s':>8} {'twin s':>7} {'ratio':>6} "
            f"{'target':>6} {'lines':>13} {'twin':>5} {'warm ms':>8}"
            + (f" {'load ms':>8}" if gpu else "") + "  ok")
    print(head)
    for r in result["kernels"]:
        if "skipped" in r:
            print(f"{r['kernel']:<15} skipped: {r['skipped']}")
            continue
        lines = f"{r['lines']:,}" + ("" if r["max_lines"] is None else f"/{r['max_lines']:,}")
        print(f"{r['kernel']:<15} {r['cold_s']:>11.3f} {r['trace_s']:>8.3f} {r['twin_s']:>7.3f} "
              f"{r['ratio']:>6.1f} {r['target_ratio']:>6.0f} {lines:>13} {r['twin_lines']:>5} "
              f"{r['warm_ms']:>8.1f}" + (f" {r['warm_gpu_ms']:>8.1f}" if gpu else "")
              + f"  {'ok' if r['ok'] else 'FAIL'}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", help="comma-separated kernel names")
    parser.add_argument("--json")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "KERNEL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.arch)))
        return
    wanted = set(args.only.split(",")) if args.only else None
    unknown = (wanted or set()) - {c.name for c in CASES}
    if unknown:
        parser.error(f"unknown kernels {sorted(unknown)}; known: {[c.name for c in CASES]}")
    from moye.backend.cuda import nvrtc
    gpu = gpu_name()
    result = {"arch": args.arch, "repeat": args.repeat, "machine": machine(), "gpu": gpu,
              "nvrtc": nvrtc.describe(),
              "targets": {"ratio": {c.name: c.ratio for c in CASES}, "sgemm_lines": 1500,
                          "warm_ms": WARM_TARGET_MS, "import_s": IMPORT_TARGET_S}}
    # byte-compiled, as `pip install` leaves a package: a process that must compile
    # moye's source first (PYTHONDONTWRITEBYTECODE, a fresh checkout) measures that too
    result["byte_compiled"] = compileall.compile_dir(str(ROOT / "moye"), quiet=1)
    with tempfile.TemporaryDirectory() as cache:
        result["import_s"] = min(run_child("import", None, args.arch, cache)["import_s"]
                                 for _ in range(args.repeat))
    result["kernels"] = []
    for case in CASES:
        if wanted and case.name not in wanted:
            continue
        reason = skip_reason(case)
        result["kernels"].append({"kernel": case.name, "skipped": reason} if reason else
                                 measure(case, args.arch, args.repeat, gpu is not None))
    print_table(result)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
