"""copyto and gemm with atoms: what a tiled copy or MMA does to a thread's
partitions. MoYe: copyto!, gemm!; CuTe: copy, gemm."""
import numpy as np

from ..array import MoYeArray
from ..array import copyto as _copy_arrays
from ..array.engine import run_loop
from ..array.ops import elementwise_into
from ..atom.copy import CopyAtom
from ..atom.mma import MMAAtom, mma_reference
from ..errors import MoyeError, MoyeTypeError
from ..layout import append, size
from ..layout import inttuple as T
from .copy import TiledCopy
from .mma import TiledMMA


def copyto(*args):
    """copyto(dst, src) copies array to array in logical order;
    copyto(tiled_copy_or_atom, dst, src) copies a thread's partitions with
    that copy's instruction (each mode-0 slice is one atom's values).
    MoYe: copyto!; CuTe: copy.
        >>> a = MoYeArray(np.arange(4.0), 4); b = MoYeArray.zeros(Float64, 4)
        >>> copyto(CopyAtom(UniversalCopy(Float64), Float64), b, a).numpy().tolist()
        [0.0, 1.0, 2.0, 3.0]
    """
    if len(args) == 2:
        return _copy_arrays(*args)
    if len(args) != 3:
        raise TypeError("copyto takes (dst, src) or (copy, dst, src)")
    op, dst, src = args
    atom = op.atom if isinstance(op, TiledCopy) else op
    if not isinstance(atom, CopyAtom):
        raise TypeError(f"copyto: expected a TiledCopy or CopyAtom first, got {op!r}")
    for name, a, n in (("dst", dst, atom.num_val_dst), ("src", src, atom.num_val_src)):
        if not isinstance(a, MoYeArray):
            raise TypeError(f"copyto: {name} must be a MoYeArray, got {type(a).__name__}")
        v = size(a, 0)
        if type(v) is int and v % n:
            raise MoyeError(f"copyto: mode 0 of {name} (shape {T.fmt(a.shape)}) holds {v} values, "
                            f"not a multiple of the {n} that one {atom.op} copies")
    kernel_copy = getattr(dst.engine, "atom_copy", None) or getattr(src.engine, "atom_copy", None)
    if kernel_copy is not None:
        kernel_copy(atom, dst, src)
        return dst
    return _copy_arrays(dst, src)


def gemm(mma, *operands):
    """D = A * B^T + C with the MMA's instruction and precision:
    gemm(mma, D, A, B, C) or gemm(mma, A, B, C) (C accumulates).
    Operands are a thread's partitions (MMA, MMA_M, MMA_K) for one-thread
    atoms (UniversalFMA) and, inside kernels, for every atom (each (m, n, k)
    is one mma.sync of the warp, or one wgmma of the warpgroup reading A and
    B from shared memory: docs/wgmma.md); on the host a warp-wide atom takes whole
    tiles (M,K), (N,K), (M,N) and emulates all threads at once.
    MoYe: gemm!; CuTe: gemm.
    """
    if len(operands) == 3:
        a, b, c = operands
        d = c
    elif len(operands) == 4:
        d, a, b, c = operands
    else:
        raise TypeError("gemm takes (mma, D, A, B, C) or (mma, A, B, C)")
    atom = mma.atom if isinstance(mma, TiledMMA) else getattr(mma, "tiled_mma", mma)
    atom = atom.atom if isinstance(atom, TiledMMA) else atom
    if not isinstance(atom, MMAAtom):
        raise TypeError(f"gemm: expected a TiledMMA, ThrMMA or MMAAtom first, got {mma!r}")
    if d.engine.space == "host":
        _check_types(atom, d, a, b, c)
    if size(atom.thr_id) == 1:
        return _gemm_thread(atom, d, a, b, c)
    kernel_mma = getattr(d.engine, "atom_mma", None)
    if kernel_mma is not None:
        kernel_mma(atom, _as3(d, "D"), _as3(a, "A"), _as3(b, "B"), _as3(c, "C"))
        return d
    return _gemm_tiles(atom, d, a, b, c)


def _check_types(atom, d, a, b, c):
    """A MoyeTypeError unless each host operand holds the
    element type the atom takes (the same storage: TFloat32 reads float32)."""
    wanted = (("D", d, atom.d_type), ("A", a, atom.a_type), ("B", b, atom.b_type),
              ("C", c, atom.c_type))
    for name, x, want in wanted:
        if not isinstance(x, MoYeArray):
            raise MoyeTypeError(f"gemm: {name} must be a MoYeArray, got {type(x).__name__}")
    bad = [(name, x.dtype, want) for name, x, want in wanted if x.dtype.numpy != want.numpy]
    if bad:
        got = ", ".join(f"{name} is {have}" for name, have, _ in bad)
        raise MoyeTypeError(f"gemm: {atom.op} takes D={atom.d_type}, A={atom.a_type}, "
                            f"B={atom.b_type}, C={atom.c_type}, but {got}")


def _as3(x, what):
    """x viewed as (V, M, N)-like rank 3, padding missing modes with size 1."""
    r = T.rank(x.shape)
    if r == 3:
        return x
    if r == 2:
        return MoYeArray.view_of(x.engine, append(x.layout, n=3))
    raise MoyeError(f"gemm: {what} has shape {T.fmt(x.shape)}; expected (MMA, MMA_M/N, MMA_K)")


def _gemm_thread(atom, d, a, b, c):
    """(V,M,N) = (V,M,K) x (V,N,K) + (V,M,N) with a one-thread atom, k
    outermost as CuTe orders it. Element by element, so the same code runs
    on host arrays and, inside kernels, on register fragments."""
    d, a, b, c = _as3(d, "D"), _as3(a, "A"), _as3(b, "B"), _as3(c, "C")
    V, M, K = size(a, 0), size(a, 1), size(a, 2)
    N = size(b, 1)
    if V != 1 or size(b, 0) != 1 or size(b, 2) != K or size(c, 1) != M or size(c, 2) != N:
        raise MoyeError(f"gemm: A {T.fmt(a.shape)}, B {T.fmt(b.shape)} and C {T.fmt(c.shape)} "
                        f"do not form (1,M,K) x (1,N,K) -> (1,M,N) for {atom.op}")
    fma = _host_fma(atom) if d.engine.space == "host" else None

    def k_block(k, src):            # in a kernel: loops over m and n that NVRTC unrolls
        run_loop(d.engine, 0, M, lambda m: run_loop(
            d.engine, 0, N, lambda n: fma_at(k, m, n, src)))

    def fma_at(k, m, n, src):
        av, bv, cv = a[0, m, k], b[0, n, k], src[0, m, n]
        d[0, m, n] = fma(av, bv, cv) if fma else cv + av * bv

    if K:
        k_block(0, c)
        run_loop(d.engine, 1, K, lambda k: k_block(k, d))
    return d


def _host_fma(atom):
    """d = a * b + c rounded once to the accumulator type, as an FMA does."""
    acc = atom.d_type.numpy
    if atom.d_type.is_float:
        return lambda a, b, c: acc.type(np.float64(a) * np.float64(b) + np.float64(c))
    return lambda a, b, c: acc.type(int(a) * int(b) + int(c))


def _gemm_tiles(atom, d, a, b, c):
    A, B, C = a.numpy(), b.numpy(), c.numpy()
    if A.ndim != 2 or B.ndim != 2 or C.ndim != 2 or A.shape[1] != B.shape[1] \
            or C.shape != (A.shape[0], B.shape[0]):
        raise MoyeError(f"gemm: {atom.op} is warp-wide; on the host give whole tiles A (M,K), "
                        f"B (N,K), C (M,N); got {T.fmt(a.shape)}, {T.fmt(b.shape)}, "
                        f"{T.fmt(c.shape)}")
    am, an, ak = atom.shape_mnk
    M, K = A.shape
    N = B.shape[0]
    if M % am or N % an or K % ak:
        raise MoyeError(f"gemm: the tiles ({M},{N},{K}) are not multiples of {atom.op}'s "
                        f"shape ({am},{an},{ak})")
    acc = C
    for k0 in range(0, K, ak):
        acc = mma_reference(atom.op, A[:, k0:k0 + ak], B[:, k0:k0 + ak], acc)
    d.engine.write(d.layout, np.asarray(acc).reshape(-1, order="F"))
    return d


def axpby(alpha, x, beta, y):
    """y = alpha * x + beta * y element-wise, in place. CuTe: axpby."""
    return elementwise_into(y, lambda xv, yv: alpha * xv + beta * yv, x, y)
