"""moye.tiled: TiledCopy and TiledMMA, thread slices and partitions, and the
copy/gemm algorithms that run them."""
from .algorithms import axpby, copyto, gemm
from .copy import (ThrCopy, TiledCopy, make_tiled_copy, make_tiled_copy_A, make_tiled_copy_B,
                   make_tiled_copy_C)
from .predicated import copy_if, make_copy_predicate
from .mma import (ThrMMA, TiledMMA, make_fragment_A, make_fragment_B, make_fragment_C,
                  make_tiled_mma, tile_size)


def get_slice(tiled, thr_idx):
    """Thread `thr_idx`'s slice of a TiledCopy or TiledMMA. CuTe: get_slice."""
    return tiled.get_slice(thr_idx)


get_thread_slice = get_slice


def partition_S(thr_copy, src):
    """A thread's share of a copy's source: (CPY, CPY_M, CPY_N, ...)."""
    return thr_copy.partition_S(src)


def partition_D(thr_copy, dst):
    """A thread's share of a copy's destination: (CPY, CPY_M, CPY_N, ...)."""
    return thr_copy.partition_D(dst)


def retile_S(thr_copy, a):
    """A thread's fragment re-partitioned for the copy's source side."""
    return thr_copy.retile_S(a)


def retile_D(thr_copy, a):
    """A thread's fragment re-partitioned for the copy's destination side."""
    return thr_copy.retile_D(a)


def partition_A(thr_mma, a):
    """A thread's part of A: (MMA, MMA_M, MMA_K, ...)."""
    return thr_mma.partition_A(a)


def partition_B(thr_mma, b):
    """A thread's part of B: (MMA, MMA_N, MMA_K, ...)."""
    return thr_mma.partition_B(b)


def partition_C(thr_mma, c):
    """A thread's part of C: (MMA, MMA_M, MMA_N, ...)."""
    return thr_mma.partition_C(c)


def partition_fragment_A(thr_mma, a):
    return thr_mma.partition_fragment_A(a)


def partition_fragment_B(thr_mma, b):
    return thr_mma.partition_fragment_B(b)


def partition_fragment_C(thr_mma, c):
    return thr_mma.partition_fragment_C(c)


__all__ = [n for n in dir() if not n.startswith("_") and n not in
           ("algorithms", "copy", "mma", "predicated")]
