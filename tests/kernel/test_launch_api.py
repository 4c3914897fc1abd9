"""The launch API's refusals that need a fixture (the fast path of a CUDA
backend with a stand-in driver, hand-made DLPack producers), and the calls
right beside each refusal that must still work, with every value checked."""
import numpy as np
import pytest

import moye
from moye import LaunchError
from moye.compiler.arguments import as_array_arg

from .test_frontend_args import CudaProducer, TorchLike, fake_cuda  # noqa: F401 (a fixture)

rng = np.random.default_rng(16)


@moye.kernel
def scale(y, x, a):
    i = moye.thread_idx.x
    y[i] = x[i] * a


@moye.kernel(backend="cpu")
def scale_cpu(y, x, a):
    i = moye.thread_idx.x
    y[i] = x[i] * a


def test_keywords_on_the_fast_path(fake_cuda):
    x, y = TorchLike(0x1000, (32,), (1,)), TorchLike(0x2000, (32,), (1,))
    for _ in range(3):                      # the launch function becomes the fast one
        scale[1, 32](y, x, 2.0)
    launches = len(fake_cuda.launches)
    assert scale[1, 32].__code__.co_filename.startswith("<moye launch")
    scale[1, 32](y, x, a=5.0)               # bound by name, then launched
    scale[1, 32](a=6.0, x=x, y=y)
    assert [r["values"] for r in fake_cuda.launches[launches:]] == \
        [[0x2000, 32, 0x1000, 32, 5.0], [0x2000, 32, 0x1000, 32, 6.0]]
    with pytest.raises(LaunchError, match=r"no argument smem_bytes: its arguments are "
                                          r"\(y, x, a\)"):
        scale[1, 32](y, x, 2.0, smem_bytes=0)
    with pytest.raises(LaunchError, match=r"argument 'a' is given twice"):
        scale[1, 32](y, x, 2.0, a=1.0)
    assert len(fake_cuda.launches) == launches + 2      # the refused calls launched nothing
    scale[1, 32](y, x, 3.0)
    assert fake_cuda.launches[-1]["values"][-1] == 3.0


def test_a_cpu_launch_after_a_refused_one_computes_every_element():
    x = rng.standard_normal(32).astype(np.float32)
    y = np.full(32, np.nan, np.float32)
    with pytest.raises(LaunchError):
        scale_cpu[1, 32](y, x, b=0.5)
    assert np.isnan(y).all()
    scale_cpu[1, 32](y, x, 0.5)
    np.testing.assert_array_equal(y, x * np.float32(0.5))


def test_a_compiled_kernel_runs_with_new_arrays_and_refuses_another_specialization():
    x = rng.standard_normal(32).astype(np.float32)
    ck = scale_cpu.compile(np.zeros(32, np.float32), x, 1.0, block=32)
    y = np.full(32, np.nan, np.float32)
    ck(y, x, -1.5, grid=1)
    np.testing.assert_array_equal(y, x * np.float32(-1.5))
    with pytest.raises(LaunchError, match=r"argument 'x' is a Int32 array .*compiled for a "
                                          r"Float32 array"):
        ck(y, x.astype(np.int32), 1.0, grid=1)
    with pytest.raises(LaunchError, match=r"argument 'a' is a Float64 scalar, compiled for a "
                                          r"Float32 scalar"):
        ck(y, x, np.float64(1.0), grid=1)


def test_kernel_decorator_with_a_backend():
    def body(y):
        y[moye.thread_idx.x] = 7
    k = moye.kernel(backend="cpu")(body)
    assert k.backend == "cpu"
    y = np.full(4, -1, np.int32)
    k[1, 4](y)
    np.testing.assert_array_equal(y, 7)
    with pytest.raises(LaunchError, match="got 'gpu'"):
        k.backend = "gpu"
    assert k.backend == "cpu"


# -- array interfaces: refused, and the valid ones beside them -----------------------

class CAI:
    def __init__(self, **interface):
        self.__cuda_array_interface__ = interface


def test_valid_cuda_array_interfaces_still_bind():
    arr = as_array_arg(CAI(shape=(np.int64(4), 3), typestr="<f2", data=(0x2000, True),
                           strides=(np.int64(2), 8), version=2), "x")
    assert (arr.ptr, arr.shape, arr.strides, arr.dtype) == (0x2000, (4, 3), (1, 4), moye.Float16)
    empty = as_array_arg(CAI(shape=(0,), typestr="<i4", data=(0, False), version=3), "x")
    assert (empty.ptr, empty.shape, empty.dtype) == (0, (0,), moye.Int32)
    backwards = as_array_arg(CAI(shape=(8,), typestr="<f4", data=(0x2000 + 28, False),
                                 strides=(-4,), version=3), "x")
    assert backwards.strides == (-1,)           # a reversed CuPy view is legal


@pytest.mark.parametrize("producer, message", [
    (CudaProducer(0, (8,), (1,)), r"shape \(8,\) at the null address"),
    (CudaProducer(0x1000, (-8,), (1,)), r"shape \(-8,\), with a negative extent"),
], ids=["null address", "negative extent"])
def test_malformed_dlpack_tensors(producer, message):
    with pytest.raises(LaunchError, match=f"argument 'x': a DLPack array of {message}"):
        as_array_arg(producer, "x")


def test_an_empty_dlpack_tensor_may_have_no_address():
    arr = as_array_arg(CudaProducer(0, (0, 4), None), "x")
    assert (arr.ptr, arr.shape) == (0, (0, 4))
