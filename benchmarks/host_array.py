"""Host array speed: moye's copyto against NumPy's own strided copy.

`copyto(dst, src)` on host arrays is a gather from src's layout and a
scatter into dst's; NumPy copying between two strided views of the same
buffers (`d[...] = s.T` style) is the reference, timed in the same run. Each
workload moves 1M float64 elements (8 MB) between differently laid-out
arrays. "index path" is moye with strided views turned off (every access
through an offset array), the path that swizzled layouts still take.

copyto passes the elements through a 1-D intermediate in colex order
(engine.read, then engine.write). Where both layouts run fastest along a
mode other than mode 0 (two row-major arrays), that is two transposing
passes where NumPy makes one straight one: those workloads are far from
NumPy until copyto can copy view to view.

    python benchmarks/host_array.py [--json out.json] [--repeat 20]
"""
import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from moye.array import MoYeArray, copyto, engine  # noqa: E402
from moye.layout import Layout  # noqa: E402

N = 1024


def transpose_case(rng):
    """Column-major (1024,1024) into row-major: NumPy `d[...] = s.T`."""
    s, d = rng.random(N * N), np.full(N * N, np.nan)
    src, dst = MoYeArray(s, Layout((N, N), (1, N))), MoYeArray(d, Layout((N, N), (N, 1)))
    s2, d2 = s.reshape(N, N), d.reshape(N, N)

    def reference():
        d2[...] = s2.T
    return dst, src, reference, d


def row_major_case(rng):
    """Row-major (1024,1024) into row-major, NumPy's default order: `d[...] = s`."""
    s, d = rng.random((N, N)), np.full((N, N), np.nan)
    src, dst = MoYeArray(s), MoYeArray(d)

    def reference():
        d[...] = s
    return dst, src, reference, d


def strided_source_case(rng):
    """Every other column of a row-major (1024,2048) into a compact array:
    NumPy `d[...] = big[:, ::2]`; MoYeArray(big[:, ::2]) keeps NumPy's strides."""
    big, d = rng.random((N, 2 * N)), np.full((N, N), np.nan)
    src, dst = MoYeArray(big[:, ::2]), MoYeArray(d)
    view = big[:, ::2]

    def reference():
        d[...] = view
    return dst, src, reference, d


def tiled_case(rng):
    """Column-major (1024,1024) into 32x32 tiles stored one after another,
    layout ((32,32),(32,32)):((1,1024),(32,32768)): NumPy copies one 4-D view
    into another."""
    s, d = rng.random(N * N), np.full(N * N, np.nan)
    src = MoYeArray(s, Layout((N, N)))
    dst = MoYeArray(d, Layout(((32, 32), (32, 32)), ((1, 1024), (32, 32768))))
    s4, d4 = s.reshape(32, 32, 32, 32), d.reshape(32, 32, 32, 32)
    s4t = s4.transpose(0, 2, 1, 3)  # s4 is [j1,j0,i1,i0], d4 is [j1,i1,j0,i0]

    def reference():
        d4[...] = s4t
    return dst, src, reference, d


WORKLOADS = {
    "(1024,1024) col-major -> row-major": transpose_case,
    "(1024,1024) row-major -> row-major": row_major_case,
    "(1024,2048)[:, ::2] -> compact": strided_source_case,
    "(1024,1024) -> 32x32 tiles": tiled_case,
}


def time_it(fn, repeat):
    fn()  # warm: caches, page faults
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the raw results here")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    rows = []
    for name, make in WORKLOADS.items():
        dst, src, reference, out = make(rng)
        reference()
        expected = out.copy()
        out[...] = np.nan
        copyto(dst, src)
        if not np.array_equal(out, expected):
            sys.exit(f"{name}: moye's copy differs from NumPy's")
        theirs = time_it(reference, args.repeat)
        ours = time_it(lambda: copyto(dst, src), args.repeat)
        threshold, engine._VIEW_THRESHOLD = engine._VIEW_THRESHOLD, float("inf")
        try:
            indexed = time_it(lambda: copyto(dst, src), args.repeat)
        finally:
            engine._VIEW_THRESHOLD = threshold
        rows.append({"workload": name, "elements": N * N, "moye_s": ours,
                     "moye_index_path_s": indexed, "numpy_s": theirs, "ratio": ours / theirs,
                     "ratio_index_path": indexed / theirs})

    print(f"{'copyto, 1M float64':38} {'moye':>9} {'NumPy':>9} {'ratio':>7} "
          f"{'index path':>11} {'ratio':>7}")
    for r in rows:
        print(f"{r['workload']:38} {r['moye_s'] * 1e3:7.2f}ms {r['numpy_s'] * 1e3:7.2f}ms "
              f"{r['ratio']:6.2f}x {r['moye_index_path_s'] * 1e3:9.2f}ms "
              f"{r['ratio_index_path']:6.2f}x")
    machine = (f"{platform.processor() or platform.machine()}, "
               f"Python {platform.python_version()}, NumPy {np.__version__}")
    print(f"machine: {machine}")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
