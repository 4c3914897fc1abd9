"""Cross-entropy of logits against class targets, forward and backward, as
moye kernels.

Forward, per row r of logits x: lse[r] = log(sum(exp(x[r]))) and
loss[r] = lse[r] - x[r, target[r]] (0 where target[r] == ignore_index), in
float32 (float64 for float64 logits) whatever the logits' type. Backward:
dx[r] = (exp(x[r] - lse[r]) - onehot(target[r])) * dloss[r], 0 in ignored
rows, in the logits' type.

Two kernels each, on row_kernels' skeleton (rows.Plan says which):
- "registers": the forward loads the row once into registers and reduces
  its max and sum of exponentials over the row's threads; the row's first
  thread reads the target's logit with one scalar load (the row was just
  read: a cache hit) and writes loss and lse. The backward needs no
  reduction: each element from its logit, the row's lse and dloss.
- "loop": any N, one block per row: the forward's log-sum-exp in one online
  pass (row_kernels.loop_logsumexp); the backward in one pass. The forward
  takes it for rows of 65,536 or more, or that would need a cluster
  (rows.streamed).

Targets outside [0, N) (other than ignore_index) are refused before any
kernel runs on NumPy arrays and CPU tensors (on the host: _check_range); on
CUDA tensors the kernels check them, and a bad target's loss and gradient
are NaN (a check read on the host would make each call wait for the device).
"""
import numpy as np

from ..array import make_fragment_like
from ..compiler import Constexpr, func, kernel
from ..device import block_idx, cast, exp2, ifelse, maximum, minimum, thread_idx
from ..errors import BoundsError, MoyeTypeError, ShapeError
from ..layout import Layout, size

from . import replay, rows
from .row_kernels import (LOG2E, fragment, load_chunk, load_group, loop_logsumexp,
                          math_type, row_groups, row_logsumexp, store_chunk, store_row)

REDUCTIONS = ("none", "sum", "mean")
# the forward's elements per thread for 16-bit logits, times the default: it only reads, so
# each thread keeps more loads in flight (H100, bfloat16: N = 16,384 2,538 to 2,747 GB/s,
# 1,024 2,128 to 2,682; float32 gained nothing)
HALF_ELEMENTS_SCALE = 2


# -- kernels ---------------------------------------------------------------------------------

@kernel(fast_math=True)
def cross_entropy_registers(loss, lse, x, target, ignore_index, WORK: Constexpr,
                            STAGED: Constexpr):
    VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS = WORK
    first, count, step, t, nt, ring, bars = row_groups((x,), WORK, STAGED, STAGED)
    r = fragment(WORK, math_type(x.dtype))
    nth = 0
    for g in range(first, count, step):
        row, mine = load_group((r,), ring, (x,), g, count, step, t, nt, -float("inf"), WORK)
        tgt, xt = target_logit(x, target, row, r.dtype)
        m, l = row_logsumexp(r, nth, TPR, CLUSTER, THREADS, bars)
        if t == 0 and mine:
            write_loss(loss, lse, tgt, xt, ignore_index, row, size(x, 1), m, l)
        nth = nth + 1


@kernel(fast_math=True)
def cross_entropy_loop(loss, lse, x, target, ignore_index, VEC: Constexpr, THREADS: Constexpr):
    row = block_idx.x
    r = make_fragment_like(Layout((VEC, 1)), math_type(x.dtype))
    tgt, xt = target_logit(x, target, row, r.dtype)
    m, l = loop_logsumexp(x[row, None], r, THREADS)
    if thread_idx.x == 0:
        write_loss(loss, lse, tgt, xt, ignore_index, row, size(x, 1), m, l)


@func
def target_logit(x, target, row, dtype):
    """(target[row], the row's logit at it in `dtype`): read where the target
    is clamped into [0, N), so that a bad or ignored target reads in bounds
    (write_loss does not use that logit)."""
    tgt = target[row]
    return tgt, cast(x[row, minimum(maximum(tgt, 0), size(x, 1) - 1)], dtype)


@func
def write_loss(loss, lse, tgt, xt, ignore_index, row, n, m, l):
    """loss[row] = (m - x[row, target]) + l, with xt the target's logit; 0
    for an ignored row, NaN for a target outside [0, N) (the host refuses
    those of NumPy arrays and CPU tensors before the launch; on CUDA tensors
    the NaN is the check, as reading a device check's answer would make
    every call wait for the device); lse[row] = m + l."""
    v = cast(0.0, m.type)
    if tgt != ignore_index:
        v = cast(float("nan"), m.type)
        if tgt >= 0:
            if tgt < n:
                v = (m - xt) + l
    loss[row] = v
    lse[row] = m + l


@kernel(fast_math=True)
def cross_entropy_backward_registers(dx, x, target, lse, dloss, ignore_index, WORK: Constexpr,
                                     STAGED: Constexpr):
    VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS = WORK
    n = size(x, 1)
    first, count, step, t, nt, ring, bars = row_groups((x,), WORK, STAGED, STAGED, False)
    r = fragment(WORK, math_type(x.dtype))
    for g in range(first, count, step):
        row, mine = load_group((r,), ring, (x,), g, count, step, t, nt, 0.0, WORK)
        tgt, l, d = row_gradient_terms(target, lse, dloss, ignore_index, row, n, r.dtype)
        for k in range(CHUNKS):
            for e in range(VEC):
                r[e, k] = gradient(r[e, k], (k * nt + t) * VEC + e, tgt, l, d)
        if mine:
            store_row(dx[row, None], r, t, nt, n)


@kernel(fast_math=True)
def cross_entropy_backward_loop(dx, x, target, lse, dloss, ignore_index, VEC: Constexpr,
                                THREADS: Constexpr):
    n = size(x, 1)
    row = block_idx.x
    gx = x[row, None]
    gdx = dx[row, None]
    r = make_fragment_like(Layout((VEC, 1)), math_type(x.dtype))
    tgt, l, g = row_gradient_terms(target, lse, dloss, ignore_index, row, n, r.dtype)
    for c in range(thread_idx.x, n // VEC, THREADS):
        load_chunk(r, 0, gx, c)
        for e in range(VEC):
            r[e, 0] = gradient(r[e, 0], c * VEC + e, tgt, l, g)
        store_chunk(gdx, c, r, 0)


@func
def row_gradient_terms(target, lse, dloss, ignore_index, row, n, dtype):
    """(target, lse, dloss) of `row` in the math type `dtype`; dloss 0 for an
    ignored row, NaN for a target outside [0, N) (see write_loss)."""
    tgt = target[row]
    g = cast(dloss[row], dtype)
    if tgt == ignore_index:
        g = cast(0.0, dtype)
    else:
        if tgt < 0:
            g = cast(float("nan"), dtype)
        if tgt >= n:
            g = cast(float("nan"), dtype)
    return tgt, cast(lse[row], dtype), g


@func
def gradient(v, col, tgt, l, g):
    """(exp(v - lse) - [col == target]) * dloss for the logit v of column col."""
    p = exp2((v - l) * LOG2E)
    return (p - ifelse(col == tgt, cast(1.0, p.type), cast(0.0, p.type))) * g


# -- checks ----------------------------------------------------------------------------------

_TARGET_DTYPES = ("int64", "int32")


def check_target(logits, target, ignore_index, op):
    """Check target's kind, dtype, shape and device against logits', and
    ignore_index's type."""
    if rows.is_torch(target) != rows.is_torch(logits) or not (
            rows.is_torch(target) or isinstance(target, np.ndarray)):
        kind = "a torch tensor" if rows.is_torch(logits) else "a NumPy array"
        raise MoyeTypeError(f"{op}: target must be {kind}, as logits is; got "
                            f"{type(target).__name__}")
    name = str(target.dtype).removeprefix("torch.")
    if name not in _TARGET_DTYPES:
        raise MoyeTypeError(f"{op}: target must hold class indices as int64 or int32, got "
                            f"{name}")
    if tuple(target.shape) != tuple(logits.shape[:-1]):
        raise ShapeError(f"{op}: target has shape {tuple(target.shape)} but logits has "
                         f"{tuple(logits.shape)}; target must be logits' shape without its "
                         f"last (class) dimension, {tuple(logits.shape[:-1])}")
    if rows.is_torch(target) and target.device != logits.device:
        raise MoyeTypeError(f"{op}: target is on {target.device} but logits is on "
                            f"{logits.device}; they must be on the same device")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, (int, np.integer)):
        raise MoyeTypeError(f"{op}: ignore_index must be an int, got "
                            f"{type(ignore_index).__name__}")


def _check_range(target, n, ignore_index, op):
    """Refuse targets outside [0, n) other than ignore_index, naming the
    first such row and its value: for NumPy arrays and CPU tensors. On CUDA
    tensors the kernels check instead (a bad target's loss and gradient are
    NaN): reading a check's answer on the host would make each call wait for
    the device, and is not allowed while a CUDA graph is captured."""
    if rows.backend_of(target) == "cuda":
        return
    replay.host_work()
    bad = ((target < 0) | (target >= n)) & (target != ignore_index)
    if not bool(bad.any()):
        return
    flat = bad.reshape(-1)
    i = int(flat.nonzero()[0][0]) if rows.is_torch(target) else int(np.flatnonzero(flat)[0])
    where = np.unravel_index(i, tuple(target.shape)) if target.ndim > 1 else (i,)
    value = int(target.reshape(-1)[i])
    raise BoundsError(f"{op}: target[{', '.join(map(str, where))}] is {value}, outside the "
                      f"{n} classes [0, {n}) (and not ignore_index, {ignore_index})")


def _rows(logits, target, ignore_index, op):
    """(name, logits as (M, N), target as (M,), M, N), everything checked."""
    name = rows.dtype_name(logits, "logits", op)
    if (logits.dim() if rows.is_torch(logits) else logits.ndim) == 0:
        raise ShapeError(f"{op}: logits is 0-d; it needs a last dimension of classes")
    check_target(logits, target, ignore_index, op)
    x2, m, n = rows.as_rows(logits, "logits", op)
    if n == 0:
        raise ShapeError(f"{op}: logits has 0 classes (shape {tuple(logits.shape)}); it needs "
                         "at least one")
    _check_range(target, n, ignore_index, op)
    return name, x2, target.reshape(m), m, n


# -- the ops ---------------------------------------------------------------------------------

@replay.replayed
def cross_entropy_forward(logits, target, ignore_index=-100):
    """(loss, lse) per row of `logits` (..., N) against class indices
    `target` (...): lse = log(sum(exp(logits))) along the last dimension and
    loss = lse - logits[target], 0 where target == ignore_index; both of
    target's shape, float32 (float64 for float64 logits). torch:
    `F.cross_entropy(logits.float(), target, reduction="none")` and
    `torch.logsumexp(logits.float(), -1)`.

        >>> import numpy as np
        >>> loss, lse = cross_entropy_forward(np.array([[0.0, 1.0, 2.0]] * 2, np.float32),
        ...                                   np.array([2, -100]))
        >>> np.round(loss.astype(float), 4).tolist(), np.round(lse.astype(float), 4).tolist()
        ([0.4076, 0.0], [2.4076, 2.4076])
    """
    return _forward(logits, target, ignore_index, "cross_entropy_forward")


def _forward(logits, target, ignore_index, op):
    name, x2, t1, m, n = _rows(logits, target, ignore_index, op)
    out = rows.stats_dtype(name)
    loss = rows.empty(logits, (m,), out)
    lse = rows.empty(logits, (m,), out)
    knobs = {"elements": HALF_ELEMENTS_SCALE * rows.default_elements(n, name)} \
        if name in ("float16", "bfloat16") else {}
    rows.launch(rows.streamed(rows.plan_for(logits, name, n, **knobs)),
                cross_entropy_registers, cross_entropy_loop, loss, lse, x2, t1, int(ignore_index))
    shape = tuple(target.shape)
    return loss.reshape(shape), lse.reshape(shape)


@replay.replayed
def cross_entropy_backward(dloss, logits, target, lse, ignore_index=-100):
    """The gradient of the per-row loss with respect to `logits`:
    (exp(logits - lse) - onehot(target)) * dloss per row, 0 in rows where
    target == ignore_index, in logits' type; `dloss` and `lse` have target's
    shape and the loss's type (float32, float64 for float64 logits). torch:
    the gradient of `F.cross_entropy(..., reduction="none")`.

        >>> import numpy as np
        >>> x, t = np.array([[0.0, 1.0, 2.0]], np.float32), np.array([2])
        >>> loss, lse = cross_entropy_forward(x, t)
        >>> dx = cross_entropy_backward(np.ones(1, np.float32), x, t, lse)
        >>> np.round(dx.astype(float), 4).tolist()
        [[0.09, 0.2447, -0.3348]]
    """
    op = "cross_entropy_backward"
    name, x2, t1, m, n = _rows(logits, target, ignore_index, op)
    out = rows.stats_dtype(name)
    for what, v in (("dloss", dloss), ("lse", lse)):
        if not rows.same_place(v, logits):
            raise MoyeTypeError(f"{op}: {what} must be on logits' device (both NumPy, both CPU "
                                "tensors or both CUDA tensors)")
        vname = rows.dtype_name(v, what, op)
        if vname != out:
            raise MoyeTypeError(f"{op}: {what} must be {out} for {name} logits, got {vname}")
        if tuple(v.shape) != tuple(target.shape):
            raise ShapeError(f"{op}: {what} has shape {tuple(v.shape)} but target has "
                             f"{tuple(target.shape)}; they must match")
    dx = rows.empty_like(logits)
    # 16-bit logits keep rows.ELEMENTS a thread at every length, short rows too (H100,
    # bfloat16 at N = 1,024: 2,974 GB/s, 2,838 with SHORT_ELEMENTS)
    knobs = {"elements": rows.ELEMENTS} if name in ("float16", "bfloat16") else {}
    rows.launch(rows.plan_for(logits, name, n, **knobs), cross_entropy_backward_registers,
                cross_entropy_backward_loop, dx.reshape(m, n), x2, t1, lse.reshape(m),
                dloss.reshape(m), int(ignore_index), reduces=False)
    return dx


@replay.replayed
def cross_entropy(logits, target, ignore_index=-100, reduction="mean"):
    """Cross-entropy of `logits` (..., N) against class indices `target`
    (...): per row lse(logits) - logits[target], rows with target ==
    ignore_index left out; reduction "none" (the losses, target's shape),
    "sum", or "mean" (over the rows not ignored: NaN if all are), float32
    (float64 for float64 logits). torch: `F.cross_entropy(logits.float(),
    target, ignore_index=ignore_index, reduction=reduction)` for 2-d logits
    (torch takes the classes in dimension 1; here they are last).

        >>> import numpy as np
        >>> x = np.array([[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]], np.float32)
        >>> round(float(cross_entropy(x, np.array([2, 0]))), 4)
        0.2513
    """
    op = "cross_entropy"
    if not isinstance(reduction, str) or reduction not in REDUCTIONS:
        raise MoyeTypeError(f"{op}: reduction must be 'none', 'sum' or 'mean', got "
                            f"{reduction!r}")
    loss, _ = _forward(logits, target, ignore_index, op)
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "sum":
        return total
    count = (target != ignore_index).sum()
    if rows.is_torch(loss):
        return total / count
    with np.errstate(invalid="ignore", divide="ignore"):
        return loss.dtype.type(total / count)
