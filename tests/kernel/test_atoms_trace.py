"""Atoms inside kernels: what the tracer emits for cp.async, ldmatrix and
mma.sync, the errors for partitions that do not fit an instruction, and
specialization keys that tell ops with equal layouts apart."""
import numpy as np
import pytest

import moye
from moye import CopyAtom, Float16, Float32, Layout, MoYeArray, UInt128, make_tiled_mma
from moye.atom.arch import sm80
from moye import ir
from moye.compiler.frontend import spec_text
from moye.compiler.tracer import KernelError


def instrs(kernel, op):
    out = []

    def walk(body):
        for s in body:
            if isinstance(s, ir.Instr) and s.op == op:
                out.append(s)
            for child in ir.children(s):
                walk(child)
    walk(kernel.body)
    return out


def test_gemm_main_loop_swizzles_once_per_distinct_offset():
    """In the GEMM's main loop a stage index and static multiples of the
    swizzle's period stay outside the swizzle: the 12 cp.async of a k-tile
    share one swizzled offset, and a k-block's ldmatrix one per operand. The
    k-blocks are a loop NVRTC unrolls (their fragments' registers from the
    loop's variable), not unrolled while tracing."""
    from moye.examples import gemm
    args, threads = gemm.make_config("Float16")
    A, D = np.ones((256, 128), np.float16), np.zeros((256, 256), np.float16)
    k = gemm.gemm_kernel.trace(A, A, D, D, 1.0, 0.0, *args, block=threads)[0]
    loop = [s for s in k.body if isinstance(s, ir.For) and s.unroll is None][0]   # over k-tiles
    (k_blocks,) = [s for s in loop.body if isinstance(s, ir.For)]
    assert (k_blocks.stop, k_blocks.unroll) == (4, "full")
    body = ir.Kernel("b", [], k_blocks.body)
    # the next k-block's ldmatrix, 8 in each branch (the tile's last k-block reads the next stage)
    assert len(instrs(body, "cp_async")) == 12 and len(instrs(body, "ldmatrix")) == 16
    assert len(instrs(body, "mma")) == 32 and len(instrs(body, "xor")) == 1 + 2


def test_tiled_mmas_with_equal_layouts_but_other_types_are_other_specializations():
    f16 = make_tiled_mma(sm80.MMAOP_16x8x16_F32F16F16F32_TN)
    bf16 = make_tiled_mma(sm80.MMAOP_16x8x16_F32BF16BF16F32_TN)
    assert f16 != bf16 and f16 == make_tiled_mma(sm80.MMAOP_16x8x16_F32F16F16F32_TN)
    assert spec_text(f16) != spec_text(bf16)
    plain = CopyAtom(moye.UniversalCopy(UInt128), Float32)
    async_ = CopyAtom(moye.CPOP_ASYNC_CACHEGLOBAL(UInt128), Float32)
    assert repr(plain) == repr(async_) and spec_text(plain) != spec_text(async_)


def _tc_trace(variant, M=64, N=64, K=64):
    from moye.examples import tensor_core_matmul as tcm
    kern, config, dtype, _ = tcm.VARIANTS[variant]
    dt = np.float32 if dtype == "float32" else np.float16
    A, B = np.ones((M, K), dt), np.ones((N, K), dt)
    C = np.asfortranarray(np.zeros((M, N), np.float32))
    args, _ = config()
    return kern.trace(A, B, C, *args, block=128)[0]


def test_ldmatrix_kernel_emits_the_instructions_per_k_tile():
    k = _tc_trace("ldmatrix")
    loop = [s for s in k.body if isinstance(s, ir.For) and s.unroll is None][0]   # over k-tiles
    body = ir.Kernel("b", [], loop.body)
    # 64x64x32 tile, 2x2 warps of a (32,32,16) tiled MMA: per thread 2x4x2 mma.sync,
    # A: 2 (M) x 2 (K) ldmatrix.x4, B: 2 x 2 (two n8 atoms per x4); cp.async 2 + 2 of 16 bytes
    assert len(instrs(body, "mma")) == 16
    assert len(instrs(body, "ldmatrix")) == 8
    cps = instrs(body, "cp_async")
    assert len(cps) == 4 and all(c.attrs["bytes"] == 16 for c in cps)
    mma = instrs(body, "mma")[0]
    assert mma.attrs["ptx"] == "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
    assert [len(mma.args[i]) for i in (1, 3, 5, 7)] == [4, 4, 2, 4]


@moye.kernel
def _bad_cp_async(A, copy):
    s = moye.shared_array(A.dtype, Layout((64, 8), (1, 64)))
    thr = moye.get_slice(copy, moye.thread_idx.x)
    moye.copyto(copy, moye.partition_D(thr, s), moye.partition_S(thr, moye.tile(MoYeArray(A), (64, 8), (0, 0))))


def test_cp_async_of_non_contiguous_values_names_the_offsets():
    # values of one 16-byte atom run along the stride-64 mode of shared memory
    copy = moye.make_tiled_copy(CopyAtom(moye.CPOP_ASYNC_CACHEGLOBAL(UInt128), Float32),
                                Layout((64, 2)), Layout((1, 4)))
    A = np.zeros((64, 8), np.float32)
    with pytest.raises(KernelError, match="not contiguous"):
        _bad_cp_async.trace(A, copy, block=128)


@moye.kernel
def _mma_from_wrong_fragment(A, mma):
    thr = moye.get_slice(mma, moye.thread_idx.x)
    frag = moye.make_fragment_C(thr, moye.partition_C(thr, MoYeArray(A)))
    # a fragment whose values are strided by 3: no pair is one 32-bit register
    a = MoYeArray.empty(Float16, Layout((8, 1, 1), (3, 1, 1)))
    b = MoYeArray.empty(Float16, Layout((4, 1, 1), (1, 1, 1)))
    moye.gemm(mma, frag, a, b, frag)


def test_mma_with_registers_that_do_not_pack_is_an_error():
    mma = make_tiled_mma(sm80.MMAOP_16x8x16_F32F16F16F32_TN)
    with pytest.raises(KernelError, match="register"):
        _mma_from_wrong_fragment.trace(np.zeros((16, 8), np.float32), mma, block=32)
