"""The CUDA driver through cuda.bindings.driver: lazy initialization, the
device's architecture, modules and functions, and kernel launches.

Kernel parameters. cuLaunchKernel takes a `void**` array, one pointer per
parameter, each pointing at that parameter's bytes. A ParamPack keeps both
in one preallocated buffer (the pointer array first, then the values at
their natural alignment), so filling it for a launch is one `struct.pack_into`
call and the pointer array never changes. Kinds are ctypes types: c_uint64 or
c_void_p for pointers, c_int32/c_int64/c_float/c_double/... for scalars, and
any ctypes Structure or Array type (`c_char * 128`) for a struct passed by
value, such as a TMA descriptor. Buffers are per thread, because
cuLaunchKernel releases the GIL while it reads them.

Launches call cuda.bindings' cuLaunchKernel with the params array's address
(its Cython wrapper costs about 0.4 us; libcuda's through ctypes with
argtypes about 1.5 us), and cuLaunchKernelEx for thread-block clusters.
"""
import ctypes
import struct
import threading

from ...errors import CudaError, MoyeError

__all__ = ["init", "device_count", "device_arch", "compute_capability", "device_name",
           "driver_version", "max_shared_memory_per_block_optin", "multiprocessor_count", "load_module", "Module",
           "Function", "ParamPack", "Launcher", "launch", "pack", "raw_launch", "raise_error",
           "stream_handle", "relaunch", "cluster_launch_config", "synchronize", "alloc", "free", "copy_to_device",
           "copy_to_host", "memset_d8", "encode_tensor_map", "tensor_map_bytes",
           "tensor_map_call", "tensor_map_at"]

_state = {}
_tls = threading.local()


def _cu():
    cu = _state.get("cu")
    if cu is None:
        try:
            from cuda.bindings import driver as cu
        except ImportError as e:
            raise MoyeError("the CUDA backend needs cuda-bindings: "
                            "pip install 'cuda-bindings>=13.0,<13.1'") from e
        _state["cu"] = cu
    return cu


def _error_name(err):
    try:
        cu = _cu()
        name = cu.cuGetErrorName(err)[1].decode()
        text = cu.cuGetErrorString(err)[1].decode()
        return name, text
    except Exception:
        return str(err), ""


def _raise(err, what, hint=""):
    name, text = _error_name(err)
    raise CudaError(f"CUDA error {name} in {what}" + (f": {text}" if text else "")
                    + (f"\n{hint}" if hint else ""), name)


def _check(result, what):
    """The values of a driver call's result tuple; a CudaError if it failed."""
    if result[0] != 0:
        _raise(result[0], what)
    return result[1] if len(result) == 2 else result[1:]


def init(ordinal=0):
    """Initialize the driver once and make device `ordinal`'s primary context
    (the one torch and the runtime API use) current in this thread."""
    st = _state.get("device")
    if st is None:
        cu = _cu()
        try:
            err = cu.cuInit(0)[0]
        except RuntimeError as e:           # no libcuda.so: no driver on this machine
            raise CudaError(f"no CUDA driver: {e}", "CUDA_ERROR_NO_DEVICE") from None
        if err != 0:
            _raise(err, "cuInit")
        dev = _check(cu.cuDeviceGet(ordinal), "cuDeviceGet")
        ctx = _check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        st = _state["device"] = {"dev": dev, "ctx": ctx, "ordinal": ordinal}
        _tls.ctx = None
    if getattr(_tls, "ctx", None) is None:
        _check(_cu().cuCtxSetCurrent(st["ctx"]), "cuCtxSetCurrent")
        _tls.ctx = st["ctx"]
    return st


def device_count():
    """How many CUDA devices the driver sees; 0 where there is no driver."""
    try:
        cu = _cu()
        if cu.cuInit(0)[0] != 0:
            return 0
        err, n = cu.cuDeviceGetCount()
        return n if err == 0 else 0
    except Exception:
        return 0


def _attribute(name):
    cu = _cu()
    attr = getattr(cu.CUdevice_attribute, "CU_DEVICE_ATTRIBUTE_" + name)
    return _check(cu.cuDeviceGetAttribute(attr, init()["dev"]), f"cuDeviceGetAttribute({name})")


def compute_capability():
    """(major, minor) of the current device."""
    return _attribute("COMPUTE_CAPABILITY_MAJOR"), _attribute("COMPUTE_CAPABILITY_MINOR")


def device_arch():
    """The NVRTC target of the current device: "sm_80", "sm_89", and
    "sm_90a" / "sm_100a" on 9.0 / 10.0 (wgmma, setmaxnreg, TMA multicast
    need the arch-specific target; such a cubin runs only there)."""
    major, minor = compute_capability()
    return f"sm_{major}{minor}" + ("a" if (major, minor) in ((9, 0), (10, 0)) else "")


def device_name():
    cu = _cu()
    raw = _check(cu.cuDeviceGetName(256, init()["dev"]), "cuDeviceGetName")
    return raw.split(b"\0", 1)[0].decode()


def driver_version():
    """The driver's CUDA version as (major, minor), e.g. (13, 0)."""
    v = _check(_cu().cuDriverGetVersion(), "cuDriverGetVersion")
    return v // 1000, v % 1000 // 10


def max_shared_memory_per_block_optin():
    """Bytes of shared memory a block may use after opting in (above 48 KB
    needs Function.set_max_dynamic_shared_memory)."""
    return _attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")


def multiprocessor_count():
    """The current device's streaming multiprocessors (132 on an H100 SXM)."""
    return _attribute("MULTIPROCESSOR_COUNT")


def synchronize():
    """Wait for all work on the device's primary context."""
    init()
    _check(_cu().cuCtxSynchronize(), "cuCtxSynchronize")


# -- modules and functions ------------------------------------------------------

class Module:
    """A loaded cubin."""

    def __init__(self, handle):
        self.handle = handle

    def get_function(self, name):
        """The kernel `name` (its lowered name for C++ kernels)."""
        h = _check(_cu().cuModuleGetFunction(self.handle, name.encode()),
                   f"cuModuleGetFunction('{name}')")
        return Function(h, self, name)

    def unload(self):
        if self.handle is not None:
            _check(_cu().cuModuleUnload(self.handle), "cuModuleUnload")
            self.handle = None


_FUNC_ATTRS = {"num_regs": "NUM_REGS", "local_size_bytes": "LOCAL_SIZE_BYTES",
               "shared_size_bytes": "SHARED_SIZE_BYTES", "const_size_bytes": "CONST_SIZE_BYTES",
               "max_threads_per_block": "MAX_THREADS_PER_BLOCK",
               "max_dynamic_shared_size_bytes": "MAX_DYNAMIC_SHARED_SIZE_BYTES",
               "binary_version": "BINARY_VERSION"}


class Function:
    """A kernel in a loaded module."""

    def __init__(self, handle, module, name=""):
        self.handle, self.module, self.name = handle, module, name
        self.address = int(handle)          # what libcuda takes
        self.max_dynamic_shared_memory = 48 * 1024

    def attribute(self, name):
        """One of num_regs, local_size_bytes (spills), shared_size_bytes,
        const_size_bytes, max_threads_per_block, max_dynamic_shared_size_bytes,
        binary_version."""
        cu = _cu()
        attr = getattr(cu.CUfunction_attribute, "CU_FUNC_ATTRIBUTE_" + _FUNC_ATTRS[name])
        return _check(cu.cuFuncGetAttribute(attr, self.handle), f"cuFuncGetAttribute({name})")

    def set_attribute(self, name, value):
        """cuFuncSetAttribute with CU_FUNC_ATTRIBUTE_<NAME>."""
        cu = _cu()
        attr = getattr(cu.CUfunction_attribute, "CU_FUNC_ATTRIBUTE_" + name.upper())
        _check(cu.cuFuncSetAttribute(self.handle, attr, value),
               f"cuFuncSetAttribute({name}={value}) of '{self.name}'")

    def set_max_dynamic_shared_memory(self, nbytes):
        """Allow launches with up to `nbytes` of dynamic shared memory
        (needed above 48 KB)."""
        self.set_attribute("MAX_DYNAMIC_SHARED_SIZE_BYTES", nbytes)
        self.max_dynamic_shared_memory = nbytes

    def max_active_clusters(self, block, shared_mem, cluster):
        """How many clusters of `cluster` (x, y, z) blocks of `block` threads
        and `shared_mem` dynamic bytes can run at once on the device
        (cuOccupancyMaxActiveClusters): the persistent grid of a cluster
        kernel. Not every multiprocessor can join a cluster: on an H100 132
        SMs hold fewer than 66 pairs."""
        cfg = cluster_launch_config(tuple(cluster), tuple(block), shared_mem, 0, tuple(cluster))
        return _check(_cu().cuOccupancyMaxActiveClusters(self.handle, cfg),
                      "cuOccupancyMaxActiveClusters")

    def __repr__(self):
        return f"Function({self.name!r})"


def load_module(cubin):
    """Load a cubin into the current device's primary context."""
    init()
    return Module(_check(_cu().cuModuleLoadData(cubin), "cuModuleLoadData"))


# -- kernel parameters -----------------------------------------------------------

_SCALARS = {ctypes.c_bool: "?", ctypes.c_int8: "b", ctypes.c_uint8: "B", ctypes.c_int16: "h",
            ctypes.c_uint16: "H", ctypes.c_int32: "i", ctypes.c_uint32: "I",
            ctypes.c_int64: "q", ctypes.c_uint64: "Q", ctypes.c_float: "f",
            ctypes.c_double: "d", ctypes.c_void_p: "Q", ctypes.c_size_t: "Q",
            ctypes.c_char: "c"}
_RAW_ALIGN = 64                 # a CUtensorMap is 64-byte aligned
_raw_types = {}


def raw_kind(nbytes):
    """The kind of an opaque `nbytes`-byte struct passed by value."""
    t = _raw_types.get(nbytes)
    if t is None:
        t = _raw_types[nbytes] = ctypes.c_char * nbytes
    return t


class ParamPack:
    """A kernel-params array for parameters of fixed `kinds`, with room for
    their values; `pack(values)` fills it, `address` is what cuLaunchKernel
    takes. One per thread: a launch reads it while the GIL is released.
    `offsets` are where each value lies, from `address` (the pointer array
    comes first; structs passed by value are 64-byte aligned).

        >>> from ctypes import c_char, c_double, c_int32, c_uint64
        >>> ParamPack((c_uint64, c_int32, c_double, c_char * 128)).offsets
        (32, 40, 48, 64)
    """

    def __init__(self, kinds):
        self.kinds = kinds = tuple(kinds)
        n = len(kinds)
        fmt, offsets, pos, raw = ["<"], [], 8 * n, []
        for i, k in enumerate(kinds):
            code = _SCALARS.get(k)
            if code is not None:
                size = align = struct.calcsize(code)
            elif isinstance(k, type) and issubclass(k, (ctypes.Structure, ctypes.Union,
                                                         ctypes.Array)):
                size = ctypes.sizeof(k)
                align = max(ctypes.alignment(k), _RAW_ALIGN)
                code = f"{size}s"
                raw.append((i, size))
            else:
                raise MoyeError(f"kernel parameter {i}: cannot pass a {k!r}; use a ctypes "
                                "scalar type (c_uint64 for pointers) or a ctypes Structure/"
                                "Array type for a struct passed by value")
            start = -(-pos // align) * align
            if start > pos:
                fmt.append(f"{start - pos}x")
            fmt.append(code)
            offsets.append(start)
            pos = start + size
        self._raw = tuple(raw)
        self._buf = ctypes.create_string_buffer(pos + 64)
        base = ctypes.addressof(self._buf)
        self._at = (-base) % 64
        self.address = base + self._at
        struct.pack_into(f"<{n}Q", self._buf, self._at, *(self.address + o for o in offsets))
        values = struct.Struct("".join(fmt))
        self._pack_into = self.pack_into = values.pack_into
        self._values_at = self._at + 8 * n
        self.offsets = tuple(offsets)
        self.size = pos

    def slot(self):
        """(buffer, offset, address): `pack_into(buffer, offset, *values)`
        fills the values; `address` is the params array for cuLaunchKernel.
        The buffer is what keeps the memory alive."""
        return self._buf, self._values_at, self.address

    def pack(self, values):
        """Write `values` (one per kind, in order) into the params buffer."""
        try:
            if self._raw:
                self._check_raw(values)
            self._pack_into(self._buf, self._values_at, *values)
        except (struct.error, TypeError):
            self._pack_into(self._buf, self._values_at, *self._convert(values))

    def _check_raw(self, values):
        for i, size in self._raw:        # struct would pad a short one with zeros
            v = values[i]
            if type(v) is bytes and len(v) != size:
                raise MoyeError(f"kernel parameter {i} is a {size}-byte struct, "
                                f"but got {len(v)} bytes")

    def _convert(self, values):
        """Values struct cannot take as they are (CUdeviceptr, ctypes
        objects, NumPy scalars): converted one by one, or a clear error."""
        if len(values) != len(self.kinds):
            raise MoyeError(f"kernel takes {len(self.kinds)} parameters, got {len(values)}")
        out = []
        for i, (k, v) in enumerate(zip(self.kinds, values)):
            code = _SCALARS.get(k)
            try:
                if isinstance(v, ctypes._SimpleCData):
                    v = v.value
                if code is None:
                    v = bytes(v)
                    if len(v) != ctypes.sizeof(k):
                        raise ValueError(f"{len(v)} bytes, expected {ctypes.sizeof(k)}")
                elif code in "fd":
                    v = float(v)
                elif code == "?":
                    v = bool(v)
                elif code != "c":
                    v = int(v) if v is not None else 0
                struct.pack("<" + (code or f"{len(v)}s"), v)
            except (struct.error, TypeError, ValueError) as e:
                raise MoyeError(f"kernel parameter {i} is a {k.__name__}, but got "
                                f"{type(v).__name__} {v!r:.60}: {e}") from None
            out.append(v)
        return out


def pack(kinds, values):
    """A kernel-params array and the ctypes objects it points to, one per
    parameter (keep both alive): for launch paths that refill the objects'
    `.value` in place and launch with addressof(params)."""
    holders = []
    for k, v in zip(kinds, values):
        if k in _SCALARS:
            holders.append(k(v))
        else:
            holders.append(k.from_buffer_copy(bytes(v)))
    params = (ctypes.c_void_p * len(holders))(*[ctypes.addressof(h) for h in holders])
    return params, holders


def _packs():
    try:
        return _tls.packs
    except AttributeError:
        _tls.packs = {}
        return _tls.packs


def _pack_of(kinds):
    packs = _packs()
    pack = packs.get(kinds)
    if pack is None:
        pack = packs[kinds] = ParamPack(kinds)
    return pack


def _split(args):
    """(kinds, values) of launch arguments: (ctype, value) pairs, ctypes
    instances, or bytes-like objects (structs passed by value)."""
    kinds, values = [], []
    for i, a in enumerate(args):
        if type(a) is tuple:
            k, v = a
        elif isinstance(a, ctypes._SimpleCData):
            k, v = type(a), a.value
        elif isinstance(a, (bytes, bytearray, memoryview)):
            k, v = raw_kind(len(a)), a
        elif isinstance(a, (ctypes.Structure, ctypes.Union, ctypes.Array)):
            k, v = type(a), bytes(a)
        else:
            raise MoyeError(f"kernel argument {i}: expected a (ctype, value) pair, a ctypes "
                            f"value or bytes, got {type(a).__name__}")
        kinds.append(k)
        values.append(v)
    return tuple(kinds), values


# -- launches ---------------------------------------------------------------------

def _dim3(d):
    if type(d) is int:
        return d, 1, 1
    d = tuple(d)
    return d + (1,) * (3 - len(d))


_configs = {}


def cluster_launch_config(grid, block, shared_mem, stream, cluster):
    """The CUlaunchConfig of a launch in clusters (3-tuples; stream an int
    handle), made once per distinct launch."""
    key = (grid, block, shared_mem, stream, cluster)
    cfg = _configs.get(key)
    if cfg is not None:
        return cfg
    cu = _cu()
    cfg = cu.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
    cfg.sharedMemBytes = shared_mem
    cfg.hStream = cu.CUstream(stream or 0)
    attr = cu.CUlaunchAttribute()
    attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster
    cfg.attrs = [attr]
    cfg.numAttrs = 1
    if len(_configs) > 256:
        _configs.clear()
    _configs[key] = cfg
    return cfg


def raw_launch():
    """libcuda's cuLaunchKernel through ctypes:
    fn(function, gx, gy, gz, bx, by, bz, shared_mem, stream, params, extra) -> CUresult
    with integer handles. For callers that hold integer handles only; moye's
    launches go through cuda.bindings, whose call costs less."""
    fn = _state.get("raw")
    if fn is None:
        init()
        fn = ctypes.CDLL("libcuda.so.1").cuLaunchKernel     # the library cuda.bindings loaded
        u = ctypes.c_uint
        fn.argtypes = [ctypes.c_void_p, u, u, u, u, u, u, u, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.c_void_p]
        fn.restype = ctypes.c_int
        _state["raw"] = fn
    return fn


def stream_handle(stream):
    """The integer handle of a stream given as an int, a torch or CuPy
    stream (`cuda_stream`, `ptr`), an object with `__cuda_stream__`, or a
    cuda.bindings CUstream; None is 0, the legacy default stream."""
    if stream is None:
        return 0
    if type(stream) is int:
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        return int(proto()[1])
    for attr in ("cuda_stream", "ptr"):
        handle = getattr(stream, attr, None)
        if isinstance(handle, int):
            return handle
    try:
        return int(stream)
    except TypeError:
        raise MoyeError(f"stream: expected an int handle, a torch/CuPy stream or a CUstream, "
                        f"got {type(stream).__name__}") from None


def raise_error(code, what):
    """Raise the CudaError for CUresult `code` (an int or CUresult) from `what`."""
    _raise(_cu().CUresult(int(code)), what)


def _launch(function, grid, block, shared_mem, stream, address, cluster):
    if type(grid) is not tuple or len(grid) != 3:
        grid = _dim3(grid)
    if type(block) is not tuple or len(block) != 3:
        block = _dim3(block)
    if type(stream) is not int:
        stream = stream_handle(stream)
    handle = function.handle if type(function) is Function else _function_handle(function)
    cu = _cu()
    for _ in range(2):
        if cluster is None:
            err = cu.cuLaunchKernel(handle, grid[0], grid[1], grid[2], block[0], block[1],
                                    block[2], shared_mem, stream or None, address, 0)[0]
        else:
            cfg = cluster_launch_config(grid, block, shared_mem, stream, _dim3(cluster))
            err = _cu().cuLaunchKernelEx(cfg, getattr(function, "handle", function), address,
                                         0)[0]
        if err == 0:
            return
        if err != 201 or "device" not in _state:      # 201: CUDA_ERROR_INVALID_CONTEXT
            break
        _tls.ctx = None                 # a thread that never made the context current
        init()
    _launch_failed(_cu().CUresult(int(err)), function, grid, block, shared_mem, cluster)


def _function_handle(function):
    """A CUfunction for a Function, a CUfunction or an integer handle."""
    cu = _cu()
    if isinstance(function, cu.CUfunction):
        return function
    return cu.CUfunction(int(getattr(function, "handle", function)))


def relaunch(function, grid, block, shared_mem, stream, address, err, cluster=None):
    """After a launch that returned `err`: launch once more if this thread
    had no current context (CUDA_ERROR_INVALID_CONTEXT), else raise the
    CudaError, with a hint where the configuration explains it."""
    if int(err) == 201 and "device" in _state:
        _tls.ctx = None
        init()
        if cluster is None:
            err = _cu().cuLaunchKernel(_function_handle(function), grid[0], grid[1], grid[2],
                                       block[0], block[1], block[2], shared_mem, stream or None,
                                       address, 0)[0]
        else:
            err = _cu().cuLaunchKernelEx(cluster_launch_config(grid, block, shared_mem, stream,
                                                               cluster),
                                         _function_handle(function), address, 0)[0]
        if err == 0:
            return
    _launch_failed(_cu().CUresult(int(err)), function, grid, block, shared_mem, cluster)


def _launch_failed(err, function, grid, block, shared_mem, cluster):
    name = getattr(function, "name", "") or "kernel"
    what = (f"{'cuLaunchKernelEx' if cluster else 'cuLaunchKernel'} of '{name}' (grid {grid}, "
            f"block {block}, {shared_mem} bytes of dynamic shared memory"
            + (f", cluster {_dim3(cluster)})" if cluster else ")"))
    hint = ""
    threads = block[0] * block[1] * block[2]
    limit = getattr(function, "max_dynamic_shared_memory", 48 * 1024)
    if shared_mem > limit:
        hint = (f"{shared_mem} bytes of dynamic shared memory is more than the {limit} this "
                "function allows; call set_max_dynamic_shared_memory first")
    elif threads > 1024:
        hint = f"a block has at most 1024 threads; this one has {threads}"
    _raise(err, what, hint)


def launch(function, grid, block, args, shared_mem=0, stream=0, cluster=None):
    """Launch `function` on `grid` x `block` (ints or up-to-3-tuples).

    `args`, in parameter order, are (ctype, value) pairs such as
    ``(ctypes.c_uint64, ptr)``, ``(ctypes.c_float, 0.5)``,
    ``(ctypes.c_char * 128, descriptor_bytes)``, or ctypes values, or bytes
    for a struct passed by value. `stream` is a CUstream or its integer
    handle (0: the legacy default stream). `cluster` (x, y, z) launches
    thread-block clusters through cuLaunchKernelEx (sm_90+).
    """
    kinds, values = _split(args)
    pack = _pack_of(kinds)
    pack.pack(values)
    _launch(function, grid, block, shared_mem, stream, pack.address, cluster)


class Launcher:
    """Launches of one function whose parameters have fixed `kinds`: each
    call packs the values with one struct call and calls cuLaunchKernel.
    ``Launcher(fn, (c_uint64, c_int32))(grid, block, (ptr, n))``."""

    def __init__(self, function, kinds):
        self.function = function
        self.kinds = tuple(kinds)
        ParamPack(self.kinds)               # reject unknown kinds now, not at the first launch
        self._local = threading.local()

    def _pack(self):
        pack = getattr(self._local, "pack", None)
        if pack is None:
            pack = self._local.pack = ParamPack(self.kinds)
        return pack

    def __call__(self, grid, block, values, shared_mem=0, stream=0, cluster=None):
        pack = self._pack()
        pack.pack(values)
        _launch(self.function, grid, block, shared_mem, stream, pack.address, cluster)


# -- device memory (tests, benchmarks) --------------------------------------------

def alloc(nbytes):
    """A device allocation of `nbytes` (cuMemAlloc), as an integer address."""
    init()
    return int(_check(_cu().cuMemAlloc(nbytes), f"cuMemAlloc({nbytes})"))


def free(ptr):
    _check(_cu().cuMemFree(ptr), "cuMemFree")


def copy_to_device(ptr, host):
    """Copy a C-contiguous NumPy array (or any buffer) to device address `ptr`."""
    init()
    n = memoryview(host).nbytes
    _check(_cu().cuMemcpyHtoD(ptr, host, n), "cuMemcpyHtoD")


def copy_to_host(host, ptr):
    """Copy device memory at `ptr` into a writable C-contiguous buffer."""
    init()
    n = memoryview(host).nbytes
    _check(_cu().cuMemcpyDtoH(host, ptr, n), "cuMemcpyDtoH")


def memset_d8(ptr, byte, nbytes):
    """Fill `nbytes` at `ptr` with `byte` (to poison outputs before a test)."""
    init()
    _check(_cu().cuMemsetD8(ptr, byte, nbytes), "cuMemsetD8")


# -- TMA tensor maps -------------------------------------------------------------------

def tensor_map_call(args):
    """The arguments of cuda.bindings' cuTensorMapEncodeTiled for `args`
    (moye.atom.arch.tma.TensorMapArgs), in order, enums as cuda.bindings'
    (no GPU needed); its lists take cuuint64_t / cuuint32_t values."""
    cu = _cu()
    u64 = lambda xs: [cu.cuuint64_t(int(x)) for x in xs]  # noqa: E731
    u32 = lambda xs: [cu.cuuint32_t(int(x)) for x in xs]  # noqa: E731
    enum = lambda kind, prefix, name: getattr(getattr(cu, kind), prefix + name)  # noqa: E731
    return (enum("CUtensorMapDataType", "CU_TENSOR_MAP_DATA_TYPE_", args.data_type), args.rank,
            args.global_address, u64(args.global_dim), u64(args.global_strides),
            u32(args.box_dim), u32(args.element_strides),
            enum("CUtensorMapInterleave", "CU_TENSOR_MAP_INTERLEAVE_", args.interleave),
            enum("CUtensorMapSwizzle", "CU_TENSOR_MAP_SWIZZLE_", args.swizzle),
            enum("CUtensorMapL2promotion", "CU_TENSOR_MAP_L2_PROMOTION_", args.l2_promotion),
            enum("CUtensorMapFloatOOBfill", "CU_TENSOR_MAP_FLOAT_OOB_FILL_", args.oob_fill))


def encode_tensor_map(args):
    """The 128 bytes of the CUtensorMap that cuTensorMapEncodeTiled makes
    from `args` (moye.atom.arch.tma.TensorMapArgs)."""
    init()
    result = _cu().cuTensorMapEncodeTiled(*tensor_map_call(args))
    if result[0] != 0:
        _raise(result[0], "cuTensorMapEncodeTiled", f"arguments: {args}")
    tensor_map = result[1]
    raw = bytes((ctypes.c_char * 128).from_address(tensor_map.getPtr()))
    if len(raw) != 128:
        raise MoyeError(f"cuTensorMapEncodeTiled gave {len(raw)} bytes, expected 128")
    return raw


def tensor_map_bytes(tma):
    """The tensor map of a TMACopy (encoded once, kept on it)."""
    raw = getattr(tma, "_cuda_tensor_map", None)
    if raw is None:
        raw = tma._cuda_tensor_map = encode_tensor_map(tma.args)
    return raw


def tensor_map_at(tma):
    """`at(address)`: the tensor map of TMACopy `tma` with its global address
    replaced (CUDA: cuTensorMapReplaceAddress), for a copy of the same kind
    on another array: a replayed launch's (compiler/dispatch.py,
    prepared_launch). Where the driver keeps the address in the map's first
    8 bytes, as checked once against cuTensorMapReplaceAddress, `at` writes
    them (0.1 us; the driver call costs 0.75). A misaligned address, which
    no map takes, gives the map unchanged (the launch refuses it)."""
    raw = tensor_map_bytes(tma)
    if _address_leads(raw, tma.args.global_address):
        tail = raw[8:]
        return lambda address: address.to_bytes(8, "little") + tail
    return lambda address: raw if address & 15 else replace_address(raw, address)


def replace_address(raw, address):
    """The 128-byte tensor map `raw` with its global address replaced by
    the driver (`address` 16-byte aligned)."""
    cu = _cu()
    tensor_map = cu.CUtensorMap()
    ctypes.memmove(tensor_map.getPtr(), raw, 128)
    _check(cu.cuTensorMapReplaceAddress(tensor_map, address), "cuTensorMapReplaceAddress")
    return bytes((ctypes.c_char * 128).from_address(tensor_map.getPtr()))


def _address_leads(raw, address):
    """Whether `raw`, a tensor map of `address`, holds it in its first 8
    bytes (little-endian) such that writing them is what the driver's
    cuTensorMapReplaceAddress does: checked on the first map, remembered."""
    leads = _state.get("address_leads")
    if leads is None:
        moved = address + 4096
        leads = _state["address_leads"] = raw[:8] == address.to_bytes(8, "little") and \
            replace_address(raw, moved) == moved.to_bytes(8, "little") + raw[8:]
    return leads and raw[:8] == address.to_bytes(8, "little")
