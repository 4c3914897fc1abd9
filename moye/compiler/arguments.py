"""A kernel call's arguments as moye reads them: arrays (ArrayArg: address,
shape, element strides, element type, device), static values and their
exact keys. The binder (binder.py) turns them into parameter records, the
specialization key and the launch's values.

Arrays come from torch tensors, anything with `__cuda_array_interface__`
(CuPy, Numba, ...), anything with DLPack (`__dlpack__`; a CPU one through
NumPy), and NumPy arrays (for the CPU backend).
"""
import numpy as np

from .. import types as T
from ..atom.copy import CopyAtom, CopyOp
from ..atom.mma import MMAAtom, MMAOp
from ..errors import LaunchError, MoyeError, MoyeTypeError
from ..layout import ComposedLayout, Layout, Swizzle
from ..layout.scalar import is_int
from ..tiled.copy import TiledCopy
from ..tiled.mma import TiledMMA
from . import dlpack
from .identity import content_key

INDEX_LIMIT = 2**31            # extents and spans from here on need 64-bit indices


class ArrayArg:
    """An array argument: where it is and how it is laid out. `obj` is what
    keeps the memory alive (for the CPU backend, something NumPy can view)."""

    def __init__(self, obj, ptr, shape, strides, dtype, device):
        self.obj, self.ptr, self.shape, self.strides = obj, ptr, shape, strides
        self.dtype, self.device = dtype, device


class Constexpr:
    """Marks a kernel argument (or a parameter annotation) as compile-time:
    its value is baked into the kernel and part of its specialization."""

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return f"Constexpr({self.value!r})"


def needs_64bit_indices(shape, strides):
    """Whether an extent, or the span of elements the array covers, reaches
    2**31 (so its index math needs 64 bits).
        >>> needs_64bit_indices((1024, 1024), (1024, 1)), needs_64bit_indices((2, 8), (2**31, 1))
        (False, True)
    """
    span = 1
    for n, d in zip(shape, strides):
        if n >= INDEX_LIMIT:
            return True
        if n > 1:
            span += (n - 1) * abs(d)
    return span >= INDEX_LIMIT


def _element_type(x, name, what):
    try:
        return T.as_element_type(x)
    except TypeError:
        raise MoyeTypeError(f"argument '{name}': {what} has element type {x}, which moye does not "
                        "support (supported: " + ", ".join(t.name for t in T.ALL_TYPES) + ")"
                        ) from None


def as_array_arg(a, name="?"):
    """An ArrayArg for torch tensors, `__cuda_array_interface__` objects,
    NumPy arrays and DLPack producers; None for anything else. A MoyeError
    naming the argument for an array moye cannot take."""
    t = type(a)
    if t.__module__.startswith("torch") and hasattr(a, "data_ptr"):
        dtype = _element_type(a.dtype, name, "a torch tensor")
        if a.is_cuda:
            device = "cuda"
        elif a.device.type == "cpu":
            device = "cpu"
        else:
            raise LaunchError(f"argument '{name}': a torch tensor on {a.device}; moye takes CUDA "
                            "and CPU tensors")
        return ArrayArg(a, a.data_ptr(), tuple(a.shape), tuple(a.stride()), dtype, device)
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_cuda_array_interface(a, cai, name)
    if isinstance(a, np.ndarray):
        dtype = _element_type(a.dtype, name, "a NumPy array")
        item = a.itemsize
        return ArrayArg(a, a.ctypes.data, a.shape, tuple(s // item for s in a.strides), dtype,
                        "cpu")
    if hasattr(a, "__dlpack__"):
        return _from_dlpack(a, name)
    return None


_CAI_TYPES = {}                 # typestr -> element type


def _from_cuda_array_interface(a, cai, name):
    try:
        typestr, shape, (ptr, _) = cai["typestr"], tuple(cai["shape"]), cai["data"]
        version, strides = cai["version"], cai.get("strides")
    except (KeyError, TypeError, ValueError, AttributeError):
        _bad_interface(cai, name)
    if version not in (0, 1, 2, 3) or cai.get("mask") is not None:
        _bad_interface(cai, name)
    dtype = _CAI_TYPES.get(typestr)
    if dtype is None:
        try:
            numpy_type = np.dtype(typestr) if isinstance(typestr, str) else None
        except (TypeError, ValueError):
            numpy_type = None
        if numpy_type is None:
            raise LaunchError(f"argument '{name}': its __cuda_array_interface__ has typestr "
                              f"{typestr!r}, not a NumPy type string such as '<f4' or '<i8'")
        dtype = _CAI_TYPES[typestr] = _element_type(numpy_type, name,
                                                    "a __cuda_array_interface__ array")
    _check_extents(shape, name, "shape")
    item = dtype.bits // 8
    if strides is None:
        strides = dlpack.compact_strides(shape)
    else:
        strides = tuple(strides)
        _check_extents(strides, name, "strides", len(shape))
        if any(s % item for s in strides):
            raise LaunchError(f"argument '{name}': strides {strides} bytes are not "
                              f"multiples of the {item}-byte element")
        strides = tuple(s // item for s in strides)
    if not (ptr is None or isinstance(ptr, (int, np.integer))):
        raise MoyeTypeError(f"argument '{name}': its __cuda_array_interface__ data is "
                            f"({ptr!r}, ...); the address must be an int")
    if not ptr and 0 not in shape:
        raise LaunchError(f"argument '{name}': its __cuda_array_interface__ gives the null "
                          f"address {ptr!r} for an array of shape {shape}")
    return ArrayArg(a, int(ptr or 0), shape, strides, dtype, "cuda")


def _check_extents(values, name, what, rank=None):
    """`values` must be ints (extents: not negative), `rank` of them if given."""
    if not all(is_int(n) for n in values):
        raise MoyeTypeError(f"argument '{name}': its __cuda_array_interface__ {what} "
                            f"{values} holds a value that is not an int")
    if rank is not None and len(values) != rank:
        raise LaunchError(f"argument '{name}': its __cuda_array_interface__ has {rank} "
                          f"extents but {len(values)} strides {values}")
    if what == "shape" and any(n < 0 for n in values):
        raise LaunchError(f"argument '{name}': its __cuda_array_interface__ shape {values} "
                          "has a negative extent")


def _bad_interface(cai, name):
    """The error of a __cuda_array_interface__ that is not a dict of the
    keys and values the interface defines."""
    if not isinstance(cai, dict):
        why = f"is {type(cai).__name__} {cai!r}, not a dict"
    elif any(k not in cai for k in ("shape", "typestr", "data", "version")):
        missing = [k for k in ("shape", "typestr", "data", "version") if k not in cai]
        why = f"has no {', '.join(map(repr, missing))}"
    elif cai["version"] not in (0, 1, 2, 3):
        why = f"has version {cai['version']!r}"
    elif cai.get("mask") is not None:
        why = "has a mask (masked arrays are not supported)"
    elif not isinstance(cai["shape"], (tuple, list)):
        why = f"has shape {cai['shape']!r}, not a tuple"
    else:
        why = f"has data {cai['data']!r}, not (address, read_only)"
    raise LaunchError(f"argument '{name}': its __cuda_array_interface__ {why}; moye reads a "
                      "dict with 'shape' (a tuple of ints), 'typestr' ('<f4', ...), 'data' "
                      "((address, read_only)), 'strides' (bytes, or None) and 'version' 0-3 "
                      "(the CUDA Array Interface)")


CUDA_DEVICES = (dlpack.KDL_CUDA, dlpack.KDL_CUDA_MANAGED)


def _from_dlpack(a, name):
    """A DLPack producer's array: on a CUDA device read from its capsule,
    on the CPU through np.from_dlpack (the CPU backend runs on NumPy)."""
    try:
        device = dlpack.device_of(a)
    except MoyeTypeError as e:
        raise MoyeTypeError(f"argument '{name}': {e}") from None
    if device is not None and device[0] == dlpack.KDL_CPU:
        try:
            host = np.from_dlpack(a)
        except (BufferError, TypeError, ValueError, RuntimeError) as e:
            raise LaunchError(f"argument '{name}': NumPy cannot take this CPU DLPack array "
                            f"({type(a).__name__}): {e}") from None
        return as_array_arg(host, name)
    if device is not None and device[0] not in CUDA_DEVICES:
        raise LaunchError(f"argument '{name}': a DLPack array on {dlpack.device_name(device[0])}; "
                        "moye takes arrays on kDLCUDA (or kDLCUDAManaged) and kDLCPU")
    try:
        view = dlpack.view(a)
    except MoyeError as e:
        raise type(e)(f"argument '{name}': {e}") from None
    except Exception as e:  # noqa: BLE001 - the producer's own refusal, whatever its class
        raise LaunchError(f"argument '{name}': its __dlpack__() failed "
                          f"({type(e).__name__}: {e})") from None
    if view.device_type not in CUDA_DEVICES:
        raise LaunchError(f"argument '{name}': a DLPack array on "
                        f"{dlpack.device_name(view.device_type)}; moye takes arrays on kDLCUDA "
                        "(or kDLCUDAManaged), and kDLCPU ones with __dlpack_device__")
    if view.dtype is None:
        raise MoyeTypeError(f"argument '{name}': a DLPack array of {view.dtype_text}, which moye "
                            "does not support (supported: int8-64, uint8-64, float16/32/64, "
                            "bfloat16, bool, float8_e4m3fn, float8_e5m2)")
    if any(n < 0 for n in view.shape):
        raise LaunchError(f"argument '{name}': a DLPack array of shape {view.shape}, with a "
                          "negative extent")
    if not view.ptr and 0 not in view.shape:
        raise LaunchError(f"argument '{name}': a DLPack array of shape {view.shape} at the null "
                          "address")
    arr = ArrayArg(a, view.ptr, view.shape, view.strides, view.dtype, "cuda")
    arr.capsule = view.capsule          # the DLManagedTensor stays valid while arr lives
    return arr


# -- static values and scalars -----------------------------------------------------

STATIC_TYPES = (Layout, ComposedLayout, Swizzle, TiledCopy, TiledMMA, CopyAtom, MMAAtom, CopyOp,
                MMAOp, T.ElementType)    # moye's static values (these classes exactly)


BY_VALUE = (int, bool, str, type(None))     # types whose == is exact


def keyed_as_is(v):
    """Whether static value `v` is its own key (with its type's name): its
    == is exact, as for ints, bools, strings, None and moye's layouts,
    atoms and tiled copies (by op, element type and layouts)."""
    t = type(v)
    return t in BY_VALUE or t in STATIC_TYPES


def static_key(v, name="?"):
    """The exact, hashable specialization key of a static argument `v`:
    values that may trace differently never share one (1, 1.0 and True
    differ; so do 0.0 and -0.0). Ints, bools, strings and None are keyed as
    they are, moye's layouts, atoms and tiled copies by their own equality
    (exact: by op, element type and layouts), anything else by
    identity.content_key; a MoyeError naming argument `name` for a value
    that cannot be keyed.
        >>> static_key(0.5), static_key((1, True))
        (('float', '0x1.0000000000000p-1'), ('tuple', ('int', 1), ('bool', True)))
    """
    try:
        return _static_key(v, name)
    except RecursionError:
        raise MoyeTypeError(f"argument '{name}': a {type(v).__name__} nested too deeply to be "
                            "keyed as a static value") from None


def _static_key(v, name):
    t = type(v)
    if keyed_as_is(v):
        return (t.__name__, v)
    if t is float:
        return ("float", v.hex())
    if isinstance(v, Constexpr):
        return _static_key(v.value, name)
    if t is tuple or t is list:
        return (t.__name__,) + tuple(_static_key(e, name) for e in v)
    return (f"{t.__module__}.{t.__qualname__}", content_key(v, f"argument '{name}'"))


def spec_text(v):
    """A complete, stable text of a specialization key, for the disk cache:
    moye's values by their content_key (their reprs show only layouts, and
    two ops can share layouts), the rest by repr (the key's floats are
    already exact text)."""
    if isinstance(v, (tuple, list)):
        return "(" + ",".join(spec_text(e) for e in v) + ")"
    if type(v) in BY_VALUE:
        return repr(v)
    return f"{type(v).__name__}:{content_key(v)}"


def is_static(v, annotated):
    if annotated or isinstance(v, Constexpr) or v is None or isinstance(v, str):
        return True
    if type(v) in STATIC_TYPES:
        return True
    if isinstance(v, (tuple, list)):
        return all(is_static(e, False) for e in v)
    return False


MISSING = type("Missing", (), {"__repr__": lambda self: "MISSING"})()
"""An argument a launch function was not given (its parameters' default)."""


def by_position(names, defaults, args, keywords, allowed="smem=, stream= and backend="):
    """A launch's arguments in the kernel's order (`names`), some given by
    keyword: `args` (trailing MISSING ones left out), each keyword's value
    at its name's place, the kernel's `defaults` in the gaps (those after
    the last one given the binder adds); a LaunchError naming an unknown
    name, one given twice or one missing.
        >>> by_position(["x", "n", "scale"], {"n": 8, "scale": 1.0}, ("X",), {"scale": 2.0})
        ('X', 8, 2.0)
    """
    args = list(args)
    while args and args[-1] is MISSING:
        args.pop()
    unknown = [k for k in keywords if k not in names]
    if unknown:
        raise LaunchError(f"the kernel has no argument{'s' * (len(unknown) > 1)} "
                          f"{', '.join(unknown)}: its arguments are ({', '.join(names)}); "
                          f"the launch's own keywords are {allowed}")
    for name, value in keywords.items():
        k = names.index(name)
        if k < len(args) and args[k] is not MISSING:
            raise LaunchError(f"argument '{name}' is given twice, by position and by keyword")
        args += [MISSING] * (k + 1 - len(args))
        args[k] = value
    for k, a in enumerate(args):
        if a is MISSING:
            if names[k] not in defaults:
                raise LaunchError(f"the kernel takes {len(names)} arguments "
                                  f"({', '.join(names)}): '{names[k]}' is missing")
            args[k] = defaults[names[k]]
    return tuple(args)
