"""The binder: a kernel's parameters, its specialization key and the packing
of a launch's values, defined once.

`bind(names, defaults, constexpr_names, args)` reads a call's arguments into
a `Binding`: per Python parameter one frozen record,

- `ArrayParam`: an array's element type, rank, unit-stride mode, how far
  its strides divide the vector width, 16-byte alignment, 64-bit indices
  and device; it becomes the IR parameters pointer, extents, and strides
  except the unit-stride mode's (a constant 1);
- `ScalarParam`: an int, float or bool, by its type (Int32 or Int64 by the
  value's size);
- `StaticParam`: a layout, atom, tiled copy, element type, Constexpr, ...
  by its exact key (`arguments.static_key`); it becomes no IR parameter;
- `TMAParam`: a `TensorMapArgument` (moye.TMACopy), by its spec; it
  becomes one tensor-map parameter.

The records are the specialization key (`Binding.key`, their tuple: equal
records trace to the same kernel), its text for the disk cache
(`key_text`), and the IR parameter list (`record.ir_params`, in order),
which tracing turns into `ir.Param`s and `Binding.values()` fills: the
run-time values in parameter order, what the CUDA backend packs for
cuLaunchKernel and the CPU interpreter binds.

    >>> import numpy as np
    >>> b = bind(["y", "x", "n"], {}, set(), (np.zeros((4, 6), np.float32)[:, :4], np.ones(8), 3))
    >>> b.params[0]
    ArrayParam(name='y', dtype=Float32, rank=2, unit=1, divisibility=(2, 1), aligned=True, wide=False, device='cpu')
    >>> [p.name for p in b.params[0].ir_params], b.values()[1:4]
    (['y', 'y.shape[0]', 'y.shape[1]', 'y.stride[0]'], [4, 4, 6])
"""
import inspect
from dataclasses import dataclass, field

import numpy as np

from .. import types as T
from ..errors import LaunchError, MoyeTypeError
from .. import ir
from .arguments import INDEX_LIMIT, Constexpr, as_array_arg, is_static, needs_64bit_indices, \
    static_key
from .arguments import spec_text  # noqa: F401 - the key text of static values


class TensorMapArgument:
    """An argument passed as one CUtensorMap parameter: the device library's
    TMACopy derives from it, so that the binder need not import it. It has
    `spec` (its specialization key), `device`, `array` (the global array, an
    arguments.ArrayArg), `args` (the map's encoding arguments, a
    moye.atom.arch.tma.TensorMapArgs) and `traced(param)`, what the kernel
    body sees given the parameter's IR value."""
    spec = device = array = args = None

    def traced(self, param):
        raise MoyeTypeError(f"{type(self).__name__} does not say how a kernel sees it")


@dataclass(frozen=True)
class IRParam:
    """One kernel parameter a Python parameter becomes: its name in IR
    listings and errors, its IR type, the hint of its IR value's name, and
    its role: "pointer", "extent", "stride", "scalar" or "tensor_map"."""
    name: str
    type: object
    hint: str
    role: str

    def to_ir(self):
        """The ir.Param (with a fresh ir.Value) of this parameter."""
        nbytes = self.type.nbytes if self.type is ir.TENSOR_MAP else 0
        return ir.Param(self.name, self.type, ir.Value(self.type, self.hint), nbytes)


def identifier(name):
    """`name` made a C identifier."""
    return "".join(c if c.isalnum() else "_" for c in name)


@dataclass(frozen=True)
class ArrayParam:
    """An array argument's part of the key. `unit` is the unit-stride mode
    (the first of extent > 1 and stride 1; None if none), `divisibility`
    per mode the power of two, up to a 16-byte vector, dividing its stride,
    `wide` whether its index math needs 64 bits."""
    name: str
    dtype: object
    rank: int
    unit: object
    divisibility: tuple
    aligned: bool
    wide: bool
    device: str

    @property
    def index_type(self):
        return T.Int64 if self.wide else T.Int32

    @property
    def alignment(self):
        """Bytes its address is known to be a multiple of."""
        return 16 if self.aligned else max(1, self.dtype.bits // 8)

    @property
    def stride_modes(self):
        """The modes whose stride is a parameter (all but the unit-stride one)."""
        return tuple(i for i in range(self.rank) if i != self.unit)

    @property
    def ir_params(self):
        n, it = identifier(self.name), self.index_type
        return ((IRParam(self.name, ir.PtrType(self.dtype, "global"), f"p_{n}_", "pointer"),)
                + tuple(IRParam(f"{self.name}.shape[{i}]", it, f"{n}_shape{i}_", "extent")
                        for i in range(self.rank))
                + tuple(IRParam(f"{self.name}.stride[{i}]", it, f"{n}_stride{i}_", "stride")
                        for i in self.stride_modes))

    def text(self):
        return (f"array({self.dtype.name},{self.rank},{self.unit},{self.divisibility},"
                f"{self.aligned},{self.wide},{self.device})")

    def describe(self, arg):
        return (f"a {self.dtype} array on the {self.device} of shape {tuple(arg.shape)} "
                f"and strides {tuple(arg.strides)}")


@dataclass(frozen=True)
class ScalarParam:
    """A scalar argument: its element type."""
    name: str
    dtype: object

    @property
    def ir_params(self):
        return (IRParam(self.name, self.dtype, f"p_{identifier(self.name)}_", "scalar"),)

    def text(self):
        return f"scalar({self.dtype.name})"

    def describe(self, arg):
        return f"a {self.dtype} scalar"


@dataclass(frozen=True)
class StaticParam:
    """A static argument, keyed by `key` (arguments.static_key); `value` is
    what the kernel body sees."""
    name: str
    key: object
    value: object = field(compare=False, repr=False)
    ir_params = ()

    def text(self):
        return f"static{spec_text(self.key)}"

    def describe(self, arg):
        return f"the static value {self.value!r}"


@dataclass(frozen=True)
class TMAParam:
    """A TensorMapArgument (moye.TMACopy): its spec (op, element type,
    tile, swizzle, shared layout, device); one tensor-map parameter."""
    name: str
    spec: tuple
    device: str

    @property
    def ir_params(self):
        return (IRParam(self.name, ir.TENSOR_MAP, f"p_{identifier(self.name)}_", "tensor_map"),)

    def text(self):
        return f"tma{spec_text(self.spec)}"

    def describe(self, arg):
        return f"a {type(arg).__name__}"


_ARRAY_PARAMS = {}          # what decides an ArrayParam -> it (bounded)


def array_param(name, arr):
    """The ArrayParam of arguments.ArrayArg `arr`, remembered by what
    decides it (a launch binds arrays of the same layouts again and again).
        >>> from moye.compiler.arguments import as_array_arg
        >>> array_param("x", as_array_arg(np.zeros((3, 5), np.float16).T)).unit
        0
    """
    seen = (name, arr.dtype, arr.shape, arr.strides, arr.ptr % 16 == 0, arr.device)
    try:
        return _ARRAY_PARAMS[seen]
    except KeyError:
        if len(_ARRAY_PARAMS) >= 4096:
            _ARRAY_PARAMS.clear()
        p = _ARRAY_PARAMS[seen] = _array_param(name, arr)
        return p
    except TypeError:           # a shape or strides that is a list
        return _array_param(name, arr)


def _array_param(name, arr):
    shape, strides = arr.shape, arr.strides
    unit = next((i for i, (n, d) in enumerate(zip(shape, strides)) if d == 1 and n != 1), None)
    vec = max(1, 16 // max(1, arr.dtype.bits // 8))
    return ArrayParam(name, arr.dtype, len(shape), unit, tuple(_pow2_div(d, vec) for d in strides),
                      arr.ptr % 16 == 0, needs_64bit_indices(shape, strides), arr.device)


def _pow2_div(x, cap):
    if x == 0:
        return cap
    d = 1
    while d < cap and x % (d * 2) == 0:
        d *= 2
    return d


def scalar_type(v):
    """The element type of a scalar argument, None for a non-scalar."""
    if isinstance(v, bool):
        return T.Bool
    if isinstance(v, (int, np.integer)):
        return T.Int32 if -INDEX_LIMIT <= int(v) < INDEX_LIMIT else T.Int64
    if isinstance(v, (float, np.floating)):
        return T.Float32 if not isinstance(v, np.float64) else T.Float64
    return None


class Binding:
    """A call's arguments bound to the kernel's parameters: `params` (one
    record per Python parameter), `arguments` (per record its run-time
    object: an arguments.ArrayArg, a scalar's value, a static value, a
    TMACopy) and `key` (the records' tuple)."""
    __slots__ = ("params", "arguments", "key")

    def __init__(self, params, arguments):
        self.params, self.arguments = tuple(params), tuple(arguments)
        self.key = self.params

    def values(self):
        """The run-time values in IR parameter order: an array's address,
        extents and strides (but the unit-stride mode's), a scalar's value,
        a TMACopy for its tensor map."""
        out = []
        for p, a in zip(self.params, self.arguments):
            if type(p) is ArrayParam:
                out.append(a.ptr)
                out += [int(n) for n in a.shape]
                out += [int(a.strides[i]) for i in p.stride_modes]
            elif p.ir_params:
                out.append(a)
        return out

    def ir_params(self):
        """Every IR parameter, in order (what `values()` fills)."""
        return [q for p in self.params for q in p.ir_params]

    def arrays(self):
        """(record, run-time array) of each array and TMA argument."""
        return [(p, a) for p, a in zip(self.params, self.arguments)
                if type(p) in (ArrayParam, TMAParam)]

    def difference(self, other):
        """': argument 'x' is ..., compiled for ...' naming the first argument
        whose record differs from `other`'s ('' if none)."""
        for p, a, q, b in zip(self.params, self.arguments, other.params, other.arguments):
            if p != q:
                return f": argument '{p.name}' is {p.describe(a)}, compiled for {q.describe(b)}"
        return ""


def key_text(key):
    """A complete, stable text of a specialization key, for the disk cache.
        >>> import numpy as np
        >>> key_text(bind(["x", "k"], {}, {"k"}, (np.ones(4, np.float32), 0.5)).key)
        "(array(Float32,1,0,(1,),True,False,cpu),static('float','0x1.0000000000000p-1'))"
    """
    return "(" + ",".join(p.text() for p in key) + ")"


def complete_arguments(names, defaults, args):
    """`args` with the kernel's default values appended for missing ones."""
    n = len(args)
    if n >= len(names) or any(m not in defaults for m in names[n:]):
        return tuple(args)
    return tuple(args) + tuple(defaults[m] for m in names[n:])


def signature_parts(fn_sig):
    """(names, defaults) of a Python signature."""
    return (list(fn_sig.parameters),
            {n: p.default for n, p in fn_sig.parameters.items()
             if p.default is not inspect.Parameter.empty})


def bind(names, defaults, constexpr_names, args):
    """The Binding of a call's `args` (defaults filled in) to parameters
    `names`; a LaunchError for a wrong count, a MoyeTypeError naming an
    argument moye cannot take."""
    args = complete_arguments(names, defaults, args)
    if len(args) != len(names):
        which = f"missing {', '.join(names[len(args):])}" if len(args) < len(names) else \
            f"{len(args) - len(names)} too many"
        raise LaunchError(f"the kernel takes {len(names)} arguments ({', '.join(names)}), "
                          f"got {len(args)} ({which})")
    params, arguments = [], []
    for name, a in zip(names, args):
        if is_static(a, name in constexpr_names):
            value = a.value if isinstance(a, Constexpr) else a
            params.append(StaticParam(name, static_key(value, name), value))
            arguments.append(value)
            continue
        if isinstance(a, TensorMapArgument):
            params.append(TMAParam(name, a.spec, a.device))
            arguments.append(a)
            continue
        arr = as_array_arg(a, name)
        if arr is not None:
            params.append(array_param(name, arr))
            arguments.append(arr)
            continue
        t = scalar_type(a)
        if t is not None:
            params.append(ScalarParam(name, t))
            arguments.append(a)
            continue
        hint = " (a Python list is not an array: pass np.asarray(...) or a torch tensor)" \
            if isinstance(a, list) else ""
        raise MoyeTypeError(f"argument '{name}': {type(a).__name__} is not an array, a number or "
                            "a static value (layouts, atoms, tiled copies/MMAs, element types, "
                            f"moye.Constexpr){hint}")
    return Binding(params, arguments)


def bind_arguments(fn_sig, constexpr_names, args):
    """bind() for a Python signature."""
    names, defaults = signature_parts(fn_sig)
    return bind(names, defaults, constexpr_names, args)


@dataclass(frozen=True)
class FastLaunch:
    """What a launch function needs of the backend (CudaExecutable.fast_launch):
    `pack(buffer, offset, *values)` writes the values (in IR parameter
    order) into a parameter buffer; `slots` is a pool of (buffer, offset,
    params address) and `new_slot()` makes one; `launch` and `launch_ex`
    are cuLaunchKernel and cuLaunchKernelEx, `ok` their success code,
    `function` the kernel, `block` its block; `dynamic_smem` its own
    dynamic shared memory and `launch_smem(smem)` the total for `smem` more
    (checked); `current_stream()` the default stream, `stream_handle(s)`
    a stream object's handle; `cluster_config(grid, block, smem, stream,
    cluster)` cuLaunchKernelEx's configuration; `failed(err, grid, block,
    smem, stream, params, cluster)` handles a failed launch;
    `tensor_map(tma_copy)` is the bytes of a TensorMapArgument's tensor map,
    `tensor_map_at(tma_copy)` a function of an address giving that map
    moved to the address."""
    pack: object
    slots: list
    new_slot: object
    launch: object
    launch_ex: object
    ok: object
    function: object
    block: tuple
    dynamic_smem: int
    launch_smem: object
    current_stream: object
    stream_handle: object
    cluster_config: object
    failed: object
    tensor_map: object
    tensor_map_at: object
