"""Kernel parameters are marshalled byte for byte (no GPU needed), and on a
GPU the hand-written kernels load, launch and compute the right values:
every parameter kind, fp16/bf16/fp8, cp.async + mma.sync, more than 48 KB
of dynamic shared memory, clusters, a TMA descriptor passed by value."""
import ctypes
import os
import struct
import sys
import threading
from types import SimpleNamespace

import numpy as np
import pytest

import moye
from moye.backend.cuda import driver, nvrtc

from .cuda_sources import CLUSTER, SM80, SM80_KERNELS, SM90A, SM90A_KERNELS

C = ctypes
DESC = C.c_char * 128
ECHO_KINDS = (C.c_uint64, C.c_int8, C.c_int16, C.c_int32, C.c_int64, C.c_float, C.c_double,
              C.c_uint64, DESC, C.c_uint8)


def echo_values(out_ptr):
    desc = np.random.default_rng(1).integers(-2**31, 2**31, 32, dtype=np.int32).tobytes()
    return [out_ptr, -5, -12345, 123456789, -(1 << 40) - 7, 3.25, 1 / 3,
            0xDEADBEEFCAFEF00D, desc, 201]


def read_params(pack):
    """What cuLaunchKernel would read: each parameter's bytes, through the pointer array."""
    out = []
    for i, k in enumerate(pack.kinds):
        ptr = struct.unpack("<Q", C.string_at(pack.address + 8 * i, 8))[0]
        assert ptr % C.alignment(k) == 0
        out.append(C.string_at(ptr, C.sizeof(k)))
    return out


def expected_bytes(kinds, values):
    codes = {C.c_uint64: "Q", C.c_int8: "b", C.c_int16: "h", C.c_int32: "i", C.c_int64: "q",
             C.c_float: "f", C.c_double: "d", C.c_uint8: "B"}
    return [struct.pack("<" + codes[k], v) if k in codes else bytes(v)
            for k, v in zip(kinds, values)]


# -- without a GPU -------------------------------------------------------------------

def test_param_pack_points_at_each_value():
    values = echo_values(0x7F0000001000)
    pack = driver.ParamPack(ECHO_KINDS)
    assert pack.address % 64 == 0
    pack.pack(values)
    assert read_params(pack) == expected_bytes(ECHO_KINDS, values)
    values[3], values[8] = 42, bytes(range(128))
    pack.pack(values)                                  # refilled in place
    assert read_params(pack) == expected_bytes(ECHO_KINDS, values)


def test_raw_structs_are_64_byte_aligned():
    pack = driver.ParamPack((C.c_int8, DESC, C.c_int8, DESC))
    assert [(pack.address + o) % 64 for o in pack.offsets[1::2]] == [0, 0]


def test_values_struct_cannot_take_are_converted():
    class DevicePtr:                                   # like cuda.bindings' CUdeviceptr
        def __int__(self):
            return 0x1234

    class Desc(C.Structure):
        _fields_ = [("v", C.c_uint64 * 16)]

    kinds = (C.c_uint64, C.c_int32, C.c_float, C.c_bool, Desc)
    desc = Desc((C.c_uint64 * 16)(*range(16)))
    pack = driver.ParamPack(kinds)
    pack.pack([DevicePtr(), np.int32(7), C.c_float(1.5), np.True_, desc])
    assert read_params(pack) == [struct.pack("<Q", 0x1234), struct.pack("<i", 7),
                                 struct.pack("<f", 1.5), b"\x01", bytes(desc)]


@pytest.mark.parametrize("values, message", [
    ([1, "x", 1.0], r"kernel parameter 1 is a c_int, but got str"),
    ([1, 2], r"kernel takes 3 parameters, got 2"),
    ([1, 2, 3.0, 4], r"kernel takes 3 parameters, got 4"),
    ([-1, 2, 3.0], r"kernel parameter 0 is a c_ulong"),
])
def test_bad_values_name_the_parameter(values, message):
    pack = driver.ParamPack((C.c_uint64, C.c_int32, C.c_float))
    with pytest.raises(moye.MoyeError, match=message):
        pack.pack(values)


def test_a_short_struct_is_refused():
    with pytest.raises(moye.MoyeError, match="parameter 0 is a 128-byte struct, but got 100"):
        driver.ParamPack((DESC,)).pack([b"\0" * 100])


def test_unknown_kinds_are_refused():
    with pytest.raises(moye.MoyeError, match="kernel parameter 1: cannot pass"):
        driver.ParamPack((C.c_int32, int))


def test_launch_arguments_in_every_form():
    desc = bytes(range(128))
    kinds, values = driver._split([(C.c_uint64, 5), C.c_int32(-3), desc,
                                   DESC.from_buffer_copy(desc), (C.c_float, 0.5)])
    assert kinds == (C.c_uint64, C.c_int32, DESC, DESC, C.c_float)
    assert values == [5, -3, desc, desc, 0.5]
    with pytest.raises(moye.MoyeError, match="kernel argument 0: expected a"):
        driver._split([7])


def test_pack_holders():
    params, holders = driver.pack((C.c_uint64, C.c_float, DESC), [9, 0.25, bytes(128)])
    holders[1].value = 2.0
    assert C.c_float.from_address(params[1]).value == 2.0
    assert C.c_uint64.from_address(params[0]).value == 9


class CountingDriver:
    """cuda.bindings' driver as device_count sees it: cuInit's error (or an
    exception: no libcuda.so), then cuDeviceGetCount's (error, count)."""

    def __init__(self, init=0, count=(0, 2)):
        self.init, self.count = init, count

    def cuInit(self, flags):
        if isinstance(self.init, Exception):
            raise self.init
        return (self.init,)

    def cuDeviceGetCount(self):
        return self.count


@pytest.mark.parametrize("cu, expected", [
    (CountingDriver(), 2),
    (CountingDriver(count=(0, 1)), 1),
    (CountingDriver(init=100), 0),                                  # CUDA_ERROR_NO_DEVICE
    (CountingDriver(init=RuntimeError("libcuda.so not found")), 0),   # no driver at all
    (CountingDriver(count=(3, 7)), 0),                              # cuDeviceGetCount failed
], ids=["two GPUs", "one GPU", "cuInit fails", "no libcuda", "count fails"])
def test_device_count_is_the_drivers_answer_or_0(monkeypatch, cu, expected):
    monkeypatch.setitem(driver._state, "cu", cu)
    assert driver.device_count() == expected


def test_device_count_without_cuda_bindings_is_0(monkeypatch):
    monkeypatch.delitem(driver._state, "cu", raising=False)
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)        # import fails
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", None)
    assert driver.device_count() == 0


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="a GPU driver is present")
def test_device_count_is_0_on_a_machine_without_a_gpu():
    assert driver.device_count() == 0


@pytest.mark.skipif(driver.device_count() > 0, reason="a GPU is present")
def test_no_gpu_is_a_cuda_error():
    with pytest.raises(moye.CudaError):
        driver.device_arch()


# -- on a GPU ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sm80():
    m = nvrtc.compile_cuda(SM80, SM80_KERNELS, driver.device_arch())
    module = driver.load_module(m.cubin)
    functions = {n.split("<")[0]: module.get_function(m.lowered_names[n]) for n in SM80_KERNELS}
    return SimpleNamespace(cubin=m.cubin, **functions)


@pytest.fixture
def dev():
    """Device buffers freed after the test: put(host), empty(like, poison), get(ptr, like)."""
    ptrs = []

    def put(host):
        host = np.ascontiguousarray(host)
        p = driver.alloc(max(host.nbytes, 1))
        driver.copy_to_device(p, host)
        ptrs.append(p)
        return p

    def empty(like, poison=0xFF):                     # 0xFF..: NaN for floats
        p = driver.alloc(max(like.nbytes, 1))
        driver.memset_d8(p, poison, like.nbytes)
        ptrs.append(p)
        return p

    def get(ptr, like):
        driver.synchronize()
        out = np.empty_like(like)
        driver.copy_to_host(out, ptr)
        return out

    yield SimpleNamespace(put=put, empty=empty, get=get)
    driver.synchronize()
    for p in ptrs:
        driver.free(p)


def check_echo(dev, out, values):
    raw = dev.get(out, np.zeros(256, np.uint8)).tobytes()
    got = [struct.unpack_from(f, raw, o)[0] for f, o in
           [("<b", 0), ("<h", 2), ("<i", 4), ("<q", 8), ("<f", 16), ("<d", 24), ("<Q", 32)]]
    assert got == values[1:8]
    assert raw[64:192] == values[8] and raw[192] == values[9]


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["pairs", "ctypes values", "launcher", "pack"])
def test_every_parameter_kind_arrives(sm80, dev, how):
    out = dev.empty(np.zeros(256, np.uint8), poison=0xAB)
    values = echo_values(out)
    if how == "pairs":
        driver.launch(sm80.echo_kernel, 1, 1, list(zip(ECHO_KINDS, values)))
    elif how == "ctypes values":
        args = [k(v) for k, v in zip(ECHO_KINDS, values) if k is not DESC]
        args.insert(8, values[8])                      # bytes: a struct by value
        driver.launch(sm80.echo_kernel, (1,), (1, 1), args)
    elif how == "launcher":
        launcher = driver.Launcher(sm80.echo_kernel, ECHO_KINDS)
        # a first call with other scalars: the second call's values must win
        other = values[:1] + [v if isinstance(v, bytes) else type(v)(0) for v in values[1:]]
        launcher((1, 1, 1), (1, 1, 1), other)
        launcher((1, 1, 1), (1, 1, 1), values)
    else:
        params, holders = driver.pack(ECHO_KINDS, values)
        err = driver.raw_launch()(sm80.echo_kernel.address, 1, 1, 1, 1, 1, 1, 0, 0,
                                  C.addressof(params), None)
        assert err == 0
    check_echo(dev, out, values)


@pytest.mark.gpu
@pytest.mark.parametrize("stream", ["0", "None", "CUstream", "int handle"])
def test_a_large_array_on_any_stream(sm80, dev, stream):
    from cuda.bindings import driver as cu
    rng = np.random.default_rng(0)
    n = (1 << 22) + 3
    x = rng.standard_normal(n, dtype=np.float32)
    src, dst = dev.put(x), dev.empty(x)
    handle = None
    if stream in ("CUstream", "int handle"):
        handle = driver._check(cu.cuStreamCreate(0), "cuStreamCreate")
    s = {"0": 0, "None": None, "CUstream": handle, "int handle": int(handle or 0)}[stream]
    driver.launch(sm80.scale_kernel, 264, 256,
                  [(C.c_uint64, dst), (C.c_uint64, src), (C.c_int32, n), (C.c_float, -1.75)],
                  stream=s)
    if handle is not None:
        driver._check(cu.cuStreamSynchronize(handle), "cuStreamSynchronize")
        driver._check(cu.cuStreamDestroy(handle), "cuStreamDestroy")
    np.testing.assert_array_equal(dev.get(dst, x), x * np.float32(-1.75))


@pytest.mark.gpu
def test_half_bfloat16_and_fp8_conversions(sm80, dev):
    import ml_dtypes
    rng = np.random.default_rng(2)
    n = 5000
    x = (rng.standard_normal(n) * 20).astype(np.float32)
    x[:4] = [0.0, -0.0, 1e-9, 300.0]
    h, b, f8 = np.zeros(n, np.uint16), np.zeros(n, np.uint16), np.zeros(n, np.uint8)
    ph, pb, pf = dev.empty(h), dev.empty(b), dev.empty(f8)
    driver.launch(sm80.convert_kernel, (n + 127) // 128, 128,
                  [(C.c_uint64, dev.put(x)), (C.c_uint64, ph), (C.c_uint64, pb),
                   (C.c_uint64, pf), (C.c_int32, n)])
    np.testing.assert_array_equal(dev.get(ph, h), x.astype(np.float16).view(np.uint16))
    np.testing.assert_array_equal(dev.get(pb, b), x.astype(ml_dtypes.bfloat16).view(np.uint16))
    np.testing.assert_array_equal(dev.get(pf, f8),
                                  x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8))


@pytest.mark.gpu
def test_cp_async_and_mma_sync(sm80, dev):
    rng = np.random.default_rng(3)
    A = rng.standard_normal((16, 16)).astype(np.float16)
    B = rng.standard_normal((16, 8)).astype(np.float16)
    D = np.zeros((16, 8), np.float32)
    pd = dev.empty(D)
    driver.launch(sm80.mma_kernel, 1, 32, [(C.c_uint64, dev.put(A)),
                                           (C.c_uint64, dev.put(B.T.copy())), (C.c_uint64, pd)])
    ref = A.astype(np.float64) @ B.astype(np.float64)
    np.testing.assert_allclose(dev.get(pd, D), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_function_attributes(sm80):
    assert sm80.mma_kernel.attribute("num_regs") > 0
    assert sm80.mma_kernel.attribute("local_size_bytes") == 0           # no spills
    assert sm80.mma_kernel.attribute("shared_size_bytes") == 16 * 16 * 2 + 8 * 16 * 2


@pytest.mark.gpu
def test_more_than_48k_of_dynamic_shared_memory(sm80, dev):
    nbytes = driver.max_shared_memory_per_block_optin()
    assert nbytes > 48 * 1024
    n = nbytes // 4
    x = np.random.default_rng(4).standard_normal(n, dtype=np.float32)
    src, dst = dev.put(x), dev.empty(x)
    fresh = driver.load_module(sm80.cubin).get_function("reverse_kernel")
    args = [(C.c_uint64, dst), (C.c_uint64, src), (C.c_int32, n)]
    with pytest.raises(moye.CudaError, match="set_max_dynamic_shared_memory") as e:
        driver.launch(fresh, 1, 1024, args, shared_mem=n * 4)
    assert e.value.name == "CUDA_ERROR_INVALID_VALUE"
    fresh.set_max_dynamic_shared_memory(n * 4)
    assert fresh.attribute("max_dynamic_shared_size_bytes") == n * 4
    driver.launch(fresh, 1, 1024, args, shared_mem=n * 4)
    np.testing.assert_array_equal(dev.get(dst, x), x[::-1])


@pytest.mark.gpu
def test_launch_errors_carry_the_cuda_error_name(sm80):
    with pytest.raises(moye.CudaError, match=r"(?s)CUDA_ERROR_INVALID_VALUE in cuLaunchKernel of "
                                             r"'scale_kernel'.*at most 1024 threads"):
        driver.launch(sm80.scale_kernel, 1, (2048, 1, 1),
                      [(C.c_uint64, 0), (C.c_uint64, 0), (C.c_int32, 0), (C.c_float, 1.0)])


@pytest.mark.gpu
def test_launch_from_another_thread(sm80, dev):
    x = np.arange(1000, dtype=np.float32)
    src, dst = dev.put(x), dev.empty(x)
    launcher = driver.Launcher(sm80.scale_kernel, (C.c_uint64, C.c_uint64, C.c_int32, C.c_float))
    errors = []

    def work():
        try:
            launcher(4, 256, (dst, src, 1000, 2.0))
            driver.synchronize()
        except Exception as e:                        # reported below
            errors.append(e)
    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not errors
    np.testing.assert_array_equal(dev.get(dst, x), x * 2)


@pytest.mark.gpu
def test_device_arch():
    major, minor = driver.compute_capability()
    arch = driver.device_arch()
    assert arch.startswith(f"sm_{major}{minor}")
    assert arch.endswith("a") == ((major, minor) in ((9, 0), (10, 0)))
    assert driver.driver_version() >= (12, 0)


needs_sm90 = pytest.mark.skipif(driver.device_count() == 0 or driver.compute_capability()[0] < 9,
                                reason="needs sm_90 or later")


@pytest.mark.gpu
@needs_sm90
def test_cluster_launch(dev):
    m = nvrtc.compile_cuda(CLUSTER, "cluster_kernel", driver.device_arch())
    fn = driver.load_module(m.cubin).get_function("cluster_kernel")
    out = np.zeros(8, np.int32)
    p = dev.empty(out)
    for cluster, expect in [(None, [100] * 8), ((2, 1, 1), [200, 201] * 4),
                            ((4, 1, 1), [400, 401, 402, 403] * 2)]:
        driver.launch(fn, 8, 32, [(C.c_uint64, p)], cluster=cluster)
        np.testing.assert_array_equal(dev.get(p, out), expect)
    with pytest.raises(moye.CudaError, match="cuLaunchKernelEx"):
        driver.launch(fn, 6, 32, [(C.c_uint64, p)], cluster=(4, 1, 1))


@pytest.mark.gpu
@pytest.mark.skipif(driver.device_count() == 0 or driver.device_arch() != "sm_90a",
                    reason="needs sm_90a")
def test_tma_descriptor_passed_by_value(dev):
    from cuda.bindings import driver as cu
    m = nvrtc.compile_cuda(SM90A, SM90A_KERNELS, "sm_90a")
    fn = driver.load_module(m.cubin).get_function("tma_kernel")
    rows, cols = 64, 96
    G = np.random.default_rng(5).standard_normal((rows, cols), dtype=np.float32)
    g = dev.put(G)
    tmap = driver._check(cu.cuTensorMapEncodeTiled(
        cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, g,
        [cu.cuuint64_t(cols), cu.cuuint64_t(rows)], [cu.cuuint64_t(cols * 4)],
        [cu.cuuint32_t(32), cu.cuuint32_t(32)], [cu.cuuint32_t(1), cu.cuuint32_t(1)],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeTiled")
    desc = C.string_at(tmap.getPtr(), 128)
    tile = np.zeros((32, 32), np.float32)
    out = dev.empty(tile)
    driver.launch(fn, 1, 128, [desc, (C.c_uint64, out), (C.c_int32, 64), (C.c_int32, 32)])
    np.testing.assert_array_equal(dev.get(out, tile), G[32:64, 64:96])
