"""A production GEMM written with moye: fp16 or bf16 inputs, fp32
accumulation, D = alpha * A @ B^T + beta * C, on Ampere-style tensor cores.

    python -m moye.examples.gemm [M N K] [float16|bfloat16]     (e.g. 1000 1000 1000)

- A (M, K) and B (N, K), each K-major (torch row-major) or M/N-major
  (the transposed view of one); C and D (M, N) row-major.
- Shared memory in swizzled layouts (Swizzle o (8, 64) atoms), written by
  cp.async in a multistage pipeline and read by ldmatrix (.trans for
  M/N-major operands) without bank conflicts.
- mma.sync m16n8k16 tiled over 4x2 warps, each warp a 64x64 piece of the
  256x128 block tile (TILE; make_config takes others); the fragments of the
  next k-block are read with ldmatrix while the current one is multiplied,
  and the next tile's while the last k-block is.
- Blocks ordered in columns of `group` tiles (tile_of_block), so the blocks
  resident at once share their A and B tiles in L2.
- An epilogue through shared memory: each accumulator becomes
  alpha * acc + beta * C at its coordinates (an identity array partitioned
  like the accumulators), in float32, is converted and stored to a padded
  tile (in the main loop's A or B buffers where one holds it), then
  16-byte vectors are read back and written to D, coalesced.
- Any M, N, K: where the tiles do not divide them, the kernel is specialized
  with `residue` and predicates every copy on coordinates from identity
  arrays tiled like the data: cp.async zero-fills what lies outside A and B
  (so a partial k-tile adds nothing), and the epilogue stores only inside D.
  Divisible shapes run the unpredicated kernel. A predicate covers a whole
  vector, so vectors must not straddle an edge: each 16-byte cp.async moves 8
  contiguous elements, and each operand's contiguous extent (K for a K-major
  one, M or N otherwise) must be a multiple of 8 (`launch` says so
  otherwise); D is written in the widest vectors (8, 4, 2, 1) dividing N.

The kernel lives in moye/ops/gemm_sm80.py, where moye.ops.matmul uses it
with more: a bias and an activation fused into the epilogue, float32 D,
batches (grid z).
"""
import sys

import moye

from moye.ops import gemm_sm80
from moye.ops.gemm_sm80 import TILE, gemm_kernel, grid, make_config

__all__ = ["TILE", "gemm_kernel", "grid", "launch", "main", "make_config"]

# the example's names for the operands, in its errors
NAMES = {"a": "A", "b": "B", "out": "D", "residual": "C", "bias": "bias"}


def launch(A, B, D, C=None, alpha=1.0, beta=0.0, **config):
    """D = alpha * A @ B.T + beta * C for fp16/bf16 arrays A (M,K), B (N,K)
    and row-major C, D (M,N): torch tensors, or NumPy arrays on the CPU
    backend. Any M, N, K; each operand's contiguous extent must be a
    multiple of 8 (16-byte cp.async). `config`: make_config's keywords
    (TILE by default)."""
    gemm_sm80.launch(A, B, D, residual=C, alpha=alpha, beta=beta, config={**TILE, **config},
                     names=NAMES)


def main(M=4096, N=4096, K=4096, dtype="float16"):
    from ._common import rel_error, torch_cuda
    torch = torch_cuda()
    if torch is None:
        print("gemm: no CUDA device; see the CPU backend")
        return
    dt = getattr(torch, dtype)
    for a_major, b_major in (("K", "K"), ("M", "K"), ("K", "N"), ("M", "N")):
        A = torch.randn(M, K, device="cuda", dtype=dt) if a_major == "K" else \
            torch.randn(K, M, device="cuda", dtype=dt).t()
        B = torch.randn(N, K, device="cuda", dtype=dt) if b_major == "K" else \
            torch.randn(K, N, device="cuda", dtype=dt).t()
        C = torch.randn(M, N, device="cuda", dtype=dt)
        D = torch.full((M, N), float("nan"), device="cuda", dtype=dt)
        try:
            launch(A, B, D, C, alpha=0.5, beta=-1.5)
        except moye.MoyeError as e:         # an extent this operand layout cannot take
            print(f"gemm {M}x{N}x{K} A {a_major}-major, B {b_major}-major: {e}")
            continue
        torch.cuda.synchronize()
        ref = 0.5 * (A.double() @ B.double().t()) - 1.5 * C.double()
        err = rel_error(D.float().cpu().numpy(), ref.cpu().numpy())
        print(f"gemm {M}x{N}x{K} {dtype} A {a_major}-major, B {b_major}-major on "
              f"{torch.cuda.get_device_name()}: relative error {err:.2e}")
        assert err < (1e-2 if dtype == "bfloat16" else 2e-3)


if __name__ == "__main__":
    nums = [int(x) for x in sys.argv[1:4]]
    main(*nums, **({"dtype": sys.argv[4]} if len(sys.argv) > 4 else {}))
