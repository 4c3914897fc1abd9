"""Integer tuples: ints or nested tuples of them, CuTe's IntTuple.

Shapes, strides and coordinates are all int tuples. A rank-1 tuple ``(4,)``
is not the int ``4``. Leaves may be dynamic values (see `scalar`).
"""
from ..errors import LayoutError
from . import scalar as S


def is_tuple(x):
    return type(x) is tuple


def as_int_tuple(x, what="int tuple"):
    """`x` with every leaf a Python int or dynamic value; lists become tuples."""
    if type(x) is int:
        return x
    if isinstance(x, (tuple, list)):
        return tuple(as_int_tuple(e, what) for e in x)
    return S.as_scalar(x, what)


def check_extents(shape, what="shape"):
    """`shape` itself; a LayoutError if a static extent is below 1 (CuTe's
    shapes are positive; a dynamic extent is checked where it is known)."""
    for e in flatten_to_tuple(shape):
        if type(e) is int and e < 1:
            raise LayoutError(f"{what} {fmt(shape)} has the extent {e}; extents must be positive")
    return shape


def _check_divisor(b, what):
    for e in flatten_to_tuple(b):
        if type(e) is int and e < 1:
            raise LayoutError(f"{what}: the divisor {fmt(b)} must be positive")


def rank(t):
    """Number of top-level modes (1 for an int). CuTe: rank.
        >>> rank(((2, 3), 4))
        2
    """
    return len(t) if type(t) is tuple else 1


def depth(t):
    """Nesting depth: 0 for an int. CuTe: depth.
        >>> depth(((2, 3), 4))
        2
    """
    if type(t) is tuple:
        return 1 + max((depth(e) for e in t), default=0)
    return 0


def product(t):
    """Product of all leaves. CuTe: product.
        >>> product(((2, 3), 4))
        24
    """
    if type(t) is tuple:
        r = 1
        for e in t:
            r = S.mul(r, product(e) if type(e) is tuple else e)
        return r
    return t


capacity = product


def product_each(t):
    """The product of each top-level mode.
        >>> product_each(((2, 3), 4))
        (6, 4)
    """
    return tuple(product(e) for e in t) if type(t) is tuple else t


def product_like(t, profile):
    """Products of `t` at the terminals of `profile`."""
    if type(profile) is tuple:
        return tuple(product_like(a, p) for a, p in zip(t, profile))
    return product(t)


def sum_(t):
    if type(t) is tuple:
        r = 0
        for e in t:
            r = S.add(r, sum_(e))
        return r
    return t


def inner_product(a, b):
    if type(a) is tuple:
        if type(b) is not tuple or len(a) != len(b):
            raise LayoutError(f"inner_product: {fmt(a)} and {fmt(b)} are not congruent")
        r = 0
        for x, y in zip(a, b):
            r = S.add(r, inner_product(x, y))
        return r
    return S.mul(a, b)


def flatten(t):
    """All leaves in one flat tuple (an int stays an int). CuTe: flatten.
        >>> flatten(((2, 3), (4, (5,))))
        (2, 3, 4, 5)
    """
    if type(t) is not tuple:
        return t
    out = []
    _flatten_into(t, out)
    return tuple(out)


def flatten_to_tuple(t):
    return flatten(t) if type(t) is tuple else (t,)


def _flatten_into(t, out):
    for e in t:
        if type(e) is tuple:
            _flatten_into(e, out)
        else:
            out.append(e)


def unflatten(flat, profile):
    """Fold the flat tuple `flat` into the nesting of `profile`. CuTe: unflatten.
        >>> unflatten((2, 3, 4), ((0, 0), 0))
        ((2, 3), 4)
    """
    flat = flatten_to_tuple(flat)
    result, rest = _unflatten(flat, 0, profile)
    if rest != len(flat):
        raise LayoutError(f"unflatten: {fmt(flat)} has {len(flat)} elements, "
                          f"profile {fmt(profile)} has {len(flatten_to_tuple(profile))}")
    return result


def _unflatten(flat, i, profile):
    if type(profile) is tuple:
        out = []
        for p in profile:
            r, i = _unflatten(flat, i, p)
            out.append(r)
        return tuple(out), i
    if i >= len(flat):
        raise LayoutError(f"unflatten: too few elements in {fmt(flat)} for the profile")
    return flat[i], i + 1


def repeat_like(t, value):
    if type(t) is tuple:
        return tuple(repeat_like(e, value) for e in t)
    return value


def congruent(a, b):
    """Same nesting (profile). CuTe: congruent.
        >>> congruent((2, (3, 4)), (5, (6, 7))), congruent((2, 3), (2, (3,)))
        (True, False)
    """
    if type(a) is tuple:
        return type(b) is tuple and len(a) == len(b) and all(congruent(x, y) for x, y in zip(a, b))
    return type(b) is not tuple


def weakly_congruent(a, b):
    """`a`'s profile is a coarsening of `b`'s (an int in `a` matches anything)."""
    if type(a) is tuple:
        return type(b) is tuple and len(a) == len(b) and all(weakly_congruent(x, y) for x, y in zip(a, b))
    return True


def compatible(a, b):
    """Every coordinate of shape `a` is a coordinate of shape `b`: sizes agree
    and `b` refines `a`. CuTe: compatible.
        >>> compatible(24, ((2, 3), 4)), compatible((6, 4), ((2, 3), 4))
        (True, True)
    """
    if type(a) is tuple:
        return type(b) is tuple and len(a) == len(b) and all(compatible(x, y) for x, y in zip(a, b))
    sb = product(b)
    if type(a) is int and type(sb) is int:
        return a == sb
    return a is sb


def weakly_compatible(a, b):
    """Shape `a` divides shape `b` mode by mode."""
    if type(a) is tuple:
        return type(b) is tuple and len(a) == len(b) and all(weakly_compatible(x, y) for x, y in zip(a, b))
    sb = product(b)
    return type(a) is int and type(sb) is int and sb % a == 0


def elem_less(a, b):
    """Every element of `a` below its counterpart in `b`; with dynamic
    values, their comparisons and-ed (a predicate in a kernel). CuTe: elem_less.
        >>> elem_less((1, 2), (2, 3)), elem_less((1, 3), (2, 3))
        (True, False)
    """
    if isinstance(a, tuple) and isinstance(b, tuple):
        if len(a) > len(b):
            return False
        result = True
        for x, y in zip(a, b):
            less = elem_less(x, y)
            if type(less) is bool:
                if not less:
                    return False
            else:
                result = less if result is True else result & less
        return result
    return a < b


def colex_less(a, b):
    """Colexicographic order (last mode most significant). CuTe: colex_less.
        >>> colex_less((3, 0), (0, 1))
        True
    """
    if type(a) is tuple and type(b) is tuple:
        for i in range(1, len(b) + 1):
            if i > len(a):
                return True
            x, y = a[-i], b[-i]
            if colex_less(x, y):
                return True
            if not _equal(x, y):
                return False
        return False
    return a < b


def lex_less(a, b):
    if type(a) is tuple and type(b) is tuple:
        for i in range(len(b)):
            if i == len(a):
                return True
            if lex_less(a[i], b[i]):
                return True
            if not _equal(a[i], b[i]):
                return False
        return False
    return a < b


def _equal(a, b):
    return S.same(a, b)


def increment(coord, shape):
    """The next coordinate after `coord` in colexicographic order within
    `shape` (the last mode is not wrapped). CuTe: increment.
        >>> increment((1, 0), (2, 3))
        (0, 1)
    """
    flat_c = list(flatten_to_tuple(coord))
    flat_s = flatten_to_tuple(shape)
    flat_c[0] += 1
    for i in range(len(flat_c) - 1):
        if flat_c[i] == flat_s[i]:
            flat_c[i] = 0
            flat_c[i + 1] += 1
        else:
            break
    return unflatten(tuple(flat_c), coord) if type(coord) is tuple else flat_c[0]


def coord_to_index(coord, shape, stride=None):
    """The index of `coord` (an int, an R-D or an h-D coordinate): with
    `stride`, the layout's offset; without, the colexicographic position in
    `shape`. CuTe: crd2idx.
        >>> coord_to_index((1, 2), (2, 3), (3, 1)), coord_to_index((1, 2), (2, 3))
        (5, 5)
    """
    if stride is None:
        return _crd2idx_colex(coord, shape)
    return crd2idx(coord, shape, stride)


def crd2idx(coord, shape, stride):
    if type(coord) is tuple:
        if type(shape) is not tuple or len(coord) != len(shape):
            raise LayoutError(f"coordinate {fmt(coord)} does not fit shape {fmt(shape)}")
        r = 0
        for c, s, d in zip(coord, shape, stride):
            r = S.add(r, crd2idx(c, s, d))
        return r
    if type(shape) is tuple:
        # An int coordinate is split colexicographically across the modes;
        # the last mode takes the rest, so indices past the size extend it.
        r = 0
        last = len(shape) - 1
        for i, (s, d) in enumerate(zip(shape, stride)):
            if i == last:
                return S.add(r, crd2idx(coord, s, d))
            if type(coord) is int and coord == 0:
                continue
            n = product(s)
            r = S.add(r, crd2idx(coord % n if type(n) is not int or n != 1 else 0, s, d))
            coord = S.floordiv(coord, n)
        return r
    return S.mul(coord, stride)


def _crd2idx_colex(coord, shape):
    if type(coord) is not tuple:
        return coord
    if type(shape) is not tuple or len(coord) != len(shape):
        raise LayoutError(f"coordinate {fmt(coord)} does not fit shape {fmt(shape)}")
    r, m = 0, 1
    for c, s in zip(coord, shape):
        r = S.add(r, S.mul(_crd2idx_colex(c, s), m))
        m = S.mul(m, product(s))
    return r


def index_to_coord(index, shape, stride=None):
    """The coordinate in `shape` of a 1-D `index` (colexicographic; the last
    mode is not wrapped). With `stride`, CuTe's idx2crd(i, s, d).
        >>> index_to_coord(7, (2, (2, 3)))
        (1, (1, 1))
    """
    if stride is not None:
        return _idx2crd_strided(index, shape, stride)
    if type(index) is tuple:
        if type(shape) is not tuple or len(index) != len(shape):
            raise LayoutError(f"coordinate {fmt(index)} does not fit shape {fmt(shape)}")
        return tuple(index_to_coord(i, s) for i, s in zip(index, shape))
    if type(shape) is not tuple:
        return index
    out = []
    last = len(shape) - 1
    for i, s in enumerate(shape):
        if i == last:
            out.append(index_to_coord(index, s))
        else:
            n = product(s)
            out.append(index_to_coord(index % n, s))
            index = S.floordiv(index, n)
    return tuple(out)


def _idx2crd_strided(idx, shape, stride):
    if type(idx) is tuple:
        return tuple(_idx2crd_strided(i, s, d) for i, s, d in zip(idx, shape, stride))
    if type(shape) is tuple:
        if type(stride) is not tuple:
            stride = compact_col_major(shape, stride)
        return tuple(_idx2crd_strided(idx, s, d) for s, d in zip(shape, stride))
    if S.is_const(shape, 1):
        return 0
    return S.floordiv(idx, stride) % shape


def coord_to_coord(coord, src_shape, dst_shape):
    """Re-express `coord` of `src_shape` as a coordinate of `dst_shape`
    (through the 1-D index where the profiles differ). CuTe: crd2crd.
        >>> coord_to_coord((1, 2), (2, 3), ((2, 3),))
        ((1, 2),)
    """
    if type(coord) is tuple and type(src_shape) is tuple and type(dst_shape) is tuple \
            and len(coord) == len(src_shape) == len(dst_shape):
        return tuple(coord_to_coord(c, s, d) for c, s, d in zip(coord, src_shape, dst_shape))
    return index_to_coord(coord_to_index(coord, src_shape), dst_shape)


class GenColMajor:
    """Tag: compact column-major strides (CuTe's LayoutLeft)."""


class GenRowMajor:
    """Tag: compact row-major strides (CuTe's LayoutRight)."""


def compact_col_major(shape, current=1):
    """Column-major strides for `shape`; static size-1 modes get stride 0.
    CuTe: compact_col_major (GenColMajor).
        >>> compact_col_major((2, (3, 1), 4))
        (1, (2, 0), 6)
    """
    return _compact_left(shape, current)[0]


def _compact_left(shape, current):
    if type(shape) is tuple:
        out = []
        for s in shape:
            d, current = _compact_left(s, current)
            out.append(d)
        return tuple(out), current
    if type(shape) is int and shape == 1:
        return 0, current
    return current, S.mul(current, shape)


def compact_row_major(shape, current=1):
    """Row-major strides for `shape`. CuTe: compact_row_major (GenRowMajor).
        >>> compact_row_major((2, (3, 4)))
        (12, (4, 1))
    """
    return _compact_right(shape, current)[0]


def _compact_right(shape, current):
    if type(shape) is tuple:
        out = []
        for s in reversed(shape):
            d, current = _compact_right(s, current)
            out.append(d)
        return tuple(reversed(out)), current
    if type(shape) is int and shape == 1:
        return 0, current
    return current, S.mul(current, shape)


def compact_order(shape, order):
    """Compact strides for `shape`, modes laid out by increasing `order`
    (modes with equal orders start at the same stride, as in CuTe; dynamic
    orders count as large and go left to right). CuTe: compact_order.
        >>> compact_order((2, 3, 4), (1, 0, 2))
        (3, 1, 6)
    """
    if order is GenColMajor:
        return compact_col_major(shape)
    if order is GenRowMajor:
        return compact_row_major(shape)
    ref_shape = flatten_to_tuple(product_like(shape, order))
    flat_order = flatten_to_tuple(order)
    max_order = 0
    for o in flat_order:
        if type(o) is int and o > max_order:
            max_order = o
    ref_order = tuple(o if type(o) is int else max_order + 1 + i for i, o in enumerate(flat_order))
    new_order = unflatten(ref_order, order)
    return _compact_order(shape, new_order, ref_shape, ref_order)


def _compact_order(shape, order, ref_shape, ref_order):
    if type(order) is tuple:
        if type(shape) is not tuple or len(shape) != len(order):
            raise LayoutError(f"compact_order: shape {fmt(shape)} and order {fmt(order)} "
                              "must have equal ranks")
        return tuple(_compact_order(s, o, ref_shape, ref_order) for s, o in zip(shape, order))
    start = 1
    for s, o in zip(ref_shape, ref_order):
        if o < order:
            start = S.mul(start, s)
    return compact_col_major(shape, start)


def prefix_product(t, init=1):
    """Exclusive prefix product, following the nesting of `t`.
    CuTe: prefix_product.
        >>> prefix_product((2, (3, 4), 5))
        (1, (2, 6), 24)
    """
    return _prefix(t, init)[0]


def _prefix(t, init):
    if type(t) is tuple:
        out = []
        for e in t:
            r, init = _prefix(e, init)
            out.append(r)
        return tuple(out), init
    return init, S.mul(init, t)


def shape_div(a, b):
    """Divide shape `a` by `b`, folding `b` across the modes of `a`; each
    step needs a % b == 0 or b % a == 0 when both are static. CuTe: shape_div.
        >>> shape_div((4, 5, 6), 40)
        (1, 1, 3)
    """
    if type(a) is tuple:
        if type(b) is tuple:
            if len(a) != len(b):
                raise LayoutError(f"shape_div: ranks of {fmt(a)} and {fmt(b)} differ")
            return tuple(shape_div(x, y) for x, y in zip(a, b))
        out = []
        for ai in a:
            out.append(shape_div(ai, b))
            b = shape_div(b, product(ai))
        return tuple(out)
    if type(b) is tuple:
        return shape_div(a, product(b))
    if type(a) is int and type(b) is int:
        _check_divisor(b, "shape_div")
        if a < 0 or (a % b != 0 and b % a != 0):
            raise LayoutError(f"shape_div: divisibility condition fails for {a} and {b} "
                              "(one must divide the other)")
    return S.ceil_div(a, b)


def ceil_div(a, b):
    """Ceiling division of shapes, folding an int `b` across the modes of `a`.
    CuTe: ceil_div.
        >>> ceil_div((4, 5, 6), 40), ceil_div(10, 4)
        ((1, 1, 3), 3)
    """
    if type(a) is tuple:
        if type(b) is tuple:
            if len(a) < len(b):
                raise LayoutError(f"ceil_div: {fmt(b)} has more modes than {fmt(a)}")
            b = b + (1,) * (len(a) - len(b))
            return tuple(ceil_div(x, y) for x, y in zip(a, b))
        out = []
        for ai in a:
            out.append(ceil_div(ai, b))
            b = ceil_div(b, product(ai))
        return tuple(out)
    if type(b) is tuple:
        return ceil_div(a, product(b))
    _check_divisor(b, "ceil_div")
    return S.ceil_div(a, b)


def evenly_divides(shape, tiler_shape):
    """Each mode of `tiler_shape` divides the corresponding mode of `shape`."""
    if type(tiler_shape) is tuple:
        if type(shape) is not tuple or len(tiler_shape) > len(shape):
            return False
        return all(evenly_divides(a, b) for a, b in zip(shape, tiler_shape))
    sa, sb = product(shape), product(tiler_shape)
    return sa == S.mul(sb, product(ceil_div(shape, tiler_shape)))


def filter_zeros(stride, shape):
    """`shape` with the modes whose stride is static 0 replaced by 1."""
    if type(stride) is tuple:
        return tuple(filter_zeros(d, s) for d, s in zip(stride, shape))
    if type(stride) is int and stride == 0:
        return repeat_like(shape, 1)
    return shape


def slice_(coord, t):
    """The elements of `t` paired with ``None`` in `coord`, flattened one
    level per tuple. CuTe: slice.
        >>> slice_((1, (None, 0), None), (2, (3, 4), 5))
        (3, 5)
    """
    if type(coord) is tuple:
        if type(t) is not tuple or len(coord) != len(t):
            raise LayoutError(f"coordinate {fmt(coord)} does not fit {fmt(t)}")
        out = []
        for c, e in zip(coord, t):
            out.extend(_lift_slice(c, e))
        return tuple(out)
    return t if coord is None else ()


def _lift_slice(c, e):
    if type(c) is tuple:
        if type(e) is not tuple or len(c) != len(e):
            raise LayoutError(f"coordinate {fmt(c)} does not fit {fmt(e)}")
        out = []
        for ci, ei in zip(c, e):
            out.extend(_lift_slice(ci, ei))
        return out
    return [e] if c is None else []


def dice(coord, t):
    """The elements of `t` paired with integers in `coord`. CuTe: dice."""
    if type(coord) is tuple:
        if type(t) is not tuple or len(coord) != len(t):
            raise LayoutError(f"coordinate {fmt(coord)} does not fit {fmt(t)}")
        out = []
        for c, e in zip(coord, t):
            out.extend(_lift_dice(c, e))
        return tuple(out)
    return () if coord is None else t


def _lift_dice(c, e):
    if type(c) is tuple:
        out = []
        for ci, ei in zip(c, e):
            out.extend(_lift_dice(ci, ei))
        return out
    return [] if c is None else [e]


def has_none(coord):
    if type(coord) is tuple:
        return any(has_none(c) for c in coord)
    return coord is None


def zero_like_slice(coord):
    """`coord` with ``None`` replaced by 0 (the offset of a slice)."""
    if type(coord) is tuple:
        return tuple(zero_like_slice(c) for c in coord)
    return 0 if coord is None else coord


def fmt(t):
    """CuTe's text for an int tuple: ``(2,(3,4))``; dynamic values print as ``?``."""
    if type(t) is tuple:
        if len(t) == 1:
            return "(" + fmt(t[0]) + ")"
        return "(" + ",".join(fmt(e) for e in t) + ")"
    if type(t) is int:
        return str(t)
    if t is None:
        return "_"
    return "?"
