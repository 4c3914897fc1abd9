"""Every mma.sync op once on the GPU: each lane's registers are packed on
the host from the op's thread-value layouts, the kernel runs one
`gemm(mma, D, A, B, C)` (one instruction), and D, unpacked the same way,
is compared with A @ B^T + C computed in NumPy (exact for integer ops)."""
import zlib

import numpy as np
import pytest

import moye
from moye import Layout, MoYeArray, UInt32, copyto, gemm, make_tiled_mma, recast, size
from moye.atom.arch import sm70, sm75, sm80
MMA_OPS = sm70.SM70_OPS + sm75.SM75_OPS + sm80.SM80_OPS
from moye.atom.mma import mma_reference

pytestmark = pytest.mark.gpu


@moye.kernel
def one_mma(Dw, Aw, Bw, Cw, mma):
    lane = moye.thread_idx.x
    atom = mma.atom
    frags = [MoYeArray.empty(t, Layout((size(lay, 1), 1, 1), (1, 1, 1))) for t, lay in
             ((atom.d_type, atom.layout_c_tv), (atom.a_type, atom.layout_a_tv),
              (atom.b_type, atom.layout_b_tv), (atom.c_type, atom.layout_c_tv))]
    for frag, words in zip(frags[1:], (Aw, Bw, Cw)):
        w = recast(frag, UInt32)
        copyto(w[:, 0, 0], MoYeArray(words)[:, lane])
    gemm(mma, frags[0], frags[1], frags[2], frags[3])
    w = recast(frags[0], UInt32)
    copyto(MoYeArray(Dw)[:, lane], w[:, 0, 0])


def _values(t, shape, rng):
    if t.is_float:
        return rng.integers(-4, 5, size=shape).astype(np.float64) / 2
    lo, hi = (0, 2) if t.bits == 1 else ((-8, 8) if t.name == "Int4" else (0, 16) if t.bits == 4
                                         else (-128, 128) if t.name == "Int8" else (0, 256))
    return rng.integers(lo, hi, size=shape).astype(np.int64)


def _pack(vals, t):
    """(32, V) values of type t -> (W, 32) uint32 words, lane per column."""
    if t.bits >= 8:
        np_t = t.numpy if t.name != "TFloat32" else np.float32
        raw = np.ascontiguousarray(vals.astype(np_t)).view(np.uint8).reshape(32, -1)
        return np.ascontiguousarray(raw.view(np.uint32).T)
    per = 32 // t.bits
    v = (vals.astype(np.int64) & ((1 << t.bits) - 1)).astype(np.uint64).reshape(32, -1, per)
    shifts = (np.arange(per, dtype=np.uint64) * np.uint64(t.bits))
    return np.ascontiguousarray((v << shifts).sum(axis=2).astype(np.uint32).T)


def _unpack(words, t, n):
    raw = np.ascontiguousarray(words.T).view(np.uint8).reshape(32, -1)
    np_t = t.numpy if t.name != "TFloat32" else np.float32
    return raw.view(np_t)[:, :n].astype(np.float64 if t.is_float else np.int64)


def _tile(op, which, vals):
    """(32, V) lane values -> the (rows, cols) tile, column-major index from the TV layout."""
    m, n, k = op.shape_mnk
    lay, (r, c) = {"a": (op.a_layout, (m, k)), "b": (op.b_layout, (n, k)),
                   "c": (op.c_layout, (m, n))}[which]
    tile = np.zeros(r * c, vals.dtype)
    for t in range(size(op.thr_id)):
        for v in range(size(lay, 1)):
            tile[lay(t, v)] = vals[op.thr_id(t), v]
    return tile.reshape((r, c), order="F")


@pytest.mark.parametrize("op", MMA_OPS, ids=lambda o: o.name)
def test_mma_op_on_gpu(torch, op):
    from moye.backend.cuda import driver
    if int(driver.device_arch()[3:5]) < op.info.get("min_sm", 80):
        pytest.skip(f"{op} needs sm_{op.info['min_sm']}")
    check_one_mma(op, torch)


def check_one_mma(op, torch=None):
    """One gemm of `op` on random values against mma_reference: on the GPU
    through `torch`, or on the CPU backend where torch is None."""
    rng = np.random.default_rng(zlib.crc32(op.name.encode()))
    mma = make_tiled_mma(op)
    nv = {w: size(getattr(op, f"{w}_layout"), 1) for w in "abc"}
    lanes = {w: _values(t, (32, nv[w]), rng)
             for w, t in (("a", op.a_type), ("b", op.b_type), ("c", op.c_type))}
    A, B, C = (_tile(op, w, lanes[w]) for w in "abc")
    # lanes that the op does not use (sm70 quad pairs) read their own copy of the same tile
    Aw, Bw, Cw = (_pack(lanes[w], t) for w, t in (("a", op.a_type), ("b", op.b_type),
                                                  ("c", op.c_type)))
    words_d = nv["c"] * op.d_type.bits // 32
    D = np.full((words_d, 32), -1, dtype=np.int32)
    if torch is None:
        one_mma[1, 32](D, Aw.view(np.int32), Bw.view(np.int32), Cw.view(np.int32), mma,
                       backend="cpu")
    else:
        dev = lambda x: torch.from_numpy(x.view(np.int32)).cuda()          # noqa: E731
        D_dev = dev(D)
        one_mma[1, 32](D_dev, dev(Aw), dev(Bw), dev(Cw), mma)
        torch.cuda.synchronize()
        D = D_dev.cpu().numpy()
    got = _tile(op, "c", _unpack(D.view(np.uint32), op.d_type, nv["c"]))
    ref = np.asarray(mma_reference(op, A, B, C), dtype=np.float64)
    if op.d_type.is_float:
        np.testing.assert_allclose(got, ref, rtol=1e-2 if op.d_type.bits == 16 else 1e-5,
                                   atol=1e-2)
    else:
        np.testing.assert_array_equal(got, ref)
