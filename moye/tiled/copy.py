"""TiledCopy: a copy atom repeated over threads and values to cover a tile.

Its `layout_tv` maps (thread, value) to the coordinate (as a column-major
index) within the tile `tiler_mn`. Partitioning an array by a TiledCopy
gives each thread ((atom values, atom repeats), rest modes...): CuTe's
(CPY, CPY_M, CPY_N, ...).
"""
from ..array.threads import check_thread_index
from ..atom.copy import CopyAtom
from ..errors import MoyeError
from ..layout import (Layout, coalesce, composition, logical_product, product_each, raked_product,
                      right_inverse, size, upcast, zipped_divide)
from ..layout import inttuple as T
from ..layout.layout import layout_from_parts
from ..array import MoYeArray


def _zip(layout):
    """((a0,a1),(b0,b1)) -> ((a0,b0),(a1,b1)): CuTe's zip of a layout."""
    s, d = layout.shape, layout.stride
    return layout_from_parts(tuple(zip(*s)), tuple(zip(*d)))


def slice_of(x, coord):
    """x sliced at `coord` (None keeps a mode): an array view or a sub-layout."""
    return x[coord] if hasattr(x, "engine") else x(coord)


def _repeat_none(n):
    return None if n == 1 else (None,) * n


def _hashable(x):
    return tuple(_hashable(e) for e in x) if isinstance(x, (tuple, list)) else x


class TiledCopy:
    """A CopyAtom tiled over threads and values (CuTe's TiledCopy).
    Build one with `make_tiled_copy`."""

    def __init__(self, atom, layout_tv, tiler_mn):
        self.atom = atom
        self.layout_tv = layout_tv
        self.tiler_mn = tiler_mn
        self.atom_num_thr = size(atom.val_layout_ref[0])
        self.atom_num_val = size(atom.val_layout_ref[1])
        if size(layout_tv[0]) % self.atom_num_thr:
            raise MoyeError(f"TiledCopy uses too few threads ({size(layout_tv[0])}) for {atom.op}, "
                            f"which needs {self.atom_num_thr}")
        if size(layout_tv[1]) % self.atom_num_val:
            raise MoyeError(f"TiledCopy: each thread copies {size(layout_tv[1])} values, not a "
                            f"multiple of the {self.atom_num_val} that {atom.op} copies at once "
                            f"({atom.dtype})")

    def _key(self):
        return (self.atom, self.layout_tv, _hashable(self.tiler_mn))

    def __eq__(self, other):
        return isinstance(other, TiledCopy) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    @property
    def num_threads(self):
        return size(self.layout_tv[0])

    def __moye_size__(self, *modes):
        return size(self.layout_tv, *modes) if modes else self.num_threads

    def _ref2(self, val_layout):
        return composition(right_inverse(self.atom.val_layout_ref), val_layout)

    def tile2thrfrg(self, tensor, ref2trg):
        """((TileM,TileN,...),(RestM,RestN,...)) -> (Thr,(FrgV,FrgX),(RestM,RestN,...))."""
        atom_layout_tv = zipped_divide(self.layout_tv, (self.atom_num_thr, self.atom_num_val))
        trg_layout_tv = composition(atom_layout_tv, (ref2trg, None))
        thrval2mn = coalesce(_zip(trg_layout_tv), (1, (1, 1)))
        tv_tensor = composition(tensor, (thrval2mn, None))
        return slice_of(tv_tensor, ((None, None), None))

    def tidfrg_S(self, src):
        if T.rank(src.shape) < T.rank(self.tiler_mn):
            raise MoyeError(f"partition_S: the array of shape {T.fmt(src.shape)} has fewer modes "
                            f"than the copy tile {T.fmt(self.tiler_mn)}")
        return self.tile2thrfrg(zipped_divide(src, self.tiler_mn),
                                self._ref2(self.atom.val_layout_src))

    def tidfrg_D(self, dst):
        if T.rank(dst.shape) < T.rank(self.tiler_mn):
            raise MoyeError(f"partition_D: the array of shape {T.fmt(dst.shape)} has fewer modes "
                            f"than the copy tile {T.fmt(self.tiler_mn)}")
        return self.tile2thrfrg(zipped_divide(dst, self.tiler_mn),
                                self._ref2(self.atom.val_layout_dst))

    def retile(self, tensor):
        """Re-partition a thread's (V, M, N, ...) layout, e.g. of an MMA
        fragment, into this copy's (CPY, CPY_M, CPY_N, ...). CuTe: retile."""
        r = T.rank(tensor.shape)
        v = size(tensor, 0)
        inv = composition(right_inverse(self.layout_tv), Layout(self.tiler_mn))
        frg_layout_mn = upcast(inv, self.num_threads * v)
        frg_layout_v = zipped_divide(logical_product(Layout(v), right_inverse(frg_layout_mn)),
                                     Layout(self.atom_num_val))
        mn = product_each(frg_layout_mn.shape)
        t_tensor = zipped_divide(tensor, (v,) + (mn if type(mn) is tuple else (mn,)))
        v_tensor = composition(t_tensor, (frg_layout_v, None))
        return slice_of(v_tensor, (None, (0,) + (None,) * (r - 1) if r > 1 else 0))

    def get_layoutS_TV(self):
        """(thread, value) -> tile coordinate index, as the source sees it."""
        return slice_of(self.tile2thrfrg(Layout((self.tiler_mn, 1)),
                                         self._ref2(self.atom.val_layout_src)), (None, None, 0))

    def get_layoutD_TV(self):
        """(thread, value) -> tile coordinate index, as the destination sees it."""
        return slice_of(self.tile2thrfrg(Layout((self.tiler_mn, 1)),
                                         self._ref2(self.atom.val_layout_dst)), (None, None, 0))

    def get_slice(self, thr_idx):
        """Thread `thr_idx`'s view (0 <= thr_idx < size(self)). CuTe: get_slice."""
        check_thread_index(f"get_slice of a TiledCopy ({self.atom.op})", thr_idx,
                           Layout(self.num_threads))
        return ThrCopy(self, thr_idx)

    get_thread_slice = get_slice

    def __repr__(self):
        return (f"TiledCopy\n  Tiler_MN:       {T.fmt(self.tiler_mn)}\n"
                f"  TiledLayout_TV: {self.layout_tv}\n{self.atom!r}")


class ThrCopy:
    """Thread `thr_idx`'s view of a TiledCopy (CuTe's ThrCopy)."""

    def __init__(self, tiled_copy, thr_idx):
        self.tiled_copy, self.thr_idx = tiled_copy, thr_idx

    def partition_S(self, src):
        """This thread's share of a source array: (CPY, CPY_M, CPY_N, ...)."""
        thr = self.tiled_copy.tidfrg_S(src)
        return slice_of(thr, (self.thr_idx, None, _repeat_none(T.rank(src.shape))))

    def partition_D(self, dst):
        """This thread's share of a destination array: (CPY, CPY_M, CPY_N, ...)."""
        thr = self.tiled_copy.tidfrg_D(dst)
        return slice_of(thr, (self.thr_idx, None, _repeat_none(T.rank(dst.shape))))

    def retile_S(self, a):
        return _with_layout(a, self.tiled_copy.retile(a.layout))

    def retile_D(self, a):
        return _with_layout(a, self.tiled_copy.retile(a.layout))


def _with_layout(a, layout):
    return MoYeArray.view_of(a.engine, layout)


def make_tiled_copy(atom, thr_layout=None, val_layout=None):
    """A TiledCopy where `thr_layout` maps tile coordinates to thread ids and
    `val_layout` to value ids (both (m,n) -> idx). CuTe: make_tiled_copy.
        >>> tc = make_tiled_copy(CopyAtom(UniversalCopy(Float64), Float64),
        ...                      Layout((2, 3), (3, 1)), Layout((2, 3), (1, 2)))
        >>> tc.tiler_mn, tc.layout_tv
        ((4, 9), ((3,2),(2,3)):((12,2),(1,4)))
    """
    if not isinstance(atom, CopyAtom):
        raise TypeError(f"make_tiled_copy: expected a CopyAtom, got {atom!r}")
    thr_layout = Layout(1) if thr_layout is None else _as_layout(thr_layout)
    val_layout = Layout(1) if val_layout is None else _as_layout(val_layout)
    layout_mn = raked_product(thr_layout, val_layout)
    layout_tv = composition(right_inverse(layout_mn),
                            Layout((size(thr_layout), size(val_layout))))
    return TiledCopy(atom, layout_tv, product_each(layout_mn.shape))


def _as_layout(x):
    return x if isinstance(x, Layout) else Layout(x)


def make_tiled_copy_A(atom, tiled_mma):
    """The TiledCopy that gives each thread exactly its A fragment of
    `tiled_mma`. CuTe: make_tiled_copy_A."""
    return TiledCopy(atom, tiled_mma.get_layoutA_TV(),
                     (tiled_mma.tile_size(0), tiled_mma.tile_size(2)))


def make_tiled_copy_B(atom, tiled_mma):
    """The TiledCopy matching `tiled_mma`'s B fragments. CuTe: make_tiled_copy_B."""
    return TiledCopy(atom, tiled_mma.get_layoutB_TV(),
                     (tiled_mma.tile_size(1), tiled_mma.tile_size(2)))


def make_tiled_copy_C(atom, tiled_mma):
    """The TiledCopy matching `tiled_mma`'s C fragments. CuTe: make_tiled_copy_C."""
    return TiledCopy(atom, tiled_mma.get_layoutC_TV(),
                     (tiled_mma.tile_size(0), tiled_mma.tile_size(1)))
