"""CuTe's layout algebra: coalesce, composition, complement, inverses,
divides and products, with CuTe 4.x's exact semantics.

A *tiler* is a Layout, an int ``n`` (meaning ``n:1``), ``None`` (CuTe's
``_``: keep the mode), or a tuple of tilers applied mode by mode.

Operations on a ComposedLayout (a swizzle or other function over a layout)
act on its inner layout and keep the outer function, as in CuTe.
"""
from ..errors import DynamicValueError, LayoutError, MoyeTypeError
from . import inttuple as T
from . import scalar as S
from .layout import Layout, append, as_layout, cosize, layout_from_parts, make_ordered_layout
from .memo import memoized
from .swizzle import compose_function, compose_with_composed


def _through(x, fn, *args):
    """Apply `fn` to the inner layout of a composed layout."""
    through = getattr(x, "__moye_through__", None)
    if through is None:
        raise MoyeTypeError(f"{fn.__name__}: expected a Layout, got {x!r} of type "
                            f"{type(x).__name__}")
    return through(fn, *args)


def _transform_layout(layout, tiler, fn, keep_rest=True):
    """Apply `fn(mode_i, tiler_i)` to the first len(tiler) modes; the other
    modes of `layout` follow unchanged if `keep_rest` (CuTe's transform_layout)."""
    shape, stride = (layout.shape, layout.stride) if type(layout.shape) is tuple \
        else ((layout.shape,), (layout.stride,))
    if len(tiler) > len(shape):
        raise LayoutError(f"{fn.__name__}: the tiler {_fmt_tiler(tiler)} has {len(tiler)} modes "
                          f"but layout {layout} has only {len(shape)}")
    modes = [fn(layout_from_parts(s, d), t) for s, d, t in zip(shape, stride, tiler)]
    if keep_rest:
        modes += [layout_from_parts(s, d) for s, d in zip(shape[len(tiler):], stride[len(tiler):])]
    return layout_from_parts(tuple(m.shape for m in modes), tuple(m.stride for m in modes))


def _fmt_tiler(t):
    if type(t) is tuple:
        return "(" + ",".join(_fmt_tiler(e) for e in t) + ")"
    return "_" if t is None else str(t)


# -- coalesce and filter ----------------------------------------------------

def _bw_coalesce(fs, fd, ns, nd):
    """CuTe's backward coalesce of the flat modes fs:fd onto the single mode ns:nd."""
    shapes, strides = [ns], [nd]
    for i in range(len(fs) - 2, -1, -1):
        s, d = fs[i], fd[i]
        if type(s) is int and s == 1:
            continue
        front_s, front_d = shapes[0], strides[0]
        if len(shapes) == 1 and type(front_s) is int and front_s == 1:
            shapes[0], strides[0] = s, d
        elif type(front_s) is int and type(s) is int and type(d) is int \
                and type(front_d) is int and s * d == front_d:
            shapes[0], strides[0] = s * front_s, d
        else:
            shapes.insert(0, s)
            strides.insert(0, d)
    if len(shapes) == 1:
        if type(shapes[0]) is int and shapes[0] == 1:
            return layout_from_parts(1, 0)
        return layout_from_parts(shapes[0], strides[0])
    return layout_from_parts(tuple(shapes), tuple(strides))


@memoized
def coalesce(layout, profile=None):
    """The same function on its domain with the fewest modes; with a
    `profile`, coalesce each mode it names separately. CuTe: coalesce.
        >>> coalesce(Layout((2, (1, 6)), (1, (6, 2))))
        12:1
        >>> coalesce(Layout(((2, 3), 4), ((1, 2), 6)), (0, 0))
        (6,4):(1,6)
    """
    if type(layout) is not Layout:
        return _through(layout, coalesce, profile)
    if type(profile) is tuple:
        return _transform_layout(layout, profile, coalesce)
    fs, fd = T.flatten_to_tuple(layout.shape), T.flatten_to_tuple(layout.stride)
    return _bw_coalesce(fs, fd, fs[-1], fd[-1])


def _coalesce_x(layout):
    # Like coalesce, but also keeps the function outside the domain: a
    # trailing static size-1 mode stands in as size 2 so its stride survives.
    fs, fd = T.flatten_to_tuple(layout.shape), T.flatten_to_tuple(layout.stride)
    last = fs[-1]
    return _bw_coalesce(fs, fd, 2 if type(last) is int and last == 1 else last, fd[-1])


def filter_zeros(layout, profile=None):
    """`layout` with its static stride-0 modes (or those where `profile`
    has 0) given size 1. CuTe: filter_zeros."""
    if type(layout) is not Layout:
        return _through(layout, filter_zeros, profile)
    ref = layout.stride if profile is None else profile
    return layout_from_parts(T.filter_zeros(ref, layout.shape), layout.stride)


@memoized
def filter(layout, profile=None):
    """`layout` without its stride-0 and size-1 modes, coalesced. CuTe: filter.
        >>> filter(Layout((2, 3, 1, 4), (0, 1, 5, 6)))
        (3,4):(1,6)
    """
    if type(layout) is not Layout:
        return _through(layout, filter, profile)
    if type(profile) is tuple:
        return _transform_layout(layout, profile, filter)
    return coalesce(filter_zeros(layout))


# -- composition --------------------------------------------------------------

@memoized
def composition(lhs, rhs):
    """``lhs o rhs``: the layout whose value at c is lhs(rhs(c)), with the
    shape of `rhs`. `rhs` may be a Layout, an int n (n:1), a shape tuple,
    ``None`` or a tuple of tilers (mode by mode; modes of `lhs` beyond the
    tuple are dropped). CuTe: composition.
        >>> composition(Layout((6, 2), (8, 2)), Layout((4, 3), (3, 1)))
        ((2,2),3):((24,2),8)
    """
    if type(lhs) is not Layout:
        if hasattr(lhs, "__moye_through__"):
            return _through(lhs, composition, rhs)
        return compose_function(lhs, rhs)
    if type(rhs) is Layout:
        return _compose(_coalesce_x(lhs), rhs.shape, rhs.stride, lhs, rhs)
    if type(rhs) is tuple or isinstance(rhs, list):
        return _transform_layout(lhs, tuple(rhs), composition, keep_rest=False)
    if rhs is None:
        return lhs
    if type(rhs) is int or S.is_dynamic_scalar(rhs):
        S.require_positive(rhs, "composition: the tiler")
        return _compose(_coalesce_x(lhs), rhs, 1, lhs, rhs)
    if hasattr(rhs, "__moye_through__"):
        return compose_with_composed(lhs, rhs)
    raise MoyeTypeError(f"composition: cannot compose {lhs} with {rhs!r} of type "
                        f"{type(rhs).__name__}")


def _compose(flat_lhs, rshape, rstride, lhs, rhs):
    if type(rshape) is tuple:
        parts = [_compose(flat_lhs, s, d, lhs, rhs) for s, d in zip(rshape, rstride)]
        return layout_from_parts(tuple(p.shape for p in parts), tuple(p.stride for p in parts))
    if type(rstride) is int and rstride == 0:
        return layout_from_parts(rshape, rstride)
    lshape, lstride = flat_lhs.shape, flat_lhs.stride
    if type(lshape) is not tuple:
        return layout_from_parts(rshape, S.mul(rstride, lstride))
    result_shape, result_stride = [], []
    rest_shape, rest_stride = rshape, rstride
    for cs, cd in zip(lshape[:-1], lstride[:-1]):
        if type(cs) is int and type(rest_stride) is int:
            if not (rest_stride % cs == 0 or rest_stride < cs):
                raise LayoutError(
                    f"composition: {lhs} o {rhs} fails the stride divisibility condition "
                    f"(stride {rest_stride} vs. shape {cs})")
        abs_stride = abs(rest_stride)
        next_shape = S.ceil_div(cs, abs_stride)
        next_stride = S.mul(S.ceil_div(abs_stride, cs), S.sign(rest_stride))
        if (type(next_shape) is int and next_shape == 1) or \
                (type(rest_shape) is int and rest_shape == 1):
            rest_stride = next_stride
            continue
        new_shape = S.smin(next_shape, rest_shape)
        if type(new_shape) is int and type(rest_shape) is int and rest_shape % new_shape != 0:
            raise LayoutError(
                f"composition: {lhs} o {rhs} fails the shape divisibility condition "
                f"(shape {rest_shape} vs. {new_shape})")
        result_shape.append(new_shape)
        result_stride.append(S.mul(rest_stride, cd))
        rest_shape = S.floordiv(rest_shape, new_shape)
        rest_stride = next_stride
    if not result_shape:
        return layout_from_parts(rest_shape, S.mul(rest_stride, lstride[-1]))
    if type(rest_shape) is int and rest_shape == 1:
        if len(result_shape) == 1:
            return layout_from_parts(result_shape[0], result_stride[0])
        return layout_from_parts(tuple(result_shape), tuple(result_stride))
    result_shape.append(rest_shape)
    result_stride.append(S.mul(rest_stride, lstride[-1]))
    return layout_from_parts(tuple(result_shape), tuple(result_stride))


# -- complement ---------------------------------------------------------------

@memoized
def complement(layout, cotarget=None):
    """The layout that fills the gaps of `layout` up to `cotarget` (an int or
    a shape; default cosize(filter(layout))), ordered and disjoint from it.
    CuTe: complement.
        >>> complement(Layout(4, 2), 24)
        (2,3):(1,8)
    """
    if type(layout) is not Layout:
        inner = getattr(layout, "inner", None)
        if inner is None:
            raise MoyeTypeError(f"complement: expected a Layout, got {layout!r}")
        return complement(inner, cotarget if cotarget is not None else layout.__moye_cosize__())
    f = filter(layout)
    if cotarget is None:
        cotarget = cosize(f)
    elif type(cotarget) is Layout:
        cotarget = cotarget.shape
    else:
        cotarget = T.as_int_tuple(cotarget, "complement: the cotarget")
    T.check_extents(cotarget, "complement: the cotarget")
    _require_positive_strides(f, layout, "complement")
    shape, stride = f.shape, f.stride
    if type(stride) is int and stride == 0:
        return Layout(_coalesce_shape(cotarget))
    if type(shape) is not tuple:
        shape, stride = (shape,), (stride,)
    if len(shape) > 1:
        for d in stride:
            if type(d) is not int:
                raise DynamicValueError(f"complement: layout {layout} has dynamic strides; "
                                        "CuTe allows that only for rank-1 layouts")
    shape, stride = list(shape), list(stride)
    result_shape, result_stride = [], [1]
    for _ in range(len(shape) - 1):
        k = min(range(len(stride)), key=stride.__getitem__)
        min_stride = stride[k]
        new_shape = min_stride // result_stride[-1]
        if new_shape == 0:
            raise LayoutError(f"complement: layout {layout} is not injective, or its modes do "
                              "not nest (each sorted stride a multiple of the one before)")
        result_shape.append(new_shape)
        result_stride.append(S.mul(min_stride, shape[k]))
        del shape[k], stride[k]
    new_shape = S.floordiv(stride[0], result_stride[-1])
    if type(new_shape) is int and new_shape == 0:
        raise LayoutError(f"complement: layout {layout} is not injective, or its modes do "
                          "not nest (each sorted stride a multiple of the one before)")
    result_shape.append(new_shape)
    new_stride = S.mul(stride[0], shape[0])
    rest_shape = _coalesce_shape(T.ceil_div(cotarget, new_stride))
    rest_stride = T.compact_col_major(rest_shape, new_stride)
    return coalesce(layout_from_parts((tuple(result_shape), rest_shape), (tuple(result_stride), rest_stride)))


def _coalesce_shape(shape):
    """Merge neighbouring static modes (and neighbouring dynamic ones) of a
    shape. CuTe: coalesce(Shape)."""
    flat = T.flatten_to_tuple(shape)
    out = [flat[0]]
    for a in flat[1:]:
        if (type(out[-1]) is int) == (type(a) is int):
            out[-1] = S.mul(out[-1], a)
        else:
            out.append(a)
    return out[0] if len(out) == 1 else tuple(out)


def _require_positive_strides(f, layout, what):
    """A LayoutError if the (filtered) layout `f` has a static negative stride."""
    for d in T.flatten_to_tuple(f.stride):
        if type(d) is int and d < 0:
            raise LayoutError(f"{what}: layout {layout} has the negative stride {d}; "
                              f"{what} needs positive strides")


# -- inverses -------------------------------------------------------------------

def _wrapped_coalesce(layout):
    c = coalesce(layout)
    if type(c.shape) is tuple:
        return c.shape, c.stride
    return (c.shape,), (c.stride,)


def _exclusive_prefix(shape):
    out = [1]
    for s in shape:
        out.append(S.mul(out[-1], s))
    return out


@memoized
def right_inverse(layout):
    """A layout R with layout(R(i)) == i for every i < size(R), as large as
    possible; stride-0 and dynamic-stride modes are skipped. CuTe: right_inverse.
        >>> right_inverse(Layout((4, 2), (0, 1)))
        2:4
    """
    if layout is None:
        return None
    if type(layout) is not Layout:
        inverse = getattr(layout, "__moye_right_inverse__", None)
        if inverse is None:
            raise MoyeTypeError(f"right_inverse: expected a Layout, got {layout!r}")
        return inverse()
    lshape, lstride = _wrapped_coalesce(layout)
    preprod = _exclusive_prefix(lshape)
    order = sorted((i for i, d in enumerate(lstride) if type(d) is int),
                   key=lstride.__getitem__)
    result_shape, result_stride, curr = [1], [0], 1
    for i in order:
        if type(curr) is int and lstride[i] == curr:
            result_shape.append(lshape[i])
            result_stride.append(preprod[i])
            curr = S.mul(lshape[i], lstride[i])
    return coalesce(layout_from_parts(tuple(result_shape), tuple(result_stride)))


@memoized
def left_inverse(layout):
    """A layout L with L(layout(i)) == i for every i < size(layout) when
    `layout` is injective. CuTe: left_inverse.
        >>> left_inverse(Layout((2, 3), (3, 1)))
        (3,2):(2,1)
    """
    if layout is None:
        return None
    if type(layout) is not Layout:
        inverse = getattr(layout, "__moye_left_inverse__", None)
        if inverse is None:
            raise MoyeTypeError(f"left_inverse: expected a Layout, got {layout!r}")
        return inverse()
    lshape, lstride = _wrapped_coalesce(layout)
    _require_positive_strides(layout_from_parts(lshape, lstride), layout, "left_inverse")
    for d in lstride:
        if type(d) is not int:
            raise DynamicValueError(f"left_inverse: layout {layout} has dynamic strides; "
                                    "CuTe requires static strides")
    preprod = _exclusive_prefix(lshape)
    order = sorted(range(len(lstride)), key=lstride.__getitem__)
    result_shape, result_stride, size = [], [0], 1
    for i in order:
        d = lstride[i]
        if d == 0:
            continue
        if type(size) is int and d % size != 0:
            raise LayoutError(f"left_inverse: layout {layout} fails the divisibility condition "
                              f"(stride {d} is not a multiple of {size})")
        result_shape.append(S.floordiv(d, size))
        result_stride.append(preprod[i])
        size = S.mul(size, result_shape[-1])
    result_shape.append(lshape[order[-1]])
    return coalesce(layout_from_parts(tuple(result_shape), tuple(result_stride)))


# -- divides --------------------------------------------------------------------

@memoized
def logical_divide(layout, tiler):
    """Split `layout` into (tile, rest): composition with the tiler and its
    complement within shape(coalesce(layout)). CuTe: logical_divide.
        >>> logical_divide(Layout((3, 4), (1, 10)), 2)
        (2,(2,4)):(1,(2,10))
    """
    if type(layout) is not Layout:
        return _through(layout, logical_divide, tiler)
    if type(tiler) is Layout:
        rest = complement(tiler, coalesce(layout).shape)
        return composition(layout, layout_from_parts((tiler.shape, rest.shape), (tiler.stride, rest.stride)))
    if type(tiler) is tuple or isinstance(tiler, list):
        return _transform_layout(layout, tuple(tiler), logical_divide)
    if tiler is None:
        return layout
    S.require_positive(tiler, "logical_divide: the tiler")
    return logical_divide(layout, as_layout(tiler, "logical_divide: the tiler"))


def _zip2_by(t, guide):
    """((A,a),((B,b),(C,c)),d) guided by (X,(X,X)) gives ((A,(B,C)),(a,(b,c),d))."""
    if type(guide) is tuple:
        if type(t) is not tuple or len(t) < len(guide):
            raise LayoutError(f"the tiler {_fmt_tiler(guide)} does not fit {T.fmt(t)}")
        split = [_zip2_by(x, g) for x, g in zip(t, guide)]
        return (tuple(s[0] for s in split), tuple(s[1] for s in split) + t[len(guide):])
    if type(t) is not tuple or len(t) != 2:
        raise LayoutError(f"a mode tiled by '{_fmt_tiler(guide)}' must be rank 2 (tile, rest); "
                          f"got {T.fmt(t)}")
    return t


def tile_unzip(layout, tiler):
    """Gather the tile modes and the rest modes of a divided or multiplied
    layout into a rank-2 ((tiles...), (rests...)). CuTe: tile_unzip."""
    if type(layout) is not Layout:
        return _through(layout, tile_unzip, tiler)
    return layout_from_parts(_zip2_by(layout.shape, tiler), _zip2_by(layout.stride, tiler))


@memoized
def zipped_divide(layout, tiler):
    """((tile modes), (rest modes)). CuTe: zipped_divide.
        >>> zipped_divide(Layout((4, 6)), (2, 3))
        ((2,3),(2,2)):((1,4),(2,12))
    """
    if type(layout) is not Layout:
        return _through(layout, zipped_divide, tiler)
    return tile_unzip(logical_divide(layout, tiler), tiler)


def _unpack(layout, first, second):
    s, d = layout.shape, layout.stride
    if first:
        s0, d0 = (s[0], d[0]) if type(s[0]) is tuple else ((s[0],), (d[0],))
    else:
        s0, d0 = (s[0],), (d[0],)
    s1, d1 = (s[1], d[1]) if second and type(s[1]) is tuple else ((s[1],), (d[1],))
    return layout_from_parts(s0 + s1, d0 + d1)


@memoized
def tiled_divide(layout, tiler):
    """((tile modes), rest0, rest1, ...). CuTe: tiled_divide.
        >>> tiled_divide(Layout((4, 6)), (2, 3))
        ((2,3),2,2):((1,4),2,12)
    """
    if type(layout) is not Layout:
        return _through(layout, tiled_divide, tiler)
    return _unpack(zipped_divide(layout, tiler), False, True)


@memoized
def flat_divide(layout, tiler):
    """(tile0, tile1, ..., rest0, rest1, ...). CuTe: flat_divide.
        >>> flat_divide(Layout((4, 6)), (2, 3))
        (2,3,2,2):(1,4,2,12)
    """
    if type(layout) is not Layout:
        return _through(layout, flat_divide, tiler)
    return _unpack(zipped_divide(layout, tiler), True, True)


# -- products -------------------------------------------------------------------

@memoized
def logical_product(block, tiler):
    """(block, tiler's repetition of it): the block, then the tiler composed
    with the block's complement. CuTe: logical_product.
        >>> logical_product(Layout((2, 2), (1, 2)), Layout((3, 4), (4, 1)))
        ((2,2),(3,4)):((1,2),(16,4))
    """
    if type(block) is not Layout:
        return _through(block, logical_product, tiler)
    if type(tiler) is Layout:
        comp = complement(block, S.mul(T.product(block.shape), cosize(tiler)))
        rep = composition(comp, tiler)
        return layout_from_parts((block.shape, rep.shape), (block.stride, rep.stride))
    if type(tiler) is tuple or isinstance(tiler, list):
        return _transform_layout(block, tuple(tiler), logical_product)
    if tiler is None:
        return block
    S.require_positive(tiler, "logical_product: the tiler")
    return logical_product(block, as_layout(tiler, "logical_product: the tiler"))


@memoized
def zipped_product(block, tiler):
    """((block modes), (tiler modes)). CuTe: zipped_product."""
    if type(block) is not Layout:
        return _through(block, zipped_product, tiler)
    return tile_unzip(logical_product(block, tiler), tiler)


@memoized
def tiled_product(block, tiler):
    """((block modes), tiler0, tiler1, ...). CuTe: tiled_product."""
    if type(block) is not Layout:
        return _through(block, tiled_product, tiler)
    return _unpack(zipped_product(block, tiler), False, True)


@memoized
def flat_product(block, tiler):
    """(block0, block1, ..., tiler0, tiler1, ...). CuTe: flat_product."""
    if type(block) is not Layout:
        return _through(block, flat_product, tiler)
    return _unpack(zipped_product(block, tiler), True, True)


def _zip_modes(a, b):
    """CuTe's zip of two layouts: pair up their modes ((a0,b0),(a1,b1),...)
    when `a` has modes; a single-mode `a` gives the one mode ((a,b))."""
    if type(a.shape) is tuple:
        if type(b.shape) is not tuple or len(a.shape) != len(b.shape):
            raise LayoutError(f"cannot zip the modes of {a} with those of {b}: their ranks differ")
        return layout_from_parts(tuple(zip(a.shape, b.shape)), tuple(zip(a.stride, b.stride)))
    return layout_from_parts(((a.shape, b.shape),), ((a.stride, b.stride),))


def _rank_product(block, tiler, raked):
    block, tiler = as_layout(block), as_layout(tiler)
    r = max(len(block), len(tiler))
    result = logical_product(append(block, n=r), append(tiler, n=r))
    first, second = result[0], result[1]
    return _zip_modes(second, first) if raked else _zip_modes(first, second)


@memoized
def blocked_product(block, tiler):
    """The block repeated over the tiler, mode by mode: each mode is
    (block_i, tiler_i). CuTe: blocked_product.
        >>> blocked_product(Layout((2, 2), (1, 2)), Layout((3, 4), (4, 1)))
        ((2,3),(2,4)):((1,16),(2,4))
    """
    if type(block) is not Layout:
        return _through(block, blocked_product, tiler)
    return _rank_product(block, tiler, raked=False)


@memoized
def raked_product(block, tiler):
    """The block's elements interleaved over the tiler: each mode is
    (tiler_i, block_i). CuTe: raked_product.
        >>> raked_product(Layout((2, 2), (1, 2)), Layout((3, 4), (4, 1)))
        ((3,2),(4,2)):((16,1),(4,2))
    """
    if type(block) is not Layout:
        return _through(block, raked_product, tiler)
    return _rank_product(block, tiler, raked=True)


@memoized
def tile_to_shape(block, target_shape, order=T.GenColMajor):
    """Repeat `block` until it has `target_shape`, repeating along the modes
    in `order`. CuTe: tile_to_shape.
        >>> tile_to_shape(Layout((2, 2), (2, 1)), (4, 6))
        ((2,2),(2,3)):((2,4),(1,8))
    """
    if type(block) is not Layout:
        return _through(block, tile_to_shape, target_shape, order)
    target_shape = T.check_extents(T.as_int_tuple(target_shape, "tile_to_shape: the target"),
                                   "tile_to_shape: the target shape")
    r = T.rank(target_shape)
    if len(block) > r:
        raise LayoutError(f"tile_to_shape: block {block} has more modes than the target "
                          f"shape {T.fmt(target_shape)}")
    padded = append(block, n=r)
    block_shape = T.product_each(padded.shape)
    target = T.product_each(target_shape)
    if _is_static_tuple(target) and _is_static_tuple(block_shape) \
            and not T.evenly_divides(target, block_shape):
        raise LayoutError(f"tile_to_shape: block {block} (shape {T.fmt(block_shape)}) does not "
                          f"divide the target shape {T.fmt(target_shape)}")
    product_shape = T.ceil_div(target, block_shape)
    if order is T.GenColMajor or order is T.GenRowMajor:
        tiling = Layout(product_shape, order)
    else:
        tiling = make_ordered_layout(product_shape, order)
    return blocked_product(padded, tiling)


def _is_static_tuple(t):
    if type(t) is tuple:
        return all(_is_static_tuple(e) for e in t)
    return type(t) is int


# -- vectors and kernels ----------------------------------------------------------

@memoized
def max_common_layout(a, b):
    """The layout of the most contiguous elements that `a` and `b` both
    place at consecutive offsets. CuTe: max_common_layout.
        >>> max_common_layout(Layout((4, 8)), Layout((4, 8)))
        32:1
    """
    inv_b = right_inverse(b)
    common = coalesce(composition(a, inv_b))
    s0, d0 = _first_mode(common)
    if type(s0) is int and type(d0) is int and d0 == 1:
        return composition(inv_b, layout_from_parts(s0, d0))
    return layout_from_parts(1, 0)


@memoized
def max_common_vector(a, b):
    """How many elements `a` and `b` both place contiguously from offset 0:
    the widest vector a copy between them can use. CuTe: max_common_vector.
        >>> max_common_vector(Layout((4, 8)), Layout((4, 8), (8, 1)))
        1
    """
    common = coalesce(composition(a, right_inverse(b)))
    s0, d0 = _first_mode(common)
    if type(s0) is int and type(d0) is int and d0 == 1:
        return s0
    return 1


def _first_mode(layout):
    if type(layout.shape) is tuple:
        return layout.shape[0], layout.stride[0]
    return layout.shape, layout.stride


def nullspace(layout):
    """The layout of the coordinates `layout` maps to 0 (its stride-0 modes).
    CuTe: nullspace.
        >>> nullspace(Layout((2, 4, 3), (1, 0, 0)))
        (4,3):(2,8)
    """
    if type(layout) is not Layout:
        return layout_from_parts(1, 0)
    fs, fd = T.flatten_to_tuple(layout.shape), T.flatten_to_tuple(layout.stride)
    picks = [i for i, d in enumerate(fd) if type(d) is int and d == 0]
    if not picks:
        return layout_from_parts(1, 0)
    rstride = T.compact_col_major(fs)
    if len(picks) == 1:
        return layout_from_parts(fs[picks[0]], rstride[picks[0]])
    return layout_from_parts(tuple(fs[i] for i in picks), tuple(rstride[i] for i in picks))


@memoized
def upcast(layout, n):
    """The layout of the same data seen as elements `n` times wider: the
    stride-1 mode shrinks by n, other strides are divided by n. CuTe: upcast<N>.
        >>> upcast(Layout((4, 8), (1, 4)), 2)
        (2,8):(1,2)
    """
    n = S.require_positive(S.require_static(n, "upcast: the factor"), "upcast: the factor")
    if type(layout) is not Layout:
        cast = getattr(layout, "__moye_upcast__", None)
        if cast is None:
            raise MoyeTypeError(f"upcast: expected a layout, got {layout!r}")
        return cast(n, upcast)
    return layout_from_parts(*_upcast(layout.shape, layout.stride, n, layout))


def _upcast(s, d, n, layout):
    if type(s) is tuple:
        parts = [_upcast(si, di, n, layout) for si, di in zip(s, d)]
        return tuple(p[0] for p in parts), tuple(p[1] for p in parts)
    if type(d) is int:
        if d == 0:
            return s, d
        if d % n != 0 and n % d != 0:
            raise LayoutError(f"upcast: stride {d} of layout {layout} and the factor {n} "
                              "do not divide one another")
        return S.ceil_div(s, S.ceil_div(n, abs(d))), S.sign(d) * S.ceil_div(abs(d), n)
    return s, S.floordiv(d, n)


@memoized
def downcast(layout, n):
    """The layout of the same data seen as elements `n` times narrower: the
    stride-1 mode grows by n, other strides are multiplied by n. CuTe: downcast<N>.
        >>> downcast(Layout((2, 8), (1, 2)), 2)
        (4,8):(1,4)
    """
    n = S.require_positive(S.require_static(n, "downcast: the factor"), "downcast: the factor")
    if type(layout) is not Layout:
        cast = getattr(layout, "__moye_downcast__", None)
        if cast is None:
            raise MoyeTypeError(f"downcast: expected a layout, got {layout!r}")
        return cast(n, downcast)
    if not any(type(d) is int and abs(d) == 1 for d in T.flatten_to_tuple(layout.stride)):
        raise LayoutError(f"downcast: layout {layout} has no stride-1 mode, "
                          "so its elements are not adjacent")
    return layout_from_parts(*_downcast(layout.shape, layout.stride, n))


def _downcast(s, d, n):
    if type(s) is tuple:
        parts = [_downcast(si, di, n) for si, di in zip(s, d)]
        return tuple(p[0] for p in parts), tuple(p[1] for p in parts)
    if type(d) is int and abs(d) == 1:
        return S.mul(s, n), d
    return s, S.mul(d, n)


def recast_layout(layout, old_type, new_type):
    """The layout of the same bytes seen as `new_type` instead of `old_type`
    (element types or bit widths). CuTe: recast_layout.
        >>> recast_layout(Layout((4, 8)), 32, 128)
        (1,8):(1,1)
    """
    from math import gcd
    old_bits, new_bits = _bits(old_type), _bits(new_type)
    g = gcd(old_bits, new_bits)
    num, den = new_bits // g, old_bits // g
    if num == 1 and den == 1:
        return layout
    if num == 1:
        return downcast(layout, den)
    if den == 1:
        return upcast(layout, num)
    return downcast(upcast(layout, num), den)


def _bits(t):
    bits = t if type(t) is int else getattr(t, "bits", None)
    if type(bits) is int:
        return S.require_positive(bits, "recast_layout: a bit width")
    raise MoyeTypeError(f"recast_layout: expected an element type or a bit width, got {t!r}")


def max_alignment(layout):
    """The largest n for which upcast(layout, n) is valid, from the static
    parts of the layout. CuTe: max_alignment."""
    from math import gcd
    if type(layout) is not Layout:
        return 1
    c = coalesce(layout)
    s = tuple(x if type(x) is int else 1 for x in T.flatten_to_tuple(c.shape))
    d = tuple(x if type(x) is int else 0 for x in T.flatten_to_tuple(c.stride))
    static = layout_from_parts(s, d)
    permuted = logical_divide(static, right_inverse(static))
    s0 = T.product(permuted.shape[0])
    d1 = permuted.stride[1]
    return gcd(s0, T.flatten_to_tuple(d1)[0] if type(d1) is tuple else d1)


@memoized
def make_fragment_like(layout):
    """A compact layout with `layout`'s shape for a register fragment: mode 0
    column-major (keeping its static 0 strides), the other modes in the
    stride order of `layout`. CuTe: make_fragment_like.
        >>> make_fragment_like(Layout(((1, (2, 3)), 1, 1), ((0, (1, 4)), 0, 0)))
        ((1,(2,3)),1,1):((0,(1,2)),0,0)
        >>> make_fragment_like(Layout((4, 8), (8, 1)))
        (4,8):(1,4)
    """
    if type(layout) is not Layout:
        if type(layout) is tuple or type(layout) is int:
            return Layout(layout)
        inner = getattr(layout, "inner", None)
        if inner is None:
            raise MoyeTypeError(f"make_fragment_like: expected a layout or shape, got {layout!r}")
        return make_fragment_like(inner)
    shape, stride = layout.shape, layout.stride
    if type(shape) is tuple and len(shape) > 1 and _is_static_tuple(shape):
        mode0 = layout_from_parts(shape[0], T.compact_col_major(T.filter_zeros(stride[0], shape[0])))
        rest = make_ordered_layout(shape[1:], stride[1:])
        return tiled_product(mode0, rest)
    return Layout(shape)
