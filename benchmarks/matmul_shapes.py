"""moye.ops.matmul and moye.ops.linear against cuBLAS (through torch) on the
shapes of issue 19, in one run on the same tensors, host time included
(issue 19, outcome 5).

    python benchmarks/matmul_shapes.py [--json out.json] [--quick] [--dtypes float16 bfloat16]
        [--layouts nn nt] [--ms M ...] [--nks N,K ...] [--no-fused] [--fused-ms M ...]
        [--activation gelu_tanh] [--no-cube] [--rounds 3] [--no-host | --host-only]
    python benchmarks/matmul_shapes.py --merge a.json b.json [--json all.json]

Shapes: M in 1, 16, 64, 128, 256, 1024, 4096, 16384 times (N, K) in (4096, 4096),
(14336, 4096), (4096, 14336), (8192, 8192), (28672, 8192), (8192, 28672), in float16
and bfloat16 (96 shapes), and the 8192^3 GEMM (--no-cube leaves it out). Random
normal data, a (M, K) row-major; the weight w (N, K) and b = w^T made contiguous
(K, N) hold the same values, so both layouts compute the same product:

  nn  moye.ops.matmul(a, b)                        vs  torch.mm(a, b)
  nt  moye.ops.linear(a, w)                        vs  F.linear(a, w)

Fused rows (--no-fused skips them; --fused-ms keeps them to some M), with a
bias (N,) and a residual (M, N) in the input's type, act = --activation:

  nn  moye.ops.matmul(a, b, bias=, activation=, residual=)
          vs  act(torch.addmm(bias, a, b)) + residual   (torch unfused)
          and torch.addmm(bias, a, b) alone             (cuBLAS's bias epilogue)
  nt  moye.ops.matmul(a, w.T, bias=, activation=, residual=)  (linear takes no residual)
          vs  act(F.linear(a, w, bias)) + residual  and  F.linear(a, w, bias)

Every result is checked before anything is timed, every element against the
float64 product of the same inputs: |y - ref| <= eps |ref| + 1e-5 (|a| @ |b|)
+ 1e-6, eps 2**-10 for float16, 2**-7 for bfloat16 ("error" is the worst
|y - ref| over that bound: at most 1 passes). moye is checked twice: written
into a NaN-filled out= (matmul(a, w.T, out=) for nt), and the timed call's own
result after the allocator's free memory is NaN-filled. A moye result off the
bound, or a moye call that raises, is reported, never timed, and makes the
script exit 1; torch's results are checked the same way, their errors recorded
(torch's unfused epilogue rounds in between) but timed regardless.

TFLOP/s count 2 M N K. Times: CUDA events around back-to-back public calls
(kernels.cuda_time: the host's time counts wherever it exceeds the GPU's),
iterations sized to about 25 ms a figure (5 to 200), the contenders alternated
in --rounds rounds (at least 7 where every contender's call takes under
0.1 ms: those move most between runs), the median. Then the host time of
each moye call and of torch's on an 8 x 1024 x 1024 float16 problem: the
mean of 200 calls enqueued
while the GPU is held busy (torch.cuda._sleep, so no call waits for the GPU;
target: 10 us), and of 200 back-to-back calls synchronized once at the end
(the GPU's time where it is longer), the two alternated in 3 rounds, the
median. The report ends with issue 19's targets: the geometric
mean of moye/cuBLAS over the plain rows >= 1.0 (per layout and overall), no row
below 0.9, fused moye over torch unfused >= 1.1, 8192^3 >= 1.0. The JSON is
rewritten after every shape, so a run cut short keeps what it measured; runs
split by dtype or M (the GPU machine allows 10 minutes a call) join with --merge.
"""
import argparse
import json
import math
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rowwise import Timer, poison_free_memory  # noqa: E402

MS = (1, 16, 64, 128, 256, 1024, 4096, 16384)
NKS = ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192), (28672, 8192), (8192, 28672))
CUBE = (8192, 8192, 8192)
DTYPES = ("float16", "bfloat16")
LAYOUTS = ("nn", "nt")
KINDS = ("plain", "fused")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")
EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}
QUICK = {"dtypes": ["bfloat16"], "ms": [1, 128, 4096], "nks": [(4096, 4096), (8192, 8192)]}
# the contenders of each kind: moye first, then its peers (the ratio's denominator first)
CONTENDERS = {"plain": ("moye", "cublas"), "fused": ("moye", "torch", "addmm")}
TARGETS = {"geomean": 1.0, "floor": 0.9, "fused": 1.1, "cube": 1.0}
PEAK_FLOPS, PEAK_BYTES, FIGURE_S = 600e12, 3e12, 25e-3    # to size the iterations
SHORT_MS, SHORT_ROUNDS = 0.1, 7          # rows whose calls take under 0.1 ms get 7 rounds
HOST_SHAPE = (8, 1024, 1024)                               # M, N, K, float16
HOST_CALLS = 200              # 2 launches each stay within the launch queue
HOST_SLEEP_CYCLES = 200_000_000   # about 0.1 s of GPU: longer than HOST_CALLS calls' host time
HOST_ROUNDS = 3
HOST_TARGET_US = 10.0


# -- arguments -------------------------------------------------------------------------------

def positive_ints(text, names, example):
    """The positive ints of 'a,b,...' (or 'axb...'), as many as `names`
    ('N,K') has, else an argparse error naming them."""
    parts = text.replace("x", ",").split(",")
    if len(parts) != len(names.split(",")) or \
            not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r}: expected {names}, e.g. {example}")
    return tuple(int(p) for p in parts)


def _nk(text):
    """(N, K) from 'N,K' (or 'NxK')."""
    return positive_ints(text, "N,K", "14336,4096")


def mnk(text):
    """(M, N, K) from 'M,N,K' (or 'MxNxK'), the shapes argument of the
    matmul benchmarks that take any."""
    return positive_ints(text, "M,N,K", "1,8192,8192")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()),
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 2)[2])
    p.add_argument("--json", help="write the raw results here")
    p.add_argument("--quick", action="store_true",
                   help="a one-minute subset: bfloat16, M = 1, 128, 4096, (N, K) = (4096, 4096) "
                        "and (8192, 8192), and 8192^3 (each unless given)")
    p.add_argument("--dtypes", nargs="+", choices=DTYPES)
    p.add_argument("--layouts", nargs="+", choices=LAYOUTS)
    p.add_argument("--ms", nargs="+", type=int, metavar="M", help=f"of {', '.join(map(str, MS))}")
    p.add_argument("--nks", nargs="+", type=_nk, metavar="N,K",
                   help="of " + " ".join(f"{n},{k}" for n, k in NKS))
    p.add_argument("--fused", action=argparse.BooleanOptionalAction, default=True,
                   help="also the fused bias + activation + residual rows (default: on)")
    p.add_argument("--fused-ms", nargs="+", type=int, metavar="M",
                   help="the fused rows only at these M (default: every M run)")
    p.add_argument("--activation", choices=ACTIVATIONS, default="gelu_tanh")
    p.add_argument("--cube", action=argparse.BooleanOptionalAction, default=True,
                   help="also the 8192^3 GEMM, plain, per dtype and layout (default: on)")
    p.add_argument("--rounds", type=int, default=3, help="alternating timing rounds (default 3)")
    p.add_argument("--no-host", action="store_true", help="skip the host-time measurement")
    p.add_argument("--host-only", action="store_true",
                   help="measure the host times alone (no shapes)")
    p.add_argument("--merge", nargs="+", metavar="JSON",
                   help="run nothing: merge these runs' results (--json writes them), print "
                        "the report")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help=argparse.SUPPRESS)     # cpu: the tests' smoke run, any M, N, K
    a = p.parse_args(argv)
    if a.host_only and a.no_host:
        p.error("--host-only and --no-host exclude each other")
    quick = QUICK if a.quick else {}
    a.dtypes = a.dtypes or quick.get("dtypes", list(DTYPES))
    a.layouts = a.layouts or list(LAYOUTS)
    a.ms = a.ms or quick.get("ms", list(MS))
    a.nks = a.nks or quick.get("nks", list(NKS))
    a.fused_ms = a.fused_ms or list(a.ms)
    for m in a.ms:
        if m < 1 or a.device == "cuda" and m not in MS:
            p.error(f"--ms: M = {m} is not one of {', '.join(map(str, MS))}")
    for n, k in a.nks:
        if a.device == "cuda" and (n, k) not in NKS:
            p.error(f"--nks: {n},{k} is not one of " + " ".join(f"{x},{y}" for x, y in NKS))
    for m in a.fused_ms:
        if m not in a.ms:
            p.error(f"--fused-ms: M = {m} is not among --ms")
    if a.rounds < 1:
        p.error("--rounds must be at least 1")
    return a


def plan(args):
    """The shapes to run, in order: [(dtype, M, N, K, kinds)], the 8192^3
    cube last in each dtype (plain only)."""
    if args.host_only:
        return []
    shapes = []
    for dtype in args.dtypes:
        for n, k in args.nks:
            for m in args.ms:
                fused = args.fused and m in args.fused_ms
                shapes.append((dtype, m, n, k, KINDS if fused else KINDS[:1]))
        if args.cube:
            shapes.append((dtype, *CUBE, KINDS[:1]))
    return shapes


def iterations(M, N, K, itemsize=2):
    """Calls per figure: about FIGURE_S at PEAK_FLOPS, or at PEAK_BYTES for the
    operands and output where that takes longer (5 to 200).
        >>> iterations(4096, 4096, 4096), iterations(16384, 28672, 8192), iterations(1, 4096, 4096)
        (109, 5, 200)
    """
    seconds = max(2 * M * N * K / PEAK_FLOPS, (M * K + N * K + M * N) * itemsize / PEAK_BYTES)
    return max(5, min(200, int(FIGURE_S / seconds)))


# -- the check -------------------------------------------------------------------------------

def activation_fn(torch, name):
    """The activation as a torch function (any dtype)."""
    F = torch.nn.functional
    return {None: lambda x: x, "relu": torch.relu, "gelu": F.gelu, "silu": F.silu,
            "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}[name]


def excess(torch, y, prod, scale, eps, epilogue=None, chunk=2 ** 25):
    """(worst |y - ref| / bound, elements over the bound) with ref =
    epilogue(rows, prod[rows]) (prod itself where no epilogue) and bound =
    eps |ref| + 1e-5 scale + 1e-6; NaN counts as infinitely far. Works in
    blocks of rows of about `chunk` elements."""
    if tuple(y.shape) != tuple(prod.shape):
        raise AssertionError(f"the output has shape {tuple(y.shape)}, expected "
                             f"{tuple(prod.shape)}")
    worst, over = 0.0, 0
    step = max(1, chunk // max(1, prod.shape[1]))
    for r in range(0, prod.shape[0], step):
        rows = slice(r, r + step)
        ref = prod[rows] if epilogue is None else epilogue(rows, prod[rows])
        gap = (y[rows].double() - ref).abs()
        bound = eps * ref.abs() + 1e-5 * scale[rows] + 1e-6
        over += int((~(gap <= bound)).sum())
        worst = max(worst, float(torch.nan_to_num(gap / bound, nan=math.inf).max()))
    return worst, over


def operands(torch, dtype, M, N, K, fused, device):
    """a (M, K), w (N, K), b = w^T contiguous, and for fused rows bias (N,) and
    residual (M, N): random normal, from a generator seeded by the shape."""
    g = torch.Generator(device=device).manual_seed(M * 1_000_003 + N * 1009 + K)
    dt = getattr(torch, dtype)
    t = {"a": torch.randn(M, K, generator=g, device=device, dtype=dt),
         "w": torch.randn(N, K, generator=g, device=device, dtype=dt)}
    t["b"] = t["w"].T.contiguous()
    if fused:
        t["bias"] = torch.randn(N, generator=g, device=device, dtype=dt)
        t["residual"] = torch.randn(M, N, generator=g, device=device, dtype=dt)
    return t


def calls(torch, layout, kind, t, activation):
    """({contender: fn()} of one row, the moye call with out= that is checked)."""
    import moye.ops as mops
    F = torch.nn.functional
    a, w, b = t["a"], t["w"], t["b"]
    act = activation_fn(torch, activation)
    if kind == "plain":
        if layout == "nn":
            return ({"moye": lambda: mops.matmul(a, b), "cublas": lambda: torch.mm(a, b)},
                    lambda out: mops.matmul(a, b, out=out))
        return ({"moye": lambda: mops.linear(a, w), "cublas": lambda: F.linear(a, w)},
                lambda out: mops.matmul(a, w.T, out=out))
    bias, res = t["bias"], t["residual"]
    rhs = b if layout == "nn" else w.T
    epilogue = dict(bias=bias, activation=activation, residual=res)
    addmm = (lambda: torch.addmm(bias, a, b)) if layout == "nn" else (lambda: F.linear(a, w, bias))
    return ({"moye": lambda: mops.matmul(a, rhs, **epilogue),
             "torch": lambda: act(addmm()) + res, "addmm": addmm},
            lambda out: mops.matmul(a, rhs, out=out, **epilogue))


# -- one shape -------------------------------------------------------------------------------

def run_shape(torch, args, dtype, M, N, K, kinds):
    """The rows of one shape (each layout and kind): every result checked
    against one float64 product, then each row's contenders timed in rounds."""
    dev, eps = args.device, EPS[dtype]
    t = operands(torch, dtype, M, N, K, "fused" in kinds, dev)
    a64, w64 = t["a"].double(), t["w"].double()
    prod, scale = a64 @ w64.T, a64.abs() @ w64.abs().T
    del a64, w64
    act = activation_fn(torch, args.activation)
    refs = {"plain": None}
    if "fused" in kinds:
        bias64 = t["bias"].double()
        refs["fused"] = lambda r, p: act(p + bias64) + t["residual"][r].double()
        refs["addmm"] = lambda r, p: p + bias64
    timer = Timer(torch, dev)
    iters = iterations(M, N, K) if dev == "cuda" else 2
    rows = []
    for layout in args.layouts:
        for kind in kinds:
            row = {"layout": layout, "dtype": dtype, "M": M, "N": N, "K": K, "kind": kind,
                   "flop": 2 * M * N * K, "iters": iters, "ms": {}, "TFLOP/s": {}, "error": {},
                   "over": {}, "n/a": {}}
            fns, into = calls(torch, layout, kind, t, args.activation)
            tuned = set(tuned_configs())
            check_row(torch, row, fns, into, lambda y, who: excess(
                torch, y, prod, scale, eps, refs["addmm" if who == "addmm" else kind]), dev)
            row["configs"] = [list(c) for k, c in tuned_configs().items() if k not in tuned]
            times = {who: [] for who in fns if who not in row["n/a"]}
            for _ in range(rounds_for(args.rounds, times, timer, fns, iters)):
                for who in times:
                    times[who].append(timer(fns[who], iters))
            for who, ts in times.items():
                row["ms"][who] = sorted(ts)[len(ts) // 2]
                row["TFLOP/s"][who] = row["flop"] / row["ms"][who] / 1e9
            rows.append(row)
    return rows


def tuned_configs():
    """{tuning slot: gemm_sm90 config (bM, bN, stages, group, splits)} that
    moye.ops.matmul's autotuner chose so far in this process, timed or read
    from its disk cache (a row records the ones its calls added)."""
    from moye.ops import matmul_op
    return {slot: tuple(c.cfg) for slot, c in matmul_op._timed.cache.items()}


def rounds_for(rounds, times, timer, fns, iters):
    """The timing rounds of a row: `rounds`, or SHORT_ROUNDS where a first
    round (kept in `times`) finds every contender's call under SHORT_MS
    (calls that short move most between runs: the host's share)."""
    for who in times:
        times[who].append(timer(fns[who], iters))
    short = times and all(ts[0] < SHORT_MS for ts in times.values())
    return max(rounds, SHORT_ROUNDS if short else 0) - 1


def check_row(torch, row, fns, into, measure, device):
    """Check moye's call into a NaN-filled out=, then each contender's own
    result with the allocator's free memory NaN-filled: row["error"] and
    row["over"] get measure(y, who); a moye result off the bound or a call
    that raises goes to row["n/a"] (and moye then is not timed)."""
    M, N = row["M"], row["N"]
    dtype = getattr(torch, row["dtype"])
    written = None
    for who, fn in [("moye out=", None)] + list(fns.items()):
        try:
            if fn is None:
                y = torch.full((M, N), math.nan, dtype=dtype, device=device)
                into(y)
                written = y
            else:
                poison_free_memory(torch, device, [((M, N), dtype)])
                y = fn()
            row["error"][who], row["over"][who] = measure(y, who)
        except Exception as e:
            row["n/a"][who] = f"raised {type(e).__name__}: {str(e)[:300]}"
            if who.startswith("moye"):
                traceback.print_exc()
            continue
        if who == "moye" and written is not None:
            row["moye_bits_equal_out"] = bool(torch.equal(y, written))
        if row["over"][who] and who.startswith("moye"):
            row["n/a"][who] = (f"WRONG: {row['over'][who]} of {M * N} elements off the bound, "
                               f"worst {row['error'][who]:.3g}x it")
        del y
    if any(w.startswith("moye") for w in row["n/a"]):
        row["n/a"].setdefault("moye", "not timed: its result with out= was wrong or raised")


def failed(row):
    """Whether moye gave a wrong result or raised in this row."""
    return any(w.startswith("moye") and why.startswith(("WRONG", "raised"))
               for w, why in row["n/a"].items())


def ratio(row, peer=None):
    """moye's speed over its peer's: cuBLAS for plain rows, torch unfused for
    fused ones (or `peer`); None where either has no time."""
    peer = peer or CONTENDERS[row["kind"]][1]
    ms = row["ms"]
    return ms[peer] / ms["moye"] if ms.get("moye") and ms.get(peer) else None


# -- host time -------------------------------------------------------------------------------

def host_times(torch, args):
    """µs per call of moye's matmul, linear and fused matmul and of torch's
    peers on a small float16 problem, two ways, each the median of
    HOST_ROUNDS rounds alternating the two:
    - "host": the host's own time, HOST_CALLS calls enqueued while the GPU
      is held busy (torch.cuda._sleep), so that no call waits for it;
    - "per call": HOST_CALLS back-to-back calls synchronized once at the
      end (the GPU's time wherever it exceeds the host's)."""
    import moye.ops as mops
    F = torch.nn.functional
    M, N, K = HOST_SHAPE
    t = operands(torch, "float16", M, N, K, True, args.device)
    a, w, b, bias = t["a"], t["w"], t["b"], t["bias"]
    kind, act = args.activation, activation_fn(torch, args.activation)
    pairs = {"matmul": (lambda: mops.matmul(a, b), lambda: torch.mm(a, b)),
             "linear": (lambda: mops.linear(a, w), lambda: F.linear(a, w)),
             f"matmul + bias + {kind}": (lambda: mops.matmul(a, b, bias=bias, activation=kind),
                                         lambda: act(torch.addmm(bias, a, b)))}
    cuda = args.device == "cuda"
    n = HOST_CALLS if cuda else 3
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    hold = (lambda: torch.cuda._sleep(HOST_SLEEP_CYCLES)) if cuda else (lambda: None)
    rows = []
    for call, (moye_fn, torch_fn) in pairs.items():
        entry = {"call": call, "shape": list(HOST_SHAPE), "dtype": "float16", "calls": n}
        fns = {"moye": moye_fn, "torch": torch_fn}
        times = {}
        for who, fn in fns.items():
            try:
                for _ in range(min(20, n)):
                    fn()
                times[who] = {"host": [], "per_call": []}
            except Exception as e:
                entry[f"{who}_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        for _ in range(HOST_ROUNDS):
            for who in times:
                for way in ("host", "per_call"):
                    sync()
                    if way == "host":
                        hold()
                    t0 = time.perf_counter()
                    for _ in range(n):
                        fns[who]()
                    if way == "per_call":
                        sync()
                    times[who][way].append((time.perf_counter() - t0) / n * 1e6)
        for who in fns:
            for way, suffix in (("host", "us"), ("per_call", "per_call_us")):
                ts = times[who][way] if who in times else None
                entry[f"{who}_{suffix}"] = sorted(ts)[len(ts) // 2] if ts else None
        sync()
        rows.append(entry)
    return rows


# -- report ----------------------------------------------------------------------------------

def _fmt(v, spec):
    return "n/a" if v is None else format(v, spec)


def geomean(values):
    """The geometric mean of positive numbers (None for none)."""
    values = list(values)
    return math.exp(math.fsum(map(math.log, values)) / len(values)) if values else None


def is_cube(row):
    return (row["M"], row["N"], row["K"]) == CUBE


def shape_of(row):
    return f"{row['layout']} {row['dtype']} {row['M']}x{row['N']}x{row['K']}"


def table(rows, kind):
    """The rows of one kind as a Markdown table: TFLOP/s and moye's ratios."""
    who = CONTENDERS[kind]
    head = (["moye TFLOP/s", "cuBLAS TFLOP/s", "moye/cuBLAS"] if kind == "plain" else
            ["moye fused TFLOP/s", "torch unfused TFLOP/s", "addmm TFLOP/s", "moye/unfused",
             "moye/addmm"])
    lines = ["| layout | dtype | M | N | K | " + " | ".join(head) + " |",
             "| --- | --- | ---: | ---: | ---: |" + " ---: |" * len(head)]
    for r in rows:
        if r["kind"] != kind:
            continue
        quotients = [ratio(r, peer) for peer in who[1:2 if kind == "plain" else 3]]
        lines.append(f"| {r['layout']} | {r['dtype']} | {r['M']} | {r['N']} | {r['K']} | "
                     + " | ".join([_fmt(r["TFLOP/s"].get(w), ".4g") for w in who]
                                  + [_fmt(q, ".3f") for q in quotients]) + " |")
    return "\n".join(lines)


def targets(rows):
    """Lines on issue 19's targets: the geometric mean of moye/cuBLAS over the
    plain rows (8192^3 apart), per layout and overall; rows below 0.9; the
    fused rows against torch unfused; 8192^3."""
    lines = []
    plain = [r for r in rows if r["kind"] == "plain" and not is_cube(r)]
    missing = [r for r in plain if ratio(r) is None]
    if missing:
        lines.append(f"plain rows without a ratio: {len(missing)} (first: {shape_of(missing[0])})")
    have = [(ratio(r), r) for r in plain if ratio(r) is not None]
    if have:
        parts = []
        for layout in LAYOUTS:
            mine = [q for q, r in have if r["layout"] == layout]
            if mine:
                parts.append(f"{layout} {geomean(mine):.3f} ({len(mine)} rows)")
        parts.append(f"all {geomean(q for q, _ in have):.3f} ({len(have)} rows)")
        lines.append(f"moye/cuBLAS geomean (target >= {TARGETS['geomean']}): " + ", ".join(parts))
        worst, r = min(have, key=lambda x: x[0])
        below = sum(q < TARGETS["floor"] for q, _ in have)
        lines.append(f"moye/cuBLAS below {TARGETS['floor']}: {below} of {len(have)} rows; "
                     f"worst {worst:.3f} ({shape_of(r)})")
    fused = [(ratio(r), r) for r in rows if r["kind"] == "fused" and ratio(r) is not None]
    if fused:
        worst, r = min(fused, key=lambda x: x[0])
        met = sum(q >= TARGETS["fused"] for q, _ in fused)
        lines.append(f"fused moye/torch unfused (target >= {TARGETS['fused']}): geomean "
                     f"{geomean(q for q, _ in fused):.3f}; >= {TARGETS['fused']}: {met} of "
                     f"{len(fused)} rows; worst {worst:.3f} ({shape_of(r)})")
    cubes = [r for r in rows if r["kind"] == "plain" and is_cube(r)]
    if cubes:
        lines.append(f"8192^3 moye/cuBLAS (target >= {TARGETS['cube']}): " + ", ".join(
            f"{r['layout']} {r['dtype']} {_fmt(ratio(r), '.3f')}" for r in cubes))
    return lines


def off_bound(rows):
    """A line on torch's results off the check's bound, if any (they are
    timed all the same: the unfused epilogue rounds after each op)."""
    count = {}
    for r in rows:
        for who, n in r.get("over", {}).items():
            if n and not who.startswith("moye"):
                count[who] = count.get(who, 0) + 1
    return ["torch results off the bound (timed all the same): " + ", ".join(
        f"{who} in {n} rows" for who, n in count.items())] if count else []


def report(results):
    """Print the tables, the targets and the host times."""
    rows = results["rows"]
    print(f"\nmatmul shapes on {results['device']} (torch {results.get('torch')}): TFLOP/s = "
          "2 M N K over the time of back-to-back public calls (host time included)\n")
    if any(r["kind"] == "plain" for r in rows):
        print(table(rows, "plain"))
    if any(r["kind"] == "fused" for r in rows):
        print(f"\nfused: bias + {results.get('activation', '?')} + residual\n")
        print(table(rows, "fused"))
    lines = targets(rows) + off_bound(rows)
    if lines:
        print("\n" + "\n".join(lines))
    if results.get("host"):
        h = results["host"][0]
        print(f"\nhost time per call, {'x'.join(map(str, h['shape']))} {h['dtype']}, "
              f"{h.get('calls', HOST_CALLS)} calls, median of {HOST_ROUNDS} rounds (target <= "
              f"{HOST_TARGET_US:g} us): the host's own (calls enqueued while the GPU is held "
              "busy), and back-to-back calls synchronized once (the GPU's time where longer)\n")
        print("| call | moye host us | torch host us | moye per call us | torch per call us |\n"
              "| --- | ---: | ---: | ---: | ---: |")
        for h in results["host"]:
            print(f"| {h['call']} | {_fmt(h['moye_us'], '.1f')} | {_fmt(h['torch_us'], '.1f')} | "
                  f"{_fmt(h.get('moye_per_call_us'), '.1f')} | "
                  f"{_fmt(h.get('torch_per_call_us'), '.1f')} |")
    if "seconds" in results:
        print(f"\n{results['seconds']:.0f} s")


def row_key(row):
    return row["layout"], row["dtype"], row["M"], row["N"], row["K"], row["kind"]


def _order(key):
    layout, dtype, M, N, K, kind = key
    nk = NKS.index((N, K)) if (N, K) in NKS else len(NKS)
    return (KINDS.index(kind), LAYOUTS.index(layout), DTYPES.index(dtype), nk, N, K, M)


def merge(paths):
    """Several runs (e.g. split by dtype and M to fit the GPU machine's
    10-minute calls) as one: their rows, a later run's replacing an earlier
    one's of the same layout, dtype, M, N, K and kind, in table order; the
    host times of the last run that has them."""
    merged, rows = None, {}
    for path in paths:
        r = json.loads(Path(path).read_text())
        if merged is None:
            merged = dict(r, runs=[])
        elif r["device"] != merged["device"]:
            raise SystemExit(f"matmul_shapes --merge: {path} ran on {r['device']}, "
                             f"not {merged['device']}")
        merged["runs"].append({"file": str(path), "args": r.get("args"),
                               "seconds": r.get("seconds")})
        for row in r["rows"]:
            rows[row_key(row)] = row
        if r.get("host"):
            merged["host"] = r["host"]
    merged.pop("seconds", None)
    merged.pop("args", None)
    merged["rows"] = [rows[k] for k in sorted(rows, key=_order)]
    return merged


def main(argv=None):
    args = parse_args(argv)
    if args.merge:
        results = merge(args.merge)
        report(results)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
        return results
    import torch                                # before moye: see tests/conftest.py
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("matmul_shapes: needs a CUDA device (torch sees none)")
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    results = {"device": device, "torch": torch.__version__, "activation": args.activation,
               "reduced_precision_reduction": {
                   "float16": torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
                   "bfloat16": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction},
               "args": {k: v for k, v in vars(args).items() if k != "json"}, "rows": []}
    print(f"matmul_shapes on {device}, torch {torch.__version__}", flush=True)
    if args.device == "cuda":
        from kernels import warm_up
        warm_up(torch)
    t0 = time.perf_counter()
    bad = False
    for dtype, M, N, K, kinds in plan(args):
        rows = run_shape(torch, args, dtype, M, N, K, kinds)
        results["rows"] += rows
        for row in rows:
            bad |= failed(row)
            over = {w: n for w, n in row["over"].items() if n}
            print(f"{shape_of(row):>32} {row['kind']:>5}: "
                  + " ".join(f"{w} {v:.4g}" for w, v in row["TFLOP/s"].items())
                  + f" TF, ratio {_fmt(ratio(row), '.3f')}"
                  + (f"  n/a: {row['n/a']}" if row["n/a"] else "")
                  + (f"  elements off the bound: {over}" if over else "")
                  + (f"  configs {row['configs']}" if row.get("configs") else "")
                  + f"  [{time.perf_counter() - t0:.0f} s]", flush=True)
        if args.json:                            # partial results survive a timeout
            Path(args.json).write_text(json.dumps(results, indent=1))
    if not args.no_host:
        results["host"] = host_times(torch, args)
    results["seconds"] = time.perf_counter() - t0
    report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if bad:
        raise SystemExit("matmul_shapes: moye gave a wrong result or raised (see n/a above)")
    return results


if __name__ == "__main__":
    main()
