"""Seed 003: copy a matrix through shared memory, block by block.

    python -m moye.examples.copy_kernel [M N]

Each 32x32 block tile is copied by 32x8 threads (4 elements each) into a
shared-memory tile and back out. `--padded` pads shared memory by one
element per column, the seed's bank-conflict remedy.
"""
import sys

import moye
from moye import Layout, MoYeArray, parallelize, size, tile


@moye.kernel
def copy_kernel(dst, src, smem_layout, block_layout, thread_layout):
    smem = moye.shared_array(dst.dtype, smem_layout)
    bM, bN = size(block_layout, 0), size(block_layout, 1)
    block_dst = tile(MoYeArray(dst), (bM, bN), (moye.block_idx.x, moye.block_idx.y))
    block_src = tile(MoYeArray(src), (bM, bN), (moye.block_idx.x, moye.block_idx.y))
    thread_dst = parallelize(block_dst, thread_layout, moye.thread_idx.x)
    thread_src = parallelize(block_src, thread_layout, moye.thread_idx.x)
    thread_smem = parallelize(smem, thread_layout, moye.thread_idx.x)
    for i in range(size(thread_smem)):
        thread_smem[i] = thread_src[i]
    moye.sync_threads()
    for i in range(size(thread_dst)):
        thread_dst[i] = thread_smem[i]


BLOCK = Layout((32, 32))
THREADS = Layout((32, 8))


def launch(dst, src, padded=False):
    """dst = src for column-major (M, N) arrays, M and N multiples of 32."""
    M, N = src.shape
    smem = Layout((32, 32), (1, 33)) if padded else Layout((32, 32))
    copy_kernel[(M // 32, N // 32), size(THREADS)](dst, src, smem, BLOCK, THREADS)


def main(M=2048, N=2048):
    from ._common import column_major, torch_cuda
    torch = torch_cuda()
    if torch is None:
        print("copy_kernel: no CUDA device; see the CPU backend")
        return
    for padded in (False, True):
        src = column_major(torch, (M, N), torch.float32)
        dst = torch.full_like(src, float("nan"))
        launch(dst, src, padded)
        torch.cuda.synchronize()
        ok = torch.equal(dst, src)
        print(f"copy_kernel {'padded' if padded else 'plain '} {M}x{N} float32 on "
              f"{torch.cuda.get_device_name()}: {'exact' if ok else 'MISMATCH'}")
        assert ok


if __name__ == "__main__":
    main(*map(int, sys.argv[1:3]))
