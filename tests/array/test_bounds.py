"""Host arrays never touch memory outside the layout's image: every read and
write through a view lands on an offset of its layout, inside the buffer,
and a view that reaches outside its buffer raises BoundsError before any
element is written (property tests over layouts with negative strides)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moye import BoundsError, Layout, MoYeArray, copyto, fill_
from moye.array import HostEngine, layout_offsets
from moye.array.engine import image_bounds
from moye.layout import inttuple as T

from ..layout.strategies import signed_layouts

PAD = 3


def guarded(layout, rng, cut=0):
    """A buffer holding the image of `layout` with PAD poisoned elements
    each side (less `cut` at the end), and the view of it."""
    lo, hi = image_bounds(layout)
    buf = rng.standard_normal(hi - lo + 1 + 2 * PAD - cut)
    return buf, MoYeArray.view_of(HostEngine(buf, PAD - lo), layout)


def image_mask(buf, view):
    mask = np.zeros(len(buf), bool)
    mask[view.engine.start + layout_offsets(view.layout)] = True
    return mask


@settings(max_examples=150, deadline=None)
@given(signed_layouts(), st.integers(0, 2**32 - 1))
def test_reads_and_writes_stay_in_the_image(layout, seed):
    rng = np.random.default_rng(seed)
    buf, view = guarded(layout, rng)
    before, outside = buf.copy(), ~image_mask(buf, view)
    offsets = view.engine.start + layout_offsets(layout)
    np.testing.assert_array_equal(view.numpy().reshape(-1, order="F"), before[offsets])
    copyto(view, MoYeArray(rng.standard_normal(T.product(layout.shape)), Layout(layout.shape)))
    fill_(view, 1.5)
    n = T.product(layout.shape)
    for i in rng.integers(0, n, 5):
        coord = T.index_to_coord(int(i), layout.shape)
        view[coord] = -2.0
        assert view[coord] == -2.0 and buf[offsets[i]] == -2.0
    np.testing.assert_array_equal(buf[outside], before[outside])


@settings(max_examples=100, deadline=None)
@given(signed_layouts(), st.integers(0, 2**32 - 1), st.booleans())
def test_a_view_outside_its_buffer_raises_before_writing(layout, seed, before_start):
    rng = np.random.default_rng(seed)
    lo, hi = image_bounds(layout)
    if before_start:          # the view starts one element too early
        buf = rng.standard_normal(hi - lo + 1)
        view = MoYeArray.view_of(HostEngine(buf, -lo - 1), layout)
    else:                     # the buffer is one element short
        buf = rng.standard_normal(hi - lo)
        view = MoYeArray.view_of(HostEngine(buf, -lo), layout)
    before = buf.copy()
    for access in (view.numpy, lambda: fill_(view, 1.5),
                   lambda: copyto(view, MoYeArray(np.ones(T.product(layout.shape)),
                                                 Layout(layout.shape)))):
        with pytest.raises(BoundsError):
            access()
    np.testing.assert_array_equal(buf, before)
    # element by element: the ones inside work, the ones outside raise
    offsets = view.engine.start + layout_offsets(layout)
    for i, off in enumerate(offsets):
        coord = T.index_to_coord(i, layout.shape)
        if 0 <= off < len(buf):
            view[coord] = 7.0
            assert buf[off] == 7.0
        else:
            with pytest.raises(BoundsError):
                view[coord] = 7.0
            with pytest.raises(BoundsError):
                view[coord]
