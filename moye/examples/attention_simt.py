"""FlashAttention-2's forward pass on the CUDA cores: O = softmax(Q K^T * scale) V.

    python -m moye.examples.attention_simt [seqlen heads batch]    (default 4096 16 4)

- Q, K, V, O are float32 arrays of shape (batch * heads, seqlen, 64), row-major
  (torch's (batch, heads, seqlen, 64) reshaped); seqlen a multiple of 64.
- A block of 256 threads owns one 64-row tile of Q (block_idx.x) of one
  head (block_idx.y), and streams K and V through shared memory in tiles of
  64 rows, each fetched with cp.async while the previous one is used.
- Online softmax: each row keeps its running maximum m and sum l; a new tile
  of scores S raises m, the old O and l are scaled by exp2(m_old - m_new),
  and P = exp2(S * scale * log2(e) - m) is added in. O / l is written at the end.
- Both products, S = Q K^T and O += P V, are FMAs tiled over a 16x16 grid of
  threads, each owning 4x4 values 16 apart: thread t is row t // 16 and
  column t % 16, so the 16 threads of a row are the lanes of a half-warp and
  a row's maximum and sum are reduced with four shfl_xor_sync.
- P goes through shared memory (a thread holds 4 of a row's 64 scores; the
  PV product needs the whole row). Rows of sQ, sK and sP are padded to 65
  floats, so a half-warp's reads of 16 rows fall in 16 banks.

benchmarks/twins/attention_simt.cu is the same kernel written in CUDA by hand.
"""
import math
import sys

import numpy as np

import moye
from moye import (CPOP_ASYNC_CACHEALWAYS, CPOP_ASYNC_CACHEGLOBAL, CopyAtom, Float32, Layout,
                  MoYeArray, UInt128, UniversalFMA, copyto, fill_, gemm, get_slice,
                  make_fragment_like, make_layout, make_tiled_copy, make_tiled_mma, partition_A,
                  partition_B, partition_C, partition_D, partition_S, size, tile, transpose,
                  zeros_)

BLOCK_M, BLOCK_N, HEAD_DIM, THREADS = 64, 64, 64, 256
LOG2E = 1.4426950408889634


def row_reduce(x, combine, lanes):
    """`combine` of x over the `lanes` consecutive lanes that share a row
    (a butterfly of shfl_xor_sync)."""
    mask = lanes // 2
    while mask:
        x = combine(x, moye.shfl_xor_sync(x, mask))
        mask //= 2
    return x


@moye.kernel
def attention_kernel(Q, K, V, O, scale_log2, sQ_layout, sK_layout, sV_layout, sP_layout,
                     copy_QK, copy_V, mma, row_lanes: moye.Constexpr):
    bM, bN, d = size(sQ_layout, 0), size(sK_layout, 0), size(sQ_layout, 1)
    tid, bh = moye.thread_idx.x, moye.block_idx.y
    mQ, mK, mV, mO = MoYeArray(Q), MoYeArray(K), MoYeArray(V), MoYeArray(O)
    gQ = tile(mQ[bh, :, :], (bM, d), (moye.block_idx.x, 0))        # (bM, d)
    gO = tile(mO[bh, :, :], (bM, d), (moye.block_idx.x, 0))
    gK = tile(mK[bh, :, :], (bN, d), (None, 0))                     # (bN, d, n)
    gV = tile(mV[bh, :, :], (bN, d), (None, 0))
    sQ = moye.shared_array(Q.dtype, sQ_layout)                      # (bM, d)
    sK = moye.shared_array(K.dtype, sK_layout)                      # (bN, d)
    sV = moye.shared_array(V.dtype, sV_layout)                      # (bN, d)
    sP = moye.shared_array(Float32, sP_layout)                      # (bM, bN)

    # global -> shared with cp.async: 4 bytes at a time into the padded sQ, sK;
    # 16 into sV
    thr_qk, thr_v = get_slice(copy_QK, tid), get_slice(copy_V, tid)
    tQgQ, tQsQ = partition_S(thr_qk, gQ), partition_D(thr_qk, sQ)
    tKgK, tKsK = partition_S(thr_qk, gK), partition_D(thr_qk, sK)   # (CPY, N, D, n)
    tVgV, tVsV = partition_S(thr_v, gV), partition_D(thr_v, sV)

    # S = Q K^T and O += P V on the same 16x16 grid of threads: a thread's
    # rows of S are its rows of O
    thr_mma = get_slice(mma, tid)
    tSsQ, tSsK = partition_A(thr_mma, sQ), partition_B(thr_mma, sK)
    tSsP = partition_C(thr_mma, sP)                                 # (1, rows, cols)
    tSrS = make_fragment_like(tSsP)
    tOsP, tOsV = partition_A(thr_mma, sP), partition_B(thr_mma, transpose(sV))
    tOgO = partition_C(thr_mma, gO)                                 # (1, rows, d cols)
    tOrO = make_fragment_like(tOgO)
    zeros_(tOrO)
    rows = size(tSrS, 1)
    row_max = make_fragment_like(Layout(rows), Float32)             # in units of log2
    row_sum = make_fragment_like(Layout(rows), Float32)
    fill_(row_max, -math.inf)
    zeros_(row_sum)

    # cp.async groups, oldest first: Q + K_0, V_0, then K_1, V_1, ...
    copyto(copy_QK, tQsQ, tQgQ)
    copyto(copy_QK, tKsK, tKgK[:, :, :, 0])
    moye.cp_async_commit()
    copyto(copy_V, tVsV, tVgV[:, :, :, 0])
    moye.cp_async_commit()
    n_tiles = size(gK, 2)
    for j in range(n_tiles):
        moye.cp_async_wait(1)                   # K_j has landed (this thread's copies)
        moye.sync_threads()                     # ... everyone's
        zeros_(tSrS)
        gemm(mma, tSrS, tSsQ, tSsK, tSrS)
        moye.sync_threads()                     # sK is read: fetch K_{j+1} under the softmax
        if j + 1 < n_tiles:
            copyto(copy_QK, tKsK, tKgK[:, :, :, j + 1])
        moye.cp_async_commit()                  # (an empty group after the last tile)

        for i in range(rows):
            m = tSrS[0, i, 0]
            for c in range(1, size(tSrS, 2)):
                m = moye.maximum(m, tSrS[0, i, c])
            m_new = moye.maximum(row_max[i], row_reduce(m, moye.maximum, row_lanes) * scale_log2)
            correction = moye.exp2(row_max[i] - m_new)
            row_max[i] = m_new
            total = 0.0
            for c in range(size(tSrS, 2)):
                p = moye.exp2(tSrS[0, i, c] * scale_log2 - m_new)
                tSrS[0, i, c] = p
                total = total + p
            row_sum[i] = row_sum[i] * correction + row_reduce(total, _add, row_lanes)
            for c in range(size(tOrO, 2)):
                tOrO[0, i, c] = tOrO[0, i, c] * correction
        copyto(tSsP, tSrS)

        moye.cp_async_wait(1)                   # V_j has landed; sP is written
        moye.sync_threads()
        gemm(mma, tOrO, tOsP, tOsV, tOrO)
        moye.sync_threads()                     # sV and sP are read: fetch V_{j+1}
        if j + 1 < n_tiles:
            copyto(copy_V, tVsV, tVgV[:, :, :, j + 1])
        moye.cp_async_commit()

    for i in range(rows):
        inv = 1.0 / row_sum[i]
        for c in range(size(tOrO, 2)):
            tOrO[0, i, c] = tOrO[0, i, c] * inv
    copyto(tOgO, tOrO)


def _add(a, b):
    return a + b


def make_config():
    """The static arguments of attention_kernel: shared layouts, tiled copies
    and the tiled FMA, for 64x64 tiles, head dim 64 and 256 threads."""
    pad = HEAD_DIM + 1
    sQ = make_layout((BLOCK_M, HEAD_DIM), (pad, 1))
    sK = make_layout((BLOCK_N, HEAD_DIM), (pad, 1))
    sV = make_layout((BLOCK_N, HEAD_DIM), (HEAD_DIM, 1))
    sP = make_layout((BLOCK_M, BLOCK_N), (BLOCK_N + 1, 1))
    # rows of 64 floats: 4 rows per pass of 256 threads, 4 bytes each (padded rows
    # are only 4-byte aligned), or 16 rows, 16 bytes each
    copy_QK = make_tiled_copy(CopyAtom(CPOP_ASYNC_CACHEALWAYS(Float32), Float32),
                              make_layout((THREADS // HEAD_DIM, HEAD_DIM), (HEAD_DIM, 1)),
                              Layout((1, 1)))
    per_row = HEAD_DIM // 4
    copy_V = make_tiled_copy(CopyAtom(CPOP_ASYNC_CACHEGLOBAL(UInt128), Float32),
                             make_layout((THREADS // per_row, per_row), (per_row, 1)),
                             Layout((1, 4)))
    # thread t at (t // 16, t % 16) of a 16x16 grid: a row's threads are one half-warp
    mma = make_tiled_mma(UniversalFMA(Float32), Layout((16, 16), (16, 1)))
    return sQ, sK, sV, sP, copy_QK, copy_V, mma, 16


def launch(q, k, v, o, scale=None):
    """o = softmax(q k^T * scale) v for float32 arrays of shape
    (batch * heads, seqlen, 64), row-major: torch tensors, or NumPy arrays on
    the CPU backend. scale defaults to 1 / sqrt(64)."""
    shape = tuple(q.shape)
    if len(shape) != 3 or shape[2] != HEAD_DIM:
        raise moye.ShapeError(f"attention_simt: q has shape {shape}; expected (batch * heads, "
                              f"seqlen, {HEAD_DIM})")
    for name, t in (("k", k), ("v", v), ("o", o)):
        if tuple(t.shape) != shape:
            raise moye.ShapeError(f"attention_simt: {name} has shape {tuple(t.shape)}; "
                                  f"expected {shape}, the shape of q")
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        if "float32" not in str(t.dtype):
            raise moye.MoyeTypeError(f"attention_simt: {name} is {t.dtype}; q, k, v and o must "
                                     f"be float32")
    if shape[1] % BLOCK_M or shape[1] == 0:
        raise moye.ShapeError(f"attention_simt: seqlen = {shape[1]} must be a positive "
                              f"multiple of {BLOCK_M}, the tile")
    scale = 1.0 / math.sqrt(HEAD_DIM) if scale is None else scale
    attention_kernel[(shape[1] // BLOCK_M, shape[0]), THREADS](
        q, k, v, o, float(scale * LOG2E), *make_config())


def reference(q, k, v, scale=None):
    """softmax(q k^T * scale) v in float64 with NumPy."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def main(seqlen=4096, heads=16, batch=4):
    from ._common import rel_error, torch_cuda
    torch = torch_cuda()
    if torch is None:
        print("attention_simt: no CUDA device; see the CPU backend")
        return
    q, k, v = (torch.randn(batch * heads, seqlen, HEAD_DIM, device="cuda") for _ in range(3))
    o = torch.full_like(q, float("nan"))
    launch(q, k, v, o)
    torch.cuda.synchronize()
    ref = torch.softmax(q.double() @ k.double().transpose(1, 2) / math.sqrt(HEAD_DIM), -1) \
        @ v.double()
    err = rel_error(o.cpu().numpy(), ref.cpu().numpy())
    ms = gpu_time(torch, lambda: launch(q, k, v, o))
    flops = 4 * batch * heads * seqlen * seqlen * HEAD_DIM
    print(f"attention_simt seqlen {seqlen} heads {heads} batch {batch} float32 on "
          f"{torch.cuda.get_device_name()}: relative error {err:.2e}, {ms:.3f} ms, "
          f"{flops / ms / 1e9:.1f} TFLOP/s")
    assert err < 1e-5


def gpu_time(torch, fn, reps=20):
    """Milliseconds per call of fn on the GPU: the median of `reps` after a warm-up."""
    fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


if __name__ == "__main__":
    main(*map(int, sys.argv[1:4]))
