"""16-bit floats on a GPU, through moye's own C++ types (backend/cuda/float16):
every half and bfloat16 value widened and narrowed back, narrowing from
float32, float64 and integers rounding once, every value truncated to each
integer type with saturation, and arithmetic and comparisons, bit for bit
against the references of tests/kernel/test_float16_cpu.py."""
import ml_dtypes
import numpy as np
import pytest

from ..kernel.test_float16_cpu import (HALVES, arithmetic, check_arithmetic, check_from_ints,
                                       check_narrowing, check_round_trip, check_to_ints,
                                       check_widening, every_value, float_edges, launch)

pytestmark = pytest.mark.gpu

INTS = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


def _torch_dtype(torch, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.dtype(ml_dtypes.bfloat16):
        return torch.bfloat16
    return getattr(torch, dtype.name)


def _to_device(torch, x):
    """A NumPy array as a CUDA tensor of the same type, through its bytes."""
    raw = torch.from_numpy(np.ascontiguousarray(x).view(np.uint8).reshape(-1)).cuda()
    return raw.view(_torch_dtype(torch, x.dtype)).reshape(x.shape)


def _to_host(torch, t, dtype):
    """A CUDA tensor as a NumPy array of `dtype`, through its bytes."""
    return t.contiguous().view(torch.uint8).cpu().numpy().view(dtype).reshape(t.shape)


@pytest.fixture
def run(torch):
    """Runs a kernel of test_float16_cpu on the GPU, outputs poisoned, and
    gives its outputs back as NumPy arrays."""
    def run_gpu(kern, out_type, *args):
        n = len(args[0])
        device = [_to_device(torch, a) for a in args]
        if kern is arithmetic:
            out = _to_device(torch, np.full((5, n), np.nan, out_type))
            flags = torch.full((6, n), -7, dtype=torch.int32, device="cuda")
            launch(kern, out, flags, *device)
            torch.cuda.synchronize()
            return _to_host(torch, out, out_type), flags.cpu().numpy()
        poison = 99 if np.dtype(out_type).kind in "iu" else np.nan
        out = _to_device(torch, np.full(n, poison, out_type))
        launch(kern, out, *device)
        torch.cuda.synchronize()
        return _to_host(torch, out, out_type)
    return run_gpu


@pytest.mark.parametrize("dtype", HALVES, ids=["half", "bfloat16"])
def test_every_value_widens_exactly_and_narrows_back(run, dtype):
    check_widening(run, dtype)
    check_round_trip(run, dtype)


@pytest.mark.parametrize("source", [np.float32, np.float64])
@pytest.mark.parametrize("dtype", HALVES, ids=["half", "bfloat16"])
def test_narrowing_rounds_once_to_nearest_even(run, dtype, source):
    check_narrowing(run, dtype, source, 4000)


@pytest.mark.parametrize("int_type", [np.int16, np.int32, np.uint32, np.int64, np.uint64])
@pytest.mark.parametrize("dtype", HALVES, ids=["half", "bfloat16"])
def test_integers_round_once(run, dtype, int_type):
    check_from_ints(run, dtype, int_type, 2000)


@pytest.mark.parametrize("int_type", INTS)
@pytest.mark.parametrize("dtype", HALVES, ids=["half", "bfloat16"])
def test_every_value_truncates_to_integers_saturating(run, dtype, int_type):
    check_to_ints(run, int_type, every_value(dtype))


@pytest.mark.parametrize("int_type", INTS)
@pytest.mark.parametrize("source", [np.float32, np.float64])
def test_wider_floats_truncate_to_integers_saturating(run, source, int_type):
    """Kernels convert float32 and float64 to integers through NVVM, not
    the 16-bit prelude: the same rule, which the CPU backend follows."""
    check_to_ints(run, int_type, float_edges(source))


@pytest.mark.parametrize("dtype", HALVES, ids=["half", "bfloat16"])
def test_arithmetic_rounds_once_and_compares_as_floats(run, dtype):
    check_arithmetic(run, dtype, 1 << 16)
