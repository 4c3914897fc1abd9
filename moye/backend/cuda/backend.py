"""The CUDA backend: IR -> C++ (codegen) -> cubin (NVRTC, cached) -> launch."""
import ctypes
import json

from ...errors import CudaError, MoyeError
from ...types import as_element_type
from ... import ir
from ...compiler.binder import FastLaunch
from ...ir.targets import (ARCH_NAME, SMEM_LIMIT, check_launch_smem,  # noqa: F401
                           check_shared_memory, check_smem, check_stream)


class CudaExecutable:
    """A compiled kernel on the current device."""

    def __init__(self, kernel, source, function, param_types, arch=None, shared=0):
        self.kernel, self.source, self.function = kernel, source, function
        self.param_types = param_types
        self.arch, self.shared = arch, shared     # the target; bytes of its shared arrays
        self.smem_limit_set = 0
        if arch and int(ARCH_NAME.match(arch)[1]) >= 90:
            allow_large_clusters(function)

    def max_active_clusters(self, block, cluster, smem=0):
        """Clusters of this kernel that fit on the device at once."""
        return self.function.max_active_clusters(
            block, self._more_smem(smem + self.kernel.dynamic_smem), cluster)

    def launch(self, grid, block, binding, smem=0, stream=None, cluster=None):
        """Launch with the values of `binding` (binder.Binding), packed in
        the parameters' order."""
        from . import driver
        if stream is None:
            stream = current_stream_getter()()
        smem = self._launch_smem(smem) if smem else self._more_smem(self.kernel.dynamic_smem)
        values = binding.values()
        if len(values) != len(self.param_types):
            raise MoyeError(f"kernel '{self.kernel.name}': {len(self.param_types)} parameters, "
                            f"but the arguments give {len(values)} values")
        args = [(_ctype(t), v if t != ir.TENSOR_MAP else driver.tensor_map_bytes(v))
                for t, v in zip(self.param_types, values)]
        driver.launch(self.function, grid, block, args, shared_mem=smem, stream=stream,
                      cluster=cluster)

    def fast_launch(self, block):
        """The binder.FastLaunch of this kernel with `block` threads: what
        the frontend's launch functions (compiler/dispatch.py) call to pack
        the values into a parameter buffer with one struct call and launch
        through cuda.bindings' cuLaunchKernel (its Cython wrapper costs less
        than libcuda through ctypes)."""
        from . import driver
        kinds = tuple(_ctype(t) for t in self.param_types)
        self._more_smem(self.kernel.dynamic_smem)
        first = driver.ParamPack(kinds)
        cu = driver._cu()
        return FastLaunch(
            pack=first.pack_into, slots=[first.slot()],
            new_slot=lambda: driver.ParamPack(kinds).slot(),
            launch=cu.cuLaunchKernel, launch_ex=cu.cuLaunchKernelEx,
            ok=cu.CUresult.CUDA_SUCCESS, function=self.function.handle, block=tuple(block),
            dynamic_smem=self.kernel.dynamic_smem, launch_smem=self._launch_smem,
            current_stream=current_stream_getter(), stream_handle=_stream_handle,
            cluster_config=driver.cluster_launch_config, failed=self._launch_failed,
            tensor_map=driver.tensor_map_bytes, tensor_map_at=driver.tensor_map_at)

    def _launch_smem(self, smem):
        """The dynamic shared memory of a launch asking `smem` more bytes,
        checked (an int >= 0, within the target's limit beside the kernel's
        own) and allowed."""
        check_smem(smem)
        check_launch_smem(self.kernel.name, self.shared, smem, self.arch)
        return self._more_smem(smem + self.kernel.dynamic_smem)

    def _more_smem(self, total):
        """`total` bytes of dynamic shared memory, allowed first if above 48 KB."""
        if total > 48 * 1024 and total > self.smem_limit_set:
            self.function.set_max_dynamic_shared_memory(total)
            self.smem_limit_set = total
        return total

    def _launch_failed(self, err, grid, block, smem, stream, params, cluster=None):
        """A fast launch that failed: once more if this thread had no current
        context (CUDA_ERROR_INVALID_CONTEXT), else the CudaError."""
        from . import driver
        driver.relaunch(self.function, grid, block, smem, stream, params, err, cluster)


def allow_large_clusters(function):
    """Let `function` launch in clusters of more than the portable 8 blocks
    (up to 16 on an H100). A device that has no such sizes refuses the
    attribute: there a launch of more than 8 fails in the driver, with its
    error."""
    try:
        function.set_attribute("non_portable_cluster_size_allowed", 1)
    except CudaError:
        pass


class Specialization:
    """A compiled specialization: the kernel's name, dynamic shared memory,
    bytes of its shared arrays, parameter types, cubin and CUDA source;
    `kernel` is its IR where it was
    traced in this process, None where it came from the disk cache. Stored
    as a JSON header, a zero byte, the cubin, then the source."""

    def __init__(self, name, dynamic_smem, shared, param_types, cubin, source, kernel=None):
        self.name, self.dynamic_smem, self.shared = name, dynamic_smem, shared
        self.param_types = param_types
        self.cubin, self.source, self.kernel = cubin, source, kernel

    def encode(self):
        head = {"name": self.name, "dynamic_smem": self.dynamic_smem, "shared": self.shared,
                "params": [_type_name(t) for t in self.param_types], "cubin": len(self.cubin)}
        return json.dumps(head).encode() + b"\0" + self.cubin + self.source.encode()

    @classmethod
    def decode(cls, blob):
        """The Specialization in a cache payload; None for none, or for a
        payload that is not one (damaged or foreign, if checksum-valid)."""
        if blob is None:
            return None
        try:
            head, body = blob.split(b"\0", 1)
            meta = json.loads(head)
            name, smem, n = meta["name"], meta["dynamic_smem"], meta["cubin"]
            shared = meta["shared"]
            if not (isinstance(name, str) and name.isidentifier() and type(smem) is int and
                    smem >= 0 and type(shared) is int and shared >= 0 and type(n) is int and
                    4 <= n <= len(body)):
                return None
            cubin, source = body[:n], body[n:].decode()
            if cubin[:4] != b"\x7fELF":
                return None
            params = [_type(t) for t in meta["params"]]
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError, MoyeError):
            return None
        return cls(name, smem, shared, params, cubin, source)


def _stream_handle(stream):
    """A launch's `stream=` (not None, not an int) as its handle, or a LaunchError."""
    from . import driver
    check_stream(stream)
    return driver.stream_handle(stream)


class _KernelInfo:
    """What a launch needs of a kernel loaded from the cache."""

    def __init__(self, name, dynamic_smem):
        self.name, self.dynamic_smem = name, dynamic_smem


def _type_name(t):
    if isinstance(t, ir.PtrType):
        return f"ptr:{t.elem.name}:{t.space}"
    if isinstance(t, ir.OpaqueType):
        return f"opaque:{t.name}:{t.nbytes}:{t.align}"
    return t.name


def _type(name):
    if name.startswith("opaque:"):
        _, n, nbytes, align = name.split(":")
        return ir.OpaqueType(n, int(nbytes), int(align))
    if name.startswith("ptr:"):
        _, elem, space = name.split(":")
        return ir.PtrType(as_element_type(elem), space)
    return as_element_type(name)


_CTYPES = {"Float32": ctypes.c_float, "TFloat32": ctypes.c_float, "Float64": ctypes.c_double,
           "Int32": ctypes.c_int32, "UInt32": ctypes.c_uint32, "Int64": ctypes.c_int64,
           "UInt64": ctypes.c_uint64, "Bool": ctypes.c_bool, "Int16": ctypes.c_int16,
           "Int8": ctypes.c_int8, "UInt8": ctypes.c_uint8, "UInt16": ctypes.c_uint16}


def _ctype(t):
    """How a kernel parameter of IR type `t` travels to cuLaunchKernel."""
    if isinstance(t, ir.PtrType):
        return ctypes.c_uint64
    if isinstance(t, ir.OpaqueType):
        from .driver import raw_kind
        return raw_kind(t.nbytes)
    try:
        return _CTYPES[t.name]
    except KeyError:
        raise MoyeError(f"the CUDA backend cannot pass a {t.name} kernel parameter") from None


def current_stream_getter():
    """A cheap callable giving the stream a launch without `stream=` uses:
    torch's current stream on moye's device where torch is imported, else 0
    (the legacy default stream)."""
    import functools
    import sys
    torch = sys.modules.get("torch")
    if torch is None:
        modules = sys.modules

        def no_torch():
            return 0 if "torch" not in modules else current_stream_getter()()
        return no_torch
    raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
    if raw is None:                         # a torch built without CUDA
        return int
    from . import driver
    return functools.partial(raw, driver.init()["ordinal"])


class CudaBackend:
    name = "cuda"

    def available(self):
        try:
            from . import driver
            return driver.device_count() > 0
        except Exception:
            return False

    def source(self, kernel, block):
        from .codegen import generate
        threads = block[0] * block[1] * block[2]
        return generate(kernel, threads)

    def compile(self, kernel, block, arch=None):
        from . import driver, nvrtc
        arch = arch or driver.device_arch()
        check_shared_memory(kernel, arch)
        ir.check_architecture(kernel, arch)
        source = self.source(kernel, block)
        module = nvrtc.compile_cuda(source, [ir.symbol(kernel.name)], arch)
        function = driver.load_module(module.cubin).get_function(ir.symbol(kernel.name))
        types = [p.type for p in kernel.params]
        exe = CudaExecutable(kernel, source, function, types, arch, ir.shared_bytes(kernel))
        exe.cubin = module.cubin
        return exe

    def compile_specialization(self, spec, trace, block, arch=None):
        """A kernel's specialization loaded on the device: built by
        build_specialization (from the disk cache by `spec`, the kernel's
        code and argument kinds, without tracing; or traced and compiled).
        A cached cubin the driver refuses is built again."""
        from . import driver
        arch = arch or driver.device_arch()
        built = self.build_specialization(spec, trace, block, arch)
        try:
            function = driver.load_module(built.cubin).get_function(ir.symbol(built.name))
        except CudaError:
            if built.kernel is not None:
                raise
            built = self.build_specialization(spec, trace, block, arch, fresh=True)
            function = driver.load_module(built.cubin).get_function(ir.symbol(built.name))
        kernel = built.kernel or _KernelInfo(built.name, built.dynamic_smem)
        exe = CudaExecutable(kernel, built.source, function, built.param_types, arch, built.shared)
        exe.cubin = built.cubin
        return exe

    def build_specialization(self, spec, trace, block, arch, fresh=False):
        """A specialization's cubin and CUDA source for `arch`, with NVRTC
        alone (no GPU needed): from the disk cache by `spec`, or traced by
        `trace()`, compiled and stored (always so with `fresh`). The key
        is `spec`, the architecture, NVRTC's options and identity (its
        version, by its file) and moye's own source (cache.key)."""
        from . import cache, nvrtc
        key = cache.key(spec, arch, nvrtc.standard_options(arch), nvrtc.cache_identity(),
                        "specialization")
        if not fresh:
            built = Specialization.decode(cache.get(key))
            if built is not None:
                return built
        kernel = trace()
        check_shared_memory(kernel, arch)
        ir.check_architecture(kernel, arch)
        source = self.source(kernel, block)
        module = nvrtc.compile_cuda(source, [ir.symbol(kernel.name)], arch)
        built = Specialization(kernel.name, kernel.dynamic_smem, ir.shared_bytes(kernel),
                               [p.type for p in kernel.params], module.cubin, source, kernel)
        cache.put(key, built.encode())
        return built

    def compile_only(self, kernel, block, arch):
        """NVRTC compilation without a GPU (for CI): the cubin bytes."""
        from . import nvrtc
        ir.check_architecture(kernel, arch)
        return nvrtc.compile_cuda(self.source(kernel, block), [ir.symbol(kernel.name)], arch)
