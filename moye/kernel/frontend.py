"""@moye.kernel: specialization, tracing and launching.

    @moye.kernel
    def copy(dst, src): ...
    copy[grid, block](b, a)                 # launch (smem=, stream= keywords)
    copy[grid, block, cluster](b, a)        # in thread-block clusters (sm_90)
    copy.compile(b, a, grid=..., block=...) # a reusable compiled kernel
    copy.cuda_source(b, a, block=...)       # the generated C++

Each distinct specialization of the arguments (array element types, ranks,
alignment and unit-stride mode; the values of static arguments) is traced
once: the rewritten body runs in Python with symbolic scalars and emits IR,
which a backend compiles. `kern[grid, block]` is a launch function; once a
specialization has been launched it is one written for that specialization
(dispatch.py), which checks the arguments and launches without binding.
"""
import functools
import inspect
import traceback

from .. import types as T
from ..array import MoYeArray
from ..array.engine import allocator
from ..errors import LaunchError, MoyeError, MoyeTypeError
from ..layout import Layout
from ..layout.scalar import is_int
from .. import ir
from .arguments import (Binding, bind_arguments, complete_arguments,  # noqa: F401
                        describe_argument, keyword_arguments_error, runtime_values, spec_text)
from .builtins import Constexpr, register_allocate
from .hopper import TMADescriptor
from .identity import function_key
from .dispatch import ENTRIES_LIMIT, MISSING, NOT_MINE, make_entry, make_key_reader
from .limits import check_arch_name, check_block, check_grid, check_smem, check_stream
from .memory import PointerEngine
from .rewrite import rewrite_function
from .tracer import Builder, KernelError, Sym, tracing_context

BACKENDS = {}
STATIC_SMEM_LIMIT = 48 * 1024        # above this, shared arrays move to dynamic shared memory


def _backend_named(backend):
    """`backend` if it names a backend (or is None); a LaunchError saying
    which do otherwise."""
    if backend is None or (isinstance(backend, str) and backend in BACKENDS):
        return backend
    raise LaunchError(f"backend must be one of {', '.join(map(repr, sorted(BACKENDS)))} "
                      f"(or None: by the arrays' device), got {backend!r}")


def default_backend():
    cuda = BACKENDS.get("cuda")
    if cuda is not None and cuda.available():
        return "cuda"
    if "cpu" in BACKENDS:
        return "cpu"
    raise MoyeError("no GPU is available and no CPU backend is installed")


def _identifier(name):
    return "".join(c if c.isalnum() else "_" for c in name)


def _trace_arguments(builder, binding):
    """The kernel parameters and the Python values the body sees."""
    params, values, plan = builder.kernel.params, [], []
    for kind, name, info in binding.kinds:
        if kind == "static":
            values.append(info)
            continue
        if kind == "tma":
            v = ir.Value(ir.TENSOR_MAP, f"p_{_identifier(name)}_")
            params.append(ir.Param(name, ir.TENSOR_MAP, v, ir.TENSOR_MAP.nbytes))
            plan.append(("tma", len(values), None))
            values.append(TMADescriptor(info, v))
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
        self._backend = _backend_named(backend)
        self._rewritten = None
        self._traces = {}
        self._compiled = {}
        self._launches = {}         # (grid, block) as written -> its latest launch function
        self._entries = {}          # block -> {key: dispatch.Entry}
        self._key_readers = {}      # argument types -> dispatch key reader, or None
        self._recent = {}           # (grid, block) as written -> recent Entries, latest first
        self._streak = {}           # (grid, block) as written -> calls in a row the first served
        self._identity = None
        params = self.signature.parameters
        self._param_names = list(params)
        self._defaults = {n: p.default for n, p in params.items()
                          if p.default is not inspect.Parameter.empty}

    def __repr__(self):
        return f"<moye.kernel {self.name}>"

    @property
    def backend(self):
        """The backend this kernel always uses ("cuda", "cpu"), or None: by
        its arrays' device, else the default."""
        return self._backend

    @backend.setter
    def backend(self, value):
        self._backend = _backend_named(value)
        self._entries.clear()           # they chose a backend without asking
        self._launches.clear()
        self._recent.clear()
        self._streak.clear()

    def __call__(self, *args, **kwargs):
        raise LaunchError(f"a kernel is launched with a grid and a block: "
                          f"{self.name}[grid, block](*args), e.g. {self.name}[1, 32](...); "
                          f"{self.name}.compile(*args, grid=..., block=...) gives a reusable one")

    def __getitem__(self, config):
        """The launch function of `config` = (grid, block) or (grid, block,
        cluster): `kern[grid, block](*args, smem=0, stream=None, backend=None)`.
        `smem` is more dynamic shared memory (bytes), `stream` a CUDA stream
        (an int handle, a torch or CuPy stream; by default torch's current
        one, else the legacy default stream), `backend` "cuda" or "cpu".
        With `cluster` (blocks per cluster, an int or a 1-3 tuple dividing
        the grid, at most 8 blocks) the grid's blocks run in thread-block
        clusters (sm_90; cuLaunchKernelEx): see kernel/cluster.py."""
        try:
            return self._launches[config]
        except (KeyError, TypeError):
            return self._new_launch(config)

    def _entries_for(self, block):
        entries = self._entries.get(block)
        if entries is None:
            entries = self._entries[block] = {}
        return entries

    def _new_launch(self, config):
        if not isinstance(config, tuple) or len(config) not in (2, 3):
            raise LaunchError(f"launch a kernel as {self.name}[grid, block](*args) or "
                              f"{self.name}[grid, block, cluster](*args); got "
                              f"{self.name}[{config!r}]")
        grid, block = _launch_dims(config[0], config[1])
        cluster = check_cluster(grid, config[2]) if len(config) == 3 else None
        try:
            hash(config)
        except TypeError:                   # a list in the config: not kept
            config = None
        # a launch in clusters: the cluster's shape rides after the grid's
        launch = _dispatching_launch(self, config, grid + (cluster or ()), block)
        if config is not None:
            if len(self._launches) >= 256:
                self._launches.clear()
            self._launches[config] = launch
        return launch

    def code_identity(self):
        """What the kernel's code is, for the disk cache: its name, the text
        of its file (the control-flow rewrite reads the source) and
        identity.function_key of its function (its code and, transitively,
        every function and global it reads, in any module)."""
        if self._identity is None:
            import hashlib
            h = hashlib.sha256(function_key(self.fn).encode())
            try:
                with open(inspect.getsourcefile(self.fn), "rb") as f:
                    h.update(f.read())
            except (OSError, TypeError):
                pass                    # no file: the code object alone
            self._identity = f"{self.fn.__module__}.{self.fn.__qualname__}:{h.hexdigest()}"
        return self._identity

    def specialization_text(self, binding, block):
        """The text that names a specialization in the disk cache: the
        kernel's code identity, its arguments' key and the block."""
        return f"{self.code_identity()}|{spec_text(binding.key)}|{block}"

    def _executable(self, backend, binding, block, arch=None):
        """The compiled specialization, from memory, the backend's disk cache,
        or traced and compiled now."""
        key = (binding.key, block, backend, arch)
        exe = self._compiled.get(key)
        if exe is None:
            be = BACKENDS[backend]
            spec = self.specialization_text(binding, block)
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
        """The function to trace: the kernel with its control flow rewritten,
        or, when its source cannot be read, the kernel as it is."""
        if self._rewritten is None:
            self._rewritten = rewrite_function(self.fn) or self.fn
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
            except MoyeError as e:
                raise _located(e, self, fn is self.fn) from None
            except Exception as e:      # the user's code failed: say where, keep the original
                raise _located(e, self, fn is self.fn) from e
        ir.eliminate_dead_code(builder.kernel)
        ir.verify(builder.kernel)
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
        with new arguments of the same kinds: `ck(*args, grid=, block=)`.
        `arch` is an NVRTC target such as "sm_80" or "sm_90a" (by default
        the device's)."""
        backend = _backend_named(backend) or self.backend or default_backend()
        check_arch_name(arch)
        block = _dim3(block, "block")
        check_block(block)
        binding = bind_arguments(self.signature, self.constexpr_names, args)
        exe = self._executable(backend, binding, block, arch)
        return CompiledKernel(self, exe, binding, block)

    def launch(self, grid, block, args, smem=0, stream=None, backend=None, cluster=None):
        """`self[grid, block](*args, smem=smem, stream=stream, backend=backend)`,
        or self[grid, block, cluster](...) with a cluster."""
        grid, block = _launch_dims(grid, block)
        if cluster is not None:
            grid += check_cluster(grid, cluster)
        self._dispatch(None, grid, block, None, tuple(args), smem, stream, backend)

    def _dispatch(self, config, grid, block, tried, args, smem, stream, backend):
        """A launch that `config`'s launch function (of Entry `tried`, if
        any) did not take (see dispatch.py): by another recent specialization
        of the configuration, by the one the arguments' key selects, or by
        binding the arguments (tracing and compiling if needed), after which
        that specialization gets a fast path (see _served for which launch
        function `config` then maps to)."""
        while args and args[-1] is MISSING:       # from a launch function's defaults
            args = args[:-1]
        check_smem(smem)
        check_stream(stream)
        key = key_of = None
        if backend is None:
            for entry in self._recent.get(config, ()):
                if entry is not tried:
                    probe = entry.probes.get(config) or entry.probe(config, grid)
                    if probe(*args, smem=smem, stream=stream) is not NOT_MINE:
                        return self._served(config, grid, block, entry)
            types = tuple(map(type, args))
            key_of = self._key_readers.get(types, MISSING)
            if key_of is MISSING:
                if len(self._key_readers) >= 64:
                    self._key_readers.clear()
                key_of = self._key_readers[types] = make_key_reader(
                    self._param_names, self._defaults, self.constexpr_names, args)
            key = key_of(args) if key_of is not None else None
            entry = self._entries_for(block).get(key) if key is not None else None
            if entry is not None and \
                    entry.probe(config, grid)(*args, smem=smem, stream=stream) is not NOT_MINE:
                return self._served(config, grid, block, entry)
        binding = bind_arguments(self.signature, self.constexpr_names, args)
        backend = _backend_named(backend) or self._backend or _backend_of(binding) or \
            default_backend()
        _check_devices(binding, backend)
        exe = self._executable(backend, binding, block)
        more = {"cluster": grid[3:]} if len(grid) > 3 else {}     # (grid, cluster) in clusters
        exe.launch(grid[:3], block, runtime_values(binding), binding, smem=smem, stream=stream,
                   **more)
        code = getattr(exe, "fast_launch_code", None)
        if key is None or code is None or \
                key_of.kinds != tuple(k for k, _, _ in binding.kinds if k != "static"):
            return
        entry = make_entry(self._param_names, self._defaults, self.constexpr_names, args, key,
                           binding, lambda values: code(binding, block, values))
        entries = self._entries_for(block)
        if len(entries) >= ENTRIES_LIMIT:
            entries.clear()
        entries[key] = entry
        self._install(config, grid, block, entry)

    def _served(self, config, grid, block, entry):
        """After `entry` launched for a call that `config`'s launch function
        did not take: it comes first among the recent ones, and after a few
        such calls in a row its launch function becomes `config`'s (calls
        alternating between two specializations keep one of them direct)."""
        recent = self._recent.get(config)
        if recent is None:                  # the configuration's first specialization
            return self._install(config, grid, block, entry)
        if recent[0] is not entry:
            self._recent[config] = (entry,) + tuple(e for e in recent if e is not entry)
            self._streak[config] = 1
        elif self._launches.get(config) is not entry.installed(config):
            streak = self._streak.get(config, 0) + 1
            if streak >= 4:
                return self._install(config, grid, block, entry)
            self._streak[config] = streak

    def _install(self, config, grid, block, entry):
        """Make `entry`'s launch function the one `self[config]` gives, and
        `entry` the first of the configuration's recent ones (at most 4)."""
        if config is None:
            return
        if len(self._launches) >= 256:
            self._launches.clear()
            self._recent.clear()
            self._streak.clear()
        fallback = functools.partial(self._dispatch, config, grid, block, entry)
        self._launches[config] = entry.launcher(config, grid, fallback)
        recent = self._recent.get(config, ())
        self._recent[config] = (entry,) + tuple(e for e in recent if e is not entry)[:3]
        self._streak[config] = 0


def _dispatching_launch(kernel, config, grid, block):
    """The first launch function of a configuration: it goes through
    kernel._dispatch, or, once the configuration has a launch function of
    its own, through that one (for callers who kept this one)."""
    launches = kernel._launches

    def launch(*args, smem=0, stream=None, backend=None, **keywords):
        if keywords:
            keyword_arguments_error(kernel._param_names, keywords)
        f = launches.get(config)
        if f is not None and f is not launch:
            if not smem and stream is None and backend is None:
                return f(*args)
            return f(*args, smem=smem, stream=stream, backend=backend)
        kernel._dispatch(config, grid, block, None, args, smem, stream, backend)
    launch.__name__ = launch.__qualname__ = f"{kernel.name}[{grid}, {block}]"
    return launch


MAX_CLUSTER_BLOCKS = 8      # the portable cluster size (more needs a non-portable opt-in)


def check_cluster(grid, cluster):
    """The cluster shape as a 3-tuple, checked against the grid (x, y, z)."""
    cluster = _dim3(cluster, "cluster")
    if any(g % c for g, c in zip(grid, cluster)):
        raise LaunchError(f"the grid {grid} is not divisible by the cluster {cluster}: each grid "
                          "dimension must be a multiple of the cluster's")
    n = cluster[0] * cluster[1] * cluster[2]
    if n > MAX_CLUSTER_BLOCKS:
        raise LaunchError(f"the cluster {cluster} has {n} blocks; a cluster has at most "
                          f"{MAX_CLUSTER_BLOCKS} (the portable size)")
    return cluster


def _check_devices(binding, backend):
    """A clear error for an array the backend cannot reach."""
    want = "cuda" if backend == "cuda" else "cpu"
    for kind, name, info in binding.kinds:
        if kind in ("array", "tma") and info.device != want:
            where = "on the GPU" if info.device == "cuda" else "in host memory"
            raise LaunchError(f"argument '{name}' is {where}, but this launch runs on the "
                            f"{backend} backend")


def _backend_of(binding):
    """"cuda" or "cpu" by the device of the first array argument."""
    for kind, _, info in binding.kinds:
        if kind in ("array", "tma"):
            return "cuda" if info.device == "cuda" else "cpu"
    return None


class CompiledKernel:
    """A compiled specialization: call it with arguments of the same kinds."""

    def __init__(self, kernel, exe, binding, block):
        self.kernel, self.exe, self.block = kernel, exe, block
        self.key, self._kinds = binding.key, binding.kinds

    def __call__(self, *args, grid=None, block=None, smem=0, stream=None, cluster=None,
                 **keywords):
        name = self.kernel.name
        if keywords:
            keyword_arguments_error(self.kernel._param_names, keywords)
        if grid is None:
            raise LaunchError(f"a compiled {name} is launched as ck(*args, grid=..., "
                              "block=...): grid is missing")
        binding = bind_arguments(self.kernel.signature, self.kernel.constexpr_names, args)
        if binding.key != self.key:
            raise LaunchError(f"these arguments select another specialization of {name} than "
                              f"the compiled one{self._difference(binding)}; call "
                              f"{name}.compile with them (or launch {name}[grid, block](...))")
        grid, block = _launch_dims(grid, self.block if block is None else block)
        check_smem(smem)
        check_stream(stream)
        more = {} if cluster is None else {"cluster": check_cluster(grid, cluster)}
        self.exe.launch(grid, block, runtime_values(binding), binding, smem=smem, stream=stream,
                        **more)

    def _difference(self, binding):
        """': argument 'x' is ..., compiled for ...' naming the first argument
        whose part of the key differs (one part per argument)."""
        if len(binding.key) != len(binding.kinds) or len(self.key) != len(self._kinds):
            return ""
        for new, old, (kind, name, info), (old_kind, _, old_info) in \
                zip(binding.key, self.key, binding.kinds, self._kinds):
            if new != old:
                return (f": argument '{name}' is {describe_argument(kind, info)}, compiled for "
                        f"{describe_argument(old_kind, old_info)}")
        return ""

    def max_active_clusters(self, cluster, smem=0):
        """How many clusters of `cluster` blocks of this kernel can run at once
        on the device (CUDA: cudaOccupancyMaxActiveClusters), to size a
        persistent grid. CUDA backend only."""
        if not hasattr(self.exe, "max_active_clusters"):
            raise MoyeError(f"{self.kernel.name}: max_active_clusters needs the CUDA backend")
        return self.exe.max_active_clusters(self.block, _dim3(cluster, "cluster"), smem)

    @property
    def source(self):
        return getattr(self.exe, "source", None)


def _launch_dims(grid, block):
    """A launch's grid and block as 3-tuples, within the driver's limits."""
    grid, block = _dim3(grid, "grid"), _dim3(block, "block")
    check_grid(grid)
    check_block(block)
    return grid, block


def _dim3(x, what):
    """`x` (a positive int, or a tuple of 1-3) as an (x, y, z) tuple."""
    if is_int(x):
        x = (int(x),)
    if not isinstance(x, tuple) or not 1 <= len(x) <= 3 or \
            not all(is_int(n) and n > 0 for n in x):
        raise LaunchError(f"{what} must be a positive int or a tuple of 1-3 of them "
                          f"(x, y, z), got {x!r}")
    return tuple(int(n) for n in x) + (1,) * (3 - len(x))


NO_SOURCE = ("\n  (the kernel's source cannot be read: it was made by exec or typed at an "
             "interactive prompt, so its control flow was not rewritten, and an if, for, while, "
             "and, or, not or x if c else y works on static values only; define the kernel in a "
             "file to use them on run-time values)")


def _located(e, kernel, no_source=False):
    """`e` as a KernelError naming the kernel source line where it happened
    (and, with `no_source`, why its control flow could not be rewritten)."""
    if isinstance(e, KernelError) and getattr(e, "located", False):
        return e
    frames = traceback.extract_tb(e.__traceback__)
    src = kernel.fn.__code__.co_filename
    user = [f for f in frames if f.filename == src]
    where = ""
    if user:
        f = user[-1]
        where = f"{f.filename}:{f.lineno}: {f.line}\n  "
    err = KernelError(f"in kernel '{kernel.name}', {where}{type(e).__name__}: {e}"
                      f"{NO_SOURCE if no_source else ''}")
    err.located = True
    return err


def kernel(fn=None, *, backend=None):
    """Decorate a Python function as a moye kernel (see the module doc):
    `@moye.kernel`, or `@moye.kernel(backend="cpu")`."""
    _backend_named(backend)
    if fn is None:
        return lambda f: kernel(f, backend=backend)
    if not inspect.isfunction(fn):
        raise MoyeTypeError(f"moye.kernel decorates a Python function (def ...), got "
                            f"{type(fn).__name__} {fn!r}: write @moye.kernel above a def, or "
                            "@moye.kernel(backend=...) to choose a backend")
    return KernelFunction(fn, backend)
