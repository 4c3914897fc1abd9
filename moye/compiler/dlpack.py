"""Arrays from any DLPack producer: the DLTensor behind `obj.__dlpack__()`.

A producer's `__dlpack__()` returns a PyCapsule named "dltensor" holding a
DLManagedTensor (or "dltensor_versioned", a DLManagedTensorVersioned). moye
reads the DLTensor in it (address, device, element type, shape, strides)
and does not consume the capsule: it stays named as it was, and when it is
collected the producer's own destructor releases the tensor. The capsule
and the producer must stay alive while the values are used (a launch keeps
them in its ArrayArg).
"""
import ctypes

from .. import types as T
from ..errors import MoyeError, MoyeTypeError

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13

DEVICE_NAMES = {1: "kDLCPU", 2: "kDLCUDA", 3: "kDLCUDAHost", 4: "kDLOpenCL", 7: "kDLVulkan",
                8: "kDLMetal", 9: "kDLVPI", 10: "kDLROCM", 11: "kDLROCMHost", 12: "kDLExtDev",
                13: "kDLCUDAManaged", 14: "kDLOneAPI", 15: "kDLWebGPU", 16: "kDLHexagon",
                17: "kDLMAIA", 18: "kDLTrn"}

# (type code, bits) -> element type; lanes must be 1
ELEMENT_TYPES = {(0, 8): T.Int8, (0, 16): T.Int16, (0, 32): T.Int32, (0, 64): T.Int64,
                 (1, 8): T.UInt8, (1, 16): T.UInt16, (1, 32): T.UInt32, (1, 64): T.UInt64,
                 (2, 16): T.Float16, (2, 32): T.Float32, (2, 64): T.Float64,
                 (4, 16): T.BFloat16, (6, 8): T.Bool,
                 (10, 8): T.Float8E4M3, (12, 8): T.Float8E5M2}
CODE_NAMES = {0: "int", 1: "uint", 2: "float", 3: "opaque handle", 4: "bfloat", 5: "complex",
              6: "bool", 7: "float8_e3m4", 8: "float8_e4m3", 9: "float8_e4m3b11fnuz",
              10: "float8_e4m3fn", 11: "float8_e4m3fnuz", 12: "float8_e5m2",
              13: "float8_e5m2fnuz", 14: "float8_e8m0fnu", 15: "float6_e2m3fn",
              16: "float6_e3m2fn", 17: "float4_e2m1fn"}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", DLTensor)]


_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype, _capsule_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_MANAGED = {b"dltensor": DLManagedTensor, b"dltensor_versioned": DLManagedTensorVersioned}


class DLPackView:
    """What a DLPack capsule says of an array: `device_type` (1 CPU, 2
    CUDA, ...), `device_id`, `ptr` (data + byte_offset), `shape`, `strides`
    in elements (compact row-major where the producer gave none), `dtype`
    (a moye element type, or None) and `dtype_text`; `capsule` keeps the
    tensor alive."""

    def __init__(self, capsule):
        if type(capsule).__name__ != "PyCapsule":
            raise MoyeTypeError(f"__dlpack__() returned {type(capsule).__name__} {capsule!r}, "
                                "not a DLPack capsule")
        name = _capsule_name(capsule)
        managed = _MANAGED.get(name)
        if managed is None:
            raise MoyeError(f"__dlpack__() returned a capsule named {name!r}; expected "
                            "'dltensor' or 'dltensor_versioned' (a capsule already used?)")
        t = managed.from_address(_capsule_pointer(capsule, name)).dl_tensor
        self.capsule = capsule
        self.device_type, self.device_id = t.device.device_type, t.device.device_id
        self.ptr = (t.data or 0) + t.byte_offset
        n = t.ndim
        self.shape = tuple(t.shape[i] for i in range(n))
        if n and t.strides:
            self.strides = tuple(t.strides[i] for i in range(n))
        else:
            self.strides = compact_strides(self.shape)
        code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
        self.dtype = ELEMENT_TYPES.get((code, bits)) if lanes == 1 else None
        self.dtype_text = f"{CODE_NAMES.get(code, f'type code {code}')}{bits}" + \
            (f"x{lanes}" if lanes != 1 else "")


def compact_strides(shape):
    """Row-major strides, in elements, of a compact array of `shape`.
        >>> compact_strides((2, 3, 4))
        (12, 4, 1)
    """
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


def device_of(obj):
    """(device type, device id) of a DLPack producer, by `__dlpack_device__`
    where it has one."""
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is not None:
        device = dev()
        try:
            kind, index = device
            return int(kind), int(index)
        except (TypeError, ValueError):
            raise MoyeTypeError(f"__dlpack_device__() returned {device!r}, not (device type, "
                                "device id) such as (2, 0)") from None
    return None


def device_name(kind):
    return DEVICE_NAMES.get(kind, f"device type {kind}")


def view(obj):
    """The DLPackView of `obj.__dlpack__()`."""
    return DLPackView(obj.__dlpack__())
