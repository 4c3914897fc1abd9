"""Row-wise ops' shared host side: checking the input, seeing it as M rows of
N contiguous elements, the launch plan (threads, elements per thread,
cluster, which kernel) per (dtype, N, backend, clusters), cached, the
launches, and the dispatch of the public ops (NumPy arrays to the raw host
functions, torch tensors to moye.ops.torch_ops).

An op reduces along `dim`. The last dimension of a C-contiguous array is used
in place; any other `dim` is moved last (one copy) and the result moved back.
Non-contiguous rows along the last dimension are refused: make them
contiguous first (`np.ascontiguousarray`, `tensor.contiguous()`).
"""
import contextlib
import functools
import importlib
import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ..compiler.arguments import as_array_arg
from ..errors import MoyeError, MoyeTypeError, ShapeError
from . import replay
from .row_kernels import COLUMN_LANES, COLUMNS, column_sum

MAX_N = 262_144
# elements a thread keeps in registers in the one-pass kernels (aimed at); half as many in
# rows of at most SHORT_ROW elements: H100, N = 1,024, GB/s of the forwards float32 softmax
# 2,934 to 2,999, layer_norm 2,908 to 2,932, bfloat16 softmax 2,934 to 2,985, rms_norm 2,888
# to 2,935, layer_norm 2,799 to 2,885 (the backwards -0.6 to +4.5%; at 4,096 it lost up to
# 22%); twice as many in 16-bit rows longer than LONG_ROW: H100, bfloat16 at 262,144, softmax
# forward 2,087-2,101 to 2,302-2,333, backward 2,525 to 2,650, log_softmax forward 2,029-2,055
# to 2,220-2,270, layer_norm forward 1,649-1,657 to 1,830-1,871 (log_softmax's backward -2.5%,
# rms_norm's forward -1.3%)
ELEMENTS = 32
SHORT_ROW, SHORT_ELEMENTS = 1024, 16
LONG_ROW, LONG_HALF_ELEMENTS = 65_536, 64
MAX_THREADS = 1024
# the block of short rows (several rows per block, a few lanes per row)
SMALL_BLOCK = 128
# the largest thread-block cluster: 8 blocks run on every GPU with clusters, 16 on sm_90
# (non-portable: the H100's and H200's), but only the backwards' rows that 8 blocks cannot
# keep in registers take 16 (largest_cluster_plan): on an H100 at 262,144, softmax's forward
# ran at 1,869 GB/s in float32 (2,831 in 8 blocks of 1,024 threads), 2,155 in bfloat16
# (2,463); and the threads of a cluster's blocks
PORTABLE_CLUSTER, MAX_CLUSTER = 8, 16
# the most stages of a looping kernel's ring of staged rows (staged, plan_options)
MAX_STAGES = 4
CLUSTER_THREADS = 256
_DTYPES = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16",
           np.dtype(ml_dtypes.bfloat16): "bfloat16", np.dtype(np.float64): "float64"}
_TORCH_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16", "torch.float64")


def is_torch(x):
    """Whether `x` is a torch tensor (duck typing: torch stays optional)."""
    return type(x).__module__.startswith("torch")


def flag(v, what, op):
    """`v` as a bool, or a MoyeTypeError unless it is True or False.
        >>> flag(1, "allow_tf32", "matmul")
        Traceback (most recent call last):
        ...
        moye.errors.MoyeTypeError: matmul: allow_tf32 must be True or False, got int 1
    """
    if not isinstance(v, (bool, np.bool_)):
        raise MoyeTypeError(f"{op}: {what} must be True or False, got {type(v).__name__} {v!r}")
    return bool(v)


def dtype_name(x, what, op):
    """'float32', 'float16', 'bfloat16' or 'float64' for `x`, else a MoyeTypeError."""
    if is_torch(x):
        name = str(x.dtype)
        if name in _TORCH_DTYPES:
            return name[len("torch."):]
        name = name[len("torch."):] if name.startswith("torch.") else name
    elif isinstance(x, np.ndarray):
        if x.dtype in _DTYPES:
            return _DTYPES[x.dtype]
        name = str(x.dtype)
    else:
        raise MoyeTypeError(f"{op}: {what} must be a NumPy array or a torch tensor, got "
                            f"{type(x).__name__}")
    raise MoyeTypeError(f"{op}: {what} must be float32, float16, bfloat16 or float64, got {name}")


def check_dim(x, dim, what, op):
    """`dim` as a non-negative axis of `x`."""
    nd = x.ndim if not is_torch(x) else x.dim()
    if nd == 0:
        raise ShapeError(f"{op}: {what} is 0-d; it needs at least one dimension to reduce along")
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
        raise MoyeTypeError(f"{op}: dim must be an int, got {type(dim).__name__}")
    if not -nd <= dim < nd:
        raise ShapeError(f"{op}: dim {dim} is out of range for {what} of {nd} dimensions "
                         f"(expected {-nd} to {nd - 1})")
    return int(dim) % nd


def to_last(x, dim):
    """`x` with `dim` moved last (a contiguous copy when dim is not last)."""
    last = (x.dim() if is_torch(x) else x.ndim) - 1
    if dim == last:
        return x
    if is_torch(x):
        return x.movedim(dim, -1).contiguous()
    return np.ascontiguousarray(np.moveaxis(x, dim, -1))


def from_last(y, dim, nd):
    """Undo `to_last`."""
    if dim == nd - 1:
        return y
    return y.movedim(-1, dim) if is_torch(y) else np.moveaxis(y, -1, dim)


def as_rows(x, what, op):
    """`x` (its reduced dimension last) as an (M, N) view, without a copy;
    non-contiguous rows are refused."""
    shape = tuple(x.shape)
    n = shape[-1]
    if n > MAX_N:
        raise ShapeError(f"{op}: {what} has rows of {n} elements; at most {MAX_N} are supported")
    contiguous = x.is_contiguous() if is_torch(x) else x.flags.c_contiguous
    if not contiguous:
        raise ShapeError(f"{op}: {what} must be contiguous (C order) along its rows; got strides "
                         f"{tuple(x.stride()) if is_torch(x) else x.strides}: call "
                         ".contiguous() / np.ascontiguousarray first")
    m = math.prod(shape[:-1])
    return x.reshape(m, n), m, n


_NUMPY_TYPES = {name: dtype for dtype, name in _DTYPES.items()} | {"int64": np.dtype(np.int64),
                                                                   "int32": np.dtype(np.int32)}


def empty(like, shape, dtype=None):
    """A new C-contiguous array of `shape` and `dtype` (a name: 'float32',
    ..., 'int64'; None: like's) of like's kind: NumPy, or a torch tensor on
    like's device."""
    if is_torch(like):
        import torch
        if dtype is None and shape == like.shape:
            out = torch.empty_like(like, memory_format=torch.contiguous_format)
        else:
            t = like.dtype if dtype is None else getattr(torch, dtype)
            out = torch.empty(shape, dtype=t, device=like.device)
        return replay.output(out)
    return replay.output(np.empty(shape, like.dtype if dtype is None else _NUMPY_TYPES[dtype]))


def zeros(like, shape, dtype=None):
    """empty(), zero-filled (a replay makes it zero-filled again).
        >>> zeros(np.ones(2, np.float16), (2, 3), "int32").tolist()
        [[0, 0, 0], [0, 0, 0]]
    """
    if is_torch(like):
        import torch
        out = torch.zeros(shape, dtype=like.dtype if dtype is None else getattr(torch, dtype),
                          device=like.device)
        return replay.output(out, zeroed=True)
    return replay.output(np.zeros(shape, like.dtype if dtype is None else _NUMPY_TYPES[dtype]),
                         zeroed=True)


def empty_like(x):
    """empty() of x's shape and dtype."""
    return empty(x, x.shape)


def backend_of(x):
    """'cuda' for a torch CUDA tensor, else 'cpu'."""
    if is_torch(x) and x.device.type == "cuda":
        return "cuda"
    return "cpu"


def same_place(a, b):
    """Whether `a` and `b` live in one place: both NumPy arrays, or torch
    tensors on one device (two CUDA tensors on different GPUs do not)."""
    ta = is_torch(a)
    return ta == is_torch(b) and (not ta or a.device == b.device)


def overlaps(a, b):
    """Whether arrays `a` and `b` (NumPy, torch) may share memory: their
    byte ranges meet (conservative, as np.may_share_memory).
        >>> x = np.zeros((4, 6), np.float16)
        >>> overlaps(x[:, :3], x[:, 3:]), overlaps(x[:2], x[2:])
        (True, False)
    """
    if a is None or b is None:
        return False
    ranges = []
    for t in (a, b):
        arg = as_array_arg(t)
        if arg is None:                 # not an array: the op's own checks name it
            return False
        size = arg.dtype.bits // 8
        span = [(n - 1) * s * size for n, s in zip(arg.shape, arg.strides)]
        if 0 in arg.shape:
            return False
        ranges.append((arg.ptr + sum(min(0, d) for d in span),
                       arg.ptr + sum(max(0, d) for d in span) + size))
    (lo_a, hi_a), (lo_b, hi_b) = ranges
    return lo_a < hi_b and lo_b < hi_a


def stats_dtype(name):
    """The dtype of the per-row statistics (rstd, mean, lse, loss) and of
    the partial sums, for inputs of dtype `name`: 'float64' for float64,
    else 'float32'."""
    return "float64" if name == "float64" else "float32"


def max_cluster(x, portable=True):
    """The largest thread-block cluster the plans for `x`'s device take: on
    a CUDA device of compute capability 9.0 or later PORTABLE_CLUSTER, or
    with portable=False the most it runs (MAX_CLUSTER on 9.x); else 1."""
    if backend_of(x) != "cuda":
        return 1
    most = _cuda_max_cluster(x.device.index)
    return min(most, PORTABLE_CLUSTER) if portable else most


@functools.lru_cache(maxsize=64)
def _cuda_max_cluster(index):
    import torch
    major = torch.cuda.get_device_capability(index)[0]
    return 1 if major < 9 else MAX_CLUSTER if major == 9 else PORTABLE_CLUSTER


# blocks of the backward kernels on the CPU backend (the row loops run there too)
CPU_BLOCKS = 4
# an SM's threads and 32-bit registers (sm_80 and sm_90), and a thread's most
SM_THREADS = 2048
SM_REGISTERS = 65536
MAX_REGISTERS = 255


def parallel_blocks(x, threads, registers=0, shared=0):
    """How many blocks of `threads` the looping kernels (a backward that sums
    over rows) launch for `x`'s device: as many as fit at once, the SM count
    (cached per device) times the blocks of `threads` an SM holds, by its
    threads and, given the `registers` a thread needs (an estimate) and the
    `shared` bytes a block takes, by its registers and shared memory;
    CPU_BLOCKS on the CPU backend. Not more, so that every block runs in the
    one wave and they share the rows evenly.
        >>> parallel_blocks(np.zeros(3, np.float32), 256)
        4
    """
    if backend_of(x) != "cuda":
        return CPU_BLOCKS
    sms, sm_shared = _cuda_device(x.device.index)[:2]
    per_sm = SM_THREADS // threads
    if registers:
        per_thread = min(MAX_REGISTERS, -(-registers // 8) * 8)
        per_sm = min(per_sm, SM_REGISTERS // (per_thread * threads))
    if shared:
        per_sm = min(per_sm, sm_shared // (shared + BLOCK_RESERVED_SHARED))
    return sms * max(1, per_sm)


def multiprocessors(x):
    """The multiprocessors of torch CUDA tensor `x`'s device (cached)."""
    return _cuda_device(x.device.index)[0]


def hopper(x):
    """Whether torch CUDA tensor `x`'s device is of compute capability 9.x
    (cached): the wgmma kernels' (sm_90a)."""
    return _cuda_device(x.device.index)[3] == 9


# the shared memory the driver keeps per block (sm_80, sm_90)
BLOCK_RESERVED_SHARED = 1024


@functools.lru_cache(maxsize=64)
def _cuda_device(index):
    """(SMs, shared bytes per SM, shared bytes a block may opt in to, compute
    capability's major) of CUDA device `index`."""
    import torch
    props = torch.cuda.get_device_properties(index)
    return (props.multi_processor_count, props.shared_memory_per_multiprocessor,
            props.shared_memory_per_block_optin, props.major)


@dataclass(frozen=True)
class Plan:
    """How one row-wise op runs for one (dtype, N, backend). A row is N / vec
    chunks of `vec` elements (16 bytes of the input type where N allows).
    kernel "registers": each thread keeps `chunks` chunks of its row in
    registers (the row is read once); `tpr` threads per row, `rows` rows per
    block of `threads` (tpr a power of two up to 32 when rows > 1), or one
    row per cluster of `cluster` blocks (sm_90, DSMEM reductions).
    kernel "loop": any N, one block of `threads` per row, looping over the
    row twice (chunks == 1)."""
    dtype: str
    n: int
    backend: str
    threads: int
    tpr: int
    rows: int
    vec: int
    chunks: int
    cluster: int
    kernel: str

    @property
    def work(self):
        """The kernels' static WORK argument: (VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS)."""
        return (self.vec, self.chunks, self.rows, self.tpr, self.cluster, self.threads)


_OPTIONS = {}


@contextlib.contextmanager
def plan_options(**knobs):
    """Within the block, plans use these of plan()'s knobs (max_cluster,
    elements, max_threads, cluster_threads) instead of the defaults,
    staged() says `staged` and keeps() `keep` (with "sums", a backward
    keeps its column sums too wherever they fit: backward_plan): to take
    each kernel on small rows (tests) or to tune.
        >>> with plan_options(elements=4, max_threads=256):
        ...     plan_for(np.zeros((1, 4096), np.float32), "float32", 4096).kernel
        'loop'
    """
    unknown = set(knobs) - {"max_cluster", "elements", "max_threads", "cluster_threads",
                            "staged", "keep"}
    if unknown:
        raise MoyeTypeError(f"plan_options: unknown knobs {sorted(unknown)}; expected "
                            "max_cluster, elements, max_threads, cluster_threads, staged or keep")
    stages = knobs.get("staged", False)
    if not (isinstance(stages, bool) or isinstance(stages, int) and 1 <= stages <= MAX_STAGES):
        raise MoyeTypeError(f"plan_options: staged must be True, False or a number of stages "
                            f"from 1 to {MAX_STAGES}, got {stages!r}")
    keep = knobs.get("keep", False)
    if not (isinstance(keep, bool) or isinstance(keep, str) and keep == "sums"):
        raise MoyeTypeError(f"plan_options: keep must be True, False or 'sums', got "
                            f"{knobs['keep']!r}")
    for name, ok, want in (
            ("max_threads", lambda v: v % 32 == 0 and 32 <= v <= MAX_THREADS,
             f"a multiple of 32 from 32 to {MAX_THREADS}"),
            ("cluster_threads", lambda v: v % 32 == 0 and 32 <= v <= MAX_THREADS,
             f"a multiple of 32 from 32 to {MAX_THREADS}"),
            ("max_cluster", lambda v: 1 <= v <= MAX_CLUSTER and v & (v - 1) == 0,
             f"a power of two from 1 to {MAX_CLUSTER}"),
            ("elements", lambda v: v >= 1, "at least 1")):
        v = knobs.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not ok(v)):
            raise MoyeTypeError(f"plan_options: {name} must be {want}, got {v!r}")
    saved = dict(_OPTIONS)
    _OPTIONS.update(knobs)
    replay.forget()                     # calls recorded under other plans
    try:
        yield
    finally:
        _OPTIONS.clear()
        _OPTIONS.update(saved)
        replay.forget()


def _plan_knobs():
    """The plan_options that are plan()'s knobs."""
    return {k: v for k, v in _OPTIONS.items() if k not in ("staged", "keep")}


def plan_for(x, dtype, n, **defaults):
    """plan() for rows of `n` elements of `x` (its backend and device's
    clusters), with an op's own `defaults` of plan()'s knobs, under the
    current plan_options (which override both)."""
    options = _plan_knobs()
    if options or defaults:
        knobs = {"max_cluster": max_cluster(x), **defaults, **options}
        return plan(dtype, n, backend_of(x), **knobs)
    return plan(dtype, n, backend_of(x), max_cluster(x))


_SIZES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


@functools.lru_cache(maxsize=4096)
def plan(dtype, n, backend, max_cluster=1, elements=None, max_threads=MAX_THREADS,
         cluster_threads=CLUSTER_THREADS):
    """The Plan for rows of `n` elements of `dtype` on `backend`, with
    clusters of up to `max_cluster` blocks (1: none), aiming at `elements`
    per thread (by default default_elements(n, dtype)) and at most
    `max_threads` per block (cached: the same object
    for the same arguments). In order of preference:
    - a short row: a power of two of lanes, up to 32, `elements` each;
    - a row in one block: as many threads as give each elements / 2 (more
      threads keep more loads in flight), up to max_threads, and at most
      `elements` each;
    - a row in a cluster of blocks of `cluster_threads` (doubled, up to
      max_threads, while the cluster would be too large), `elements` each;
    - else the loop kernel.
        >>> p = plan("float32", 4096, "cuda")
        >>> p.kernel, p.vec, p.threads, p.chunks
        ('registers', 4, 256, 4)
    """
    elements = elements or default_elements(n, dtype)
    vec = 16 // _SIZES[dtype]
    while n % vec:
        vec //= 2
    groups = n // vec
    per = max(1, elements // vec)                       # chunks per thread aimed at
    want = -(-groups // per)
    if want <= 32:
        tpr = 1 << (want - 1).bit_length()
        threads = max(tpr, SMALL_BLOCK)
        return Plan(dtype, n, backend, threads, tpr, threads // tpr, vec, -(-groups // tpr), 1,
                    "registers")
    threads = min(max_threads, -(-groups // max(1, per // 2) // 32) * 32)
    chunks = -(-groups // threads)
    if chunks <= per:
        return Plan(dtype, n, backend, threads, threads, 1, vec, chunks, 1, "registers")
    threads = min(max_threads, cluster_threads)
    while True:
        cluster = 1 << (-(-groups // (threads * per)) - 1).bit_length()
        if cluster <= max_cluster:
            chunks = -(-groups // (threads * cluster))
            return Plan(dtype, n, backend, threads, threads * cluster, 1, vec, chunks, cluster,
                        "registers")
        if threads * 2 > max_threads:
            break
        threads *= 2
    return _loop_plan(dtype, n, backend, vec, max_threads)


def default_elements(n, dtype):
    """The elements a thread aims at in rows of `n` of `dtype` (see ELEMENTS).
        >>> default_elements(1024, "float32"), default_elements(4096, "bfloat16")
        (16, 32)
        >>> default_elements(262144, "float32"), default_elements(262144, "bfloat16")
        (32, 64)
    """
    if n <= SHORT_ROW:
        return SHORT_ELEMENTS
    return LONG_HALF_ELEMENTS if n > LONG_ROW and _SIZES[dtype] == 2 else ELEMENTS


def _loop_plan(dtype, n, backend, vec, max_threads=MAX_THREADS):
    threads = max_threads if backend == "cuda" else min(max_threads, 256)
    return Plan(dtype, n, backend, threads, threads, 1, vec, 1, 1, "loop")


STREAMED_ROW = 65_536


def streamed(p):
    """Plan `p`, or the loop kernel's plan for rows of STREAMED_ROW elements
    or more or that `p` splits over a cluster, unless plan_options chose the
    plan: for a kernel that only reads its rows (cross_entropy's forward,
    one online pass), one block streaming each row outruns the registers of
    a cluster or of a whole block. H100, GB/s at N = 65,536 / 262,144:
    float32 2,747 / 2,138 to 3,081 / 3,064, bfloat16 2,340 / 1,469 to
    2,881 / 2,878.
        >>> streamed(plan("float32", 262144, "cuda", 8)).kernel
        'loop'
    """
    if (p.cluster == 1 and p.n < STREAMED_ROW) or _plan_knobs():
        return p
    return _loop_plan(p.dtype, p.n, p.backend, p.vec)


def map_rows(op, registers, loop, dim, **arrays):
    """The output of a row-wise op whose kernels map rows of `arrays` (named,
    in order: x, or y and dy) along `dim` to rows of one output like the
    first: every array checked to have the first's dtype, shape and device,
    `dim` moved last and back, the plan's kernel launched (launch()).
    Softmax and log_softmax, forward and backward, are this."""
    (first, a), *others = arrays.items()
    name = dtype_name(a, first, op)
    for what, b in others:
        other = dtype_name(b, what, op)
        if other != name:
            raise MoyeTypeError(f"{op}: {what} is {other} but {first} is {name}; they must "
                                "have the same dtype")
        if tuple(b.shape) != tuple(a.shape):
            raise ShapeError(f"{op}: {what} has shape {tuple(b.shape)} but {first} has "
                             f"{tuple(a.shape)}; they must match")
        if not same_place(a, b):
            raise MoyeTypeError(f"{op}: {first} and {what} must be on the same device (both "
                                "NumPy, both CPU tensors or both CUDA tensors)")
    d = check_dim(a, dim, first, op)
    nd = a.dim() if is_torch(a) else a.ndim
    moved = [to_last(v, d) for v in arrays.values()]
    flat = [as_rows(v, what, op) for what, v in zip(arrays, moved)]
    _, m, n = flat[0]
    out = empty_like(moved[0])
    if n:
        p = plan_for(a, name, n)
        if len(flat) > 1:
            p = pair_plan(a, p)
        launch(p, registers, loop, out.reshape(m, n), *(f[0] for f in flat), inputs=len(flat))
    return from_last(out, d, nd)

def launch(p, registers, loop, out, *args, inputs=1, reduces=True, params=None):
    """Run plan `p`'s kernel over the (M, N) `out` and the other arguments:
    for a "registers" plan, registers over the row groups, a group per
    block (or cluster), or where persists() or keeps() says, as many as run
    at once, each looping over its groups (launch_groups) with the next
    group's rows staged where staged() allows; else loop[M, threads](out,
    *args, p.vec, p.threads). The registers kernel reads rows of `inputs`
    arrays and, if `reduces`, reduces over them; `params`, for a norm's
    forward: its (N,) parameters given (weight, bias), and the kernel takes
    keeps()'s KEEP after STAGED."""
    m = out.shape[0]
    if m == 0:
        return
    keep = () if params is None else (keeps(p, out, params, inputs, forward=True),)
    if p.kernel == "registers" and (any(keep) or persists(p, out, inputs, reduces)):
        stages = staged(p, out, inputs)
        count = group_count(p, out, m, inputs, inputs * stages,
                            kept_bytes(p, params) if any(keep) else 0)
        launch_groups(p, registers, count, out, *args, staged=stages, tail=keep)
    elif p.kernel == "registers":
        run(p, registers, -(-m // p.rows) * p.cluster, p.threads, out, *args, p.work, False,
            *keep, cluster=p.cluster)
    else:
        run(p, loop, m, p.threads, out, *args, p.vec, p.threads)


def keeps(p, x, params, inputs, forward=False, sums=0):
    """Whether the looping kernel of a norm of plan `p` keeps its (N,)
    `params` (weight and bias, those given), and `sums` fragments of column
    sums, in shared memory (row_kernels.kept_param, zeros(KEEP=True)), not
    in registers nor read from L2 at every row: as plan_options(keep=) says,
    else for a cluster's row on a CUDA device, a backward's (backward_plan
    says which) or a forward's whose parameters would take KEPT_REGISTERS
    of a thread or whose launch persists() anyway (keeping makes it loop);
    on a CUDA device only where they fit beside the ring of its `inputs`
    staged rows (ring_bytes). On an H100 (2**27 elements, GB/s as a share
    of the copy's), rms_norm's forward at bfloat16 131,072 and 262,144 (64
    elements a thread) went from 0.86 and 0.90 to 0.96 keeping, at float32
    131,072 (32, persistent) from 0.90 to 0.97; at 65,536 (32) from 0.99 to
    0.96; layer_norm's (weight and bias) at 65,536 from 0.79 to 0.84."""
    if p.kernel != "registers" or not params or not _OPTIONS.get("keep", True):
        return False
    if "keep" not in _OPTIONS:
        if p.cluster == 1 or backend_of(x) != "cuda":
            return False
        if forward and len(params) * p.vec * p.chunks < KEPT_REGISTERS and not persists(
                p, x, inputs, True):
            return False
    if backend_of(x) != "cuda":
        return True
    ring = ring_bytes(p, inputs * staged(p, x, inputs))
    return ring + kept_bytes(p, params, sums) + MERGE_SHARED <= _cuda_device(x.device.index)[2]


# the elements a thread of a forward's parameters (the registers they would take) from which
# it keeps them in shared memory
KEPT_REGISTERS = 64

# the most shared memory a row kernel takes besides its ring and kept arrays (row_merge's
# warps' and blocks' tuples in two slots, its mbarriers: 2.3 KB for three float64 values
# in 32 warps and 16 blocks)
MERGE_SHARED = 4096


def backward_plan(x, dtype, n, fragments, weight, sums=0):
    """(plan, kept) of a norm's backward whose threads keep `fragments`
    fragments, one of them the weight's and `sums` of them column sums that
    may move too (in order: layer_norm's dbias, then dweight sums):
    plan_fitting's and kept 0, or, where keeps() them, the plan for the
    fragments left in registers with kept 1 (the weight in shared memory)
    or 1 + k (the first k sums too: the fewest that leave a registers plan;
    as many as fit under plan_options(keep="sums")). By default only for
    16-bit rows, or where keeping is what leaves a registers plan. A row
    that no portable cluster holds even so (the loop plan, or one over more
    than PORTABLE_CLUSTER blocks) takes the wide plan instead (WIDE_KNOBS
    over the device's largest cluster), keeping the weight and, in blocks
    of MAX_THREADS, as many sums as fit: their threads' 64 registers spill
    them otherwise, reloaded and stored at every row (ptxas, sm_90a:
    layer_norm's at bfloat16 262,144, 132 bytes; none with the dbias sums
    kept). On an H100 (2**27 elements, GB/s as a share of the copy's),
    rms_norm's bfloat16 backward went from 0.91, 0.90 and 0.57 to 0.96, 0.94 and 0.84
    at 16,384, 65,536 and 131,072 keeping the weight; at 262,144, wide,
    rms_norm's from 0.78 (bfloat16, kept in 16 blocks of 256) and 0.58
    (float32, the slab kernels) to 0.81 and 0.92, layer_norm's from 0.55
    (its sums kept too) and 0.52 to 0.60 and 0.60; in float32 keeping lost
    up to 0.03 elsewhere (its column partials grow with the groups that
    fit)."""
    plain = plan_fitting(x, dtype, n, fragments)
    wanted = "keep" in _OPTIONS or _SIZES[dtype] < 4 or plain.kernel != "registers"
    if weight is None or not wanted:
        return plain, 0
    chosen = plain, 0
    most = _OPTIONS.get("keep") == "sums"
    fewest_first, most_first = range(1, sums + 2), range(sums + 1, 0, -1)
    for kept in most_first if most else fewest_first:
        q = plan_fitting(x, dtype, n, fragments - kept)
        if keeps(q, x, (weight,), 2, sums=kept - 1):
            chosen = q, kept
            break
    p = chosen[0]
    if (p.kernel != "registers" or p.cluster > PORTABLE_CLUSTER) and not _plan_knobs() and (
            backend_of(x) == "cuda"):
        q = plan(dtype, n, "cuda", max_cluster(x, portable=False), **WIDE_KNOBS)
        if q.kernel == "registers":
            for kept in most_first if most or q.threads == MAX_THREADS else fewest_first:
                if keeps(q, x, (weight,), 2, sums=kept - 1):
                    return q, kept
    return chosen


def param_size(w):
    """The bytes of an element of parameter `w` (a NumPy array or torch tensor)."""
    return w.element_size() if is_torch(w) else w.itemsize


def kept_bytes(p, params, sums=0):
    """The shared memory of a block of plan `p` keeping `params` (kept_param)
    and `sums` fragments of the math type (zeros with KEEP): its threads' chunks
    of each."""
    size = sum(param_size(w) for w in params) + sums * _SIZES[stats_dtype(p.dtype)]
    return size * p.vec * p.chunks * p.threads


def persists(p, x, inputs, reduces):
    """Whether plan `p`'s registers kernel (launch) runs as many row groups
    as fit at once, each looping over groups with its next rows staged:
    where staged() allows, for a kernel that reduces rows of one input, or
    of more in a cluster beyond the portable size, in blocks that take an
    SM alone (no other block's loads hide its wait at the row
    reductions), or as plan_options(staged=) says. On an H100, the forwards
    at 262,144 elements, blocks of 1,024: softmax float32 2,176 to 2,745
    GB/s, bfloat16 1,718 to 2,087, cross_entropy 1,791 to 2,069; softmax's
    backward in clusters of 16, float32 2,685 to 2,944, bfloat16 2,083 to
    2,644; blocks of 256 (65,536), cross_entropy's backward (no reduction)
    and the backwards of two inputs in clusters of 8 ran up to 25% slower.
    """
    if not staged(p, x, inputs):
        return False
    if "staged" in _OPTIONS:
        return True
    alone = parallel_blocks(x, p.threads, registers_of(p, inputs)) == _cuda_device(
        x.device.index)[0]
    return reduces and alone and (inputs == 1 or p.cluster > PORTABLE_CLUSTER)


def run(p, kernel, grid, threads, *args, cluster=1):
    """kernel[grid, threads(, cluster)](*args) on plan `p`'s backend (for a
    CUDA plan, backend=None: the launch's fast path finds it from the
    arrays)."""
    backend = None if p.backend == "cuda" else p.backend
    config = (grid, threads, cluster) if cluster > 1 else (grid, threads)
    replay.launch(kernel, config, args, backend)


# -- dispatch: NumPy arrays to the raw host functions, torch tensors to the custom ops ----------

# Each op's raw host functions (no autograd; NumPy arrays or torch tensors in,
# the same kind out) and the module of moye.ops that holds them.
RAW_MODULES = {
    "matmul": "matmul_op", "output_shape": "matmul_op", "type_name": "matmul_op",
    "input_type": "matmul_op", "overwrites_operand": "matmul_op", "writable_out": "matmul_op",
    "softmax": "softmax_op", "softmax_backward": "softmax_op",
    "log_softmax": "log_softmax_op", "log_softmax_backward": "log_softmax_op",
    "rms_norm_forward": "rms_norm_op", "rms_norm_backward": "rms_norm_op",
    "layer_norm_forward": "layer_norm_op", "layer_norm_backward": "layer_norm_op",
    "cross_entropy": "cross_entropy_op", "cross_entropy_forward": "cross_entropy_op",
    "cross_entropy_backward": "cross_entropy_op", "attention": "attention_op",
    "attention_forward": "attention_op", "attention_backward": "attention_op",
    "check_operands": "attention_op", "attention_varlen": "attention_op",
    "attention_varlen_forward": "attention_op", "attention_varlen_backward": "attention_op",
}


@functools.lru_cache(maxsize=None)
def raw(name):
    """The raw host function `name` of RAW_MODULES, from its module."""
    module = RAW_MODULES[name]
    try:
        return getattr(importlib.import_module(f"{__package__}.{module}"), name)
    except ModuleNotFoundError as e:
        if e.name != f"{__package__}.{module}":
            raise
        raise MoyeError(f"moye.ops.{name}: its kernels (moye/ops/{module}.py) are not in this "
                        "build of moye") from None


def uses_torch(*arrays):
    """Whether any of `arrays` (None ones skipped) is a torch tensor: then the
    op runs as its torch custom op (moye.ops.torch_ops), so that autograd,
    torch.compile and CUDA graphs see it; otherwise the raw function runs."""
    return any(is_torch(a) for a in arrays)


def torch_ops():
    """moye.ops.torch_ops, imported (with torch) on the first torch tensor."""
    global _torch_ops
    if _torch_ops is None:
        from . import torch_ops as module
        _torch_ops = module
    return _torch_ops


_torch_ops = None


def sum_columns(part, dtype):
    """The sums of the (P, N) partial's columns (float32 or float64), as a
    new (N,) array of `dtype` (a name, as empty() takes) on part's device:
    the backward kernels' per-block column sums (dweight, dbias) added up."""
    out = empty(part, (part.shape[1],), dtype)
    if part.shape[1]:
        backend = None if backend_of(part) == "cuda" else "cpu"
        replay.launch(column_sum, (-(-part.shape[1] // COLUMNS), COLUMNS * COLUMN_LANES),
                      (out, part), backend)
    return out


# registers a thread of the looping kernels needs besides its fragments
# (addresses, indices, sums), from NVRTC's sm_90a cubins of the norms' backwards
BASE_REGISTERS = 40

# the chunks a thread's fragment has in the plans BASE_REGISTERS was read from (16 bytes a
# chunk: bfloat16 at 64 elements a thread); in a norm's backward, each chunk past them (rows
# whose length allows only narrower chunks) costs about CHUNK_REGISTERS more, its addresses
# and bound (ptxas, sm_90a: rms_norm's at bfloat16 131,071, 64 chunks of one element,
# spilled 432 bytes at 255 registers where 131,072's 8 chunks took 242)
BASE_CHUNKS, CHUNK_REGISTERS = 8, 2


# the same for softmax's and log_softmax's backwards, which keep two fragments (ptxas,
# sm_90a: 12 to 20 registers besides them), and what each of their chunks past BASE_CHUNKS
# costs (bfloat16 at 200,001, 49 chunks of one element in blocks of 512: 24 and 92 bytes
# spilled at 128 registers)
PAIR_REGISTERS, PAIR_CHUNK_REGISTERS = 24, 1


def registers_of(p, fragments, elements=None, base=BASE_REGISTERS):
    """An estimate of the registers a thread of plan `p` needs when it keeps
    `fragments` fragments of `elements` (default: p.vec * p.chunks) in the
    math type, besides `base` others (0: unknown)."""
    if not fragments:
        return 0
    elements = p.vec * p.chunks if elements is None else elements
    return fragments * elements * (2 if p.dtype == "float64" else 1) + base


# the knobs of the plan for kernels whose threads keep more fragments than the
# forward's one (the backwards): half the elements, blocks of at most 512
FITTING_KNOBS = {"elements": ELEMENTS // 2, "max_threads": 512}


# the plan of a backward whose row no portable cluster holds (backward_plan): blocks of
# 1,024 over the device's largest cluster, 16 elements a thread, keeping the weight in shared
# memory, and layer_norm's sums where they fit (ptxas, sm_90a: rms_norm's 64 registers, no
# spills; layer_norm's dbias sums kept in bfloat16, no spills; in float32 they do not fit
# beside the ring, and it spills 180 bytes)
WIDE_KNOBS = {"elements": ELEMENTS // 2, "max_threads": MAX_THREADS}


def plan_fitting(x, dtype, n, fragments):
    """plan_for(), unless on a CUDA device its blocks would need more
    registers than an SM has for `fragments` fragments per thread (NVRTC
    would spill them to local memory: blocks of 1,024 threads get 64
    registers each). Then, for a row split over a cluster, its
    largest_cluster_plan where that fits (on an H100 the norms' backwards
    in float32 at 131,072, which the slab kernels took: rms_norm 1,779 to
    2,834 GB/s, layer_norm 1,727 to 2,562); else the plan under
    FITTING_KNOBS (fewer elements per thread; on sm_90 a cluster), or where
    none fits the loop plan (the backwards' slab kernels; on an H100,
    rms_norm's backward in bfloat16 at 262,144 ran at 316 GB/s spilling)."""
    p = plan_for(x, dtype, n)
    if _plan_knobs() or p.backend != "cuda" or p.kernel != "registers" or fits(
            p, fragments, chunk=CHUNK_REGISTERS):
        return p
    q = largest_cluster_plan(x, p) if p.cluster > 1 else None
    if q is not None and fits(q, fragments, chunk=CHUNK_REGISTERS):
        return q
    return plan(dtype, n, p.backend, max_cluster(x), **FITTING_KNOBS)


def pair_plan(x, p):
    """The plan of a backward that keeps two fragments per thread (softmax's and
    log_softmax's) for rows of `x`: plan `p`, unless on a CUDA device its
    blocks would spill them (fits, PAIR_REGISTERS and PAIR_CHUNK_REGISTERS);
    then its largest_cluster_plan at ELEMENTS per thread, where there is
    one. The plans that spill (ptxas, sm_90a): float32 at 262,144 (8 x 1,024
    x 32), both at 32,768 (one block of 1,024 x 32; 20 to 64 bytes) and
    16-bit rows at 262,144 (8 x 512 x 64; 80 to 84 bytes, reloaded in the
    row loop, one before its barrier). H100, GB/s of softmax's /
    log_softmax's backward in float32 at 262,144: 2,515 / 2,729 to 2,915 /
    2,883; H200, softmax's in bfloat16 at 262,144, 0.82 to 0.93 of the copy
    in clusters of 16. Clusters of 16 for plans that fit lost up to 16%
    (bfloat16 at 100,000).
        >>> pair_plan(np.zeros(1), plan("float32", 4096, "cpu")).threads
        256
    """
    if _plan_knobs() or p.backend != "cuda" or fits(p, 2, PAIR_REGISTERS, PAIR_CHUNK_REGISTERS):
        return p
    return largest_cluster_plan(x, p, ELEMENTS) or p


def largest_cluster_plan(x, p, elements=None):
    """Plan `p`'s rows in blocks of at most FITTING_KNOBS' threads over the
    largest cluster `x`'s device runs (max_cluster(x, portable=False): 16
    on an H100), `elements` per thread (None: the default), where that is a
    registers plan; else None."""
    q = plan(p.dtype, p.n, p.backend, max_cluster(x, portable=False), elements=elements,
             max_threads=FITTING_KNOBS["max_threads"])
    return q if q.kernel == "registers" else None


def fits(p, fragments, base=BASE_REGISTERS, chunk=0):
    """Whether an SM holds the registers of a block of plan `p` whose threads
    keep `fragments` fragments besides `base` registers (registers_of), and
    `chunk` more for each chunk past BASE_CHUNKS."""
    narrow = chunk * max(0, p.chunks - BASE_CHUNKS)
    return (registers_of(p, fragments, base=base) + narrow) * p.threads <= SM_REGISTERS


def group_count(p, x, m, fragments=0, staged=0, kept=0):
    """How many row groups (blocks, or clusters of p.cluster blocks) a
    looping kernel of plan `p` runs over `m` rows of `x`: enough to fill the
    device (parallel_blocks), no more than there are groups of p.rows rows.
    `fragments`: how many (vec, chunks) fragments a thread keeps
    (registers_of estimates its registers); `staged`: how many arrays its
    blocks stage in a shared ring, times its stages (ring_bytes), 0 for
    none; `kept`: the shared bytes of its kept parameters (kept_bytes). A
    cluster plan that keeps some on a CUDA device is counted by threads and
    shared memory alone: launch_groups takes no more clusters than the
    driver runs at once (from the compiled kernel), and registers_of misses
    by a block an SM there (NVRTC's sm_90a cubins of the norms' backwards
    at bfloat16 65,536, kept: 127-128 registers a thread, the estimate 136:
    one block of 256 threads an SM where two run)."""
    shared = ring_bytes(p, staged) + kept
    exact = kept and p.cluster > 1 and p.backend == "cuda"
    fill = parallel_blocks(x, p.threads, 0 if exact else registers_of(p, fragments),
                           shared) // p.cluster
    return max(1, min(max(1, fill), -(-m // p.rows)))


def staged(p, x, arrays):
    """The stages of the ring in which plan `p`'s "registers" kernel,
    looping over row groups, stages the next groups' rows of its `arrays`
    inputs in shared memory while it works on this one
    (row_kernels.row_groups: cp.async), 0 for none: one for a row in a
    cluster on a CUDA device whose blocks can take the ring (on an H100:
    rms_norm's backward, float32 at 65,536, 2,670 GB/s unstaged, 2,900
    staged; bfloat16 1,830 and 2,270; no gain for rows in one block), or as
    plan_options(staged=) says (True: 1).
        >>> staged(plan("float32", 4096, "cuda"), np.zeros(1, np.float32), 1)
        0
    """
    if "staged" in _OPTIONS:
        return int(_OPTIONS["staged"]) if p.kernel == "registers" else 0
    if p.kernel != "registers" or p.cluster == 1 or backend_of(x) != "cuda":
        return 0
    return int(ring_bytes(p, arrays) <= _cuda_device(x.device.index)[2])


def ring_bytes(p, arrays):
    """The shared memory of a staged kernel's ring (row_kernels.row_groups):
    for each of `arrays` inputs times stages, a row's chunks for each of the
    block's threads."""
    return arrays * p.vec * p.chunks * p.threads * _SIZES[p.dtype]


def launch_groups(p, registers, count, out, *args, staged=0, tail=()):
    """Run plan `p`'s looping "registers" kernel with up to `count` row
    groups (group_count): registers[groups * cluster, threads, cluster](out,
    *args, p.work, staged, *tail); each group loops over rows first, first +
    groups, ... Returns `groups`: `count`, or on a CUDA device the clusters
    that run at once if fewer (not every SM can join a cluster: 15 of 8
    blocks on an H100's 132 SMs, where a 16th would run after the others,
    doubling the time)."""
    more = (*args, p.work, staged, *tail)
    if p.cluster > 1 and p.backend == "cuda":
        count = min(count, resident_clusters(registers, p, out, *more))
    run(p, registers, count * p.cluster, p.threads, out, *more, cluster=p.cluster)
    return count


# the slab kernels' blocks, and the elements each thread keeps of a fragment
SLAB_THREADS = 256
SLAB_ELEMENTS = 16


def slab_plan(p, x, m, n, fragments):
    """(work, slabs, groups) of the two slab kernels of a backward whose rows
    plan `p` cannot keep in registers (p.kernel == "loop"): work = (VEC,
    CHUNKS, THREADS), blocks of THREADS (up to SLAB_THREADS) keeping
    SLAB_ELEMENTS of each of `fragments` fragments per thread; `slabs` of
    VEC * CHUNKS * THREADS elements per row; and the row groups of the
    second kernel: enough blocks (groups * slabs) to fill the device, at
    most one group per row.
        >>> slab_plan(plan("float32", 262144, "cuda"), np.zeros(1), 1024, 262144, 4)[:2]
        ((4, 4, 256), 64)
    """
    threads = min(p.threads, SLAB_THREADS)
    work = (p.vec, max(1, SLAB_ELEMENTS // p.vec), threads)
    slabs = -(-n // (work[0] * work[1] * threads))
    registers = registers_of(p, fragments, work[0] * work[1])
    fill = parallel_blocks(x, threads, registers) // slabs
    return work, slabs, max(1, min(fill, m))


_RESIDENT = {}


def resident_clusters(kernel, p, *args):
    """How many clusters of plan `p`'s blocks of `kernel`, launched with
    `args`, run at once on the current CUDA device (the driver's occupancy,
    from the compiled kernel; cached per kernel, plan and argument types)."""
    key = (kernel, p) + tuple(str(a.dtype) if hasattr(a, "shape") else a for a in args)
    if key not in _RESIDENT:
        compiled = kernel.compile(*args, block=p.threads)
        _RESIDENT[key] = max(1, compiled.max_active_clusters(p.cluster))
    return _RESIDENT[key]
