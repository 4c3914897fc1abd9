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

from ..array import MoYeArray
from ..array.engine import allocator
from ..errors import LaunchError, MoyeError, MoyeTypeError
from ..layout import Layout
from ..layout.scalar import is_int
from .. import ir
from .arguments import Constexpr, by_position, spec_text  # noqa: F401
from .binder import ScalarParam, StaticParam, TMAParam, bind, identifier, key_text
from .identity import changed, function_key_and_watch
from .dispatch import ENTRIES_LIMIT, MISSING, NOT_MINE, entry_key, make_entry, prepared_launch
from ..ir.targets import (MAX_CLUSTER_BLOCKS, check_arch_name, check_block, check_grid,
                          check_smem, check_stream)
from .memory import PointerEngine, register_allocate
from .rewrite import rewrite_function, source_stamp
from .tracer import Builder, KernelError, Sym, tracing_context

BACKENDS = {}
STATIC_SMEM_LIMIT = 48 * 1024        # above this, shared arrays move to dynamic shared memory


def backend_named(backend):
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


def _trace_arguments(builder, binding):
    """The kernel parameters (from the binder's records, in order) and the
    Python values the body sees."""
    values = []
    for p, a in zip(binding.params, binding.arguments):
        params = [q.to_ir() for q in p.ir_params]
        builder.kernel.params += params
        t = type(p)
        if t is StaticParam:
            values.append(a)
        elif t is TMAParam:
            values.append(a.traced(params[0].value))
        elif t is ScalarParam:
            values.append(Sym(params[0].value, p.dtype, 1))
        else:
            values.append(_array_view(p, params))
    return values


def _array_view(p, params):
    """The MoYeArray an ArrayParam's body sees: over its pointer parameter,
    with symbolic extents and strides (1 for the unit-stride mode); a 0-d
    array's is 1:1 (its one element at 0, as on the host, and any other
    coordinate outside it, not folded onto it)."""
    if p.rank == 0:
        return MoYeArray.view_of(PointerEngine(params[0].value, p.dtype, "global", 0,
                                               p.alignment), Layout(1, 1))
    it = p.index_type
    shape = [Sym(q.value, it, 1) for q in params[1:1 + p.rank]]
    given = iter(params[1 + p.rank:])
    stride = [1 if i == p.unit else Sym(next(given).value, it, p.divisibility[i])
              for i in range(p.rank)]
    layout = Layout(tuple(shape), tuple(stride)) if p.rank != 1 else Layout(shape[0], stride[0])
    engine = PointerEngine(params[0].value, p.dtype, "global", 0, p.alignment)
    return MoYeArray.view_of(engine, layout)


# -- the kernel object -----------------------------------------------------------------

class KernelFunction:
    """A Python function traced into a GPU (or CPU) kernel. See the module doc."""

    def __init__(self, fn, backend=None, fast_math=False):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self._fast_math = _check_fast_math(fast_math)
        self.name = fn.__name__
        self.signature = inspect.signature(fn)
        self.constexpr_names = {n for n, p in self.signature.parameters.items()
                                if p.annotation is Constexpr or p.annotation == "Constexpr"
                                or p.annotation == "moye.Constexpr"}
        self._backend = backend_named(backend)
        self._rewritten = None          # the function to trace (see _rewrite)
        self._stamp = source_stamp(fn)  # its file when defined (rewrite_function)
        self._identity = None           # code_identity(), computed once
        self._watch = ()                # the globals it was made of (identity.changed)
        # The caches, each bounded:
        # (binding.key, block) -> (IR kernel, parameter records): each trace once, for
        # ir(), cuda_source() and a compile for another backend or arch
        self._traces = {}
        # (binding.key, block, backend, arch) -> the backend's executable
        self._compiled = {}
        # (block, binding.key, dispatch.entry_key) -> dispatch.Entry: the fast path of a
        # specialization for arguments of these classes and strides
        self._entries = {}
        # config as written -> its launch function: what kern[grid, block] returns
        self._launches = {}
        # config as written -> [calls in a row the first served, recent Entries, latest first]
        self._recent = {}
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
        self._backend = backend_named(value)
        self._entries.clear()           # they chose a backend without asking
        self._launches.clear()
        self._recent.clear()

    @property
    def fast_math(self):
        """Whether moye.exp, exp2, rsqrt, tanh and Float32 division use the
        approximate forms (`@moye.kernel(fast_math=True)`); fixed at
        decoration, and part of each specialization's cache key."""
        return self._fast_math

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
        the grid, at most 16 blocks; more than 8 only on the GPUs that allow
        it, such as the H100) the grid's blocks run in thread-block clusters
        (sm_90; cuLaunchKernelEx): see device/cluster.py."""
        try:
            return self._launches[config]
        except (KeyError, TypeError):
            return self._new_launch(config)

    def _config_dims(self, config):
        """(grid, block, cluster or None) of a launch configuration, checked."""
        if not isinstance(config, tuple) or len(config) not in (2, 3):
            raise LaunchError(f"launch a kernel as {self.name}[grid, block](*args) or "
                              f"{self.name}[grid, block, cluster](*args); got "
                              f"{self.name}[{config!r}]")
        grid, block = _launch_dims(config[0], config[1])
        return grid, block, check_cluster(grid, config[2]) if len(config) == 3 else None

    def _new_launch(self, config):
        grid, block, cluster = self._config_dims(config)
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
            key, self._watch = function_key_and_watch(self.fn)
            h = hashlib.sha256(key.encode())
            try:
                with open(inspect.getsourcefile(self.fn), "rb") as f:
                    h.update(f.read())
            except (OSError, TypeError):
                pass                    # no file: the code object alone
            self._identity = f"{self.fn.__module__}.{self.fn.__qualname__}:{h.hexdigest()}"
        return self._identity

    def _current(self):
        """Forget every trace, compile and launch function where a global the
        kernel's code reads was rebound since they were made (its code
        identity was of the old value): the next launch traces again."""
        if self._watch and changed(self._watch):
            self._identity, self._watch = None, ()
            for cache in (self._traces, self._compiled, self._entries, self._launches,
                          self._recent):
                cache.clear()

    def specialization_text(self, binding, block):
        """The text that names a specialization in the disk cache: the
        kernel's code identity, its arguments' key and the block (and
        `|fast_math` for a fast_math kernel)."""
        text = f"{self.code_identity()}|{key_text(binding.key)}|{block}"
        return text + "|fast_math" if self._fast_math else text

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
            self._rewritten = rewrite_function(self.fn, stamp=self._stamp) or self.fn
        return self._rewritten

    def _bind(self, args):
        return bind(self._param_names, self._defaults, self.constexpr_names, args)

    def trace(self, *args, block=1):
        """The IR kernel, the arguments' binder.Binding and its parameter
        records for these arguments."""
        self._current()
        binding = self._bind(args)
        block = _dim3(block, "block")
        key = (binding.key, block)
        hit = self._traces.get(key)
        if hit is None:
            hit = self._traces[key] = self._do_trace(binding, block)
        return hit[0], binding, hit[1]

    def _do_trace(self, binding, block):
        fn = self._rewrite()
        builder = Builder(identifier(self.name))
        builder.kernel.source_file = inspect.getsourcefile(self.fn) or ""
        builder.block = block
        builder.fast_math = self._fast_math
        with tracing_context(builder), allocator(register_allocate):
            values = _trace_arguments(builder, binding)
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
        return builder.kernel, binding.params

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
        backend = backend_named(backend) or self.backend or default_backend()
        check_arch_name(arch)
        block = _dim3(block, "block")
        check_block(block)
        self._current()
        binding = self._bind(args)
        exe = self._executable(backend, binding, block, arch)
        return CompiledKernel(self, exe, binding, block)

    def launch(self, grid, block, args, smem=0, stream=None, backend=None, cluster=None):
        """`self[grid, block](*args, smem=smem, stream=stream, backend=backend)`,
        or self[grid, block, cluster](...) with a cluster."""
        grid, block = _launch_dims(grid, block)
        if cluster is not None:
            grid += check_cluster(grid, cluster)
        self._dispatch(None, grid, block, None, tuple(args), smem, stream, backend)

    def prepared(self, config, args):
        """`self[config](*args)` made ready to launch again on new arrays of
        the same kinds, rereading only their addresses
        (dispatch.prepared_launch: `f(*new_arrays)`, the arrays alone, at
        the places `f.places` of args, gives None once launched, and
        NOT_MINE, launching nothing, where an address's alignment selects
        another specialization). It checks nothing else of the new arguments
        (the arrays' dtypes, shapes, strides and device, the other values):
        for callers that hold them fixed, as the ops' replayed calls
        (moye/ops/replay.py) do. A TMACopy's place takes the array at its
        new tensor map's address (the map is moved there). None where the
        launch would run on the CPU backend.

            >>> import moye, numpy as np
            >>> @moye.kernel
            ... def fill(a, v):
            ...     a[moye.thread_idx.x] = v
            >>> fill.prepared((1, 4), (np.zeros(4, np.float32), 2.0)) is None   # the CPU backend
            True
        """
        grid, block, cluster = self._config_dims(config)
        if not isinstance(args, (tuple, list)):
            raise MoyeTypeError(f"{self.name}.prepared(config, args): args must be a tuple or "
                                f"list of the kernel's arguments, got {type(args).__name__}")
        self._current()
        binding = self._bind(tuple(args))
        backend = self._backend_for(binding)
        if backend != "cuda":
            return None
        _check_devices(binding, backend)
        fast = getattr(self._executable(backend, binding, block), "fast_launch", None)
        return None if fast is None else \
            prepared_launch(binding, fast(block), grid + (cluster or ()), len(args))

    def _backend_for(self, binding, backend=None):
        """The backend a launch of `binding` runs on: `backend` if given, else
        the kernel's own, else its arrays' device's, else the default."""
        return backend_named(backend) or self._backend or _backend_of(binding) or \
            default_backend()

    def _dispatch(self, config, grid, block, tried, args, smem, stream, backend):
        """A launch that `config`'s launch function (of Entry `tried`, if
        any) did not take (see dispatch.py): by another recent specialization
        of the configuration, or by binding the arguments (tracing and
        compiling if needed), after which that specialization gets a fast
        path (see _served for which launch function `config` then maps to)."""
        while args and args[-1] is MISSING:       # from a launch function's defaults
            args = args[:-1]
        self._current()
        check_smem(smem)
        check_stream(stream)
        chosen = backend
        if backend is None:
            recent = self._recent.get(config)
            for entry in recent[1:] if recent else ():
                if entry is not tried:
                    probe = entry.probes.get(config) or entry.probe(config, grid)
                    if probe(*args, smem=smem, stream=stream) is not NOT_MINE:
                        return self._served(config, grid, block, entry)
        binding = self._bind(args)
        backend = self._backend_for(binding, backend)
        _check_devices(binding, backend)
        exe = self._executable(backend, binding, block)
        more = {"cluster": grid[3:]} if len(grid) > 3 else {}     # (grid, cluster) in clusters
        exe.launch(grid[:3], block, binding, smem=smem, stream=stream, **more)
        fast = getattr(exe, "fast_launch", None)
        if chosen is not None or fast is None:
            return
        key = (block, binding.key, entry_key(args, binding))
        entry = self._entries.get(key)
        if entry is None:
            entry = make_entry(self._param_names, self._defaults, args, binding, fast(block),
                               self._watch)
            if len(self._entries) >= ENTRIES_LIMIT:
                self._entries.clear()
            self._entries[key] = entry
        self._install(config, grid, block, entry)

    def _served(self, config, grid, block, entry):
        """After `entry` launched for a call that `config`'s launch function
        did not take: it comes first among the recent ones, and after a few
        such calls in a row its launch function becomes `config`'s (calls
        alternating between two specializations keep one of them direct)."""
        recent = self._recent.get(config)
        if recent is None:                  # the configuration's first specialization
            return self._install(config, grid, block, entry)
        if recent[1] is not entry:
            self._recent[config] = [1, entry] + [e for e in recent[1:] if e is not entry]
        elif self._launches.get(config) is not entry.installed(config):
            recent[0] += 1
            if recent[0] >= 4:
                return self._install(config, grid, block, entry)

    def _install(self, config, grid, block, entry):
        """Make `entry`'s launch function the one `self[config]` gives, and
        `entry` the first of the configuration's recent ones (at most 4)."""
        if config is None:
            return
        if len(self._launches) >= 256:
            self._launches.clear()
            self._recent.clear()
        fallback = functools.partial(self._dispatch, config, grid, block, entry)
        self._launches[config] = entry.launcher(config, grid, fallback)
        recent = self._recent.get(config, [0])
        self._recent[config] = [0, entry] + [e for e in recent[1:] if e is not entry][:3]


def _dispatching_launch(kernel, config, grid, block):
    """The first launch function of a configuration: it goes through
    kernel._dispatch, or, once the configuration has a launch function of
    its own, through that one (for callers who kept this one)."""
    launches = kernel._launches

    def launch(*args, smem=0, stream=None, backend=None, **keywords):
        if keywords:
            args = by_position(kernel._param_names, kernel._defaults, args, keywords)
        f = launches.get(config)
        if f is not None and f is not launch:
            if not smem and stream is None and backend is None:
                return f(*args)
            return f(*args, smem=smem, stream=stream, backend=backend)
        kernel._dispatch(config, grid, block, None, args, smem, stream, backend)
    launch.__name__ = launch.__qualname__ = f"{kernel.name}[{grid}, {block}]"
    return launch


def check_cluster(grid, cluster):
    """The cluster shape as a 3-tuple, checked against the grid (x, y, z)."""
    cluster = _dim3(cluster, "cluster")
    if any(g % c for g, c in zip(grid, cluster)):
        raise LaunchError(f"the grid {grid} is not divisible by the cluster {cluster}: each grid "
                          "dimension must be a multiple of the cluster's")
    n = cluster[0] * cluster[1] * cluster[2]
    if n > MAX_CLUSTER_BLOCKS:
        raise LaunchError(f"the cluster {cluster} has {n} blocks; a cluster has at most "
                          f"{MAX_CLUSTER_BLOCKS} (8 on every GPU with clusters)")
    return cluster


def _check_devices(binding, backend):
    """A clear error for an array the backend cannot reach."""
    want = "cuda" if backend == "cuda" else "cpu"
    for p, _ in binding.arrays():
        if p.device != want:
            where = "on the GPU" if p.device == "cuda" else "in host memory"
            raise LaunchError(f"argument '{p.name}' is {where}, but this launch runs on the "
                              f"{backend} backend")


def _backend_of(binding):
    """"cuda" or "cpu" by the device of the first array argument."""
    for p, _ in binding.arrays():
        return "cuda" if p.device == "cuda" else "cpu"
    return None


class CompiledKernel:
    """A compiled specialization: call it with arguments of the same kinds."""

    def __init__(self, kernel, exe, binding, block):
        self.kernel, self.exe, self.block = kernel, exe, block
        self.binding = binding

    def __call__(self, *args, grid=None, block=None, smem=0, stream=None, cluster=None,
                 **keywords):
        name = self.kernel.name
        if keywords:
            args = by_position(self.kernel._param_names, self.kernel._defaults, args, keywords,
                               "grid=, block=, smem=, stream= and cluster=")
        if grid is None:
            raise LaunchError(f"a compiled {name} is launched as ck(*args, grid=..., "
                              "block=...): grid is missing")
        binding = self.kernel._bind(args)
        if binding.key != self.binding.key:
            raise LaunchError(f"these arguments select another specialization of {name} than "
                              f"the compiled one{binding.difference(self.binding)}; call "
                              f"{name}.compile with them (or launch {name}[grid, block](...))")
        grid, block = _launch_dims(grid, self.block if block is None else block)
        check_smem(smem)
        check_stream(stream)
        more = {} if cluster is None else {"cluster": check_cluster(grid, cluster)}
        self.exe.launch(grid, block, binding, smem=smem, stream=stream, **more)

    @property
    def key(self):
        """The specialization key it was compiled for (binder records)."""
        return self.binding.key

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


def _check_fast_math(fast_math):
    if fast_math is not True and fast_math is not False:
        raise MoyeTypeError(f"moye.kernel(fast_math=...) must be True or False, got "
                            f"{fast_math!r}")
    return fast_math


def kernel(fn=None, *, backend=None, fast_math=False):
    """Decorate a Python function as a moye kernel (see the module doc):
    `@moye.kernel`, `@moye.kernel(backend="cpu")`, or
    `@moye.kernel(fast_math=True)`: moye.exp, exp2, rsqrt, tanh and Float32
    division by their PTX approximations (docs/builtins.md, "Fast math")."""
    backend_named(backend)
    _check_fast_math(fast_math)
    if fn is None:
        return lambda f: kernel(f, backend=backend, fast_math=fast_math)
    if not inspect.isfunction(fn):
        raise MoyeTypeError(f"moye.kernel decorates a Python function (def ...), got "
                            f"{type(fn).__name__} {fn!r}: write @moye.kernel above a def, or "
                            "@moye.kernel(backend=...) to choose a backend")
    return KernelFunction(fn, backend, fast_math)
