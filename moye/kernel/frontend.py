"""@moye.kernel: specialization, tracing and launching.

    @moye.kernel
    def copy(dst, src): ...
    copy[grid, block](b, a)                 # launch (smem=, stream= keywords)
    copy.compile(b, a, grid=..., block=...) # a reusable compiled kernel
    copy.cuda_source(b, a, block=...)       # the generated C++

Each distinct specialization of the arguments (array element types, ranks,
alignment and unit-stride mode; the values of static arguments) is traced
once: the rewritten body runs in Python with symbolic scalars and emits IR,
which a backend compiles.
"""
import functools
import inspect
import math
import sys
import traceback

import numpy as np

from .. import types as T
from ..array import MoYeArray
from ..array.engine import allocator
from ..errors import MoyeError
from ..layout import Layout
from . import ir
from .builtins import Constexpr, register_allocate
from .memory import PointerEngine
from .rewrite import rewrite_function
from .tracer import Builder, KernelError, Sym, tracing_context

BACKENDS = {}
STATIC_SMEM_LIMIT = 48 * 1024        # above this, shared arrays move to dynamic shared memory


def default_backend():
    cuda = BACKENDS.get("cuda")
    if cuda is not None and cuda.available():
        return "cuda"
    if "cpu" in BACKENDS:
        return "cpu"
    raise MoyeError("no GPU is available and no CPU backend is installed")


# -- arguments ----------------------------------------------------------------------

class ArrayArg:
    """An array argument: where it is and how it is laid out."""

    def __init__(self, obj, ptr, shape, strides, dtype, device):
        self.obj, self.ptr, self.shape, self.strides = obj, ptr, shape, strides
        self.dtype, self.device = dtype, device

    def key(self):
        unit = next((i for i, (n, d) in enumerate(zip(self.shape, self.strides))
                     if d == 1 and n != 1), None)
        vec = max(1, 16 // max(1, self.dtype.bits // 8))
        divs = tuple(_pow2_div(d, vec) for d in self.strides)
        aligned = self.ptr % 16 == 0
        span = 1 + sum((n - 1) * abs(d) for n, d in zip(self.shape, self.strides))
        return ("array", self.dtype.name, len(self.shape), unit, divs, aligned, span >= 2**31,
                self.device)


def _pow2_div(x, cap):
    if x == 0:
        return cap
    d = 1
    while d < cap and x % (d * 2) == 0:
        d *= 2
    return d


def as_array_arg(a):
    """An ArrayArg for torch/CuPy arrays, `__cuda_array_interface__`, or
    NumPy arrays (for the CPU backend); None for anything else."""
    mod = type(a).__module__
    if mod.startswith("torch") and hasattr(a, "data_ptr"):
        dtype = T.as_element_type(str(a.dtype))
        return ArrayArg(a, a.data_ptr(), tuple(a.shape), tuple(a.stride()), dtype,
                        "cuda" if a.is_cuda else "cpu")
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is not None:
        dtype = T.as_element_type(np.dtype(cai["typestr"]))
        shape = tuple(cai["shape"])
        item = dtype.bits // 8
        if cai.get("strides") is None:
            strides, acc = [], 1
            for n in reversed(shape):
                strides.append(acc)
                acc *= n
            strides = tuple(reversed(strides))
        else:
            strides = tuple(s // item for s in cai["strides"])
        return ArrayArg(a, cai["data"][0], shape, strides, dtype, "cuda")
    if isinstance(a, np.ndarray):
        item = a.itemsize
        return ArrayArg(a, a.ctypes.data, a.shape, tuple(s // item for s in a.strides),
                        T.as_element_type(a.dtype), "cpu")
    return None


_STATIC_TYPES = ("Layout", "ComposedLayout", "Swizzle", "TiledCopy", "TiledMMA", "CopyAtom",
                 "MMAAtom", "CopyOp", "MMAOp", "ElementType")


def _static_key(v):
    if isinstance(v, Constexpr):
        return _static_key(v.value)
    if isinstance(v, (tuple, list)):
        return tuple(_static_key(e) for e in v)
    try:
        hash(v)
        return (type(v).__name__, v)
    except TypeError:
        return (type(v).__name__, repr(v))


def spec_text(v):
    """A complete text of a specialization key, for the disk cache: atoms by
    their op's name and element type (their reprs show only layouts, and two
    ops can share layouts), tiled copies and MMAs by all that defines them."""
    if isinstance(v, (tuple, list)):
        return "(" + ",".join(spec_text(e) for e in v) + ")"
    name = type(v).__name__
    if name in ("TiledCopy", "TiledMMA"):
        return f"{name}{spec_text(v._key())}"
    if name == "CopyAtom":
        return f"CopyAtom({v.op.name},{v.dtype})"
    if name == "MMAAtom":
        return f"MMAAtom({v.op.name})"
    if name in ("CopyOp", "MMAOp"):
        return f"{name}({v.name})"
    return repr(v)


def _is_static(v, annotated):
    if annotated or isinstance(v, Constexpr) or v is None or isinstance(v, str):
        return True
    if type(v).__name__ in _STATIC_TYPES:
        return True
    if isinstance(v, (tuple, list)):
        return all(_is_static(e, False) for e in v)
    return False


def _scalar_type(v):
    if isinstance(v, bool):
        return T.Bool
    if isinstance(v, (int, np.integer)):
        return T.Int32 if -2**31 <= int(v) < 2**31 else T.Int64
    if isinstance(v, (float, np.floating)):
        return T.Float32 if not isinstance(v, np.float64) else T.Float64
    return None


class _Binding:
    """How the call's arguments map to kernel parameters."""

    def __init__(self, kinds, key, scalars):
        self.kinds, self.key, self.scalars = kinds, key, scalars


def complete_arguments(fn_sig, args):
    """`args` with the kernel's default values appended for missing ones."""
    params = list(fn_sig.parameters.values())
    if len(args) >= len(params):
        return tuple(args)
    missing = params[len(args):]
    if any(p.default is inspect.Parameter.empty for p in missing):
        return tuple(args)
    return tuple(args) + tuple(p.default for p in missing)


def bind_arguments(fn_sig, constexpr_names, args):
    args = complete_arguments(fn_sig, args)
    names = list(fn_sig.parameters)
    if len(args) != len(names):
        raise MoyeError(f"the kernel takes {len(names)} arguments ({', '.join(names)}), "
                        f"got {len(args)}")
    kinds, key, scalars = [], [], {}
    for name, a in zip(names, args):
        if _is_static(a, name in constexpr_names):
            value = a.value if isinstance(a, Constexpr) else a
            kinds.append(("static", name, value))
            key.append(("static", _static_key(value)))
            continue
        arr = as_array_arg(a)
        if arr is not None:
            kinds.append(("array", name, arr))
            key.append(arr.key())
            continue
        t = _scalar_type(a)
        if t is not None:
            kinds.append(("scalar", name, t))
            key.append(("scalar", t.name))
            scalars[name] = a
            continue
        raise MoyeError(f"argument '{name}': {type(a).__name__} is not an array, a number or a "
                        "static value (layouts, atoms, tiled copies/MMAs, element types, "
                        "moye.Constexpr)")
    return _Binding(kinds, tuple(key), scalars)


def _identifier(name):
    return "".join(c if c.isalnum() else "_" for c in name)


def _trace_arguments(builder, binding):
    """The kernel parameters and the Python values the body sees."""
    params, values, plan = builder.kernel.params, [], []
    for kind, name, info in binding.kinds:
        if kind == "static":
            values.append(info)
            continue
        if kind == "scalar":
            v = ir.Value(info, f"p_{_identifier(name)}_")
            params.append(ir.Param(name, info, v))
            plan.append(("scalar", len(values), info))
            values.append(Sym(v, info, 1))
            continue
        arr = info
        key = arr.key()
        unit, divs, aligned, big = key[3], key[4], key[5], key[6]
        itype = T.Int64 if big else T.Int32
        ptr = ir.Value(ir.PtrType(arr.dtype, "global"), f"p_{_identifier(name)}_")
        params.append(ir.Param(name, ptr.type, ptr))
        shape, stride = [], []
        for i in range(len(arr.shape)):
            sv = ir.Value(itype, f"{_identifier(name)}_shape{i}_")
            params.append(ir.Param(f"{name}.shape[{i}]", itype, sv))
            shape.append(Sym(sv, itype, 1))
        for i in range(len(arr.shape)):
            if i == unit:
                stride.append(1)
                continue
            dv = ir.Value(itype, f"{_identifier(name)}_stride{i}_")
            params.append(ir.Param(f"{name}.stride[{i}]", itype, dv))
            stride.append(Sym(dv, itype, divs[i]))
        plan.append(("array", len(values), unit))
        align = 16 if aligned else max(1, arr.dtype.bits // 8)
        layout = Layout(tuple(shape), tuple(stride)) if len(shape) != 1 else \
            Layout(shape[0], stride[0])
        values.append(MoYeArray.view_of(PointerEngine(ptr, arr.dtype, "global", 0, align), layout))
    return values, plan


def runtime_values(binding, plan):
    """The flat parameter values of a call, in parameter order."""
    out = []
    for kind, name, info in binding.kinds:
        if kind == "scalar":
            out.append((info, binding.scalars[name]))
        elif kind == "array":
            out.append(("ptr", info.ptr))
            out.extend(("shape", int(n)) for n in info.shape)
            unit = info.key()[3]
            out.extend(("stride", int(d)) for i, d in enumerate(info.strides) if i != unit)
    return out


# -- the kernel object -----------------------------------------------------------------

class KernelFunction:
    """A Python function traced into a GPU (or CPU) kernel. See the module doc."""

    def __init__(self, fn, backend=None):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.name = fn.__name__
        self.signature = inspect.signature(fn)
        self.constexpr_names = {n for n, p in self.signature.parameters.items()
                                if p.annotation is Constexpr or p.annotation == "Constexpr"
                                or p.annotation == "moye.Constexpr"}
        self.backend = backend
        self._rewritten = None
        self._traces = {}
        self._compiled = {}
        self._fast = {}
        self._launches = {}
        self._identity = None
        self.nparams = len(self.signature.parameters)

    def __repr__(self):
        return f"<moye.kernel {self.name}>"

    def __getitem__(self, config):
        launch = self._launches.get(config) if isinstance(config, tuple) else None
        if launch is not None:
            return launch
        if not isinstance(config, tuple) or len(config) != 2:
            raise MoyeError(f"launch a kernel as {self.name}[grid, block](*args); got "
                            f"{self.name}[{config!r}]")
        launch = Launch(self, _dim3(config[0], "grid"), _dim3(config[1], "block"))
        if len(self._launches) < 256:
            self._launches[config] = launch
        return launch

    def code_identity(self):
        """What the kernel's code is: its name and the text of its file."""
        if self._identity is None:
            import hashlib
            try:
                with open(inspect.getsourcefile(self.fn), "rb") as f:
                    text = f.read()
            except (OSError, TypeError):
                text = inspect.getsource(self.fn).encode()
            self._identity = f"{self.fn.__module__}.{self.fn.__qualname__}:" + \
                hashlib.sha256(text).hexdigest()
        return self._identity

    def _executable(self, backend, binding, block, arch=None):
        """The compiled specialization, from memory, the backend's disk cache,
        or traced and compiled now."""
        key = (binding.key, block, backend, arch)
        exe = self._compiled.get(key)
        if exe is None:
            be = BACKENDS[backend]
            spec = f"{self.code_identity()}|{spec_text(binding.key)}|{block}"
            trace = lambda: self._trace_binding(binding, block)  # noqa: E731
            exe = self._compiled[key] = be.compile_specialization(spec, trace, block, arch)
        return exe

    def _trace_binding(self, binding, block):
        key = (binding.key, block)
        hit = self._traces.get(key)
        if hit is None:
            hit = self._traces[key] = self._do_trace(binding, block)
        return hit[0]

    def _rewrite(self):
        if self._rewritten is None:
            self._rewritten = rewrite_function(self.fn)
        return self._rewritten

    def trace(self, *args, block=1):
        """The IR kernel (and argument binding) for these arguments."""
        binding = bind_arguments(self.signature, self.constexpr_names, args)
        block = _dim3(block, "block")
        key = (binding.key, block)
        hit = self._traces.get(key)
        if hit is None:
            hit = self._traces[key] = self._do_trace(binding, block)
        return hit[0], binding, hit[1]

    def _do_trace(self, binding, block):
        fn = self._rewrite()
        builder = Builder(_identifier(self.name))
        builder.kernel.source_file = inspect.getsourcefile(self.fn) or ""
        builder.block = block
        with tracing_context(builder), allocator(register_allocate):
            values, plan = _trace_arguments(builder, binding)
            try:
                fn(*values)
            except KernelError as e:
                raise _located(e, self) from None
            except MoyeError as e:
                raise _located(e, self) from None
            except (TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError) as e:
                raise _located(e, self) from None
        ir.eliminate_dead_code(builder.kernel)
        smem = ir.shared_bytes(builder.kernel)
        if smem > STATIC_SMEM_LIMIT:
            builder.kernel.dynamic_smem = smem
        return builder.kernel, plan

    def ir(self, *args, block=1):
        """The IR of this specialization, as text."""
        return ir.format_kernel(self.trace(*args, block=block)[0])

    def cuda_source(self, *args, block=1, grid=None):
        """The CUDA C++ translation unit of this specialization."""
        kernel = self.trace(*args, block=block)[0]
        return BACKENDS["cuda"].source(kernel, _dim3(block, "block"))

    def compile(self, *args, grid=1, block=1, backend=None, arch=None):
        """A compiled kernel for these arguments' specialization, callable
        with new arguments of the same kinds: `ck(*args, grid=, block=)`."""
        backend = backend or self.backend or default_backend()
        block = _dim3(block, "block")
        binding = bind_arguments(self.signature, self.constexpr_names, args)
        exe = self._executable(backend, binding, block, arch)
        return CompiledKernel(self, exe, binding.key, block)

    def launch(self, grid, block, args, smem=0, stream=None, backend=None):
        if len(args) != self.nparams:
            args = complete_arguments(self.signature, args)
        quick = _quick_key(args, block, backend)
        entry = self._fast.get(quick)
        if entry is not None:
            return entry(grid, args, smem, stream)
        entry = self._launch_slow(grid, block, args, smem, stream, backend)
        if entry is not None and quick is not None:
            # static arguments are keyed by id: keep them alive with the entry
            entry.static_args = [a for a in args if not isinstance(a, (int, float))
                                 and type(a) is not _TensorType[0]]
            self._fast[quick] = entry

    def _launch_slow(self, grid, block, args, smem, stream, backend):
        backend = backend or self.backend or _backend_for(args) or default_backend()
        binding = bind_arguments(self.signature, self.constexpr_names, args)
        exe = self._executable(backend, binding, block)
        exe.launch(grid, block, runtime_values(binding, None), binding, smem=smem, stream=stream)
        fast = getattr(exe, "fast_launcher", None)
        return fast(binding, block) if fast is not None else None


def _quick_key(args, block, backend):
    """A cheap key that determines the specialization of a call: the same
    key means the same compiled kernel, so repeated launches skip binding.
    None where no cheap key exists."""
    parts = [block, backend]
    for a in args:
        t = type(a)
        if t is _TensorType[0]:
            if not a.is_cuda:
                return None
            parts.append((a.dtype, a.stride(), a.data_ptr() & 15 == 0, a.numel() >= 2**30))
        elif t is int:
            parts.append(-2**31 <= a < 2**31)
        elif t is float or t is bool:
            parts.append(t)
        elif t.__module__ == "torch" or t is np.ndarray:
            if t.__name__ == "Tensor" and _TensorType[0] is None:
                _TensorType[0] = t
                return _quick_key(args, block, backend)
            return None
        else:
            parts.append(id(a))
    return tuple(parts)


_TensorType = [None]


def _backend_for(args):
    for a in args:
        arr = as_array_arg(a)
        if arr is not None:
            return "cuda" if arr.device == "cuda" else "cpu"
    return None


class CompiledKernel:
    """A compiled specialization: call it with arguments of the same kinds."""

    def __init__(self, kernel, exe, key, block):
        self.kernel, self.exe, self.key, self.block = kernel, exe, key, block

    def __call__(self, *args, grid, block=None, smem=0, stream=None):
        binding = bind_arguments(self.kernel.signature, self.kernel.constexpr_names, args)
        if binding.key != self.key:
            raise MoyeError(f"{self.kernel.name}: these arguments need another specialization "
                            "than the compiled one; call .compile with them")
        self.exe.launch(_dim3(grid, "grid"), self.block if block is None else _dim3(block, "block"),
                        runtime_values(binding, None), binding, smem=smem, stream=stream)

    @property
    def source(self):
        return getattr(self.exe, "source", None)


class Launch:
    def __init__(self, kernel, grid, block):
        self.kernel, self.grid, self.block = kernel, grid, block

    def __call__(self, *args, smem=0, stream=None, backend=None):
        self.kernel.launch(self.grid, self.block, args, smem=smem, stream=stream, backend=backend)


def _dim3(x, what):
    if isinstance(x, (int, np.integer)):
        x = (int(x),)
    if not isinstance(x, tuple) or not 1 <= len(x) <= 3 or \
            not all(isinstance(n, (int, np.integer)) and n > 0 for n in x):
        raise MoyeError(f"{what} must be a positive int or a tuple of 1-3 of them, got {x!r}")
    return tuple(int(n) for n in x) + (1,) * (3 - len(x))


def _located(e, kernel):
    """`e` as a KernelError naming the kernel source line where it happened."""
    if isinstance(e, KernelError) and getattr(e, "located", False):
        return e
    tb = e.__traceback__
    frames = traceback.extract_tb(tb)
    src = inspect.getsourcefile(kernel.fn)
    user = [f for f in frames if f.filename == src]
    where = ""
    if user:
        f = user[-1]
        where = f"{f.filename}:{f.lineno}: {f.line}\n  "
    err = KernelError(f"in kernel '{kernel.name}', {where}{type(e).__name__}: {e}")
    err.located = True
    return err


def kernel(fn=None, *, backend=None):
    """Decorate a Python function as a moye kernel (see the module doc)."""
    if fn is None:
        return lambda f: KernelFunction(f, backend)
    return KernelFunction(fn, backend)
