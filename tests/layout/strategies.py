"""Hypothesis strategies for the layout algebra, and small brute-force helpers.

Shapes are kept small (size <= 256 unless asked otherwise, depth <= 3) so that
every law can be checked exhaustively on the whole domain of a layout.

Layout families (all static):
  compact_layouts      Layout(shape), column-major (or row-major)
  permuted_layouts     compact, the flat modes laid out in a random order
  gapped_layouts       injective, CuTe's divisibility conditions hold: sorted
                       by stride, stride[k+1] is a multiple of stride[k]*shape[k]
  broadcast_layouts    gapped layouts with some modes given stride 0
  any_layouts          arbitrary strides in [0, 12] (usually not injective)
  signed_layouts       arbitrary strides in [-6, 6]
  layouts()            any of the above
Size-1 modes appear in every family (their stride is drawn freely where the
family allows it).
"""
import itertools
import math

from hypothesis import strategies as st

from moye import GenColMajor, GenRowMajor, Layout
from moye.layout import inttuple as T

LEAVES = (1, 2, 2, 3, 4, 4, 5, 6, 8)


# -- int tuples and shapes ------------------------------------------------------

@st.composite
def int_tuples(draw, max_depth=3, max_rank=3, leaves=st.integers(0, 9)):
    """A nested tuple of ints (or an int) of depth <= max_depth."""
    def build(depth):
        if depth == 0 or draw(st.integers(0, 2)) == 0:
            return draw(leaves)
        return tuple(build(depth - 1) for _ in range(draw(st.integers(1, max_rank))))
    return build(max_depth)


@st.composite
def shapes(draw, max_depth=3, max_rank=3, max_size=256, tuple_top=None, no_ones=False):
    """A nested shape with product <= max_size and depth <= max_depth.
    tuple_top: True forces a tuple, False an int, None either."""
    def leaf(budget):
        choices = [x for x in LEAVES if x <= budget and not (no_ones and x == 1)]
        return draw(st.sampled_from(choices or [1 if not no_ones else 2]))

    def build(depth, budget, force_tuple=None):
        is_leaf = depth == 0 or (draw(st.integers(0, 2)) == 0 if force_tuple is None
                                 else not force_tuple)
        if is_leaf:
            return leaf(budget)
        parts = []
        for _ in range(draw(st.integers(1, max_rank))):
            if parts and no_ones and budget < 2:       # no room left for a leaf >= 2
                break
            p = build(depth - 1, budget)
            budget = max(1, budget // T.product(p))
            parts.append(p)
        return tuple(parts)

    return build(max_depth, max_size, tuple_top if max_depth > 0 else False)


def _with_flat_strides(shape, flat_strides):
    flat_strides = tuple(flat_strides)
    stride = T.unflatten(flat_strides, shape) if type(shape) is tuple else flat_strides[0]
    return Layout(shape, stride)


# -- layouts ----------------------------------------------------------------------

@st.composite
def compact_layouts(draw, **shape_kw):
    shape = draw(shapes(**shape_kw))
    return Layout(shape, draw(st.sampled_from([GenColMajor, GenColMajor, GenRowMajor])))


@st.composite
def permuted_layouts(draw, **shape_kw):
    """Compact (a bijection onto [0, size)), the flat modes in random order;
    size-1 modes get an arbitrary stride."""
    shape = draw(shapes(**shape_kw))
    flat = T.flatten_to_tuple(shape)
    order = draw(st.permutations(range(len(flat))))
    stride, acc = [0] * len(flat), 1
    for i in order:
        stride[i] = acc if flat[i] != 1 else draw(st.integers(0, 9))
        acc *= flat[i]
    return _with_flat_strides(shape, stride)


@st.composite
def gapped_layouts(draw, **shape_kw):
    """Injective layouts meeting CuTe's divisibility conditions: in stride
    order, each stride is a multiple of the previous stride times its shape
    (gaps allowed, the first stride may exceed 1)."""
    shape = draw(shapes(**shape_kw))
    flat = T.flatten_to_tuple(shape)
    order = draw(st.permutations(range(len(flat))))
    stride = [0] * len(flat)
    acc = draw(st.sampled_from([1, 1, 1, 2, 3]))
    for i in order:
        stride[i] = acc if flat[i] != 1 else draw(st.integers(0, 9))
        acc *= flat[i] * draw(st.sampled_from([1, 1, 1, 2, 3]))
    return _with_flat_strides(shape, stride)


@st.composite
def broadcast_layouts(draw, **shape_kw):
    """Gapped layouts where some flat modes are given stride 0."""
    L = draw(gapped_layouts(**shape_kw))
    flat_d = list(T.flatten_to_tuple(L.stride))
    for i in range(len(flat_d)):
        if draw(st.integers(0, 3)) == 0:
            flat_d[i] = 0
    return _with_flat_strides(L.shape, flat_d)


@st.composite
def any_layouts(draw, lo=0, hi=12, **shape_kw):
    shape = draw(shapes(**shape_kw))
    flat = T.flatten_to_tuple(shape)
    return _with_flat_strides(shape, [draw(st.integers(lo, hi)) for _ in flat])


def signed_layouts(**shape_kw):
    return any_layouts(lo=-6, hi=6, **shape_kw)


def layouts(**shape_kw):
    return st.one_of(compact_layouts(**shape_kw), permuted_layouts(**shape_kw),
                     gapped_layouts(**shape_kw), broadcast_layouts(**shape_kw),
                     any_layouts(**shape_kw))


# -- tilers and composable pairs --------------------------------------------------

def flat_modes(layout):
    """The flat (shape, stride) pairs of a layout."""
    return list(zip(T.flatten_to_tuple(layout.shape), T.flatten_to_tuple(layout.stride)))


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def exact_sublayouts(draw, shape, max_modes=3, allow_zero=False, extend_last=False):
    """A layout B of 1-D indices into `shape` for which CuTe's composition
    A o B, for any A of that shape, meets the strong divisibility conditions:
    each mode of B picks n elements with step f inside one flat mode c_k of
    `shape` (n*f divides c_k, stride prefix_k*f), at most one B mode per flat
    mode, in any order. With extend_last, the mode in the last flat mode may
    run past it (CuTe extends a layout through its last mode). With
    allow_zero, stride-0 modes may be added. B's shape may come out nested."""
    flat = T.flatten_to_tuple(shape)
    prefix = T.flatten_to_tuple(T.prefix_product(flat))
    free = list(range(len(flat)))
    modes = []
    for _ in range(draw(st.integers(1, max_modes))):
        if allow_zero and draw(st.integers(0, 4)) == 0:
            modes.append((draw(st.integers(1, 4)), 0))
            continue
        if not free:
            break
        k = draw(st.sampled_from(free))
        free.remove(k)
        c = flat[k]
        f = draw(st.sampled_from(divisors(c)))
        if extend_last and k == len(flat) - 1 and draw(st.booleans()):
            n = draw(st.integers(1, 2 * c))
        else:
            n = draw(st.sampled_from(divisors(c // f)))
        modes.append((n, prefix[k] * f))
    if not modes:
        modes.append((1, 0))
    if len(modes) == 1:
        return Layout(modes[0][0], modes[0][1])
    s = tuple(m[0] for m in modes)
    d = tuple(m[1] for m in modes)
    if len(modes) >= 3 and draw(st.booleans()):          # nest the first two modes
        s, d = ((s[0], s[1]),) + s[2:], ((d[0], d[1]),) + d[2:]
    return Layout(s, d)


@st.composite
def composable_pairs(draw, allow_zero=True, extend_last=True):
    """(A, B) with A any layout and B an exact sub-layout of A's domain."""
    A = draw(layouts())
    B = draw(exact_sublayouts(A.shape, allow_zero=allow_zero, extend_last=extend_last))
    return A, B


@st.composite
def layout_tilers(draw, layout):
    """A Layout tiler T that divides `layout` exactly: T's modes pick aligned
    sub-blocks of the flat modes, so (T, complement(T, size)) is a bijection
    of [0, size(layout)) and logical_divide(layout, T) is exact."""
    return draw(exact_sublayouts(layout.shape, max_modes=2))


@st.composite
def mode_tiler(draw, mode):
    """A tiler for one mode: None, an int or a Layout that divides it, or
    (for a tuple mode) a tuple of those."""
    kind = draw(st.integers(0, 4 if type(mode.shape) is tuple else 3))
    if kind == 0:
        return None
    if kind == 1:                      # an int: a prefix of the flat shape times a divisor
        flat = T.flatten_to_tuple(mode.shape)
        k = draw(st.integers(0, len(flat) - 1))
        return T.product(flat[:k]) * draw(st.sampled_from(divisors(flat[k])))
    if kind in (2, 3):
        return draw(layout_tilers(mode))
    n = draw(st.integers(1, len(mode.shape)))
    return tuple(draw(mode_tiler(mode[i])) for i in range(n))


@st.composite
def tuple_tilers(draw, layout, min_modes=1):
    """A tuple tiler with one tiler per leading mode of `layout`."""
    r = len(layout)
    n = draw(st.integers(min(min_modes, r), r))
    return tuple(draw(mode_tiler(layout[i])) for i in range(n))


# -- brute force -------------------------------------------------------------------

def image(layout):
    """The layout's values at the 1-D indices 0 .. size-1."""
    return [layout(i) for i in range(T.product(layout.shape))]


def all_coords(shape):
    """Every hierarchical coordinate of `shape` in colexicographic order."""
    flat = T.flatten_to_tuple(shape)
    for idx in itertools.product(*[range(n) for n in reversed(flat)]):
        c = tuple(reversed(idx))
        yield T.unflatten(c, shape) if type(shape) is tuple else c[0]


def is_injective(layout):
    img = image(layout)
    return len(set(img)) == len(img)


def span(layout):
    """For a layout meeting the divisibility conditions: the size of the
    range its modes tile, max(stride*shape) over its non-trivial modes."""
    return max([s * d for s, d in flat_modes(layout) if s != 1 and d != 0], default=1)


def leading_run(layout):
    """The largest k with {0, ..., k-1} inside the image."""
    img, k = set(image(layout)), 0
    while k in img:
        k += 1
    return k


def lcm(a, b):
    return a * b // math.gcd(a, b)


# -- example budgets ------------------------------------------------------------------

def scaled(n):
    """Hypothesis settings for n examples under the "ci" profile (150 by
    default), proportionally more under "thorough"."""
    from hypothesis import settings
    return settings(max_examples=max(5, settings.default.max_examples * n // 150))
