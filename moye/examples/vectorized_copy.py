"""Seed 000: vectorized copies and memory coalescing.

    python -m moye.examples.vectorized_copy [M N]

Copies a column-major float32 matrix block by block (128x64 tiles, 256
threads) through registers with the three tiled copies the seed shows, and
times each on the GPU:

- `float64 (4,1)`: 8-byte UniversalCopy, four floats per thread: thread 0
  reads elements 0-1 and 2-3, thread 1 elements 4-5 and 6-7, so at each
  instruction the warp's addresses are 16 bytes apart: not coalesced;
- `float64 (2,1)`: 8-byte copies, two floats per thread: coalesced;
- `uint128 (4,1)`: 16-byte copies, four floats per thread: coalesced, and
  the fewest instructions (copy_kernel's 16-byte variant).

The kernel is copy_kernel's `copy_vec_kernel`; only the TiledCopy changes.
"""
import sys

from moye import CopyAtom, Float32, Float64, Layout, UInt128, UniversalCopy, make_tiled_copy, size

from .copy_kernel import copy_vec_kernel

THREADS = Layout((32, 8))
COPIES = {
    "float64 (4,1)": make_tiled_copy(CopyAtom(UniversalCopy(Float64), Float32), THREADS,
                                     Layout((4, 1))),
    "float64 (2,1)": make_tiled_copy(CopyAtom(UniversalCopy(Float64), Float32), THREADS,
                                     Layout((2, 1))),
    "uint128 (4,1)": make_tiled_copy(CopyAtom(UniversalCopy(UInt128), Float32), THREADS,
                                     Layout((4, 1))),
}
BLOCK = Layout((128, 64))


def launch(name, dst, src):
    """dst = src (column-major float32) with the tiled copy `name`; M a
    multiple of 128, N of 64."""
    M, N = src.shape
    tiled_copy = COPIES[name]
    copy_vec_kernel[(M // size(BLOCK, 0), N // size(BLOCK, 1)), size(tiled_copy)](
        dst, src, tiled_copy, BLOCK)


def main(M=8192, N=8192):
    from ._common import column_major, torch_cuda
    torch = torch_cuda()
    if torch is None:
        print("vectorized_copy: no CUDA device; see the CPU backend")
        return
    src = column_major(torch, (M, N), torch.float32)
    dst = column_major(torch, (M, N), torch.float32, fill="empty")
    for name in COPIES:
        dst.fill_(float("nan"))
        launch(name, dst, src)
        torch.cuda.synchronize()
        ok = torch.equal(dst, src)
        times = []
        for _ in range(10):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            launch(name, dst, src)
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        ms = sorted(times)[len(times) // 2]
        gbs = 2 * src.numel() * 4 / ms / 1e6
        print(f"vectorized_copy {name} {M}x{N} float32 on {torch.cuda.get_device_name()}: "
              f"{'exact' if ok else 'MISMATCH'}, {ms:.3f} ms, {gbs:.0f} GB/s")
        assert ok


if __name__ == "__main__":
    main(*map(int, sys.argv[1:3]))
