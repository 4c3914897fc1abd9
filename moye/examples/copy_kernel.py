"""Seed 003: copy a matrix through shared memory, block by block.

    python -m moye.examples.copy_kernel [M N]

Each 32x32 block tile is copied by 32x8 threads (4 elements each) into a
shared-memory tile and back out; `padded=True` pads shared memory by one
element per column, the seed's bank-conflict remedy. `copy_vec_kernel` is
seed 000's vectorized variant: a TiledCopy of 16-byte UniversalCopy atoms
moves each thread's 128x? share through registers.
"""
import sys

import moye
from moye import (CopyAtom, Float32, Layout, MoYeArray, UInt128, UniversalCopy, copyto, get_slice,
                  make_fragment_like, make_tiled_copy, parallelize, partition_D, partition_S, size,
                  tile)


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


@moye.kernel
def copy_vec_kernel(dst, src, tiled_copy, block_tile):
    bM, bN = size(block_tile, 0), size(block_tile, 1)
    block_src = tile(MoYeArray(src), (bM, bN), (moye.block_idx.x, moye.block_idx.y))
    block_dst = tile(MoYeArray(dst), (bM, bN), (moye.block_idx.x, moye.block_idx.y))
    thr = get_slice(tiled_copy, moye.thread_idx.x)
    thread_src = partition_S(thr, block_src)            # (CPY, CPY_M, CPY_N)
    thread_dst = partition_D(thr, block_dst)
    frag = make_fragment_like(thread_src)
    copyto(tiled_copy, frag, thread_src)
    copyto(tiled_copy, thread_dst, frag)


BLOCK = Layout((32, 32))
THREADS = Layout((32, 8))
VEC_COPY = make_tiled_copy(CopyAtom(UniversalCopy(UInt128), Float32), Layout((32, 8)),
                           Layout((4, 1)))


def launch_vec(dst, src, block=(128, 64)):
    """dst = src with 16-byte accesses; M, N multiples of the block tile."""
    M, N = src.shape
    copy_vec_kernel[(M // block[0], N // block[1]), size(VEC_COPY)](dst, src, VEC_COPY,
                                                                     Layout(block))


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
    for name, run in (("plain   ", lambda d, s: launch(d, s)),
                      ("padded  ", lambda d, s: launch(d, s, True)),
                      ("16-byte ", launch_vec)):
        src = column_major(torch, (M, N), torch.float32)
        dst = column_major(torch, (M, N), torch.float32, fill="empty")
        dst.fill_(float("nan"))
        run(dst, src)
        torch.cuda.synchronize()
        ok = torch.equal(dst, src)
        print(f"copy_kernel {name} {M}x{N} float32 on {torch.cuda.get_device_name()}: "
              f"{'exact' if ok else 'MISMATCH'}")
        assert ok


if __name__ == "__main__":
    main(*map(int, sys.argv[1:3]))
