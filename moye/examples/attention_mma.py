"""FlashAttention-2's forward pass on tensor cores: O = softmax(Q K^T * scale) V
with fp16 Q, K, V, fp32 accumulation and mma.sync m16n8k16.

    python -m moye.examples.attention_mma [seqlen heads batch]    (default 4096 16 4)

The algorithm of attention_simt.py (its docstring says more), as FA2 runs it:

- Q, K, V are float16 arrays of shape (batch * heads, seqlen, 64), row-major;
  O is float16 or float32 of the same shape; seqlen a multiple of 64.
- A block of 4 warps owns a 64-row tile of Q; each warp 16 rows of it and
  whole rows of S = Q K^T (16 x 64) and of O (16 x 64), so the softmax needs
  no shared memory: a row lives in the 4 lanes of a quad (shfl_xor 1 and 2).
- Q, K and V tiles reach shared memory by 16-byte cp.async, in swizzled
  layouts that ldmatrix reads without bank conflicts: Q once into registers,
  K with ldmatrix, V transposed with ldmatrix.trans (V is the B operand of
  P V with the head dim as N, and its rows are contiguous along N).
- P stays in registers: the accumulator fragment of two neighbouring n8
  atoms of S is the A fragment of one k16 atom of P V (PTX ISA, "Matrix
  Fragments for mma.m16n8k16"), so P is S converted to fp16 in place.
- K_{j+1} is fetched while the softmax and P V_j run; V_{j+1} while S_{j+1}
  is computed.

benchmarks/twins/attention_mma.cu is the same kernel written in CUDA by hand.
"""
import math
import sys

import moye
from moye import (CPOP_ASYNC_CACHEGLOBAL, CopyAtom, Float16, LDSM_U16x8_T, LDSM_U32x4_N,
                  MMAOP_16x8x16_F32F16F16F32_TN, Layout, MoYeArray, Swizzle, UInt128,
                  composition, copyto, fill_, gemm, get_slice, make_fragment_like, make_layout,
                  make_tiled_copy, make_tiled_copy_A, make_tiled_copy_B, make_tiled_mma,
                  partition_C, partition_D, partition_fragment_A, partition_fragment_B,
                  partition_fragment_C, partition_S, retile_D, size, tile, tile_to_shape,
                  transpose, zeros_)
from .attention_simt import LOG2E, gpu_time, row_reduce

BLOCK_M, BLOCK_N, HEAD_DIM, THREADS = 64, 64, 64, 128


@moye.kernel
def attention_kernel(Q, K, V, O, scale_log2, sQ_layout, sK_layout, sVt_layout, copy_QK, copy_Vt,
                     mma, s2r_QK, s2r_Vt):
    bM, bN, d = size(sQ_layout, 0), size(sK_layout, 0), size(sQ_layout, 1)
    tid, bh = moye.thread_idx.x, moye.block_idx.y
    mQ, mK, mV, mO = MoYeArray(Q), MoYeArray(K), MoYeArray(V), MoYeArray(O)
    gQ = tile(mQ[bh, :, :], (bM, d), (moye.block_idx.x, 0))        # (bM, d)
    gO = tile(mO[bh, :, :], (bM, d), (moye.block_idx.x, 0))
    gK = tile(mK[bh, :, :], (bN, d), (None, 0))                     # (bN, d, n)
    gVt = tile(transpose(mV[bh, :, :]), (d, bN), (0, None))         # (d, bN, n): V^T
    sQ = moye.shared_array(Q.dtype, sQ_layout)                      # (bM, d)
    sK = moye.shared_array(K.dtype, sK_layout)                      # (bN, d)
    sVt = moye.shared_array(V.dtype, sVt_layout)                    # (d, bN)

    # global -> shared: 16-byte cp.async
    thr_qk, thr_v = get_slice(copy_QK, tid), get_slice(copy_Vt, tid)
    tQgQ, tQsQ = partition_S(thr_qk, gQ), partition_D(thr_qk, sQ)
    tKgK, tKsK = partition_S(thr_qk, gK), partition_D(thr_qk, sK)   # (CPY, N, D, n)
    tVgV, tVsV = partition_S(thr_v, gVt), partition_D(thr_v, sVt)   # (CPY, D, N, n)

    # register fragments: S = Q K^T is (bM, bN), O = P V is (bM, d)
    thr_mma = get_slice(mma, tid)
    tSrQ = partition_fragment_A(thr_mma, sQ)                        # (MMA, 1, d/16)
    tSrK = partition_fragment_B(thr_mma, sK)                        # (MMA, bN/8, d/16)
    tSrS = partition_fragment_C(thr_mma, make_layout((bM, bN)))     # ((2,2), 1, bN/8)
    tOrP = partition_fragment_A(thr_mma, make_layout((bM, bN)))     # ((2,2,2), 1, bN/16)
    tOrV = partition_fragment_B(thr_mma, sVt)                       # (MMA, d/8, bN/16)
    tOrO = partition_fragment_C(thr_mma, gO)                        # ((2,2), 1, d/8)
    zeros_(tOrO)
    # shared -> registers with ldmatrix, in the MMA's fragment layouts
    ldsm_q = get_slice(make_tiled_copy_A(s2r_QK, mma), tid)
    tXsQ, tXrQ = partition_S(ldsm_q, sQ), retile_D(ldsm_q, tSrQ)
    ldsm_k = get_slice(make_tiled_copy_B(s2r_QK, mma), tid)
    tXsK, tXrK = partition_S(ldsm_k, sK), retile_D(ldsm_k, tSrK)
    ldsm_v = get_slice(make_tiled_copy_B(s2r_Vt, mma), tid)
    tXsV, tXrV = partition_S(ldsm_v, sVt), retile_D(ldsm_v, tOrV)

    # a thread holds 2 rows of S and O: values (c, r) of each n8 atom are row
    # groupID + 8 r, column 2 threadID_in_group + c
    rows = 2
    row_max = make_fragment_like(Layout(rows), moye.Float32)        # in units of log2
    row_sum = make_fragment_like(Layout(rows), moye.Float32)
    fill_(row_max, -math.inf)
    zeros_(row_sum)

    # cp.async groups, oldest first: Q + K_0, V_0, then K_1, V_1, ...
    copyto(copy_QK, tQsQ, tQgQ)
    copyto(copy_QK, tKsK, tKgK[:, :, :, 0])
    moye.cp_async_commit()
    copyto(copy_Vt, tVsV, tVgV[:, :, :, 0])
    moye.cp_async_commit()
    moye.cp_async_wait(1)
    moye.sync_threads()
    copyto(s2r_QK, tXrQ, tXsQ)                  # Q stays in registers
    n_tiles = size(gK, 2)
    for j in range(n_tiles):
        moye.cp_async_wait(1)                   # K_j has landed (this thread's copies)
        moye.sync_threads()                     # ... everyone's
        zeros_(tSrS)
        for kb in range(size(tSrQ, 2)):
            copyto(s2r_QK, tXrK[:, :, kb], tXsK[:, :, kb])
            gemm(mma, tSrS, tSrQ[:, :, kb], tSrK[:, :, kb], tSrS)
        moye.sync_threads()                     # sK is read: fetch K_{j+1} under the rest
        if j + 1 < n_tiles:
            copyto(copy_QK, tKsK, tKgK[:, :, :, j + 1])
        moye.cp_async_commit()                  # (an empty group after the last tile)

        for r in range(rows):
            m = tSrS[2 * r, 0, 0]
            for n in range(size(tSrS, 2)):
                for c in range(2):
                    m = moye.maximum(m, tSrS[c + 2 * r, 0, n])
            m_new = moye.maximum(row_max[r], row_reduce(m, moye.maximum, 4) * scale_log2)
            correction = moye.exp2(row_max[r] - m_new)
            row_max[r] = m_new
            total = 0.0
            for n in range(size(tSrS, 2)):
                for c in range(2):
                    p = moye.exp2(tSrS[c + 2 * r, 0, n] * scale_log2 - m_new)
                    tSrS[c + 2 * r, 0, n] = p
                    total = total + p
            row_sum[r] = row_sum[r] * correction + row_reduce(total, _add, 4)
            for n in range(size(tOrO, 2)):
                for c in range(2):
                    tOrO[c + 2 * r, 0, n] = tOrO[c + 2 * r, 0, n] * correction
        # P in fp16: the accumulators of n8 atoms 2 kb and 2 kb + 1 are the A
        # fragment of k16 atom kb
        for kb in range(size(tOrP, 2)):
            for h in range(2):
                for v in range(4):
                    tOrP[v + 4 * h, 0, kb] = moye.cast(tSrS[v, 0, 2 * kb + h], Float16)

        moye.cp_async_wait(1)                   # V_j has landed
        moye.sync_threads()
        for kb in range(size(tOrP, 2)):
            copyto(s2r_Vt, tXrV[:, :, kb], tXsV[:, :, kb])
            gemm(mma, tOrO, tOrP[:, :, kb], tOrV[:, :, kb], tOrO)
        moye.sync_threads()                     # sVt is read: fetch V_{j+1}
        if j + 1 < n_tiles:
            copyto(copy_Vt, tVsV, tVgV[:, :, :, j + 1])
        moye.cp_async_commit()

    tOgO = partition_C(thr_mma, gO)
    out = make_fragment_like(tOgO)
    for r in range(rows):
        inv = 1.0 / row_sum[r]
        for n in range(size(tOrO, 2)):
            for c in range(2):
                out[c + 2 * r, 0, n] = moye.cast(tOrO[c + 2 * r, 0, n] * inv, O.dtype)
    copyto(tOgO, out)


def _add(a, b):
    return a + b


def make_config():
    """The static arguments of attention_kernel: swizzled shared layouts,
    cp.async and ldmatrix copies and the tiled MMA, for 64x64 tiles, head
    dim 64 and 4 warps."""
    # rows of 64 halves (128 bytes) in 8x64 atoms, swizzled so that the 8 rows an
    # ldmatrix reads, and the 16-byte vectors cp.async writes, fall in distinct banks
    k_major = composition(Swizzle(3, 3, 3), Layout((8, HEAD_DIM), (HEAD_DIM, 1)))
    sQ = tile_to_shape(k_major, (BLOCK_M, HEAD_DIM))
    sK = tile_to_shape(k_major, (BLOCK_N, HEAD_DIM))
    # V^T: (d, bN) with d contiguous, as V's rows are
    n_major = composition(Swizzle(3, 3, 3), Layout((HEAD_DIM, 8), (1, HEAD_DIM)))
    sVt = tile_to_shape(n_major, (HEAD_DIM, BLOCK_N))
    g2s = CopyAtom(CPOP_ASYNC_CACHEGLOBAL(UInt128), Float16)
    per_row = HEAD_DIM // 8                     # 16-byte vectors per row
    copy_QK = make_tiled_copy(g2s, make_layout((THREADS // per_row, per_row), (per_row, 1)),
                              Layout((1, 8)))
    copy_Vt = make_tiled_copy(g2s, make_layout((per_row, THREADS // per_row), (1, per_row)),
                              Layout((8, 1)))
    # 4 warps along M, each 16 rows; N tiles of 16 so that one ldmatrix.x4 feeds two atoms
    mma = make_tiled_mma(MMAOP_16x8x16_F32F16F16F32_TN, Layout((THREADS // 32, 1, 1)),
                         (16 * THREADS // 32, 16, 16))
    return (sQ, sK, sVt, copy_QK, copy_Vt, mma, CopyAtom(LDSM_U32x4_N, Float16),
            CopyAtom(LDSM_U16x8_T, Float16))


def launch(q, k, v, o, scale=None):
    """o = softmax(q k^T * scale) v for float16 q, k, v and float16 or float32
    o, each of shape (batch * heads, seqlen, 64), row-major: torch tensors, or
    NumPy arrays on the CPU backend. scale defaults to 1 / sqrt(64)."""
    shape = tuple(q.shape)
    if len(shape) != 3 or shape[2] != HEAD_DIM:
        raise moye.ShapeError(f"attention_mma: q has shape {shape}; expected (batch * heads, "
                              f"seqlen, {HEAD_DIM})")
    for name, t in (("k", k), ("v", v), ("o", o)):
        if tuple(t.shape) != shape:
            raise moye.ShapeError(f"attention_mma: {name} has shape {tuple(t.shape)}; "
                                  f"expected {shape}, the shape of q")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if "float16" not in str(t.dtype):
            raise moye.MoyeTypeError(f"attention_mma: {name} is {t.dtype}; q, k and v must be "
                                     f"float16")
    if shape[1] % BLOCK_M or shape[1] == 0:
        raise moye.ShapeError(f"attention_mma: seqlen = {shape[1]} must be a positive "
                              f"multiple of {BLOCK_M}, the tile")
    scale = 1.0 / math.sqrt(HEAD_DIM) if scale is None else scale
    attention_kernel[(shape[1] // BLOCK_M, shape[0]), THREADS](
        q, k, v, o, float(scale * LOG2E), *make_config())


def main(seqlen=4096, heads=16, batch=4):
    from ._common import rel_error, torch_cuda
    torch = torch_cuda()
    if torch is None:
        print("attention_mma: no CUDA device; see the CPU backend")
        return
    q, k, v = (torch.randn(batch * heads, seqlen, HEAD_DIM, device="cuda", dtype=torch.float16)
               for _ in range(3))
    o = torch.full_like(q, float("nan"))
    launch(q, k, v, o)
    torch.cuda.synchronize()
    ref = torch.softmax(q.double() @ k.double().transpose(1, 2) / math.sqrt(HEAD_DIM), -1) \
        @ v.double()
    err = rel_error(o.float().cpu().numpy(), ref.cpu().numpy())
    ms = gpu_time(torch, lambda: launch(q, k, v, o))
    flops = 4 * batch * heads * seqlen * seqlen * HEAD_DIM
    print(f"attention_mma seqlen {seqlen} heads {heads} batch {batch} float16 on "
          f"{torch.cuda.get_device_name()}: relative error {err:.2e}, {ms:.3f} ms, "
          f"{flops / ms / 1e9:.1f} TFLOP/s")
    assert err < 2e-3


if __name__ == "__main__":
    main(*map(int, sys.argv[1:4]))
