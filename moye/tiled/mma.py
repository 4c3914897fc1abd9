"""TiledMMA: an MMA atom repeated over a layout of atoms (threads) and
permuted to cover an (M, N, K) tile; its thread slices partition A, B and C
into (MMA, MMA_M, MMA_K) fragments and the like.
"""
from ..array.threads import check_thread_index
from ..atom.mma import MMAAtom, MMAOp
from ..errors import MoyeError
from ..layout import (Layout, append, complement, composition, logical_divide, make_layout,
                      right_inverse, size, tiled_product, zipped_divide)
from ..layout import inttuple as T
from .copy import slice_of
from ..array import MoYeArray, make_fragment_like


class TiledMMA:
    """An MMAAtom tiled by `atom_layout_mnk` (atoms along M, N, K) with an
    optional `permutation_mnk` of each mode (CuTe's TiledMMA). Build one with
    `make_tiled_mma`."""

    def __init__(self, atom, atom_layout_mnk, permutation_mnk):
        self.atom = atom
        self.atom_layout_mnk = atom_layout_mnk
        self.permutation_mnk = permutation_mnk
        self.thr_layout_vmnk = tiled_product(atom.thr_id, atom_layout_mnk)

    def _key(self):
        return (self.atom, self.atom_layout_mnk, self.permutation_mnk)

    def __eq__(self, other):
        """Same atom (op and types), atom layout and permutation: the same
        tiled MMA, which kernels specialize on."""
        return isinstance(other, TiledMMA) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    # -- sizes ------------------------------------------------------------------
    def permutation(self, i):
        perm = self.permutation_mnk[i]
        if perm is None:
            return self.atom.shape_mnk[i] * size(self.thr_layout_vmnk, i + 1)
        return perm

    def tile_size(self, i):
        """The extent of the tiled MMA's tile in mode i (0: M, 1: N, 2: K)."""
        return size(self.permutation(i))

    @property
    def tile_shape(self):
        return tuple(self.tile_size(i) for i in range(3))

    @property
    def num_threads(self):
        return size(self.thr_layout_vmnk)

    def __moye_size__(self, *modes):
        return size(self.thr_layout_vmnk, *modes)

    # -- partitioning -------------------------------------------------------------------
    def _thrfrg(self, tensor, i, j, atom_tv):
        t_tensor = logical_divide(tensor, (self.permutation(i), self.permutation(j)))
        atom_tile = (Layout(self.atom.shape_mnk[i]), Layout(self.atom.shape_mnk[j]))
        tv_tensor = composition(zipped_divide(t_tensor, atom_tile), (atom_tv, None))
        thr_tile = (None, (Layout(size(self.thr_layout_vmnk, i + 1)),
                           Layout(size(self.thr_layout_vmnk, j + 1))))
        return zipped_divide(tv_tensor, thr_tile)

    def thrfrg_C(self, c):
        """(M,N,...) -> ((ThrV,(ThrM,ThrN)),(FrgV,(RestM,RestN,...)))."""
        return self._thrfrg(c, 0, 1, self.atom.layout_c_tv)

    def thrfrg_A(self, a):
        """(M,K,...) -> ((ThrV,(ThrM,ThrK)),(FrgV,(RestM,RestK,...)))."""
        return self._thrfrg(a, 0, 2, self.atom.layout_a_tv)

    def thrfrg_B(self, b):
        """(N,K,...) -> ((ThrV,(ThrN,ThrK)),(FrgV,(RestN,RestK,...)))."""
        return self._thrfrg(b, 1, 2, self.atom.layout_b_tv)

    def _thridx_to_thrid(self):
        vmnk = self.thr_layout_vmnk
        return composition(Layout((size(vmnk), 1), (1, 0)),
                           right_inverse(make_layout(vmnk, complement(vmnk))))

    def get_layoutC_TV(self):
        """(thread index, value) -> index in the (M,N) tile."""
        ref = Layout((self.tile_size(0), self.tile_size(1)))
        return composition(self.thrfrg_C(ref), (self._thridx_to_thrid(), None))

    def get_layoutA_TV(self):
        """(thread index, value) -> index in the (M,K) tile."""
        vmnk = self.thr_layout_vmnk
        ref = Layout((self.tile_size(0), self.tile_size(2)))
        atile = (None, (Layout((size(vmnk, 1), size(vmnk, 2)), (1, 0)), None))
        tv = composition(self.thrfrg_A(ref), (atile, None))
        return composition(tv, (self._thridx_to_thrid(), None))

    def get_layoutB_TV(self):
        """(thread index, value) -> index in the (N,K) tile."""
        vmnk = self.thr_layout_vmnk
        ref = Layout((self.tile_size(1), self.tile_size(2)))
        btile = (None, (Layout((size(vmnk, 1), size(vmnk, 2)), (0, 1)), None))
        tv = composition(self.thrfrg_B(ref), (btile, None))
        return composition(tv, (self._thridx_to_thrid(), None))

    def get_slice(self, thr_idx):
        """Thread `thr_idx`'s view (0 <= thr_idx < size(self)). CuTe: get_slice."""
        check_thread_index(f"get_slice of a TiledMMA ({self.atom.op})", thr_idx,
                           self.thr_layout_vmnk)
        coord = _flat_coord(self.thr_layout_vmnk, thr_idx)
        return ThrMMA(self, thr_idx, coord)

    get_thread_slice = get_slice

    def __repr__(self):
        perm = "(" + ",".join("_" if p is None else str(p) for p in self.permutation_mnk) + ")"
        return (f"TiledMMA\n  ThrLayoutVMNK:  {self.thr_layout_vmnk}\n"
                f"  PermutationMNK: {perm}\n{self.atom!r}")


def _flat_coord(layout, index):
    hier = T.index_to_coord(index, layout.shape, layout.stride)
    return tuple(T.coord_to_index(c, s) for c, s in zip(hier, layout.shape))


def _rest_coord(thr_tensor):
    rest = thr_tensor.shape[1][1]
    r = T.rank(rest)
    return (None, None if r == 1 else (None,) * r)


class ThrMMA:
    """Thread `thr_idx`'s view of a TiledMMA (CuTe's ThrMMA)."""

    def __init__(self, tiled_mma, thr_idx, thr_vmnk):
        self.tiled_mma, self.thr_idx, self.thr_vmnk = tiled_mma, thr_idx, thr_vmnk

    def partition_C(self, c):
        """This thread's part of C: (MMA, MMA_M, MMA_N, ...)."""
        v, m, n, _ = self.thr_vmnk
        thr = self.tiled_mma.thrfrg_C(c)
        return slice_of(thr, ((v, (m, n)), _rest_coord(_layout(thr))))

    def partition_A(self, a):
        """This thread's part of A: (MMA, MMA_M, MMA_K, ...)."""
        v, m, _, k = self.thr_vmnk
        thr = self.tiled_mma.thrfrg_A(a)
        return slice_of(thr, ((v, (m, k)), _rest_coord(_layout(thr))))

    def partition_B(self, b):
        """This thread's part of B: (MMA, MMA_N, MMA_K, ...)."""
        v, _, n, k = self.thr_vmnk
        thr = self.tiled_mma.thrfrg_B(b)
        return slice_of(thr, ((v, (n, k)), _rest_coord(_layout(thr))))

    def partition_fragment_C(self, c):
        return make_fragment_C(self.tiled_mma, self.partition_C(c))

    def partition_fragment_A(self, a):
        return make_fragment_A(self.tiled_mma, self.partition_A(a))

    def partition_fragment_B(self, b):
        return make_fragment_B(self.tiled_mma, self.partition_B(b))


def _layout(x):
    return x.layout if hasattr(x, "engine") else x


def _fragment(kind, mma, part, dtype, like):
    mma = mma.tiled_mma if isinstance(mma, ThrMMA) else mma
    tv = getattr(mma.atom, f"layout_{kind}_tv")
    layout = _layout(part)
    if T.rank(layout.shape) < 3:
        raise MoyeError(f"make_fragment_{kind.upper()}: expected a partitioned (MMA, MMA_M, "
                        f"MMA_N/K) array, got shape {T.fmt(layout.shape)}")
    if size(layout, 0) != size(tv, 1):
        raise MoyeError(f"make_fragment_{kind.upper()}: mode 0 of {T.fmt(layout.shape)} has "
                        f"{size(layout, 0)} values, the atom takes {size(tv, 1)}")
    if like:
        return make_fragment_like(part if hasattr(part, "engine") else layout, dtype)
    return MoYeArray.empty(dtype, Layout(layout.shape))


def make_fragment_C(mma, part):
    """A register fragment for this thread's C partition (accumulator type).
    CuTe: make_fragment_C."""
    mma_ = mma.tiled_mma if isinstance(mma, ThrMMA) else mma
    return _fragment("c", mma, part, mma_.atom.c_type, like=False)


def make_fragment_A(mma, part):
    """A register fragment for this thread's A partition. CuTe: make_fragment_A."""
    mma_ = mma.tiled_mma if isinstance(mma, ThrMMA) else mma
    return _fragment("a", mma, part, mma_.atom.a_type, like=True)


def make_fragment_B(mma, part):
    """A register fragment for this thread's B partition. CuTe: make_fragment_B."""
    mma_ = mma.tiled_mma if isinstance(mma, ThrMMA) else mma
    return _fragment("b", mma, part, mma_.atom.b_type, like=True)


def make_tiled_mma(atom, atom_layout=None, permutation=None):
    """A TiledMMA of `atom` (an MMAAtom or an MMA op) repeated over
    `atom_layout` (atoms along M, N, K; default one atom), with optional
    per-mode `permutation` tilers. CuTe: make_tiled_mma.
        >>> mma = make_tiled_mma(UniversalFMA(Float32), Layout((16, 16)))
        >>> size(mma), mma.tile_shape
        (256, (16, 16, 1))
    """
    if isinstance(atom, MMAOp):
        atom = MMAAtom(atom)
    if not isinstance(atom, MMAAtom):
        raise TypeError(f"make_tiled_mma: expected an MMA atom or op, got {atom!r}")
    atom_layout = Layout((1, 1, 1)) if atom_layout is None else \
        (atom_layout if isinstance(atom_layout, Layout) else Layout(atom_layout))
    if len(atom_layout) > 3:
        raise MoyeError(f"make_tiled_mma: atom layout {atom_layout} has more than 3 modes (M,N,K)")
    atom_layout = append(atom_layout, Layout(1, 0), n=3)
    permutation = tuple(permutation) if permutation is not None else ()
    if len(permutation) > 3:
        raise MoyeError("make_tiled_mma: a permutation has at most 3 modes (M,N,K)")
    permutation = permutation + (None,) * (3 - len(permutation))
    return TiledMMA(atom, atom_layout, permutation)


def tile_size(tiled_mma, i):
    """The extent of the tiled MMA's tile in mode i. CuTe: tile_size<I>."""
    return tiled_mma.tile_size(i)
