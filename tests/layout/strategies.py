"""Hypothesis strategies for int tuples and layouts."""
import math

from hypothesis import strategies as st

from moye import Layout
from moye.layout import inttuple as T

small = st.integers(1, 6)


@st.composite
def shapes(draw, max_depth=2, max_rank=3, max_size=256):
    """A nested shape of small extents with size <= max_size."""
    def build(depth):
        if depth == 0 or draw(st.booleans()):
            return draw(small)
        return tuple(build(depth - 1) for _ in range(draw(st.integers(1, max_rank))))
    s = build(max_depth)
    if T.product(s) > max_size:
        return draw(small)
    return s


def _like(shape, flat):
    return T.unflatten(tuple(flat), shape)


@st.composite
def compact_layouts(draw, max_depth=2):
    """Compact layouts: the modes laid out in a random order, no gaps."""
    shape = draw(shapes(max_depth=max_depth))
    flat = T.flatten_to_tuple(shape)
    order = draw(st.permutations(range(len(flat))))
    stride, acc = [0] * len(flat), 1
    for i in order:
        stride[i] = acc
        acc *= flat[i]
    return Layout(shape, _like(shape, stride) if isinstance(shape, tuple) else stride[0])


@st.composite
def injective_layouts(draw, max_depth=2):
    """Layouts whose sorted strides satisfy CuTe's divisibility conditions:
    each stride a multiple of the previous stride times its shape (gaps
    allowed), so complement and inverses are exact."""
    shape = draw(shapes(max_depth=max_depth))
    flat = T.flatten_to_tuple(shape)
    order = draw(st.permutations(range(len(flat))))
    stride, acc = [0] * len(flat), draw(st.sampled_from([1, 1, 2, 3]))
    for i in order:
        stride[i] = acc
        acc *= flat[i] * draw(st.sampled_from([1, 1, 1, 2, 3]))
    return Layout(shape, _like(shape, stride) if isinstance(shape, tuple) else stride[0])


@st.composite
def any_layouts(draw, max_depth=2):
    """Layouts with arbitrary small strides, zeros included."""
    shape = draw(shapes(max_depth=max_depth))
    flat = T.flatten_to_tuple(shape)
    stride = [draw(st.integers(0, 12)) for _ in flat]
    return Layout(shape, _like(shape, stride) if isinstance(shape, tuple) else stride[0])


@st.composite
def exact_composition_pairs(draw):
    """(A, B) where B stays inside single modes (or whole runs of modes) of
    A's flattened shape, each B mode on its own part of A: then A o B is
    exactly the function c -> A(B(c))."""
    A = draw(any_layouts())
    flat = T.flatten_to_tuple(A.shape)
    prefix = T.prefix_product(flat)
    free = list(range(len(flat)))
    modes = []
    for _ in range(draw(st.integers(1, 3))):
        if not free:
            break
        j = draw(st.sampled_from(free))
        s = flat[j]
        divisors = [d for d in range(1, s + 1) if s % d == 0]
        f = draw(st.sampled_from(divisors))
        n = draw(st.sampled_from([d for d in range(1, s // f + 1) if (s // f) % d == 0]))
        modes.append((n, prefix[j] * f))
        free.remove(j)
    if len(modes) == 1:
        B = Layout(modes[0][0], modes[0][1])
    else:
        B = Layout(tuple(m[0] for m in modes), tuple(m[1] for m in modes))
    return A, B


def image(layout):
    return [layout(i) for i in range(T.product(layout.shape))]


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def lcm(a, b):
    return a * b // math.gcd(a, b)
