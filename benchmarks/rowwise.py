"""moye.ops' row-wise ops, forward and backward, against the device-to-device
copy of the same bytes, torch eager, torch.compile and QuACK, in one run on
the same tensors (issue 18, outcome 4).

    python benchmarks/rowwise.py [--json out.json] [--quick] [--ops OP ...]
        [--dtypes float32 bfloat16] [--ns N ...] [--elements 268435456] [--rounds 3]
    python benchmarks/rowwise.py --merge f32.json bf16.json [--json all.json]
    python benchmarks/rowwise.py --compare here_1.json ref_1.json here_2.json ref_2.json

For each op (softmax, log_softmax, rms_norm, layer_norm, cross_entropy),
direction (fwd, bwd), dtype and row length N, M = elements // N rows (the
tensors, 1 GiB in float32, are far larger than L2). GB/s count the bytes the
op's moye API reads plus writes (`traffic`), the same figure for every
contender, even where one writes less (torch's forwards write no row
statistics: rstd, mean, lse; those are 4 bytes a row):

  copy     torch's device-to-device copy (cudaMemcpyAsync) of those bytes: the roof
  eager    torch: softmax, log_softmax, F.rms_norm, F.layer_norm, F.cross_entropy
           (reduction="none"); backward: aten._softmax_backward_data and
           _log_softmax_backward_data, and autograd.grad through a graph built once
           (only the backward kernels run) for the norms and cross-entropy
  compile  torch.compile(dynamic=False, fullgraph=True) of the eager forwards, and of
           the backward formulas written as plain functions (`*_bwd_math`)
  quack    QuACK (quack-kernels): softmax_fwd/bwd, rmsnorm_fwd/bwd,
           layernorm_fwd/bwd, cross_entropy_fwd/bwd; "n/a" where it has no such op
           (log_softmax), is not installed, or raises
  moye     the public moye.ops calls on CUDA torch tensors that need no gradient
           (host time included): softmax / softmax_backward, log_softmax /
           log_softmax_backward, rms_norm_forward / _backward, layer_norm_forward /
           _backward, cross_entropy_forward / _backward

Norm weights are in the input's dtype for rms_norm (torch's fused kernel needs
that) and float32 for layer_norm (QuACK's needs that); --weight-dtype changes
both. Cross-entropy targets are int64, one row in 16 set to ignore_index.

Every contender's result is checked before it is timed. Outputs are poisoned:
the allocator's free memory is NaN-filled before each checked call, and each
checked output after its check. Every element of every output is compared
with a float64 torch reference: the largest error over the largest reference
magnitude, at most 5e-4 for float32 inputs, 2e-2 for bfloat16 (5e-3 float16).
A wrong result is reported and never timed; a wrong or raising moye op makes
the script exit 1.

Times: CUDA events around back-to-back calls (kernels.cuda_time), the
contenders alternated in `--rounds` rounds to share the clocks' drift, the
median. Compilations (torch.compile, QuACK's, moye's) happen in the checking
call, outside the timing, once per shape. Then the host time of each moye op
and of torch eager's: the mean wall time of 1000 back-to-back calls on 8 x
1024 float32, the two alternated in HOST_ROUNDS rounds, the median (target:
10 us; --host-only measures these alone). The table ends with how many rows
meet issue 18's targets (moye/copy >= 0.93, moye/compile >= 1, moye/QuACK >=
1). The JSON is rewritten after
every row, so a run cut short keeps what it measured; runs split by dtype or
op (the GPU machine allows 10 minutes a call) join with --merge.
"""
import argparse
import importlib
import json
import math
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

OPS = ("softmax", "log_softmax", "rms_norm", "layer_norm", "cross_entropy")
DIRECTIONS = ("fwd", "bwd")
DTYPES = ("float32", "bfloat16", "float16")
NS = (256, 1024, 4096, 16384, 65536, 262144)
CONTENDERS = ("copy", "eager", "compile", "quack", "moye")
MIN_ELEMENTS, MAX_ELEMENTS = 2 ** 26, 2 ** 28
MAX_N = 262_144
ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2, "int64": 8}
TOLERANCE = {"float32": 5e-4, "bfloat16": 2e-2, "float16": 5e-3}
EPS = {"rms_norm": 1e-6, "layer_norm": 1e-5}
IGNORE_INDEX = -100
QUICK = {"dtypes": ["bfloat16"], "ns": [4096], "elements": 2 ** 26, "rounds": 2}
TARGETS = {"copy": 0.93, "compile": 1.0, "quack": 1.0}      # moye's ratio to each, issue 18
HOST_SHAPE = (8, 1024)
HOST_CALLS = 1000
HOST_ROUNDS = 3


# -- what each op reads and writes -----------------------------------------------------------

def weight_dtype(op, dtype, choice="auto"):
    """The dtype of the norms' weight (and bias): `choice`, or by default the
    input's for rms_norm and float32 for layer_norm."""
    if choice == "input":
        return dtype
    if choice == "float32":
        return "float32"
    return dtype if op == "rms_norm" else "float32"


def tensors(op, direction, M, N, dtype, wdtype="float32"):
    """(reads, writes) of the op's moye API: lists of (name, elements, dtype)."""
    rows, vec, stat = (M * N, dtype), (N, wdtype), (M, "float32")
    if op in ("softmax", "log_softmax"):
        if direction == "fwd":
            return [("x", *rows)], [("y", *rows)]
        return [("y", *rows), ("dy", *rows)], [("dx", *rows)]
    if op == "rms_norm":
        if direction == "fwd":
            return [("x", *rows), ("w", *vec)], [("y", *rows), ("rstd", *stat)]
        return ([("dy", *rows), ("x", *rows), ("w", *vec), ("rstd", *stat)],
                [("dx", *rows), ("dw", *vec)])
    if op == "layer_norm":
        if direction == "fwd":
            return ([("x", *rows), ("w", *vec), ("b", *vec)],
                    [("y", *rows), ("mean", *stat), ("rstd", *stat)])
        return ([("dy", *rows), ("x", *rows), ("w", *vec), ("mean", *stat), ("rstd", *stat)],
                [("dx", *rows), ("dw", *vec), ("db", *vec)])
    if op == "cross_entropy":
        if direction == "fwd":
            return [("x", *rows), ("target", M, "int64")], [("loss", *stat), ("lse", *stat)]
        return ([("dloss", *stat), ("x", *rows), ("target", M, "int64"), ("lse", *stat)],
                [("dx", *rows)])
    raise ValueError(f"unknown op {op!r}")


def traffic(op, direction, M, N, dtype, wdtype="float32"):
    """Bytes the op reads plus writes (its API's tensors; nothing internal)."""
    reads, writes = tensors(op, direction, M, N, dtype, wdtype)
    return sum(n * ITEMSIZE[t] for _, n, t in reads + writes)


def rows_for(elements, N):
    """M: as many rows of N as `elements` holds (at least one)."""
    return max(1, elements // N)


# -- arguments -------------------------------------------------------------------------------

def _count(text):
    """An int from '268435456' or '2**28'."""
    base, _, exponent = text.strip().partition("**")
    try:
        return int(base) ** int(exponent) if exponent else int(base)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer (e.g. 268435456 or 2**28)")


def _knob(text):
    """('keep', True) from 'keep=True': a knob of moye.ops.rows.plan_options and
    its value (True, False, an integer, or a word: keep=sums)."""
    name, eq, value = text.partition("=")
    if not eq or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r} is not KNOB=VALUE (e.g. keep=True)")
    if value in ("True", "False"):
        return name, value == "True"
    if value.isidentifier():
        return name, value
    return name, _count(value)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()),
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 2)[2])
    p.add_argument("--json", help="write the raw results here")
    p.add_argument("--quick", action="store_true",
                   help="a one-minute subset: every op and direction, bfloat16, N = 4096, "
                        "2**26 elements, 2 rounds (each unless given)")
    p.add_argument("--ops", nargs="+", choices=OPS)
    p.add_argument("--directions", nargs="+", choices=DIRECTIONS)
    p.add_argument("--dtypes", nargs="+", choices=DTYPES)
    p.add_argument("--ns", nargs="+", type=_count, metavar="N")
    p.add_argument("--elements", type=_count,
                   help=f"M*N per case, {MIN_ELEMENTS} (2**26) to {MAX_ELEMENTS} (2**28); "
                        f"default 2**28")
    p.add_argument("--rounds", type=int, help="alternating timing rounds (default 3)")
    p.add_argument("--contenders", nargs="+", choices=CONTENDERS[1:],
                   help="which to run beside the copy (default: all)")
    p.add_argument("--weight-dtype", choices=("auto", "input", "float32"), default="auto")
    p.add_argument("--plan", nargs="+", type=_knob, default=[], metavar="KNOB=VALUE",
                   help="run moye's ops under moye.ops.rows.plan_options(KNOB=VALUE, ...), "
                        "e.g. keep=True max_cluster=16: to A/B a plan in one run")
    p.add_argument("--no-host", action="store_true", help="skip the host-time measurement")
    p.add_argument("--host-only", action="store_true",
                   help="measure the host times alone (no GB/s cases)")
    p.add_argument("--merge", nargs="+", metavar="JSON",
                   help="run nothing: merge these runs' results (--json writes them), print "
                        "the table")
    p.add_argument("--compare", nargs="+", metavar="JSON",
                   help="run nothing: moye/copy of each row in each of these runs, side by "
                        "side (an A/B of two trees or plans, in alternating runs)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help=argparse.SUPPRESS)     # cpu: the tests' smoke run, any --elements
    a = p.parse_args(argv)
    if a.host_only and a.no_host:
        p.error("--host-only and --no-host exclude each other")
    quick = QUICK if a.quick else {}
    a.ops = a.ops or list(OPS)
    a.directions = a.directions or list(DIRECTIONS)
    a.dtypes = a.dtypes or quick.get("dtypes", ["float32", "bfloat16"])
    a.ns = a.ns or quick.get("ns", list(NS))
    a.elements = quick.get("elements", MAX_ELEMENTS) if a.elements is None else a.elements
    a.rounds = quick.get("rounds", 3) if a.rounds is None else a.rounds
    a.contenders = a.contenders or list(CONTENDERS[1:])
    for n in a.ns:
        if not 1 <= n <= MAX_N:
            p.error(f"--ns: N = {n} is outside 1..{MAX_N}")
    if a.device == "cuda" and not MIN_ELEMENTS <= a.elements <= MAX_ELEMENTS:
        p.error(f"--elements {a.elements} is outside 2**26..2**28 ({MIN_ELEMENTS}..{MAX_ELEMENTS})")
    if a.rounds < 1:
        p.error("--rounds must be at least 1")
    return a


# -- inputs and the float64 reference --------------------------------------------------------

def make_inputs(torch, op, direction, M, N, dtype, wdtype, device, seed=0):
    """The op's inputs (named as in `tensors`), random, non-zero; the
    statistics a backward reads (y, rstd, mean, lse) computed in float32 from x."""
    g = torch.Generator(device=device).manual_seed(seed * 1000 + N)
    dt, wt = getattr(torch, dtype), getattr(torch, wdtype)
    scale = 2.0 if op == "cross_entropy" else 1.0
    x32 = torch.randn(M, N, generator=g, device=device) * scale
    inp = {"x": x32.to(dt)}
    x32 = inp["x"].float()
    if op in ("rms_norm", "layer_norm"):
        inp["w"] = (1 + 0.1 * torch.randn(N, generator=g, device=device)).to(wt)
    if op == "layer_norm":
        inp["b"] = (0.1 * torch.randn(N, generator=g, device=device)).to(wt)
    if op == "cross_entropy":
        target = torch.randint(0, N, (M,), generator=g, device=device)
        target[::16] = IGNORE_INDEX
        inp["target"] = target
    if direction == "bwd":
        if op == "cross_entropy":
            inp["dloss"] = torch.randn(M, generator=g, device=device)
            inp["lse"] = torch.logsumexp(x32, -1)
        else:
            inp["dy"] = torch.randn(M, N, generator=g, device=device).to(dt)
        if op == "softmax":
            inp["y"] = torch.softmax(x32, -1).to(dt)
        if op == "log_softmax":
            inp["y"] = torch.log_softmax(x32, -1).to(dt)
        if op == "rms_norm":
            inp["rstd"] = torch.rsqrt(x32.square().mean(-1) + EPS[op])
        if op == "layer_norm":
            inp["mean"] = x32.mean(-1)
            inp["rstd"] = torch.rsqrt(x32.var(-1, unbiased=False) + EPS[op])
        if op in ("softmax", "log_softmax"):
            del inp["x"]
    return inp


def reference(torch, op, direction, inp):
    """The op's outputs in float64, through torch's own float64 ops (autograd
    for the backwards of the norms and cross-entropy)."""
    F = torch.nn.functional
    d = {k: (v.double() if v.is_floating_point() else v) for k, v in inp.items()}
    N = (d["x"] if "x" in d else d["y"]).shape[-1]
    if op == "softmax":
        if direction == "fwd":
            return {"y": torch.softmax(d["x"], -1)}
        return {"dx": torch.ops.aten._softmax_backward_data(d["dy"], d["y"], -1, torch.float64)}
    if op == "log_softmax":
        if direction == "fwd":
            return {"y": torch.log_softmax(d["x"], -1)}
        return {"dx": torch.ops.aten._log_softmax_backward_data(d["dy"], d["y"], -1,
                                                                torch.float64)}
    if op == "cross_entropy":
        keep = d["target"] != IGNORE_INDEX
        if direction == "fwd":
            loss = F.cross_entropy(d["x"], d["target"], reduction="none",
                                   ignore_index=IGNORE_INDEX)
            lse = torch.logsumexp(d["x"], -1)
            return {"loss": loss, "lse": torch.where(keep, lse, float("nan"))}
        x = d["x"].requires_grad_()
        loss = F.cross_entropy(x, d["target"], reduction="none", ignore_index=IGNORE_INDEX)
        return {"dx": torch.autograd.grad(loss, x, d["dloss"])[0]}
    x, w = d["x"], d["w"]
    if direction == "fwd":
        if op == "rms_norm":
            return {"y": F.rms_norm(x, (N,), w, EPS[op]),
                    "rstd": torch.rsqrt(x.square().mean(-1) + EPS[op])}
        return {"y": F.layer_norm(x, (N,), w, d["b"], EPS[op]), "mean": x.mean(-1),
                "rstd": torch.rsqrt(x.var(-1, unbiased=False) + EPS[op])}
    x, w = x.requires_grad_(), w.requires_grad_()
    if op == "rms_norm":
        dx, dw = torch.autograd.grad(F.rms_norm(x, (N,), w, EPS[op]), (x, w), d["dy"])
        return {"dx": dx, "dw": dw}
    b = d["b"].requires_grad_()
    dx, dw, db = torch.autograd.grad(F.layer_norm(x, (N,), w, b, EPS[op]), (x, w, b), d["dy"])
    return {"dx": dx, "dw": dw, "db": db}


def error(torch, out, ref):
    """Largest |out - ref| over the largest |ref|, on the elements where ref is
    not NaN (NaN in ref marks "not compared"); inf where out has a NaN there."""
    keep = ~torch.isnan(ref)
    o, r = (out.double(), ref) if keep.all() else (out.double()[keep], ref[keep])
    if o.numel() == 0:
        return 0.0
    if torch.isnan(o).any():
        return math.inf
    scale = float(r.abs().max()) or 1.0
    return float((o - r).abs().max()) / scale


def check(torch, outputs, ref, tolerance):
    """(worst error / tolerance, {output: error}) of a contender's outputs:
    each must be one of `ref`'s, of its size, and the main one (ref's first)
    must be there."""
    main = next(iter(ref))
    if main not in outputs:
        raise AssertionError(f"no {main} among the outputs {sorted(outputs)}")
    errors, worst = {}, 0.0
    for name, out in outputs.items():
        if out.numel() != ref[name].numel():
            raise AssertionError(f"{name} has {out.numel()} elements, expected {ref[name].numel()}")
        errors[name] = error(torch, out.reshape(ref[name].shape), ref[name])
        worst = max(worst, errors[name] / tolerance)
    return worst, errors


# -- contenders -----------------------------------------------------------------------------

def softmax_bwd_math(y, dy):
    yf, dyf = y.float(), dy.float()
    return (yf * (dyf - (dyf * yf).sum(-1, keepdim=True))).to(y.dtype)


def log_softmax_bwd_math(y, dy):
    dyf = dy.float()
    return (dyf - dyf.sum(-1, keepdim=True) * y.float().exp()).to(y.dtype)


def rms_norm_bwd_math(dy, x, w, rstd):
    xhat = x.float() * rstd[:, None]
    g = dy.float() * w.float()
    dx = rstd[:, None] * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx.to(x.dtype), (dy.float() * xhat).sum(0).to(w.dtype)


def layer_norm_bwd_math(dy, x, w, mean, rstd):
    xhat = (x.float() - mean[:, None]) * rstd[:, None]
    g = dy.float() * w.float()
    dx = rstd[:, None] * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx.to(x.dtype), (dy.float() * xhat).sum(0).to(w.dtype), dy.float().sum(0).to(w.dtype)


def cross_entropy_bwd_math(dloss, x, target, lse):
    p = (x.float() - lse[:, None]).exp()
    hit = p.new_zeros(p.shape).scatter_(1, target.clamp(min=0)[:, None], 1.0)
    g = ((p - hit) * dloss[:, None]).masked_fill((target == IGNORE_INDEX)[:, None], 0.0)
    return g.to(x.dtype)


# each backward formula, its arguments and its outputs' names
BWD_MATH = {
    "softmax": (softmax_bwd_math, ("y", "dy"), ("dx",)),
    "log_softmax": (log_softmax_bwd_math, ("y", "dy"), ("dx",)),
    "rms_norm": (rms_norm_bwd_math, ("dy", "x", "w", "rstd"), ("dx", "dw")),
    "layer_norm": (layer_norm_bwd_math, ("dy", "x", "w", "mean", "rstd"), ("dx", "dw", "db")),
    "cross_entropy": (cross_entropy_bwd_math, ("dloss", "x", "target", "lse"), ("dx",)),
}


def eager_calls(torch, op, direction, inp):
    """{outputs} = fn() for torch eager; the backward graphs built here, once."""
    F = torch.nn.functional
    N = (inp["x"] if "x" in inp else inp["y"]).shape[-1]
    if direction == "fwd":
        x = inp["x"]
        fwd = {
            "softmax": lambda: {"y": torch.softmax(x, -1)},
            "log_softmax": lambda: {"y": torch.log_softmax(x, -1)},
            "rms_norm": lambda: {"y": F.rms_norm(x, (N,), inp["w"], EPS["rms_norm"])},
            "layer_norm": lambda: {"y": F.layer_norm(x, (N,), inp["w"], inp["b"],
                                                     EPS["layer_norm"])},
            "cross_entropy": lambda: {"loss": F.cross_entropy(x, inp["target"], reduction="none",
                                                              ignore_index=IGNORE_INDEX)},
        }
        return fwd[op]
    if op == "softmax":
        return lambda: {"dx": torch.ops.aten._softmax_backward_data(inp["dy"], inp["y"], -1,
                                                                     inp["y"].dtype)}
    if op == "log_softmax":
        return lambda: {"dx": torch.ops.aten._log_softmax_backward_data(inp["dy"], inp["y"], -1,
                                                                         inp["y"].dtype)}
    x = inp["x"].detach().requires_grad_()
    if op == "cross_entropy":
        loss = F.cross_entropy(x, inp["target"], reduction="none", ignore_index=IGNORE_INDEX)
        dloss = inp["dloss"].to(loss.dtype)
        return lambda: {"dx": torch.autograd.grad(loss, x, dloss, retain_graph=True)[0]}
    w = inp["w"].detach().requires_grad_()
    if op == "rms_norm":
        y = F.rms_norm(x, (N,), w, EPS[op])
        return lambda: dict(zip(("dx", "dw"), torch.autograd.grad(y, (x, w), inp["dy"],
                                                                   retain_graph=True)))
    b = inp["b"].detach().requires_grad_()
    y = F.layer_norm(x, (N,), w, b, EPS[op])
    return lambda: dict(zip(("dx", "dw", "db"), torch.autograd.grad(y, (x, w, b), inp["dy"],
                                                                     retain_graph=True)))


def compile_calls(torch, op, direction, inp):
    """torch.compile of the eager forward, or of the backward's plain formula."""
    compiled = lambda f: torch.compile(f, dynamic=False, fullgraph=True)  # noqa: E731
    F = torch.nn.functional
    if direction == "fwd":
        x = inp["x"]
        N = x.shape[-1]
        fwd = {
            "softmax": lambda x: torch.softmax(x, -1),
            "log_softmax": lambda x: torch.log_softmax(x, -1),
            "rms_norm": lambda x, w: F.rms_norm(x, (N,), w, EPS["rms_norm"]),
            "layer_norm": lambda x, w, b: F.layer_norm(x, (N,), w, b, EPS["layer_norm"]),
            "cross_entropy": lambda x, t: F.cross_entropy(x, t, reduction="none",
                                                          ignore_index=IGNORE_INDEX),
        }
        args = {"rms_norm": ("x", "w"), "layer_norm": ("x", "w", "b"),
                "cross_entropy": ("x", "target")}.get(op, ("x",))
        name = "loss" if op == "cross_entropy" else "y"
        fn = compiled(fwd[op])
        return lambda: {name: fn(*(inp[a] for a in args))}
    return bwd_math_call(op, inp, compiled)


def bwd_math_call(op, inp, wrap=lambda f: f):
    """{outputs} = fn(): the backward's plain formula (`*_bwd_math`), wrapped."""
    math_fn, args, names = BWD_MATH[op]
    fn = wrap(math_fn)

    def call():
        out = fn(*(inp[a] for a in args))
        return dict(zip(names, out if isinstance(out, tuple) else (out,)))
    return call


def quack_calls(quack, op, direction, inp):
    """QuACK's call, or a string saying why there is none."""
    if quack is None or isinstance(quack, str):
        return quack or "not installed"
    if op == "log_softmax":
        return "QuACK has no log_softmax"
    sm, rn, ce = quack["softmax"], quack["rmsnorm"], quack["cross_entropy"]
    if op == "softmax":
        if direction == "fwd":
            return lambda: {"y": sm.softmax_fwd(inp["x"])}
        return lambda: {"dx": sm.softmax_bwd(inp["dy"], inp["y"])}
    if op == "rms_norm":
        if direction == "fwd":
            def fwd():
                y, _, rstd = rn.rmsnorm_fwd(inp["x"], inp["w"], eps=EPS[op], store_rstd=True)
                return {"y": y, "rstd": rstd}
            return fwd
        return lambda: dict(zip(("dx", "dw"), rn.rmsnorm_bwd(inp["x"], inp["w"], inp["dy"],
                                                              inp["rstd"])[:2]))
    if op == "layer_norm":
        if direction == "fwd":
            def fwd():
                y, rstd, mean = rn.layernorm_fwd(inp["x"], inp["w"], inp["b"], eps=EPS[op],
                                                 return_rstd=True, return_mean=True)
                return {"y": y, "mean": mean, "rstd": rstd}
            return fwd
        return lambda: dict(zip(("dx", "dw", "db"), rn.layernorm_bwd(
            inp["x"], inp["w"], inp["dy"], inp["rstd"], inp["mean"], has_bias=True)))
    if direction == "fwd":
        return lambda: dict(zip(("loss", "lse"), ce.cross_entropy_fwd(
            inp["x"], inp["target"], ignore_index=IGNORE_INDEX, return_lse=True)))
    return lambda: {"dx": ce.cross_entropy_bwd(inp["x"], inp["target"], inp["dloss"], inp["lse"],
                                               ignore_index=IGNORE_INDEX)}


# the moye.ops function of each (op, direction), its arguments, and its outputs' names
MOYE_API = {
    ("softmax", "fwd"): ("softmax", ("x",), ("y",)),
    ("softmax", "bwd"): ("softmax_backward", ("y", "dy"), ("dx",)),
    ("log_softmax", "fwd"): ("log_softmax", ("x",), ("y",)),
    ("log_softmax", "bwd"): ("log_softmax_backward", ("y", "dy"), ("dx",)),
    ("rms_norm", "fwd"): ("rms_norm_forward", ("x", "w", "eps"), ("y", "rstd")),
    ("rms_norm", "bwd"): ("rms_norm_backward", ("dy", "x", "w", "rstd"), ("dx", "dw")),
    ("layer_norm", "fwd"): ("layer_norm_forward", ("x", "w", "b", "eps"), ("y", "mean", "rstd")),
    ("layer_norm", "bwd"): ("layer_norm_backward", ("dy", "x", "w", "mean", "rstd"),
                            ("dx", "dw", "db")),
    ("cross_entropy", "fwd"): ("cross_entropy_forward", ("x", "target", "ignore_index"),
                               ("loss", "lse")),
    ("cross_entropy", "bwd"): ("cross_entropy_backward",
                               ("dloss", "x", "target", "lse", "ignore_index"), ("dx",)),
}


def moye_function(op, direction):
    """The moye.ops function (from moye.ops, else moye.ops.<op>_op), or a
    string saying it is not there yet."""
    import moye.ops
    name = MOYE_API[op, direction][0]
    fn = getattr(moye.ops, name, None)
    if fn is None:
        try:
            fn = getattr(importlib.import_module(f"moye.ops.{op}_op"), name, None)
        except ImportError:
            fn = None
    return fn if fn is not None else f"moye.ops has no {name}"


def moye_calls(op, direction, inp):
    fn = moye_function(op, direction)
    if isinstance(fn, str):
        return fn
    _, args, names = MOYE_API[op, direction]
    extra = {"eps": EPS.get(op), "ignore_index": IGNORE_INDEX}
    values = [inp[a] if a in inp else extra[a] for a in args]

    def call():
        out = fn(*values)
        return dict(zip(names, out if isinstance(out, tuple) else (out,)))
    return call


def load_quack():
    """{'softmax': module, 'rmsnorm': ..., 'cross_entropy': ...}, or why not."""
    try:
        mods = {m: importlib.import_module(f"quack.{m}")
                for m in ("softmax", "rmsnorm", "cross_entropy")}
        import quack
        mods["version"] = getattr(quack, "__version__", "?")
        return mods
    except Exception as e:                       # not installed, or its DSL is missing
        return f"not importable: {type(e).__name__}: {e}"[:300]


# -- timing ---------------------------------------------------------------------------------

class Timer:
    """Milliseconds of fn(): CUDA events (kernels.cuda_time) on the GPU, the
    wall clock on the CPU (the tests' smoke run)."""

    def __init__(self, torch, device):
        self.torch, self.device = torch, device

    def __call__(self, fn, iters):
        if self.device == "cuda":
            from kernels import cuda_time
            return cuda_time(self.torch, fn, iters=iters, warmup=3)
        fn()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t0) / iters * 1e3


def poison_free_memory(torch, device, shapes_dtypes):
    """NaN-fill blocks of the outputs' sizes and hand them back to torch's
    caching allocator (emptied first), so that an output a contender
    allocates and then fails to write reads as NaN."""
    if device != "cuda":
        return
    torch.cuda.empty_cache()
    bait = [torch.full(s, float("nan"), dtype=d, device=device) for s, d in shapes_dtypes]
    del bait


def scrub(torch, outputs, inp):
    """NaN-fill a checked contender's outputs (none that shares an input's
    memory), so that the next one cannot find right answers in freed memory."""
    inputs = {t.untyped_storage().data_ptr() for t in inp.values()}
    for t in outputs.values():
        if t.is_floating_point() and t.untyped_storage().data_ptr() not in inputs:
            t.fill_(float("nan"))


def run_case(torch, args, op, direction, dtype, N, quack, copy_buffers):
    """One row of the table: check every contender, then time them in rounds."""
    M = rows_for(args.elements, N)
    wdtype = weight_dtype(op, dtype, args.weight_dtype)
    nbytes = traffic(op, direction, M, N, dtype, wdtype)
    row = {"op": op, "direction": direction, "dtype": dtype, "N": N, "M": M,
           "weight_dtype": wdtype, "bytes": nbytes, "ms": {}, "GB/s": {}, "error": {},
           "n/a": {}}
    if args.device == "cuda":
        torch._dynamo.reset()                   # one compiled graph per shape, no recompile limit
    inp = make_inputs(torch, op, direction, M, N, dtype, wdtype, args.device)
    calls = {}
    makers = {
        "eager": lambda: eager_calls(torch, op, direction, inp),
        "compile": lambda: (compile_calls(torch, op, direction, inp) if args.device == "cuda"
                            else "not on the CPU"),
        "quack": lambda: (quack_calls(quack, op, direction, inp) if args.device == "cuda"
                          else "not on the CPU"),
        "moye": lambda: moye_calls(op, direction, inp),
    }
    for who in args.contenders:
        try:
            calls[who] = makers[who]()
        except Exception as e:
            calls[who] = f"{type(e).__name__}: {e}"
    ref = reference(torch, op, direction, inp)
    bait = [(r.shape, getattr(torch, t)) for r in ref.values() for t in {dtype, "float32"}]
    for who in list(calls):
        if isinstance(calls[who], str):
            row["n/a"][who] = calls.pop(who)
            continue
        poison_free_memory(torch, args.device, bait)
        try:
            outputs = calls[who]()
            worst, errors = check(torch, outputs, ref, TOLERANCE[dtype])
        except Exception as e:
            row["n/a"][who] = f"raised {type(e).__name__}: {str(e)[:300]}"
            if who == "moye":
                traceback.print_exc()
            del calls[who]
            continue
        scrub(torch, outputs, inp)
        del outputs
        row["error"][who] = errors
        if not worst <= 1:
            row["n/a"][who] = f"WRONG: errors {errors}, tolerance {TOLERANCE[dtype]}"
            del calls[who]
    del ref
    half = nbytes // 2
    src, dst = copy_buffers[0][:half], copy_buffers[1][:half]
    calls = {"copy": lambda: dst.copy_(src), **calls}
    iters = max(5, min(100, int(25e-3 / (nbytes / 2.5e12)))) if args.device == "cuda" else 3
    timer = Timer(torch, args.device)
    times = {who: [] for who in calls}
    for _ in range(args.rounds):
        for who, fn in calls.items():
            times[who].append(timer(fn, iters))
    for who, ts in times.items():
        ms = sorted(ts)[len(ts) // 2]
        row["ms"][who] = ms
        row["GB/s"][who] = 2 * half / ms / 1e6 if who == "copy" else nbytes / ms / 1e6
    return row


def ratios(row):
    """moye's GB/s over each other contender's (None where either is missing)."""
    g = row["GB/s"]
    m = g.get("moye")
    return {who: (m / g[who] if m and g.get(who) else None)
            for who in ("copy", "compile", "quack", "eager")}


def host_times(torch, args):
    """µs per call of each moye op and of torch eager's on a small tensor:
    the mean of HOST_CALLS back-to-back calls after a warm-up, synchronized
    once at the end; the two alternated in HOST_ROUNDS rounds, the median."""
    rows = []
    calls = HOST_CALLS if args.device == "cuda" else 10
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    for op in args.ops:
        for direction in args.directions:
            inp = make_inputs(torch, op, direction, *HOST_SHAPE, "float32",
                              weight_dtype(op, "float32", args.weight_dtype), args.device)
            entry = {"op": op, "direction": direction, "shape": list(HOST_SHAPE)}
            fns = {"moye": moye_calls(op, direction, inp),
                   "eager": eager_calls(torch, op, direction, inp)}
            times = {who: [] for who, fn in fns.items() if not isinstance(fn, str)}
            for who in times:
                for _ in range(20):
                    fns[who]()
            for _ in range(HOST_ROUNDS):
                for who in times:
                    sync()
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        fns[who]()
                    sync()
                    times[who].append((time.perf_counter() - t0) / calls * 1e6)
            for who in fns:
                entry[f"{who}_us"] = sorted(times[who])[len(times[who]) // 2] \
                    if who in times else None
            rows.append(entry)
    return rows


# -- report ---------------------------------------------------------------------------------

def _fmt(v, spec):
    return "n/a" if v is None else format(v, spec)


def table(rows):
    """The results as a Markdown table (GB/s and moye's ratios)."""
    head = ("| op | dir | dtype | N | M | MB | copy | moye | eager | compile | QuACK | "
            "moye/copy | moye/compile | moye/QuACK | moye/eager |")
    lines = [head, "| --- | --- | --- | ---: | ---: | ---: |" + " ---: |" * 9]
    for r in rows:
        g, q = r["GB/s"], ratios(r)
        lines.append(
            f"| {r['op']} | {r['direction']} | {r['dtype']} | {r['N']} | {r['M']} | "
            f"{r['bytes'] / 1e6:.0f} | "
            + " | ".join(_fmt(g.get(w), ".0f") for w in ("copy", "moye", "eager", "compile",
                                                         "quack"))
            + " | " + " | ".join(_fmt(q[w], ".3f") for w in ("copy", "compile", "quack", "eager"))
            + " |")
    return "\n".join(lines)


def targets(rows):
    """Lines saying how many rows meet each of issue 18's targets (moye/copy
    >= 0.93, moye/compile >= 1, moye/QuACK >= 1) and the worst row."""
    lines = []
    for who, target in TARGETS.items():
        have = [(ratios(r)[who], r) for r in rows if ratios(r)[who] is not None]
        if not have:
            continue
        worst, r = min(have, key=lambda x: x[0])
        met = sum(q >= target for q, _ in have)
        lines.append(f"moye/{who} >= {target}: {met} of {len(have)} rows; worst {worst:.3f} "
                     f"({r['op']} {r['direction']} {r['dtype']} N={r['N']})")
    return lines


def report(results):
    """Print the speed table, the targets met and the host times."""
    print(f"\nrow-wise ops on {results['device']} (torch {results.get('torch')}, QuACK "
          f"{results.get('quack')}): GB/s counting bytes read + written, moye's ratios\n")
    print(table(results["rows"]))
    print("\n" + "\n".join(targets(results["rows"])))
    if results.get("host"):
        print(f"\nhost time per call, {HOST_SHAPE[0]} x {HOST_SHAPE[1]} float32, "
              f"mean of {HOST_CALLS} back-to-back calls, median of {HOST_ROUNDS} rounds "
              "(target <= 10 us)\n")
        print("| op | dir | moye us | eager us |\n| --- | --- | ---: | ---: |")
        for h in results["host"]:
            print(f"| {h['op']} | {h['direction']} | {_fmt(h['moye_us'], '.1f')} | "
                  f"{_fmt(h['eager_us'], '.1f')} |")
    if "seconds" in results:
        print(f"\n{results['seconds']:.0f} s")


def case(row):
    """A result row's (op, direction, dtype, N)."""
    return row["op"], row["direction"], row["dtype"], row["N"]


def table_order(key):
    """The sort key of a case (op, direction, dtype, N): the table's order."""
    op, direction, dtype, n = key
    return OPS.index(op), DIRECTIONS.index(direction), DTYPES.index(dtype), n


def merge(paths):
    """The results of several runs (e.g. one per dtype, each inside the GPU
    machine's 10-minute call) as one: their rows, a later run's replacing an
    earlier one's of the same op, direction, dtype and N; the host times of
    the last run that has them."""
    merged, rows = None, {}
    for path in paths:
        r = json.loads(Path(path).read_text())
        if merged is None:
            merged = dict(r, runs=[])
        elif r["device"] != merged["device"]:
            raise SystemExit(f"rowwise --merge: {path} ran on {r['device']}, "
                             f"not {merged['device']}")
        merged["runs"].append({"file": str(path), "args": r.get("args"),
                               "seconds": r.get("seconds"), "quack": r.get("quack")})
        for row in r["rows"]:
            rows[case(row)] = row
        if r.get("host"):
            merged["host"] = r["host"]
    merged.pop("seconds", None)
    merged.pop("args", None)
    merged["rows"] = [rows[k] for k in sorted(rows, key=table_order)]
    return merged


def compare(paths):
    """A Markdown table of moye's GB/s as a share of the copy's in each run of
    `paths` (columns named by the files' stems), a row per case any of them
    ran ("-" where one did not, "n/a" where moye's call failed), and the
    columns' means over the cases every run has a figure for."""
    runs = [json.loads(Path(path).read_text()) for path in paths]
    devices = {r["device"] for r in runs}
    if len(devices) > 1:
        raise SystemExit(f"rowwise --compare: the runs are of several devices: "
                         f"{sorted(devices)}")
    shares = [{case(r): ratios(r)["copy"] for r in run["rows"]} for run in runs]
    cases = sorted(set().union(*shares), key=table_order)
    names = [Path(path).stem for path in paths]
    lines = [f"moye/copy on {devices.pop()}", "",
             "| op | dir | dtype | N | " + " | ".join(names) + " |",
             "| --- | --- | --- | ---: |" + " ---: |" * len(names)]
    for key in cases:
        lines.append("| " + " | ".join(map(str, key)) + " | " + " | ".join(
            "-" if key not in s else _fmt(s[key], ".3f") for s in shares)
            + " |")
    common = [c for c in cases if all(s.get(c) is not None for s in shares)]
    if common:
        means = [sum(s[c] for c in common) / len(common) for s in shares]
        lines.append(f"| mean of {len(common)} | | | | "
                     + " | ".join(f"{m:.3f}" for m in means) + " |")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    if args.compare:
        print(compare(args.compare))
        return None
    if args.merge:
        results = merge(args.merge)
        report(results)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
        return results
    import torch                                # before moye: see tests/conftest.py
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("rowwise: needs a CUDA device (torch sees none)")
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    quack = load_quack() if "quack" in args.contenders and args.device == "cuda" else None
    results = {"device": device, "torch": torch.__version__,
               "quack": quack.get("version") if isinstance(quack, dict) else quack,
               "args": {k: v for k, v in vars(args).items() if k != "json"}, "rows": []}
    print(f"rowwise on {device}, torch {torch.__version__}, QuACK {results['quack']}, "
          f"{args.elements} elements a case", flush=True)
    if args.device == "cuda":
        from kernels import warm_up
        warm_up(torch)
    cases = [] if args.host_only else [(op, d, t, n) for op in args.ops
                                         for d in args.directions for t in args.dtypes
                                         for n in args.ns]
    from moye.ops import rows
    with rows.plan_options(**dict(args.plan)):
        failed = run_cases(torch, args, cases, quack, results)
    report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if failed:
        raise SystemExit("rowwise: a moye op gave a wrong result or raised (see n/a above)")
    return results


def run_cases(torch, args, cases, quack, results):
    """Run `cases` into results["rows"] (and the host times, unless
    args.no_host); whether a moye op gave a wrong result or raised."""
    copy_buffers = None
    if cases:
        biggest = max(traffic(op, d, rows_for(args.elements, n), n, t,
                              weight_dtype(op, t, args.weight_dtype)) for op, d, t, n in cases)
        copy_buffers = [torch.empty(biggest // 2 + 1, dtype=torch.uint8, device=args.device)
                        for _ in range(2)]
        copy_buffers[0].random_(0, 256)
    t0 = time.perf_counter()
    failed = False
    for op, direction, dtype, N in cases:
        row = run_case(torch, args, op, direction, dtype, N, quack, copy_buffers)
        results["rows"].append(row)
        # moye missing an op is no failure; moye wrong or raising is
        failed |= row["n/a"].get("moye", "").startswith(("WRONG", "raised"))
        g = row["GB/s"]
        print(f"{op:>13} {direction} {dtype:>8} N={N:<6} "
              + " ".join(f"{w} {g[w]:.0f}" for w in g)
              + (f"  n/a: {row['n/a']}" if row["n/a"] else "")
              + f"  [{time.perf_counter() - t0:.0f} s]", flush=True)
        if args.json:                            # partial results survive a timeout
            Path(args.json).write_text(json.dumps(results, indent=1))
    if not args.no_host:
        results["host"] = host_times(torch, args)
    results["seconds"] = time.perf_counter() - t0
    return failed


if __name__ == "__main__":
    main()
