"""Hypothesis strategies for the array tests: small static layouts."""
from hypothesis import strategies as st

from moye.layout import Layout
from moye.layout import inttuple as T


@st.composite
def shapes(draw, max_depth=2, max_rank=3, max_size=256):
    """A nested shape of extents 1..6 with at most `max_size` elements."""
    def build(depth):
        if depth == 0 or draw(st.booleans()):
            return draw(st.integers(1, 6))
        return tuple(build(depth - 1) for _ in range(draw(st.integers(1, max_rank))))
    shape = build(max_depth)
    return shape if T.product(shape) <= max_size else draw(st.integers(1, 6))


def _layout(shape, flat_stride):
    stride = T.unflatten(tuple(flat_stride), shape) if type(shape) is tuple else flat_stride[0]
    return Layout(shape, stride)


@st.composite
def any_layouts(draw):
    """Layouts with arbitrary strides in 0..12 (often not injective)."""
    shape = draw(shapes())
    return _layout(shape, [draw(st.integers(0, 12)) for _ in T.flatten_to_tuple(shape)])


@st.composite
def injective_layouts(draw):
    """Layouts whose flat modes, in a random order, each step past all the
    modes before them (with random gaps): distinct coordinates, distinct offsets."""
    shape = draw(shapes())
    flat = T.flatten_to_tuple(shape)
    stride, acc = [0] * len(flat), draw(st.sampled_from([1, 1, 2, 3]))
    for i in draw(st.permutations(range(len(flat)))):
        stride[i] = acc
        acc *= flat[i] * draw(st.sampled_from([1, 1, 1, 2, 3]))
    return _layout(shape, stride)


def image(layout):
    """The offsets of `layout`, one coordinate after another in colex order."""
    return [layout(i) for i in range(T.product(layout.shape))]
