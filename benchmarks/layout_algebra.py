"""Layout algebra speed: moye against pycute on the same workload.

Tracing a kernel runs the layout algebra thousands of times, so its speed is
the speed of compilation. The workload is what partitioning a 128x128x8
SIMT GEMM over 256 threads asks of the algebra (block tiles of A, B and C;
each thread's copy and compute partitions of global and shared memory), and
a batch of random divides and products. Both libraries run the same calls;
pycute (`pip install --no-deps nvidia-cutlass`) is used only for timing.

    python benchmarks/layout_algebra.py [--json out.json]
"""
import argparse
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def gemm_partitioning(ns, M=4096, N=4096, K=4096):
    """Layouts a 128x128x8 GEMM with 256 threads computes, for every thread."""
    L, comp, zdiv = ns.Layout, ns.composition, ns.zipped_divide
    bM, bN, bK = 128, 128, 8
    mA, mB, mC = L((M, K), (1, M)), L((N, K), (1, N)), L((M, N), (1, M))
    sA, sB = L((bM, bK), (1, bM + 1)), L((bN, bK), (1, bN + 1))
    thr = L((32, 8), (1, 32))
    out = []
    for bx, by in ((0, 0), (5, 7)):
        # block tiles: zipped_divide then fix the block coordinate
        gA = zdiv(mA, (L(bM, 1), L(bK, 1)))
        gB = zdiv(mB, (L(bN, 1), L(bK, 1)))
        gC = zdiv(mC, (L(bM, 1), L(bN, 1)))
        tileA = comp(gA, (None, L(1, 1)))
        out += [gA, gB, gC, tileA]
        for t in range(256):
            m, n = t % 32, t // 32
            for tile in (L((bM, bK), (1, M)), sA, L((bN, bK), (1, N)), sB):
                # this thread's share of a copy: divide by the thread shape, pick (m, n)
                part = zdiv(tile, (L(32, 1), L(8, 1)))
                out.append(part)
                out.append(part((m, n), 0))
            # compute partition: rows of A by the thread's m, rows of B by n
            cA = zdiv(sA, (L(32, 1), L(1, 1)))
            cB = zdiv(sB, (L(8, 1), L(1, 1)))
            cC = zdiv(L((bM, bN), (1, M)), (L(32, 1), L(8, 1)))
            out += [cA, cB, cC, cC((m, n), 0)]
    return out


def random_cases(seed=0, n=300):
    """Random (layout, tiler) pairs: compact layouts with permuted or padded strides."""
    rng = random.Random(seed)
    cases = []
    while len(cases) < n:
        shape = tuple(rng.choice((2, 4, 8)) for _ in range(rng.randint(1, 3)))
        order = list(range(len(shape)))
        rng.shuffle(order)
        stride, acc = [0] * len(shape), 1
        for i in order:
            stride[i] = acc
            acc *= shape[i] * rng.choice((1, 1, 2))
        tiler = tuple(rng.choice([d for d in (1, 2, 4) if s % d == 0]) for s in shape)
        block = (rng.choice((2, 4)), rng.choice((1, 2)))
        cases.append((shape, tuple(stride), tiler, block))
    return cases


def random_algebra(ns, cases):
    L = ns.Layout
    out = []
    for shape, stride, tiler, block in cases:
        a = L(shape, stride)
        t = tuple(L(d, 1) for d in tiler)
        b = L(block, (1, block[0]))
        out.append(ns.logical_divide(a, t))
        out.append(ns.zipped_divide(a, t))
        out.append(ns.logical_product(b, a))
        out.append(ns.composition(a, L(ns.size(a) // 2, 2)))
        out.append(ns.complement(a, 2 * ns.cosize(a)))
        out.append(ns.coalesce(a))
        out.append(ns.right_inverse(a))
    return out


def time_it(fn, repeat, before=lambda: None):
    samples = []
    for _ in range(repeat):
        before()
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the raw results here")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import moye
    try:
        import pycute
    except ImportError:
        sys.exit("pycute is missing: pip install --no-deps nvidia-cutlass")

    cases = random_cases()
    workloads = {
        "gemm 128x128x8 partitioning, 256 threads": lambda ns: gemm_partitioning(ns),
        f"random divides/products ({len(cases)} cases x 7 ops)": lambda ns: random_algebra(ns, cases),
    }
    rows = []
    for name, work in workloads.items():
        theirs = time_it(lambda: work(pycute), args.repeat)
        # cold: moye's memo of static results is emptied before every run
        cold = time_it(lambda: work(moye), args.repeat, before=moye.clear_cache)
        warm = time_it(lambda: work(moye), args.repeat)
        rows.append({"workload": name, "moye_s": cold, "moye_warm_s": warm, "pycute_s": theirs,
                     "speedup": theirs / cold, "speedup_warm": theirs / warm})
    total_m = sum(r["moye_s"] for r in rows)
    total_p = sum(r["pycute_s"] for r in rows)
    total_w = sum(r["moye_warm_s"] for r in rows)
    rows.append({"workload": "total", "moye_s": total_m, "moye_warm_s": total_w,
                 "pycute_s": total_p, "speedup": total_p / total_m,
                 "speedup_warm": total_p / total_w})

    print(f"{'workload':50} {'moye cold':>10} {'moye warm':>10} {'pycute':>10} "
          f"{'cold x':>7} {'warm x':>7}")
    for r in rows:
        print(f"{r['workload']:50} {r['moye_s'] * 1e3:8.1f}ms {r['moye_warm_s'] * 1e3:8.1f}ms "
              f"{r['pycute_s'] * 1e3:8.1f}ms {r['speedup']:6.2f}x {r['speedup_warm']:6.2f}x")
    machine = f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"
    print(f"machine: {machine}")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
