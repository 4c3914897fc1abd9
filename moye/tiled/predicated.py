"""Predicated copies: copy only where a predicate holds, so that tiles that
overhang an array's edge neither read nor write outside it. CuTe: copy_if.

The predicate of a copy with an atom is one value per atom: a thread's
partitions are (CPY, CPY_M, CPY_N, ...), mode 0 the values one atom (or a few)
moves at once, and `pred` holds one value per index of the other modes, in
their colexicographic order (CuTe's pred(i)). An atom moves all of its
values or none, so a vector atom must not straddle the edge: choose vector
widths that divide the extents (a 16-byte cp.async of fp16 needs the
contiguous extent to be a multiple of 8). Build predicates by partitioning
an identity array like the data and comparing coordinates with the extents:

    cA = tile(make_identity_array(shape(mA)), (bM, bK), (m, None))
    tAcA = partition_S(thr_copy, cA)                # coordinates of tAgA's elements
    tApA = make_copy_predicate(tAcA[:, :, :, k_tile], shape(mA))
    # that is, tApA[m, k] = elem_less(tAcA[0, m, k, k_tile], shape(mA))

cp.async copies take their zero-filling form: where the predicate is false
nothing is read and the shared destination is filled with zeros (so a
partial k-tile contributes nothing to a GEMM). Every other copy skips the
atom, leaving the destination as it was.
"""
import numpy as np

from ..array import MoYeArray
from ..array import copyto as _copy_arrays
from ..array import fill_, make_fragment_like
from ..atom.copy import CopyAtom, UniversalCopy
from ..errors import MoyeError, ShapeError
from ..layout import Layout, composition, elem_less, size
from ..types import Bool
from ..layout import inttuple as T
from .copy import TiledCopy


def copy_if(*args):
    """copy_if(pred, dst, src) copies src into dst where pred (same size) is
    true; copy_if(copy, pred, dst, src) with a TiledCopy or CopyAtom copies
    a thread's partitions atom by atom, pred holding one value per atom
    (cp.async zero-fills where pred is false). CuTe: copy_if.
        >>> src = MoYeArray(np.arange(1.0, 5.0), 4); dst = MoYeArray.zeros(Float64, 4)
        >>> copy_if(MoYeArray(np.array([True, False, True, False]), 4), dst, src).numpy()
        array([1., 0., 3., 0.])
    """
    if len(args) == 3:
        pred, out, src = args
        _check_arrays("copy_if", out, src)
        atom = CopyAtom(UniversalCopy(out.dtype), out.dtype)
        dst, src = _as_atoms(out), _as_atoms(src)
        expected = f"dst {T.fmt(out.shape)} has {{n}} elements; give one predicate per element"
    elif len(args) == 4:
        op, pred, out, src = args
        atom = op.atom if isinstance(op, TiledCopy) else op
        if not isinstance(atom, CopyAtom):
            raise TypeError(f"copy_if: expected a TiledCopy or CopyAtom first, got {op!r}")
        _check_arrays("copy_if", out, src)
        dst = out
        expected = (f"dst {T.fmt(dst.shape)} holds {{n}} atoms (the size of its modes after "
                    "the first); give one predicate per atom")
    else:
        raise TypeError("copy_if takes (pred, dst, src) or (copy, pred, dst, src)")
    pred = _predicates(pred, dst, expected)
    kernel_copy = getattr(dst.engine, "atom_copy_if", None) or \
        getattr(src.engine, "atom_copy_if", None)
    if kernel_copy is not None:
        kernel_copy(atom, pred, dst, src)
        return out
    zero_fill = atom.op.kind == "cp_async"
    for r, p in enumerate(pred):
        d, s = atom_slice(dst, r), atom_slice(src, r)
        if p:
            _copy_arrays(d, s)
        elif zero_fill:
            fill_(d, 0)
    return out


def _check_arrays(what, dst, src):
    for name, a in (("dst", dst), ("src", src)):
        if not isinstance(a, MoYeArray):
            raise TypeError(f"{what}: {name} must be a MoYeArray, got {type(a).__name__}")
    if size(dst) != size(src) and type(size(dst)) is int and type(size(src)) is int:
        raise ShapeError(f"{what}: dst has shape {T.fmt(dst.shape)} but src has shape "
                         f"{T.fmt(src.shape)}; they must hold as many elements")


def _as_atoms(a):
    """`a` as (1, n): one element per atom, in colexicographic order."""
    n = size(a)
    return MoYeArray.view_of(a.engine, composition(a.layout, Layout((1, n))))


def _rest_shape(a):
    """The shape of modes 1.. of a partition (1 for a rank-1 one)."""
    return a.shape[1:] if type(a.shape) is tuple else 1


def atom_slice(a, r):
    """Mode 0 of partition `a` at index `r` of its other modes (colexicographic)."""
    rest = _rest_shape(a)
    if type(rest) is int:
        return a
    coord = T.index_to_coord(r, T.product_each(rest))
    return a[(None,) + tuple(coord)]


def _predicates(pred, dst, expected):
    """The predicate values, one per atom of `dst`, as a list; `expected`
    says how many there must be (formatted with n)."""
    n = T.product(_rest_shape(dst))
    if type(n) is not int:
        raise MoyeError(f"copy_if: dst {T.fmt(dst.shape)} repeats its atom a dynamic number "
                        "of times; tile it to a static shape first")
    if not isinstance(pred, MoYeArray):
        if not isinstance(pred, np.ndarray):
            raise TypeError(f"copy_if: pred must be a MoYeArray (or a NumPy array on the host), "
                            f"got {type(pred).__name__}")
        pred = MoYeArray(pred)
    if size(pred) != n:
        raise ShapeError(f"copy_if: pred has shape {T.fmt(pred.shape)} ({size(pred)} values) "
                         f"but {expected.format(n=n)}")
    return [pred[i] for i in range(n)]


def make_copy_predicate(coords, extents):
    """A Bool fragment with one value per atom of `coords`, a copy partition
    of coordinates (CPY, CPY_M, CPY_N, ...): whether the atom's first
    coordinate lies inside `extents` (elem_less). The predicate of copy_if.
        >>> c = tile(make_identity_array((3, 5)), (3, 4), (0, 1))    # columns 4..7
        >>> make_copy_predicate(c, (3, 5)).numpy().tolist()
        [True, False, False, False]
    """
    rest = _rest_shape(coords)
    pred = make_fragment_like(Layout(T.product_each(rest)), Bool)
    for i in range(size(pred)):
        pred[i] = elem_less(atom_slice(coords, i)[0], extents)
    return pred
