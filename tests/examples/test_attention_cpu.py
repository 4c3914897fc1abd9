"""The FA2-style attention examples on the CPU backend against float64 NumPy:
outputs poisoned with NaN, every element checked, one race-checked run each."""
import math

import numpy as np
import pytest

import moye
from moye.backend.cpu import race_checking
from moye.examples import attention_mma, attention_simt
from moye.examples.attention_simt import reference

rng = np.random.default_rng(17)


def qkv(heads, seqlen, dtype):
    return tuple(rng.standard_normal((heads, seqlen, 64)).astype(dtype) for _ in range(3))


def check(o, ref, tol):
    """Every element within tol of the reference, relative to its largest value."""
    assert not np.isnan(o).any()
    err = np.abs(o.astype(np.float64) - ref).max() / np.abs(ref).max()
    assert err < tol, err


@pytest.mark.parametrize("heads, seqlen", [(1, 128), (2, 64)])
def test_attention_simt(heads, seqlen):
    q, k, v = qkv(heads, seqlen, np.float32)
    o = np.full_like(q, np.nan)
    attention_simt.launch(q, k, v, o)
    check(o, reference(q, k, v), 1e-5)


@pytest.mark.parametrize("heads, seqlen, out", [(1, 128, np.float16), (2, 64, np.float32)])
def test_attention_mma(heads, seqlen, out):
    q, k, v = qkv(heads, seqlen, np.float16)
    o = np.full(q.shape, np.nan, out)
    attention_mma.launch(q, k, v, o)
    # P is rounded to fp16 before P V, and O to `out`
    check(o, reference(q, k, v), 2e-3)


def test_scale_is_applied():
    q, k, v = qkv(1, 64, np.float32)
    q *= 4                                      # peaked rows: the scale matters
    o = np.full_like(q, np.nan)
    attention_simt.launch(q, k, v, o, scale=0.05)
    check(o, reference(q, k, v, scale=0.05), 1e-5)
    o16 = np.full(q.shape, np.nan, np.float32)
    attention_mma.launch(*(x.astype(np.float16) for x in (q, k, v)), o16, scale=0.05)
    check(o16, reference(*(x.astype(np.float16) for x in (q, k, v)), scale=0.05), 2e-3)


@pytest.mark.parametrize("example, dtype", [(attention_simt, np.float32),
                                            (attention_mma, np.float16)])
def test_race_checked(example, dtype):
    """Two K/V tiles: the cp.async prefetches overlap the reads of the last tile."""
    q, k, v = qkv(1, 128, dtype)
    o = np.full(q.shape, np.nan, np.float32 if dtype == np.float32 else np.float16)
    with race_checking():
        example.launch(q, k, v, o)
    check(o, reference(q, k, v), 1e-5 if dtype == np.float32 else 2e-3)


@pytest.mark.parametrize("example, dtype", [(attention_simt, np.float32),
                                            (attention_mma, np.float16)])
def test_bad_shapes_are_refused(example, dtype):
    q, k, v = qkv(1, 96, dtype)
    with pytest.raises(moye.ShapeError, match="seqlen = 96 must be a positive multiple of 64"):
        example.launch(q, k, v, np.zeros_like(q))
    q, k, v = qkv(1, 64, dtype)
    with pytest.raises(moye.ShapeError, match="k has shape"):
        example.launch(q, k[:, :, :32], v, np.zeros_like(q))
    with pytest.raises(moye.ShapeError, match="expected"):
        example.launch(q[0], k, v, np.zeros_like(q))


def test_wrong_element_types_are_refused():
    q, k, v = qkv(1, 64, np.float32)
    with pytest.raises(moye.MoyeTypeError, match="q is float32"):
        attention_mma.launch(q, k, v, np.zeros_like(q))
    with pytest.raises(moye.MoyeTypeError, match="o is float16"):
        attention_simt.launch(q, k, v, np.zeros(q.shape, np.float16))


def test_reference_is_softmax():
    q, k, v = qkv(1, 4, np.float64)
    s = q[0] @ k[0].T / math.sqrt(64)
    p = np.exp(s) / np.exp(s).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(reference(q, k, v)[0], p @ v[0], rtol=1e-12)
