"""The Layout: a shape and a stride, a function from coordinates to offsets.

    >>> L = Layout((2, (2, 2)), (4, (1, 2)))
    >>> L
    (2,(2,2)):(4,(1,2))
    >>> L(5), L(1, 2), L(1, (0, 1))
    (6, 6, 6)
"""

from ..errors import BoundsError, LayoutError, MoyeTypeError
from . import inttuple as T
from . import scalar as S


class Layout:
    """A layout ``shape:stride`` (CuTe's Layout); the stride defaults to
    compact column-major.
        >>> Layout((4, 3))
        (4,3):(1,4)
    """
    __slots__ = ("shape", "stride", "_hash", "_skey")

    def __init__(self, shape, stride=None):
        if isinstance(shape, Layout):
            raise MoyeTypeError("Layout(shape, stride): shape must be an int tuple, got a "
                                "Layout; use make_layout to concatenate layouts")
        shape = T.check_extents(T.as_int_tuple(shape, "Layout shape"), "Layout: shape")
        if stride is None or stride is T.GenColMajor:
            stride = T.compact_col_major(shape)
        elif stride is T.GenRowMajor:
            stride = T.compact_row_major(shape)
        else:
            stride = T.as_int_tuple(stride, "Layout stride")
            if not T.congruent(shape, stride):
                raise LayoutError(f"Layout: shape {T.fmt(shape)} and stride {T.fmt(stride)} "
                                  "are not congruent")
        self.shape = shape
        self.stride = stride
        self._hash = None
        self._skey = None

    # -- structure -------------------------------------------------------
    def __len__(self):
        return len(self.shape) if type(self.shape) is tuple else 1

    def __iter__(self):
        if type(self.shape) is tuple:
            return (layout_from_parts(s, d) for s, d in zip(self.shape, self.stride))
        return iter((self,))

    def __getitem__(self, i):
        """Mode `i` (a path of modes for a tuple `i`). CuTe: layout<i>."""
        if type(i) is tuple:
            r = self
            for j in i:
                r = r[j]
            return r
        if type(self.shape) is tuple:
            try:
                return layout_from_parts(self.shape[i], self.stride[i])
            except IndexError:
                raise BoundsError(f"layout {self} has no mode {i} "
                                  f"(rank {len(self.shape)})") from None
        if i in (0, -1):
            return self
        raise BoundsError(f"layout {self} has no mode {i} (rank 1)")

    # -- evaluation and slicing ------------------------------------------
    def __call__(self, *coord):
        """The offset of a 1-D, R-D or h-D coordinate; with ``None`` (CuTe's
        ``_``) or ``slice(None)`` in it, the sliced sub-layout."""
        if len(coord) == 1:
            coord = coord[0]
        elif not coord:
            raise MoyeTypeError("a layout is evaluated at a coordinate: L(i) or L(i, j, ...)")
        coord = norm_coord(coord)
        if T.has_none(coord):
            return layout_from_parts(T.slice_(coord, self.shape), T.slice_(coord, self.stride))
        return T.crd2idx(coord, self.shape, self.stride)

    # -- identity ---------------------------------------------------------
    def __eq__(self, other):
        return isinstance(other, Layout) and S.same(self.shape, other.shape) \
            and S.same(self.stride, other.stride)

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        h = self._hash
        if h is None:
            h = self._hash = hash((_hashable(self.shape), _hashable(self.stride)))
        return h

    def __str__(self):
        return f"{T.fmt(self.shape)}:{T.fmt(self.stride)}"

    __repr__ = __str__

    def is_static(self):
        return _all_static(self.shape) and _all_static(self.stride)

    # CuTe's member spellings
    def size(self):
        return T.product(self.shape)

    def cosize(self):
        return cosize(self)

    def compose(self, *tilers):
        from .algebra import composition
        return composition(self, tilers[0] if len(tilers) == 1 else tilers)

    def with_shape(self, *shape):
        from .algebra import composition
        return composition(self, Layout(shape[0] if len(shape) == 1 else shape))

    def tile(self, *tilers):
        from .algebra import tiled_divide
        return tiled_divide(self, tilers[0] if len(tilers) == 1 else tilers)

    def get_hier_coord(self, index):
        """The coordinate whose offset is `index` (compact layouts). CuTe: get_hier_coord."""
        return T.index_to_coord(index, self.shape, self.stride)

    def get_flat_coord(self, index):
        """get_hier_coord with one 1-D index per top-level mode. CuTe: get_flat_coord."""
        hier = self.get_hier_coord(index)
        if type(self.shape) is not tuple:
            return hier
        return tuple(T.coord_to_index(c, s) for c, s in zip(hier, self.shape))


def layout_from_parts(shape, stride, _new=object.__new__):
    """A Layout from already-normalized, congruent parts (no checks)."""
    layout = _new(Layout)
    layout.shape = shape
    layout.stride = stride
    layout._hash = None
    layout._skey = None
    return layout


def norm_coord(c):
    if type(c) is tuple:
        return tuple(norm_coord(e) for e in c)
    if type(c) is int or c is None:
        return c
    if type(c) is slice:
        if c == slice(None):
            return None
        raise LayoutError(f"only the full slice ':' may appear in a coordinate, got {c}")
    if isinstance(c, list):
        return tuple(norm_coord(e) for e in c)
    return S.as_scalar(c, "coordinate")


def _hashable(t):
    if type(t) is tuple:
        return tuple(_hashable(e) for e in t)
    return t if type(t) is int else ("dyn", id(t))


def _all_static(t):
    if type(t) is tuple:
        return all(_all_static(e) for e in t)
    return type(t) is int


# -- construction ---------------------------------------------------------

def make_layout(*args):
    """A layout from a shape (and stride, or GenColMajor/GenRowMajor), or the
    concatenation of layouts as the modes of a new one. CuTe: make_layout.
        >>> make_layout((2, 3), GenRowMajor)
        (2,3):(3,1)
        >>> make_layout(Layout(2, 3), Layout(4, 1))
        (2,4):(3,1)
    """
    if args and all(isinstance(a, Layout) for a in args):
        return layout_from_parts(tuple(a.shape for a in args), tuple(a.stride for a in args))
    if args and any(_is_layout_like(a) for a in args):
        if len(args) == 1:          # a ComposedLayout (swizzle.py) is its own layout
            return args[0]
        raise LayoutError("make_layout: cannot concatenate "
                          + ", ".join(type(a).__name__ for a in args))
    if len(args) == 1:
        return Layout(args[0])
    if len(args) == 2:
        return Layout(args[0], args[1])
    raise MoyeTypeError(f"make_layout takes a shape and an optional stride, or layouts; "
                        f"got {args!r}")


def _is_layout_like(x):
    return hasattr(x, "shape") and hasattr(x, "inner")


def make_ordered_layout(shape, order):
    """Compact layout of `shape` whose modes are laid out by increasing
    `order`. CuTe: make_ordered_layout.
        >>> make_ordered_layout((2, 2, 2, 2), (0, 2, 3, 1))
        (2,2,2,2):(1,4,8,2)
    """
    shape = T.check_extents(T.as_int_tuple(shape, "shape"), "make_ordered_layout: shape")
    return layout_from_parts(shape, T.compact_order(shape, T.as_int_tuple(order, "order")))


def make_layout_like(layout):
    """Compact layout with `layout`'s shape and the stride order of its
    strides; static 0 strides stay 0. CuTe: make_layout_like.
        >>> make_layout_like(Layout((2, 2, 2, 2), (0, 2, 4, 1)))
        (2,2,2,2):(0,2,4,1)
    """
    layout = as_layout(layout)
    return layout_from_parts(layout.shape, T.compact_order(T.filter_zeros(layout.stride, layout.shape),
                                            layout.stride))


def make_identity_layout(shape):
    """The layout mapping each coordinate of `shape` to its 1-D index."""
    return Layout(shape)


def as_layout(x, what="layout"):
    """`x` as a Layout: Layouts pass, an int n is n:1, a shape is compact."""
    if isinstance(x, Layout):
        return x
    if type(x) is int or type(x) is tuple or isinstance(x, list) or S.is_dynamic_scalar(x):
        return Layout(x)
    if S.is_int(x):
        return Layout(int(x))
    raise MoyeTypeError(f"{what}: expected a Layout, an int or a shape, got {x!r} "
                        f"of type {type(x).__name__}")


# -- queries ----------------------------------------------------------------

def shape(x, *modes):
    """The shape of a layout (or int tuple), or of one of its modes. CuTe: shape."""
    s = x.shape if hasattr(x, "shape") and not isinstance(x, (tuple, int)) else x
    for m in modes:
        s = s[m] if type(s) is tuple else _mode_of_int(s, m)
    return s


def stride(layout, *modes):
    """The stride of a layout, or of one of its modes. CuTe: stride."""
    d = layout.stride
    for m in modes:
        d = d[m] if type(d) is tuple else _mode_of_int(d, m)
    return d


def _mode_of_int(v, m):
    if m in (0, -1):
        return v
    raise BoundsError(f"{T.fmt(v)} has no mode {m}")


def size(x, *modes):
    """Number of elements (of mode `modes`); for tiled copies and MMAs, the
    number of threads. CuTe: size.
        >>> size(Layout((2, (3, 4)))), size(Layout((2, (3, 4))), 1)
        (24, 12)
    """
    if hasattr(x, "__moye_size__"):
        return x.__moye_size__(*modes)
    return T.product(shape(x, *modes))


def rank(x, *modes):
    """Number of top-level modes. CuTe: rank."""
    return T.rank(shape(x, *modes))


def depth(x, *modes):
    """Nesting depth of the shape. CuTe: depth."""
    return T.depth(shape(x, *modes))


def cosize(layout, *modes):
    """One past the largest offset the layout reaches. CuTe: cosize.
        >>> cosize(Layout((2, 3), (1, 4)))
        10
    """
    if hasattr(layout, "__moye_cosize__"):
        return layout.__moye_cosize__(*modes)
    layout = layout[modes] if modes else layout
    return S.add(_cospan(layout.shape, layout.stride), 1)


def _cospan(s, d):
    if type(s) is tuple:
        r = 0
        for si, di in zip(s, d):
            r = S.add(r, _cospan(si, di))
        return r
    return S.mul(S.sub(s, 1), abs(d) if type(d) is int else abs(d))


def crd2idx(coord, layout):
    return layout(coord)


def slice_and_offset(coord, layout):
    """The sub-layout of the ``None`` modes of `coord`, and the offset of
    the fixed ones. CuTe: slice_and_offset.
        >>> slice_and_offset((1, None), Layout((2, 3), (3, 1)))
        ((3):(1), 3)
    """
    if hasattr(layout, "__moye_slice_and_offset__"):
        return layout.__moye_slice_and_offset__(coord)
    coord = norm_coord(coord)
    sub = layout_from_parts(T.slice_(coord, layout.shape), T.slice_(coord, layout.stride))
    return sub, T.crd2idx(T.zero_like_slice(coord), layout.shape, layout.stride)


def dice(coord, layout):
    """The modes of `layout` (or an int tuple) paired with integers in
    `coord`. CuTe: dice.
        >>> dice((1, None), Layout((4, 4)))
        (4):(1)
    """
    coord = norm_coord(coord)
    if not isinstance(layout, Layout):
        return T.dice(coord, layout)
    return layout_from_parts(T.dice(coord, layout.shape), T.dice(coord, layout.stride))


# -- mode manipulation -------------------------------------------------------

def _modes(layout):
    return (layout.shape, layout.stride) if type(layout.shape) is tuple \
        else ((layout.shape,), (layout.stride,))


def get(layout, *path):
    """The sub-layout at mode path `path`. CuTe: get<I...>."""
    return layout[path] if path else layout


def select(layout, *modes):
    """A layout of the chosen modes. CuTe: select.
        >>> select(Layout((2, 3, 4)), 2, 0)
        (4,2):(6,1)
    """
    if len(modes) == 1 and type(modes[0]) in (tuple, list):
        modes = tuple(modes[0])
    s, d = _modes(layout)
    for m in modes:
        if not -len(s) <= m < len(s):
            raise BoundsError(f"select: layout {layout} has no mode {m} (rank {len(s)})")
    return layout_from_parts(tuple(s[m] for m in modes), tuple(d[m] for m in modes))


def take(layout, begin, end):
    """The modes in [begin, end). CuTe: take<B,E>."""
    s, d = _modes(layout)
    return layout_from_parts(s[begin:end], d[begin:end])


def append(layout, x=None, n=None):
    """`layout` with the mode `x` (default 1:0) added last; with `n`, padded
    with 1:0 modes up to rank `n` instead. CuTe: append.
        >>> append(Layout(4, 1), Layout(3, 4))
        (4,3):(1,4)
        >>> append(Layout((4, 3)), n=3)
        (4,3,1):(1,4,0)
    """
    s, d = _modes(layout)
    if n is not None:
        if x is None:
            x = Layout(1, 0)
        k = n - len(s)
        if k <= 0:
            return layout if isinstance(layout, Layout) else layout_from_parts(s, d)
        return layout_from_parts(s + (x.shape,) * k, d + (x.stride,) * k)
    x = Layout(1, 0) if x is None else as_layout(x)
    return layout_from_parts(s + (x.shape,), d + (x.stride,))


def prepend(layout, x=None, n=None):
    """`layout` with the mode `x` (default 1:0) added first (or padded up to
    rank `n`). CuTe: prepend."""
    s, d = _modes(layout)
    x = Layout(1, 0) if x is None else as_layout(x)
    k = 1 if n is None else n - len(s)
    if k <= 0:
        return layout
    return layout_from_parts((x.shape,) * k + s, (x.stride,) * k + d)


def replace(layout, i, x):
    """`layout` with mode `i` replaced by `x`. CuTe: replace<I>."""
    s, d = _modes(layout)
    x = as_layout(x)
    return layout_from_parts(s[:i] + (x.shape,) + s[i + 1:], d[:i] + (x.stride,) + d[i + 1:])


def group_modes(layout, begin, end=None):
    """`layout` with modes [begin, end) grouped into one. CuTe: group<B,E>.
        >>> group_modes(Layout((2, 3, 4, 5)), 1, 3)
        (2,(3,4),5):(1,(2,6),24)
    """
    s, d = _modes(layout)
    if end is None or end > len(s):
        end = len(s)
    if end < 0:
        end += len(s)
    return layout_from_parts(s[:begin] + (s[begin:end],) + s[end:], d[:begin] + (d[begin:end],) + d[end:])


def flatten(layout):
    """The layout (or int tuple) with all nesting removed. CuTe: flatten.
        >>> flatten(Layout((2, (3, 4)), (1, (2, 6))))
        (2,3,4):(1,2,6)
    """
    if not isinstance(layout, Layout) and not hasattr(layout, "__moye_through__"):
        return T.flatten(layout)
    if hasattr(layout, "__moye_through__"):
        return layout.__moye_through__(flatten)
    return layout_from_parts(T.flatten(layout.shape), T.flatten(layout.stride))


def unflatten(layout, profile):
    """A flat layout (or int tuple) folded into the nesting of `profile`.
    CuTe: unflatten."""
    if not isinstance(layout, Layout):
        return T.unflatten(layout, profile)
    return layout_from_parts(T.unflatten(layout.shape, profile), T.unflatten(layout.stride, profile))


def transpose(layout):
    """The rank-2 layout with its two modes swapped.
        >>> transpose(Layout((2, 3), (3, 1)))
        (3,2):(1,3)
    """
    if hasattr(layout, "__moye_through__"):
        return layout.__moye_through__(transpose)
    if len(layout) != 2:
        raise LayoutError(f"transpose: layout {layout} has rank {len(layout)}, not 2")
    return layout_from_parts((layout.shape[1], layout.shape[0]), (layout.stride[1], layout.stride[0]))


def zip_layouts(a, b):
    """Zip the modes of two rank-R layouts pairwise: ((a0,b0),(a1,b1),...)."""
    sa, da = _modes(a)
    sb, db = _modes(b)
    if len(sa) != len(sb):
        raise LayoutError(f"zip: layouts {a} and {b} have different ranks")
    return layout_from_parts(tuple(zip(sa, sb)), tuple(zip(da, db)))
