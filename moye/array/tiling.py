"""Tiling arrays: a block's tile of an array (`tile`) and a thread's share
of a tile (`parallelize`). Both are zipped_divide followed by a slice, and
work on layouts as well as arrays.

A *projection* keeps some modes of the tiler or thread layout and drops the
others: an int (any, e.g. 1) keeps the mode, ``None`` drops it. MoYe writes
``(static(1), :)`` and CuTe ``Step<_1, X>`` for what moye writes ``(1, None)``.
"""
from ..layout import dice, zipped_divide
from ..layout import inttuple as T
from ..layout.layout import norm_coord
from .threads import check_thread_index


def _rank_of(t):
    return len(t) if type(t) is tuple else 1


def _tile_ranks(tiled):
    shape = tiled.shape if hasattr(tiled, "shape") else tiled.layout.shape
    return _rank_of(shape[0]), _rank_of(shape[1])


def inner_partition(a, tiler, coord):
    """Divide `a` by `tiler` and index the tiles with `coord` (``None``
    keeps a mode of tiles): the tile at `coord`. CuTe: inner_partition."""
    tiled = zipped_divide(a, tiler)
    r0, r1 = _tile_ranks(tiled)
    keep = (None,) * r0 if r0 > 1 else None
    if type(coord) is tuple:
        coord = coord + (None,) * (r1 - len(coord)) if r1 > len(coord) else coord
    return tiled[keep, coord] if hasattr(tiled, "engine") else tiled(keep, coord)


def outer_partition(a, tiler, coord):
    """Divide `a` by `tiler` and index inside every tile with `coord`: the
    elements at `coord` of all tiles. CuTe: outer_partition."""
    tiled = zipped_divide(a, tiler)
    r0, r1 = _tile_ranks(tiled)
    keep = (None,) * r1 if r1 > 1 else None
    if type(coord) is tuple:
        coord = coord + (None,) * (r0 - len(coord)) if r0 > len(coord) else coord
    return tiled[coord, keep] if hasattr(tiled, "engine") else tiled(coord, keep)


def tile(a, tiler, coord, proj=None):
    """The tile of `a` at `coord` for tiles of shape `tiler`; ``None`` in
    `coord` keeps that mode of tiles. MoYe: @tile; CuTe: local_tile.
        >>> a = MoYeArray(np.arange(64), (8, 8))
        >>> tile(a, (4, 2), (1, None)).layout
        (4,2,4):(1,8,16)
        >>> tile(a, (4, 2, 8), (1, 0, None), proj=(1, None, 1)).layout
        (4,8,1):(1,8,0)
    """
    tiler, coord = _norm_tiler(tiler), norm_coord(coord)
    if proj is not None:
        tiler, coord = dice(proj, tiler), dice(proj, coord)
    return inner_partition(a, tiler, coord)


def _norm_tiler(t):
    if isinstance(t, list):
        return tuple(t)
    return t


def parallelize(a, thr_layout, thr_idx, proj=None):
    """Thread `thr_idx`'s share of `a` when the threads of `thr_layout` cover
    it in repeated patterns: every element at the thread's coordinate of each
    thread-layout-shaped tile. `proj` keeps (int) or drops (None) modes of
    the thread layout. MoYe: @parallelize; CuTe: local_partition.
        >>> A = MoYeArray(np.arange(1, 33), (4, 8))
        >>> parallelize(A, Layout((4, 4)), 4, (1, None)).numpy().tolist()
        [[1, 5, 9, 13, 17, 21, 25, 29]]
    """
    check_thread_index("parallelize", thr_idx, thr_layout)
    if proj is not None:
        thr_layout = dice(proj, thr_layout)
    coord = _flat_coord(thr_layout, thr_idx)
    return outer_partition(a, T.product_each(thr_layout.shape), coord)


def _flat_coord(layout, index):
    """The coordinate, one 1-D index per mode, of `index` in `layout`
    (CuTe: Layout::get_flat_coord)."""
    hier = T.index_to_coord(index, layout.shape, layout.stride)
    if type(layout.shape) is not tuple:
        return hier
    return tuple(T.coord_to_index(c, s) for c, s in zip(hier, layout.shape))


def tiles(a, tiler):
    """The tiles of `a` for tiles of shape `tiler`, one view after another in
    colexicographic order of the tile coordinates (MoYe's TileIterator).
        >>> a = MoYeArray(np.arange(16), (4, 4))
        >>> [t.numpy().tolist() for t in tiles(a, (2, 4))]
        [[[0, 4, 8, 12], [1, 5, 9, 13]], [[2, 6, 10, 14], [3, 7, 11, 15]]]
    """
    tiled = zipped_divide(a, _norm_tiler(tiler))
    r0, _ = _tile_ranks(tiled)
    keep = (None,) * r0 if r0 > 1 else None
    n = T.product(tiled.shape[1])
    if not isinstance(n, int):
        raise TypeError(f"tiles: the number of tiles {n!r} is dynamic; use a kernel loop over "
                        "tile coordinates instead")
    for j in range(n):
        yield tiled[keep, j] if hasattr(tiled, "engine") else tiled(keep, j)


TileIterator = tiles
local_tile = tile
local_partition = parallelize
