"""Kernel arguments and the launch fast path, without a GPU.

DLPack producers are read from their capsules (a CUDA one made by hand
here) or, on the CPU, through NumPy. The fast path (dispatch.py) is checked
against a CUDA backend whose compiler and driver are stand-ins: the kernels
are traced for real, `cuLaunchKernel` records the parameter buffer it is
given, and each launch's values are compared with what binding the
arguments gives, while a changed element type, rank, stride, alignment,
index width, int width or static value must select another specialization.
"""
import ctypes
import gc
import threading
import time

import numpy as np
import pytest

import moye
from moye import MoyeError
from moye.errors import LaunchError, MoyeTypeError
from moye.compiler import dlpack
from moye.compiler.arguments import as_array_arg, needs_64bit_indices
from moye.compiler.binder import ArrayParam, array_param, bind_arguments

rng = np.random.default_rng(5)


# -- DLPack ------------------------------------------------------------------------

class DLPackOnly:
    """An array that offers nothing but DLPack (as JAX or TVM arrays do)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class CudaProducer:
    """A hand-made DLPack producer of a CUDA array (no memory behind it):
    each `__dlpack__()` returns a fresh capsule; `released` counts the
    managed tensors whose deleter ran."""

    def __init__(self, ptr, shape, strides=None, code=2, bits=32, lanes=1, device=2,
                 byte_offset=0, versioned=False):
        self.ptr, self.shape, self.strides = ptr, shape, strides
        self.code, self.bits, self.lanes, self.device = code, bits, lanes, device
        self.byte_offset, self.versioned = byte_offset, versioned
        self.released = 0
        self._keep = []
        self._deleter = _DELETER(self._release)

    def _release(self, address):
        self.released += 1

    def __dlpack_device__(self):
        return (self.device, 0)

    def __dlpack__(self, **kwargs):
        n = len(self.shape)
        shape = (ctypes.c_int64 * max(n, 1))(*self.shape)
        strides = (ctypes.c_int64 * max(n, 1))(*(self.strides or [0] * n))
        t = dlpack.DLTensor(self.ptr, dlpack.DLDevice(self.device, 0), n,
                            dlpack.DLDataType(self.code, self.bits, self.lanes),
                            ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)),
                            ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
                            if self.strides is not None else None, self.byte_offset)
        deleter = ctypes.cast(self._deleter, ctypes.c_void_p)
        if self.versioned:
            managed = dlpack.DLManagedTensorVersioned(dlpack.DLPackVersion(1, 0), None,
                                                      deleter, 0, t)
            name = b"dltensor_versioned"
        else:
            managed = dlpack.DLManagedTensor(t, None, deleter)
            name = b"dltensor"
        self._keep.append((shape, strides, managed))
        # the capsule's destructor is the producer's job; here none (the test owns memory)
        return _PyCapsule_New(ctypes.addressof(managed), name, None)


def test_cuda_dlpack_array_fields():
    p = CudaProducer(0x7F00_0000_1000, (4, 6), (1, 4), byte_offset=32)
    arr = as_array_arg(p, "x")
    assert (arr.ptr, arr.shape, arr.strides, arr.dtype, arr.device) == \
        (0x7F00_0000_1020, (4, 6), (1, 4), moye.Float32, "cuda")
    assert array_param("x", arr) == ArrayParam("x", moye.Float32, 2, 0, (1, 4), True, False,
                                               "cuda")
    assert arr.obj is p and arr.capsule is not None


def test_cuda_dlpack_compact_strides_versioned_and_bf16():
    arr = as_array_arg(CudaProducer(0x1000, (2, 3, 5), None, code=4, bits=16,
                                    versioned=True), "x")
    assert arr.strides == (15, 5, 1) and arr.dtype == moye.BFloat16
    assert array_param("x", arr).unit == 2                     # unit-stride mode


def test_cuda_dlpack_binds_like_the_same_cuda_array_interface():
    class CAI:
        __cuda_array_interface__ = {"shape": (8, 3), "typestr": "<f2", "data": (0x2008, False),
                                    "strides": (2, 16), "version": 3}
    key = bind_arguments(_sig2, set(), (CudaProducer(0x2008, (8, 3), (1, 8), bits=16), 1.0)).key
    assert key == bind_arguments(_sig2, set(), (CAI(), 1.0)).key


def _two(x, a):
    pass


_sig2 = __import__("inspect").signature(_two)


@pytest.mark.parametrize("code, bits, lanes, text", [(5, 64, 1, "complex64"),
                                                     (2, 32, 4, "float32x4"),
                                                     (17, 4, 1, "float4_e2m1fn4")])
def test_dlpack_bad_element_type_names_the_argument(code, bits, lanes, text):
    with pytest.raises(MoyeError, match=f"argument 'src'.*{text}"):
        as_array_arg(CudaProducer(0x1000, (4,), (1,), code=code, bits=bits, lanes=lanes), "src")


def test_dlpack_bad_device_names_the_argument():
    with pytest.raises(MoyeError, match="argument 'dst'.*kDLOpenCL"):
        as_array_arg(CudaProducer(0x1000, (4,), (1,), device=4), "dst")


def test_dlpack_capsule_lives_with_the_argument_and_is_not_consumed():
    p = CudaProducer(0x1000, (4,), (1,))
    arr = as_array_arg(p, "x")
    assert dlpack._capsule_name(arr.capsule) == b"dltensor"   # not renamed "used_dltensor"
    view = dlpack.DLPackView(arr.capsule)                      # still readable
    assert view.ptr == 0x1000


def test_cpu_dlpack_goes_through_numpy():
    a = rng.standard_normal((3, 5)).astype(np.float32)[:, ::2]
    arr = as_array_arg(DLPackOnly(a), "x")
    assert (arr.shape, arr.strides, arr.dtype, arr.device) == ((3, 3), (5, 2), moye.Float32,
                                                               "cpu")
    assert isinstance(arr.obj, np.ndarray) and arr.ptr == a.ctypes.data


@moye.kernel
def axpy(y, x, a, n):
    t = moye.thread_idx.x
    if t < n:
        y[t] = a * x[t] + y[t]


def test_dlpack_arrays_run_on_the_cpu_backend():
    x = rng.standard_normal(32).astype(np.float32)
    y = rng.standard_normal(32).astype(np.float32)
    expect = (np.float32(0.5) * x + y)[:20]
    axpy[1, 32](DLPackOnly(y), DLPackOnly(x), 0.5, 20)
    np.testing.assert_allclose(y[:20], expect, rtol=1e-6)
    axpy[1, 32](DLPackOnly(y), DLPackOnly(x), 0.5, 20)        # a second launch, same path
    np.testing.assert_allclose(y[:20], expect + np.float32(0.5) * x[:20], rtol=1e-6)


def test_needs_64bit_indices():
    assert not needs_64bit_indices((2**16, 2**14), (2**14, 1))
    assert needs_64bit_indices((2**16, 2**15), (2**15, 1))
    assert needs_64bit_indices((2**31,), (0,))                 # an extent alone
    assert not needs_64bit_indices((0, 5), (2**40, 1))         # empty: nothing to reach


# -- the fast path, on a stand-in CUDA backend -------------------------------------------

class Recorder:
    """Stands in for cuda.bindings' driver: cuLaunchKernel decodes the
    parameter buffer with the launched function's parameter types."""

    def __init__(self):
        from cuda.bindings import driver as real
        self.real, self.launches, self.types, self.yield_gil = real, [], {}, False
        self.OK = real.CUresult.CUDA_SUCCESS
        for name in ("CUresult", "CUfunction", "CUstream", "CUlaunchConfig", "CUlaunchAttribute",
                     "CUlaunchAttributeID", "CUtensorMap"):
            setattr(self, name, getattr(real, name))
        self.address_at = 0         # where cuTensorMapReplaceAddress writes the address

    def cuTensorMapReplaceAddress(self, tensor_map, address):  # noqa: N802
        ctypes.c_uint64.from_address(tensor_map.getPtr() + self.address_at).value = address
        return (self.OK,)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):  # noqa: N802
        if self.yield_gil:
            time.sleep(0)           # as the real one releases the GIL before reading params
        types = self.types[int(f)]
        values = []
        for i, t in enumerate(types):
            at = ctypes.c_uint64.from_address(params + 8 * i).value
            value = t.from_address(at)
            values.append(value.raw if hasattr(value, "raw") else value.value)
        self.launches.append({"function": int(f), "grid": (gx, gy, gz), "block": (bx, by, bz),
                              "smem": smem, "stream": stream, "values": values})
        return (self.OK,)

    def cuLaunchKernelEx(self, cfg, f, params, extra):  # noqa: N802
        dim = cfg.attrs[0].value.clusterDim
        self.cuLaunchKernel(f, cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ, cfg.blockDimX,
                            cfg.blockDimY, cfg.blockDimZ, cfg.sharedMemBytes,
                            int(cfg.hStream), params, extra)
        self.launches[-1]["cluster"] = (dim.x, dim.y, dim.z)
        return (self.OK,)


@pytest.fixture
def fake_cuda(monkeypatch):
    """moye's CUDA backend with no compiler and no device: specializations
    are traced, not compiled; launches are recorded."""
    pytest.importorskip("cuda.bindings")
    from moye.backend.cuda import backend as cuda_backend
    from moye.backend.cuda import driver
    rec = Recorder()
    monkeypatch.setitem(driver._state, "cu", rec)
    monkeypatch.delitem(driver._state, "address_leads", raising=False)
    monkeypatch.setattr(cuda_backend, "current_stream_getter", lambda: lambda: 0)
    count = [0]

    def compile_specialization(self, spec, trace, block, arch=None):
        kernel = trace()
        count[0] += 1
        function = driver.Function(rec.CUfunction(0x1000 + count[0]), None, kernel.name)
        types = [p.type for p in kernel.params]
        rec.types[0x1000 + count[0]] = [cuda_backend._ctype(t) for t in types]
        return cuda_backend.CudaExecutable(kernel, None, function, types)

    monkeypatch.setattr(cuda_backend.CudaBackend, "compile_specialization",
                        compile_specialization)
    rec.compiled = count
    return rec


class TorchLike:
    """A CUDA tensor's metadata, read as torch's is."""
    __module__ = "torch"

    def __init__(self, ptr, shape, strides, dtype="float32", cuda=True):
        self.ptr, self.shape, self.strides = ptr, tuple(shape), tuple(strides)
        self.dtype, self.is_cuda = _TorchDtype.of(dtype), cuda

    def data_ptr(self):
        return self.ptr

    def stride(self):
        return self.strides

    @property
    def device(self):
        return type("Device", (), {"type": "cuda" if self.is_cuda else "cpu"})()


class _TorchDtype:
    __module__ = "torch"
    _all = {}

    @classmethod
    def of(cls, name):
        if name not in cls._all:
            cls._all[name] = cls()
            cls._all[name].name = name
        return cls._all[name]

    def __str__(self):
        return "torch." + self.name


class CupyLike:
    """A CuPy array's metadata: data.ptr, strides in bytes, itemsize."""
    __module__ = "cupy"

    def __init__(self, ptr, shape, strides, dtype="float32"):
        self.dtype = np.dtype(dtype)
        self.data = type("MemoryPointer", (), {"ptr": ptr})()
        self.shape, self.itemsize = tuple(shape), self.dtype.itemsize
        self.strides = tuple(d * self.itemsize for d in strides)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.data.ptr, False),
                "strides": self.strides, "version": 3}


def expected(*arrays_and_scalars, units):
    """Parameter values as binding gives them: per array its address,
    extents and strides but the unit-stride mode's; then scalars."""
    out = []
    for a, unit in zip(arrays_and_scalars, units):
        if isinstance(a, (int, float)):
            out.append(a)
            continue
        arr = as_array_arg(a, "?")
        out.append(arr.ptr)
        out += list(arr.shape)
        out += [d for k, d in enumerate(arr.strides) if k != unit]
    return out


@moye.kernel
def copy1(y, x):
    y[0] = x[0]


@moye.kernel
def copy_n(y, x, n):
    y[n] = x[n]


@moye.kernel
def copy_k(y, x, k: moye.Constexpr):
    y[k] = x[k]


@moye.kernel
def scaled(y, x, a=2.0):
    y[0] = a * x[0]


def _fresh(kernel):
    kernel._entries.clear()
    kernel._launches.clear()
    kernel._recent.clear()
    kernel._compiled.clear()
    kernel._traces.clear()


@pytest.mark.parametrize("make", [TorchLike, CupyLike])
def test_fast_launches_refresh_pointers_and_extents(fake_cuda, make):
    _fresh(copy1)
    for i, n in enumerate([1024, 33, 5000]):
        y, x = make(0x10000 * (i + 1), (n,), (1,)), make(0x900000 + 64 * i, (n,), (1,))
        copy1[(n + 127) // 128, 128](y, x)
        rec = fake_cuda.launches[-1]
        assert rec["values"] == [y.data_ptr() if make is TorchLike else y.data.ptr, n,
                                 x.data_ptr() if make is TorchLike else x.data.ptr, n]
        assert rec["grid"] == ((n + 127) // 128, 1, 1) and rec["block"] == (128, 1, 1)
    assert fake_cuda.compiled[0] == 1 and len(fake_cuda.launches) == 3
    # after its first launch, kern[grid, block] is the specialization's launch function
    assert "fallback" in copy1[(33 + 127) // 128, 128].__code__.co_freevars


def test_cluster_launches_take_the_fast_path(fake_cuda):
    """kern[grid, block, cluster] binds its arguments once, like a plain
    launch; then its launch function packs them and calls cuLaunchKernelEx."""
    _fresh(copy1)
    for i, n in enumerate([256, 512]):
        y, x = TorchLike(0x10000 * (i + 1), (n,), (1,)), TorchLike(0x900000, (n,), (1,))
        copy1[n // 128, 128, 2](y, x)
        rec = fake_cuda.launches[-1]
        assert rec["values"] == [y.data_ptr(), n, x.data_ptr(), n]
        assert rec["grid"] == (n // 128, 1, 1) and rec["cluster"] == (2, 1, 1)
    assert "fallback" in copy1[512 // 128, 128, 2].__code__.co_freevars
    copy1[4, 128](y, x)                             # the same specialization, no cluster
    assert "cluster" not in fake_cuda.launches[-1] and fake_cuda.compiled[0] == 1


def test_prepared_launches_reread_only_addresses(fake_cuda):
    """kernel.prepared(config, args): launches with args' values but for the
    arrays' addresses, read again; NOT_MINE where an address's alignment is
    not the specialization's; clusters through cuLaunchKernelEx."""
    from moye.compiler.dispatch import NOT_MINE
    _fresh(copy_n)
    y, x = TorchLike(0x10000, (300,), (1,)), TorchLike(0x900000, (300,), (1,))
    launch = copy_n.prepared((3, 128), (y, x, 7))
    assert fake_cuda.compiled[0] == 1 and not fake_cuda.launches    # compiled, not launched
    assert launch.places == (0, 1)                  # it takes the arrays alone
    for i in range(1, 3):
        y2, x2 = TorchLike(0x20000 * i, (300,), (1,)), TorchLike(0x700000 + 16 * i, (300,), (1,))
        assert launch(y2, x2) is None
        rec = fake_cuda.launches[-1]
        assert rec["values"] == [0x20000 * i, 300, 0x700000 + 16 * i, 300, 7]
        assert rec["grid"] == (3, 1, 1) and rec["block"] == (128, 1, 1) and "cluster" not in rec
    assert len(fake_cuda.launches) == 2
    for y3, x3 in [(TorchLike(0x20004, (300,), (1,)), x), (y, TorchLike(0x700008, (300,), (1,)))]:
        assert launch(y3, x3) is NOT_MINE
    assert len(fake_cuda.launches) == 2
    # made from misaligned arrays: aligned ones are not its
    odd = copy_n.prepared((3, 128), (TorchLike(0x10004, (300,), (1,)), x, 7))
    assert odd(y, x) is NOT_MINE and odd(TorchLike(0x30008, (300,), (1,)), x) is None
    assert fake_cuda.launches[-1]["values"][0] == 0x30008 and fake_cuda.compiled[0] == 2
    clustered = copy_n.prepared((4, 128, 2), (y, x, 5))
    assert clustered(y, x) is None
    assert fake_cuda.launches[-1]["cluster"] == (2, 1, 1)
    assert fake_cuda.launches[-1]["values"] == [0x10000, 300, 0x900000, 300, 5]
    assert copy_n.prepared((3, 128), (y, x, np.int32(9)))(y, x) is None    # NumPy scalars
    assert fake_cuda.launches[-1]["values"] == [0x10000, 300, 0x900000, 300, 9]
    with pytest.raises(LaunchError, match=r"copy_n\[grid, block\]"):
        copy_n.prepared((3,), (y, x, 7))
    with pytest.raises(MoyeTypeError, match="args must be a tuple or list"):
        copy_n.prepared((3, 128), y)
    with pytest.raises(MoyeError, match="argument"):                 # binding's own errors
        copy_n.prepared((3, 128), (y, x))


def test_each_specialization_change_compiles_again(fake_cuda):
    _fresh(copy1)
    launches = fake_cuda.launches
    base = dict(shape=(64, 32), strides=(32, 1))
    cases = [
        ("first", TorchLike(0x1000, **base), TorchLike(0x9000, **base), 1),
        ("same kinds", TorchLike(0x2000, **base), TorchLike(0xA000, **base), 1),
        ("element type", TorchLike(0x2000, **base, dtype="float16"),
         TorchLike(0xA000, **base, dtype="float16"), 2),
        ("unit-stride mode", TorchLike(0x2000, (64, 32), (1, 64)), TorchLike(0xA000, **base), 3),
        ("stride divisibility", TorchLike(0x2000, (64, 32), (33, 1)),
         TorchLike(0xA000, **base), 4),
        ("alignment", TorchLike(0x2004, **base), TorchLike(0xA000, **base), 5),
        ("rank", TorchLike(0x2000, (2048,), (1,)), TorchLike(0xA000, **base), 6),
        ("index width", TorchLike(0x2000, (2**16, 2**15), (2**15, 1)),
         TorchLike(0xA000, **base), 7),
        ("same strides, 32-bit again", TorchLike(0x2000, (4, 2**15), (2**15, 1)),
         TorchLike(0xA000, **base), 7),
        ("back to the first", TorchLike(0x3000, **base), TorchLike(0xB000, **base), 7),
        ("back to 32-bit", TorchLike(0x3000, (64, 64), (64, 1)), TorchLike(0xB000, **base), 7),
    ]
    for what, y, x, compiled in cases:
        copy1[1, 32](y, x)
        assert fake_cuda.compiled[0] == compiled, what
        units = [array_param("y", as_array_arg(y)).unit, array_param("x", as_array_arg(x)).unit]
        assert launches[-1]["values"] == expected(y, x, units=units), what
    wide = [c for c in copy1._compiled if c[0][0].wide]
    assert len(wide) == 1


def test_ints_floats_statics_and_defaults(fake_cuda):
    _fresh(copy_n)
    y, x = TorchLike(0x1000, (8,), (1,)), TorchLike(0x2000, (8,), (1,))
    copy_n[1, 1](y, x, 3)
    copy_n[1, 1](y, x, 5)
    assert fake_cuda.compiled[0] == 1 and fake_cuda.launches[-1]["values"][-1] == 5
    copy_n[1, 1](y, x, 2**40)                                 # Int64 now
    assert fake_cuda.compiled[0] == 2 and fake_cuda.launches[-1]["values"][-1] == 2**40
    copy_n[1, 1](y, x, 7)
    assert fake_cuda.compiled[0] == 2 and fake_cuda.launches[-1]["values"][-1] == 7

    _fresh(copy_k)
    for k in (1, 2, 1, 2):
        copy_k[1, 1](y, x, k)
    assert fake_cuda.compiled[0] == 4                         # k=1 and k=2: two kernels
    assert len(copy_k._compiled) == 2

    _fresh(scaled)
    scaled[1, 1](y, x)
    scaled[1, 1](y, x, 3.0)
    scaled[1, 1](y, x)
    assert [r["values"][-1] for r in fake_cuda.launches[-3:]] == [2.0, 3.0, 2.0]
    assert len(scaled._compiled) == 1


@moye.kernel
def copy_t(y, x, T: moye.Constexpr):
    y[len(T)] = x[0]


def test_static_tuples_on_the_fast_path(fake_cuda):
    """A flat tuple of ints (rows' WORK) is checked by == and its elements'
    types, without static_key; a tuple of other values by its static_key."""
    _fresh(copy_t)
    y, x = TorchLike(0x1000, (8,), (1,)), TorchLike(0x2000, (8,), (1,))
    calls = [((1, 2), 1), ((1, 2), 1), ((1, 3), 2), ((True, 3), 3), ((1, 3), 3), ((1, 2), 3),
             ((1, 2, 2), 4), (((1,), 2), 5), (((1,), 2), 5), ((1.0, 2), 6), ((1, 2.0), 7),
             ((1, 2), 7)]
    for static, compiled in calls:
        copy_t[1, 1](y, x, static)
        assert fake_cuda.compiled[0] == compiled, static
    kinds = sorted(("static_key" in e.source, "tuple(map(type" in e.source)
                   for e in copy_t._entries.values())
    # (1, 2), (1, 3), (True, 3), (1, 2, 2) by ==; ((1,), 2), (1.0, 2), (1, 2.0) by static_key
    assert kinds == [(False, True)] * 4 + [(True, False)] * 3


def test_argument_count_errors_still_name_the_kernel(fake_cuda):
    _fresh(copy1)
    y, x = TorchLike(0x1000, (8,), (1,)), TorchLike(0x2000, (8,), (1,))
    copy1[1, 1](y, x)
    with pytest.raises(MoyeError, match=r"takes 2 arguments \(y, x\), got 3"):
        copy1[1, 1](y, x, x)
    with pytest.raises(MoyeError, match=r"takes 2 arguments \(y, x\), got 1"):
        copy1[1, 1](y)


def test_cpu_tensor_and_other_types_leave_the_fast_path(fake_cuda):
    _fresh(copy1)
    y, x = TorchLike(0x1000, (8,), (1,)), TorchLike(0x2000, (8,), (1,))
    f = copy1[1, 1]                                 # kept before the first launch
    f(y, x)
    f(y, x)
    assert len(fake_cuda.launches) == 2
    cy, cx = CupyLike(0x5000, (8,), (1,)), CupyLike(0x6000, (8,), (1,))
    f(cy, cx)
    copy1[1, 1](y, x)
    copy1[1, 1](cy, cx)
    assert [r["values"][0] for r in fake_cuda.launches] == [0x1000, 0x1000, 0x5000, 0x1000,
                                                           0x5000]
    assert fake_cuda.compiled[0] == 1                # same kinds: one kernel for both
    with pytest.raises(MoyeError, match="argument 'x' is in host memory"):
        copy1[1, 1](y, TorchLike(0x2000, (8,), (1,), cuda=False), backend="cuda")


def test_streams_and_shared_memory(fake_cuda):
    _fresh(copy1)
    y, x = TorchLike(0x1000, (8,), (1,)), TorchLike(0x2000, (8,), (1,))
    copy1[1, 1](y, x)
    copy1[1, 1](y, x, stream=0x77)
    copy1[1, 1](y, x, stream=type("TorchStream", (), {"cuda_stream": 0x88})())
    copy1[1, 1](y, x, smem=256)
    copy1[1, 1](y, x)
    got = [(r["stream"], r["smem"]) for r in fake_cuda.launches]
    assert [int(s or 0) for s, _ in got] == [0, 0x77, 0x88, 0, 0]
    assert [m for _, m in got] == [0, 0, 0, 256, 0]


def test_generic_cuda_array_interface_and_dlpack_take_the_fast_path(fake_cuda):
    _fresh(copy1)

    class CAI:
        def __init__(self, ptr, n):
            self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f4",
                                             "data": (ptr, False), "strides": None,
                                             "version": 3}
    copy1[1, 1](CAI(0x1000, 8), CAI(0x2000, 8))
    copy1[1, 1](CAI(0x3000, 9), CAI(0x4000, 9))
    p, q = CudaProducer(0x5000, (10,), (1,)), CudaProducer(0x6000, (10,), None)
    copy1[1, 1](p, q)
    copy1[1, 1](p, q)
    assert [r["values"] for r in fake_cuda.launches] == [
        [0x1000, 8, 0x2000, 8], [0x3000, 9, 0x4000, 9], [0x5000, 10, 0x6000, 10],
        [0x5000, 10, 0x6000, 10]]
    assert fake_cuda.compiled[0] == 1
    gc.collect()


def test_launch_buffers_are_per_call(fake_cuda):
    """cuLaunchKernel releases the GIL: two threads must not share a buffer."""
    _fresh(copy1)
    copy1[1, 1](TorchLike(0, (8,), (1,)), TorchLike(0, (8,), (1,)))
    fake_cuda.yield_gil = True

    def work(base):
        for i in range(300):
            copy1[1, 1](TorchLike(base + 16 * i, (8,), (1,)), TorchLike(base + 16 * i, (i,), (1,)))
    threads = [threading.Thread(target=work, args=(b,)) for b in (0x100000, 0x200000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sent = {(b + 16 * i, b + 16 * i, i) for b in (0x100000, 0x200000) for i in range(300)}
    got = [(r["values"][0], r["values"][2], r["values"][3]) for r in fake_cuda.launches[1:]]
    assert len(got) == 600 and set(got) == sent


@moye.kernel
def tma_kernel(load, store, n):
    smem = moye.shared_array(load.dtype, load.smem_layout, align=1024)
    bar = moye.mbarrier()
    moye.mbarrier_init(bar, 1)
    moye.mbarrier_arrive_expect_tx(bar, load.bytes)
    moye.tma_load(load, smem, (n, 0), bar)
    moye.mbarrier_wait(bar, 0)
    moye.tma_store(store, (n, 0), smem)


def test_tma_copies_take_the_fast_path(fake_cuda):
    """A TMACopy's tensor map (here a stand-in: no driver to encode it) is a
    128-byte parameter; new copies of the same kind reuse the launch function."""
    _fresh(tma_kernel)
    tile = moye.composition(moye.Swizzle(3, 3, 3), moye.Layout((8, 64), (64, 1)))
    for i in range(3):
        a = TorchLike(0x10000 * (i + 1), (100, 64), (64, 1), "float16")
        b = TorchLike(0x90000 * (i + 1), (100, 64), (64, 1), "float16")
        load, store = moye.make_tma_copy(moye.TMA_LOAD, a, tile), \
            moye.make_tma_copy(moye.TMA_STORE, b, tile)
        load._cuda_tensor_map = bytes(range(1 + i, 129 + i))
        store._cuda_tensor_map = bytes(range(2 + i, 130 + i))
        tma_kernel[13, 32](load, store, 8 * i)
        assert fake_cuda.launches[-1]["values"] == [load._cuda_tensor_map,
                                                    store._cuda_tensor_map, 8 * i]
    assert fake_cuda.compiled[0] == 1 and len(fake_cuda.launches) == 3
    assert "fallback" in tma_kernel[13, 32].__code__.co_freevars
    plain = moye.Layout((8, 64), (64, 1))            # another tile: another specialization
    other = moye.make_tma_copy(moye.TMA_LOAD, a, plain)
    other_store = moye.make_tma_copy(moye.TMA_STORE, b, plain)
    other._cuda_tensor_map = other_store._cuda_tensor_map = bytes(range(5, 133))
    tma_kernel[13, 32](other, other_store, 0)
    assert fake_cuda.compiled[0] == 2
    assert fake_cuda.launches[-1]["values"][0] == other._cuda_tensor_map


def _leading_map(copy, seed):
    """A stand-in tensor map of `copy` holding its address in its first 8
    bytes, as the driver's do."""
    copy._cuda_tensor_map = copy.args.global_address.to_bytes(8, "little") + \
        bytes((seed + k) % 256 for k in range(120))
    return copy._cuda_tensor_map


@pytest.mark.parametrize("driver_writes_at", [0, 8])
def test_prepared_launches_move_tensor_maps(fake_cuda, driver_writes_at):
    """kernel.prepared with TMA copies takes, in their places, the arrays at
    their new maps' addresses: the recorded maps moved there (written in
    their first 8 bytes where the driver's cuTensorMapReplaceAddress does
    the same, else by the driver); a misaligned address is NOT_MINE."""
    from moye.compiler.dispatch import NOT_MINE
    fake_cuda.address_at = driver_writes_at
    _fresh(tma_kernel)
    tile = moye.composition(moye.Swizzle(3, 3, 3), moye.Layout((8, 64), (64, 1)))
    a = TorchLike(0x10000, (100, 64), (64, 1), "float16")
    b = TorchLike(0x90000, (100, 64), (64, 1), "float16")
    load, store = moye.make_tma_copy(moye.TMA_LOAD, a, tile), \
        moye.make_tma_copy(moye.TMA_STORE, b, tile)
    load_map, store_map = _leading_map(load, 1), _leading_map(store, 7)
    launch = tma_kernel.prepared((13, 32), (load, store, 8))
    assert not fake_cuda.launches
    for new_a, new_b in [(0x40000, 0x70010), (0x10000, 0x90000)]:
        assert launch(TorchLike(new_a, (100, 64), (64, 1), "float16"),
                      TorchLike(new_b, (100, 64), (64, 1), "float16")) is None
        moved = [m[:driver_writes_at] + new.to_bytes(8, "little") + m[driver_writes_at + 8:]
                 for m, new in [(load_map, new_a), (store_map, new_b)]]
        assert fake_cuda.launches[-1]["values"] == moved + [8]
        assert fake_cuda.launches[-1]["grid"] == (13, 1, 1)
    odd = TorchLike(0x40008, (100, 64), (64, 1), "float16")
    assert launch(odd, b) is NOT_MINE and launch(a, odd) is NOT_MINE
    assert len(fake_cuda.launches) == 2


# -- static values are keyed exactly ------------------------------------------------------

@moye.kernel
def times_c(y, x, c: moye.Constexpr):
    y[0] = x[0] * c


@moye.kernel
def pick(y, table: moye.Constexpr, i: moye.Constexpr):
    y[0] = table[i]


def test_constexpr_arrays_differing_in_one_element_are_two_kernels():
    """NumPy abbreviates long arrays in repr(): the key reads their bytes."""
    _fresh(pick)
    a = rng.standard_normal(2000).astype(np.float32)
    b = a.copy()
    b[1234] += 1
    y = np.full(1, np.nan, np.float32)
    pick[1, 1](y, a, 1234)
    assert y[0] == a[1234]
    pick[1, 1](y, b, 1234)
    assert y[0] == b[1234]
    pick[1, 1](y, a, 1234)
    assert y[0] == a[1234]
    assert len(pick._compiled) == 2
    a[1234] = 7.5                     # changed in place: another value, another kernel
    pick[1, 1](y, a, 1234)
    assert y[0] == 7.5 and len(pick._compiled) == 3


def test_zero_and_negative_zero_are_two_kernels_on_the_cpu():
    _fresh(times_c)
    x = np.ones(1, np.float32)
    for c in (0.0, -0.0, 0.0, -0.0):
        y = np.full(1, np.nan, np.float32)
        times_c[1, 1](y, x, c)
        assert y[0] == 0 and np.signbit(y[0]) == np.signbit(c)
    assert len(times_c._compiled) == 2


@moye.kernel
def times_pair(y, x, c: moye.Constexpr):
    y[0] = x[0] * c[0] + c[1]


@pytest.mark.parametrize("kernel, values", [
    (times_c, (0.0, -0.0)), (times_c, (0.1, 0.1000000000000001)), (times_c, (1, 1.0, True)),
    (times_pair, ((1, 2.0), (1, 2), (True, 2.0), [1, 2.0], (1, -0.0), (1, 0.0))),
    (times_c, (moye.Constexpr(0.0), moye.Constexpr(-0.0), moye.Constexpr(np.float32(0.0))))])
def test_statics_that_trace_differently_never_share_a_kernel(fake_cuda, kernel, values):
    """Each value gets its own specialization, by binding and on the fast
    path (launched twice in turn: the second round compiles nothing and
    launches the same functions)."""
    _fresh(kernel)
    y, x = TorchLike(0x1000, (8,), (1,)), TorchLike(0x2000, (8,), (1,))
    functions = []
    for _ in range(2):
        for v in values:
            kernel[1, 1](y, x, v)
            functions.append(fake_cuda.launches[-1]["function"])
    n = len(values)
    assert len(set(functions)) == n and functions[:n] == functions[n:]
    assert fake_cuda.compiled[0] == n
    keys = {bind_arguments(kernel.signature, kernel.constexpr_names, (y, x, v)).key
            for v in values}
    assert len(keys) == n


def test_fast_path_keeps_zero_and_negative_zero_apart(fake_cuda):
    _fresh(times_c)
    y, x = TorchLike(0x1000, (8,), (1,)), TorchLike(0x2000, (8,), (1,))
    for c in (0.0, -0.0, 0.0, -0.0, -0.0):
        times_c[1, 1](y, x, c)
    f = [r["function"] for r in fake_cuda.launches]
    assert f[0] == f[2] and f[1] == f[3] == f[4] and f[0] != f[1]
    assert fake_cuda.compiled[0] == 2


@moye.kernel
def sum_into_scalar(out, x):
    moye.atomic_add(out, 0, x[moye.thread_idx.x])


def test_a_zero_dimensional_array_is_one_element_at_zero():
    """out[0] of a 0-d array is its element; another coordinate is outside
    it (tests/hostile/test_cpu_backend.py), not folded onto it."""
    x = np.random.default_rng(5).standard_normal(8).astype(np.float32)
    out = np.zeros((), np.float32)
    sum_into_scalar[1, 8](out, x)
    np.testing.assert_allclose(out, x.astype(np.float64).sum(), rtol=1e-6)
