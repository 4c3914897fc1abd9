"""The first call of moye.ops.matmul in a fresh process, twice over one
empty cache folder: the first process compiles the candidate kernels and
times them (moye.autotune), the second reads both the kernels and the
choice from the disk cache (issue 19: "the autotuner's disk cache in
action").

    python benchmarks/matmul_first_call.py [--shape M N K] [--dtype bfloat16] [--json out.json]

Each process prints the seconds of its first call and of its second, the
config the autotuner chose, and the tuning files under $MOYE_CACHE_DIR.
Needs a CUDA GPU and torch.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_process(M, N, K, dtype, device="cuda"):
    """Run in the child: the first and second call's seconds, the chosen config."""
    import torch

    import moye.ops as mops
    from moye.ops import matmul_op
    a = torch.randn(M, K, device=device, dtype=getattr(torch, dtype))
    b = torch.randn(K, N, device=device, dtype=getattr(torch, dtype))
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = []
    for _ in range(2):
        sync()
        t0 = time.perf_counter()
        y = mops.matmul(a, b)
        sync()
        times.append(time.perf_counter() - t0)
    err = float((y.double() - a.double() @ b.double()).abs().max())
    chosen = [list(c.cfg) for c in matmul_op._timed.cache.values()]
    return {"first_s": times[0], "second_s": times[1], "configs": chosen, "max_abs_error": err}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", nargs=3, type=int, default=(2048, 2048, 2048), metavar=("M", "N", "K"))
    p.add_argument("--dtype", choices=("float16", "bfloat16"), default="bfloat16")
    p.add_argument("--json")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help=argparse.SUPPRESS)     # cpu: the tests' run (no tuning there)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(one_process(*args.shape, args.dtype, args.device)))
        return 0
    runs = []
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "MOYE_CACHE_DIR": cache, "PYTHONPATH": os.pathsep.join(
            [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
        for process in ("first", "second"):
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, __file__, "--child", "--shape",
                                  *map(str, args.shape), "--dtype", args.dtype,
                                  "--device", args.device],
                                 env=env, capture_output=True, text=True)
            if out.returncode:
                print(out.stderr, file=sys.stderr)
                return 1
            run = json.loads(out.stdout.strip().splitlines()[-1])
            run.update(process=process, process_s=time.perf_counter() - t0,
                       tuning_files=sorted(str(f.relative_to(cache))
                                           for f in Path(cache, "autotune").rglob("*")
                                           if f.is_file()))
            runs.append(run)
            print(f"{process} process: first call {run['first_s']:.3f} s, second call "
                  f"{run['second_s'] * 1e3:.3f} ms, whole process {run['process_s']:.1f} s, "
                  f"config {run['configs']}, max |error| {run['max_abs_error']:.3g}, tuning "
                  f"files {run['tuning_files']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"shape": list(args.shape), "dtype": args.dtype,
                                               "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
