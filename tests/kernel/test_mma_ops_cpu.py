"""mma.sync ops through gemm() on the CPU backend, whose mma follows the PTX
ISA's fragment figures: moye's thread-value layouts must agree with them
(the GPU test of the same ops, tests/gpu/test_mma_ops_gpu.py, on the CPU)."""
import pytest

from tests.gpu.test_mma_ops_gpu import MMA_OPS, check_one_mma

# the ops whose C registers are arranged unlike D's (f32 D, f16 C), and one of each shape
C_AFTER = [op for op in MMA_OPS if op.info.get("c_after")]
ONE_PER_SHAPE = list({(op.shape_mnk, op.a_type.name): op for op in MMA_OPS}.values())


def test_c_after_ops_are_the_m8n8k4_f32_f16_ones():
    assert sorted(op.name for op in C_AFTER) == [
        f"MMAOP_8x8x4_F32F16F16F16_{m}" for m in ("NN", "NT", "TN", "TT")]


@pytest.mark.parametrize("op", C_AFTER + ONE_PER_SHAPE, ids=lambda o: o.name)
def test_one_mma_on_the_cpu_backend(op):
    check_one_mma(op)
