"""The registers and spills of moye.ops' row-wise kernels as the ops launch
them on an H100, from ptxas through NVRTC for sm_90a: no GPU needed.

    python benchmarks/row_registers.py [--ops OP ...] [--directions fwd bwd]
        [--dtypes float32 bfloat16] [--ns N ...] [--plan KNOB=VALUE ...] [--json out.json]

Each op's raw host function runs on CPU torch tensors that the plans take
for CUDA tensors of an H100 (132 SMs, 227 KB of shared memory a block may
take, clusters of up to 16 blocks): its plan, what it keeps in shared
memory and its launches are the H100's, and each launch is compiled
(`ptxas -v`) instead of run. A register spilled in a row loop is reloaded
from local memory at every row: `spilled` is the column to keep at 0.
The arguments are rowwise.py's (norm weights in the input's dtype for
rms_norm, float32 for layer_norm; int64 targets).

    rms_norm      bwd bfloat16 262144  rms_norm_backward_registers   16 x 1024   64 regs   0 B
"""
import argparse
import contextlib
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from moye import ir  # noqa: E402
from moye.backend.cuda import nvrtc  # noqa: E402
from moye.compiler.frontend import BACKENDS  # noqa: E402
from moye.ops import (cross_entropy_op, layer_norm_op, log_softmax_op, replay,  # noqa: E402
                      rms_norm_op, rows, softmax_op)
from rowwise import DIRECTIONS, DTYPES, MAX_N, OPS, _knob  # noqa: E402

NS = (1024, 4096, 16384, 65536, 262144)
# an H100's (SMs, shared memory an SM has, shared memory a block may take, major), and its
# largest cluster
H100 = (132, 233472, 232448, 9)
H100_CLUSTER = 16


def ptxas(kernel, args, threads):
    """(registers, bytes spilled) of `kernel` traced with `args` in blocks of
    `threads`, for sm_90a."""
    traced = kernel.trace(*args, block=threads)[0]
    source = BACKENDS["cuda"].source(traced, (threads, 1, 1))
    log = nvrtc.compile_cuda(source, [ir.symbol(traced.name)], "sm_90a",
                             options=("--ptxas-options=-v",)).log or ""
    registers = re.search(r"Used (\d+) registers", log)
    spilled = re.search(r"(\d+) bytes spill stores", log)
    if registers is None or spilled is None:
        raise RuntimeError(f"row_registers: no register count in ptxas's log:\n{log}")
    return int(registers.group(1)), int(spilled.group(1))


@contextlib.contextmanager
def launches_on_h100():
    """A block in which the ops plan for CPU torch tensors as for CUDA ones
    on an H100 and note their launches (kernel, config, arguments) in the
    list it gives, running none."""
    launched = []
    saved = {name: getattr(rows, name) for name in
             ("backend_of", "_cuda_device", "_cuda_max_cluster", "resident_clusters")}
    saved_launch = replay.launch
    rows.backend_of = lambda x: "cuda"
    rows._cuda_device = lambda index: H100
    rows._cuda_max_cluster = lambda index: H100_CLUSTER
    rows.resident_clusters = lambda kernel, p, *args: 10 ** 6
    replay.launch = lambda kernel, config, args, backend: launched.append((kernel, config, args))
    replay.forget()             # no recipe recorded before (or in) the block replays
    try:
        yield launched
    finally:
        for name, value in saved.items():
            setattr(rows, name, value)
        replay.launch = saved_launch
        replay.forget()


def op_calls(torch, op, direction, dtype, n, m=64):
    """The raw host call of `op`'s `direction` on (m, n) tensors of `dtype`."""
    t = getattr(torch, dtype)
    x = torch.randn(m, n).to(t)
    stat = torch.ones(m)
    if op == "softmax":
        return (lambda: softmax_op.softmax(x)) if direction == "fwd" else (
            lambda: softmax_op.softmax_backward(x, x))
    if op == "log_softmax":
        return (lambda: log_softmax_op.log_softmax(x)) if direction == "fwd" else (
            lambda: log_softmax_op.log_softmax_backward(x, x))
    if op == "rms_norm":
        w = torch.randn(n).to(t)
        return (lambda: rms_norm_op.rms_norm_forward(x, w, 1e-6)) if direction == "fwd" else (
            lambda: rms_norm_op.rms_norm_backward(x, x, w, stat))
    if op == "layer_norm":
        w = torch.randn(n)
        return (lambda: layer_norm_op.layer_norm_forward(x, w, w, 1e-5)) if direction == "fwd" \
            else (lambda: layer_norm_op.layer_norm_backward(x, x, w, stat, stat))
    if op == "cross_entropy":
        target = torch.randint(0, n, (m,))
        return (lambda: cross_entropy_op.cross_entropy_forward(x, target, -100)) \
            if direction == "fwd" else (
                lambda: cross_entropy_op.cross_entropy_backward(stat, x, target, stat, -100))
    raise ValueError(f"row_registers: op {op!r} is none of {OPS}")


def survey(ops=OPS, directions=DIRECTIONS, dtypes=("bfloat16", "float32"), ns=NS,
           plan=None):
    """Rows (op, direction, dtype, N, kernel, blocks, threads, cluster,
    registers, spilled) of every kernel each case launches on an H100 under
    plan_options(**plan), the column sums (rows.sum_columns) left out."""
    for what, given, allowed in (("ops", ops, OPS), ("directions", directions, DIRECTIONS),
                                 ("dtypes", dtypes, DTYPES)):
        unknown = [v for v in given if v not in allowed]
        if unknown:
            raise ValueError(f"row_registers: {what} {unknown} are none of {allowed}")
    outside = [n for n in ns if isinstance(n, bool) or not isinstance(n, int)
               or not 1 <= n <= MAX_N]
    if outside:
        raise ValueError(f"row_registers: row lengths {outside} are not ints from 1 to {MAX_N}")
    import torch
    found = []
    with launches_on_h100() as launched, rows.plan_options(**(plan or {})):
        for op in ops:
            for direction in directions:
                for dtype in dtypes:
                    for n in ns:
                        launched.clear()
                        op_calls(torch, op, direction, dtype, n)()
                        for kernel, config, args in launched:
                            if kernel.name == "column_sum":
                                continue
                            registers, spilled = ptxas(kernel, args, config[1])
                            cluster = config[2] if len(config) > 2 else 1
                            found.append((op, direction, dtype, n, kernel.name, config[0],
                                          config[1], cluster, registers, spilled))
    return found


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS))
    parser.add_argument("--directions", nargs="+", choices=DIRECTIONS,
                        default=list(DIRECTIONS))
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=["bfloat16", "float32"])
    parser.add_argument("--ns", nargs="+", type=int, default=list(NS))
    parser.add_argument("--plan", nargs="+", type=_knob, default=[], metavar="KNOB=VALUE",
                        help="under moye.ops.rows.plan_options(KNOB=VALUE, ...), e.g. keep=sums")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    args.plan = dict(args.plan)
    return args


def main(argv=None):
    args = parse_args(argv)
    found = survey(args.ops, args.directions, args.dtypes, args.ns, args.plan)
    for op, direction, dtype, n, kernel, grid, threads, cluster, registers, spilled in found:
        print(f"{op:13} {direction} {dtype:8} {n:7}  {kernel:34} {cluster:2} x {threads:<5} "
              f"{registers:3} regs {spilled:4} B")
    if args.json:
        keys = ("op", "direction", "dtype", "N", "kernel", "blocks", "threads", "cluster",
                "registers", "spilled")
        Path(args.json).write_text(json.dumps({"plan": args.plan, "rows": [
            dict(zip(keys, row)) for row in found]}, indent=1))
    return found


if __name__ == "__main__":
    main()
