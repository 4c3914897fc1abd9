"""Seed 003: transpose through shared memory with a padded (32,32):(1,33)
tile, so both the column reads and the row writes avoid bank conflicts.

    python -m moye.examples.transpose [M N]
"""
import sys

import moye
from moye import Layout, MoYeArray, parallelize, size, tile, transpose


@moye.kernel
def transpose_kernel(dst, src, smem_layout, block_layout, thread_layout,
                     diagonal: moye.Constexpr = False):
    smem = moye.shared_array(dst.dtype, smem_layout)
    bM, bN = size(block_layout, 0), size(block_layout, 1)
    bx, by = moye.block_idx.x, moye.block_idx.y
    if diagonal:
        # visit tiles along diagonals so that neighbouring blocks write far apart
        # columns of dst less often (square grids)
        bx, by = (moye.block_idx.x + moye.block_idx.y) % moye.grid_dim.x, moye.block_idx.x
    block_src = tile(MoYeArray(src), (bM, bN), (bx, by))
    block_dst = tile(MoYeArray(dst), (bN, bM), (by, bx))
    thread_dst = parallelize(block_dst, thread_layout, moye.thread_idx.x)
    thread_src = parallelize(block_src, thread_layout, moye.thread_idx.x)
    thread_smem = parallelize(smem, thread_layout, moye.thread_idx.x)
    moye.copyto(thread_smem, thread_src)
    moye.sync_threads()
    thread_smem_t = parallelize(transpose(smem), thread_layout, moye.thread_idx.x)
    moye.copyto(thread_dst, thread_smem_t)


BLOCK = Layout((32, 32))
THREADS = Layout((32, 8))
SMEM = Layout((32, 32), (1, 33))


def launch(dst, src, tile=(32, 32), diagonal=False):
    """dst = src^T for column-major src (M, N) and dst (N, M); M and N
    multiples of the block `tile` ((32, 32) as in the seed; a longer second
    mode writes longer contiguous runs of dst). `diagonal` reorders the
    blocks (square grids only)."""
    M, N = src.shape
    tm, tn = (tile, tile) if isinstance(tile, int) else tile
    if diagonal and M // tm != N // tn:
        raise ValueError("the diagonal block order needs a square grid of tiles")
    transpose_kernel[(M // tm, N // tn), size(THREADS)](
        dst, src, Layout((tm, tn), (1, tm + 1)), Layout((tm, tn)), THREADS, diagonal)


def main(M=2048, N=2048):
    from ._common import column_major, torch_cuda
    torch = torch_cuda()
    if torch is None:
        print("transpose: no CUDA device; see the CPU backend")
        return
    src = column_major(torch, (M, N), torch.float32)
    dst = column_major(torch, (N, M), torch.float32, fill="empty")
    dst.fill_(float("nan"))
    launch(dst, src)
    torch.cuda.synchronize()
    ok = torch.equal(dst, src.t())
    print(f"transpose {M}x{N} float32 on {torch.cuda.get_device_name()}: "
          f"{'exact' if ok else 'MISMATCH'}")
    assert ok


if __name__ == "__main__":
    main(*map(int, sys.argv[1:3]))
