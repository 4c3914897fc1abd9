"""Element types: what one element of an array is, on the host and in CUDA.

Each type knows its bit width, the NumPy dtype that stores it on the host
(``ml_dtypes`` for bf16 and fp8; TF32 is stored as float32; UInt128 is an
opaque 16-byte vector) and its CUDA C++ spelling.

    >>> Float16.bits, Float16.numpy, BFloat16.cuda
    (16, dtype('float16'), '__nv_bfloat16')
    >>> as_element_type("float32"), as_element_type(np.int8)
    (Float32, Int8)
"""
import ml_dtypes
import numpy as np

from .errors import MoyeTypeError


class ElementType:
    """An element type (MoYe/CuTe: the `T` of an array or atom)."""
    __slots__ = ("name", "bits", "numpy", "cuda", "kind")

    def __init__(self, name, bits, numpy, cuda, kind):
        self.name, self.bits, self.numpy, self.cuda, self.kind = \
            name, bits, None if numpy is None else np.dtype(numpy), cuda, kind

    @property
    def bytes(self):
        return self.bits // 8

    @property
    def is_float(self):
        return self.kind == "float"

    @property
    def is_integer(self):
        return self.kind in ("int", "uint")

    def __call__(self, value):
        """`value` converted to this type, as a NumPy scalar."""
        if self.numpy is None or self.kind == "opaque":
            raise MoyeTypeError(f"{self.name} has no scalar values on the host")
        try:
            return self.numpy.type(value)
        except (TypeError, ValueError, OverflowError) as e:
            raise MoyeTypeError(f"{self.name}({value!r}): {e}") from None

    def __repr__(self):
        return self.name

    def __reduce__(self):
        return (as_element_type, (self.name,))


def _t(name, bits, numpy, cuda, kind):
    return ElementType(name, bits, numpy, cuda, kind)


Bool = _t("Bool", 8, np.bool_, "bool", "bool")
Float16 = _t("Float16", 16, np.float16, "half", "float")
BFloat16 = _t("BFloat16", 16, ml_dtypes.bfloat16, "__nv_bfloat16", "float")
TFloat32 = _t("TFloat32", 32, np.float32, "float", "float")
Float32 = _t("Float32", 32, np.float32, "float", "float")
Float64 = _t("Float64", 64, np.float64, "double", "float")
Float8E4M3 = _t("Float8E4M3", 8, ml_dtypes.float8_e4m3fn, "__nv_fp8_e4m3", "float")
Float8E5M2 = _t("Float8E5M2", 8, ml_dtypes.float8_e5m2, "__nv_fp8_e5m2", "float")
Int4 = _t("Int4", 4, ml_dtypes.int4, "cutlass::int4b_t", "int")
UInt4 = _t("UInt4", 4, ml_dtypes.uint4, "cutlass::uint4b_t", "uint")
UInt1 = _t("UInt1", 1, ml_dtypes.uint1, "cutlass::uint1b_t", "uint")
Int8 = _t("Int8", 8, np.int8, "int8_t", "int")
Int16 = _t("Int16", 16, np.int16, "int16_t", "int")
Int32 = _t("Int32", 32, np.int32, "int32_t", "int")
Int64 = _t("Int64", 64, np.int64, "int64_t", "int")
UInt8 = _t("UInt8", 8, np.uint8, "uint8_t", "uint")
UInt16 = _t("UInt16", 16, np.uint16, "uint16_t", "uint")
UInt32 = _t("UInt32", 32, np.uint32, "uint32_t", "uint")
UInt64 = _t("UInt64", 64, np.uint64, "uint64_t", "uint")
UInt128 = _t("UInt128", 128, np.dtype((np.void, 16)), "uint4", "opaque")

ALL_TYPES = (Bool, Float16, BFloat16, TFloat32, Float32, Float64, Float8E4M3, Float8E5M2,
             Int4, UInt4, UInt1, Int8, Int16, Int32, Int64, UInt8, UInt16, UInt32, UInt64,
             UInt128)
_BY_NAME = {t.name.lower(): t for t in ALL_TYPES}
_BY_NAME.update({"half": Float16, "float": Float32, "double": Float64, "bf16": BFloat16,
                 "fp16": Float16, "tf32": TFloat32, "fp32": Float32, "fp64": Float64,
                 "float8_e4m3fn": Float8E4M3, "float8_e5m2": Float8E5M2, "bool_": Bool,
                 "b1": UInt1})
# The storage dtype picks the canonical type (float32 means Float32, not TFloat32).
_BY_DTYPE = {}
for _type in reversed(ALL_TYPES):
    if _type not in (TFloat32, UInt128):
        _BY_DTYPE[_type.numpy] = _type


__all__ = ["ElementType", "as_element_type", "uint_of_bits"] + [t.name for t in ALL_TYPES]


def as_element_type(x):
    """The ElementType for `x`: an ElementType, a NumPy dtype or scalar type,
    a name ("float16", "bf16"), a torch dtype, or Python's float/int/bool.
        >>> as_element_type(float), as_element_type("bf16")
        (Float64, BFloat16)
    """
    if isinstance(x, ElementType):
        return x
    if x is float:
        return Float64
    if x is bool:
        return Bool
    if x is int:
        return Int64
    if isinstance(x, str):
        t = _BY_NAME.get(x.lower().removeprefix("torch."))
        if t is None:
            raise MoyeTypeError(f"unknown element type name {x!r}; the names are "
                                + ", ".join(sorted(_BY_NAME)))
        return t
    if type(x).__module__ == "torch" or type(x).__name__ == "dtype" and "torch" in str(x):
        return as_element_type(str(x))
    try:
        dt = np.dtype(x)
    except (TypeError, ValueError):
        raise MoyeTypeError(f"cannot use {x!r} as an element type: give an ElementType "
                            "(moye.Float32, ...), a name ('float16'), a NumPy or torch "
                            "dtype") from None
    t = _BY_DTYPE.get(dt)
    if t is None:
        raise MoyeTypeError(f"no moye element type stores as the NumPy dtype {dt} "
                            "(complex, object, string and datetime arrays have none)")
    return t


def uint_of_bits(bits):
    """The unsigned integer type of `bits` bits (8 to 128): vectors for copies.
        >>> uint_of_bits(128)
        UInt128
    """
    for t in (UInt8, UInt16, UInt32, UInt64, UInt128):
        if t.bits == bits:
            return t
    raise MoyeTypeError(f"no unsigned integer type has {bits} bits (8, 16, 32, 64 or 128)")
