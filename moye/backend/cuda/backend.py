"""The CUDA backend: IR -> C++ (codegen) -> cubin (NVRTC, cached) -> launch."""
import ctypes

from ...errors import MoyeError
from ...kernel import ir
from .codegen import generate


class CudaExecutable:
    """A compiled kernel on the current device."""

    def __init__(self, kernel, source, function, param_types):
        self.kernel, self.source, self.function = kernel, source, function
        self.param_types = param_types
        self.smem_limit_set = 0

    def launch(self, grid, block, values, binding=None, smem=0, stream=None):
        from . import driver
        if stream is None:
            stream = _stream_getter()()
        smem += self.kernel.dynamic_smem
        if smem > 48 * 1024 and smem > self.smem_limit_set:
            self.function.set_max_dynamic_shared_memory(smem)
            self.smem_limit_set = smem
        args = [(_ctype(t), v) for t, (_, v) in zip(self.param_types, values)]
        driver.launch(self.function, grid, block, args, shared_mem=smem, stream=stream)


    def fast_launcher(self, binding, block):
        """A launcher for later calls with arguments of this binding's kinds:
        it refills preallocated parameter slots and calls cuLaunchKernel."""
        from . import driver
        params, holders = driver.pack([_ctype(t) for t in self.param_types],
                                      [0] * len(self.param_types))
        slots = []          # (argument index, how to read its values)
        i = 0
        for pos, (kind, name, info) in enumerate(binding.kinds):
            if kind == "static":
                continue
            if kind == "scalar":
                slots.append((pos, "scalar", holders[i], None))
                i += 1
                continue
            unit = info.key()[3]
            rank = len(info.shape)
            slots.append((pos, "array", holders[i:i + 1 + rank + rank - (unit is not None)],
                          unit))
            i += 1 + rank + rank - (unit is not None)
        function = self.function.handle
        dyn = self.kernel.dynamic_smem
        # cuda.bindings' Cython cuLaunchKernel is cheaper to call than libcuda through ctypes
        cu_launch = driver._cu().cuLaunchKernel
        addr = driver.ctypes.addressof(params)
        exe = self
        stream_of = _stream_getter()

        def launch(grid, args, smem, stream):
            for pos, kind, hs, unit in slots:
                a = args[pos]
                if kind == "scalar":
                    hs.value = a
                    continue
                hs[0].value = a.data_ptr()
                shape, stride = a.shape, a.stride()
                k = 1
                for n in shape:
                    hs[k].value = n
                    k += 1
                for j, d in enumerate(stride):
                    if j != unit:
                        hs[k].value = d
                        k += 1
            if stream is None:
                stream = stream_of()
            total = smem + dyn
            if total > 48 * 1024 and total > exe.smem_limit_set:
                exe.function.set_max_dynamic_shared_memory(total)
                exe.smem_limit_set = total
            err, = cu_launch(function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                             total, stream, addr, 0)
            if err:
                driver.raise_error(int(err), "cuLaunchKernel")
        launch.holders, launch.params = holders, params     # keep the slots alive
        return launch


class _KernelInfo:
    """What a launch needs of a kernel loaded from the cache."""

    def __init__(self, name, dynamic_smem):
        self.name, self.dynamic_smem = name, dynamic_smem


def _type_name(t):
    if isinstance(t, ir.PtrType):
        return f"ptr:{t.elem.name}:{t.space}"
    return t.name


def _type(name):
    from ...types import as_element_type
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
    try:
        return _CTYPES[t.name]
    except KeyError:
        raise MoyeError(f"the CUDA backend cannot pass a {t.name} kernel parameter") from None


def _stream_getter():
    """A cheap callable giving torch's current CUDA stream (0 without torch)."""
    import sys
    torch = sys.modules.get("torch")
    if torch is None:
        return lambda: 0
    try:
        raw = torch._C._cuda_getCurrentRawStream
        device = torch._C._cuda_getDevice          # current_device() without its checks
        return lambda: raw(device())
    except AttributeError:
        return lambda: torch.cuda.current_stream().cuda_stream


class CudaBackend:
    name = "cuda"

    def available(self):
        try:
            from . import driver
            return driver.device_count() > 0
        except Exception:
            return False

    def source(self, kernel, block):
        threads = block[0] * block[1] * block[2]
        return generate(kernel, threads)

    def compile(self, kernel, block, arch=None):
        from . import driver, nvrtc
        arch = arch or driver.device_arch()
        check_shared_memory(kernel, arch)
        source = self.source(kernel, block)
        module = nvrtc.compile_cuda(source, [kernel.name], arch)
        function = driver.load_module(module.cubin).get_function(kernel.name)
        types = [p.type for p in kernel.params]
        exe = CudaExecutable(kernel, source, function, types)
        exe.cubin = module.cubin
        return exe

    def compile_specialization(self, spec, trace, block, arch=None):
        """A kernel's specialization: from the disk cache by `spec` (the
        kernel's code and argument kinds) without tracing, or traced and compiled."""
        import json
        from . import cache, driver, nvrtc
        arch = arch or driver.device_arch()
        key = cache.key(spec, arch, ("specialization",), "")
        blob = cache.get(key)
        if blob is not None:
            head, cubin = blob.split(b"\0", 1)
            meta = json.loads(head)
            function = driver.load_module(cubin).get_function(meta["name"])
            info = _KernelInfo(meta["name"], meta["dynamic_smem"])
            return CudaExecutable(info, None, function, [_type(t) for t in meta["params"]])
        kernel = trace()
        exe = self.compile(kernel, block, arch)
        meta = {"name": kernel.name, "dynamic_smem": kernel.dynamic_smem,
                "params": [_type_name(p.type) for p in kernel.params]}
        cache.put(key, json.dumps(meta).encode() + b"\0" + exe.cubin)
        return exe

    def compile_only(self, kernel, block, arch):
        """NVRTC compilation without a GPU (for CI): the cubin bytes."""
        from . import nvrtc
        return nvrtc.compile_cuda(self.source(kernel, block), [kernel.name], arch)


# Shared memory a block may use, by architecture (bytes; the opt-in maximum).
SMEM_LIMIT = {"sm_70": 96 * 1024, "sm_75": 64 * 1024, "sm_80": 163 * 1024,
              "sm_86": 99 * 1024, "sm_89": 99 * 1024, "sm_90": 227 * 1024,
              "sm_90a": 227 * 1024, "sm_100a": 227 * 1024}


def check_shared_memory(kernel, arch):
    """A clear error, naming the shared arrays' lines, when a kernel needs
    more shared memory than the architecture gives a block."""
    limit = SMEM_LIMIT.get(arch)
    total = ir.shared_bytes(kernel)
    if limit is None or total <= limit:
        return
    lines = []
    for a in kernel.arrays:
        if a.space == "shared":
            loc = kernel.array_locs.get(a.id)
            where = f"{loc.file.rsplit('/', 1)[-1]}:{loc.line}: {loc.text}" if loc else "?"
            lines.append(f"  {a.size * a.elem.bits // 8} bytes at {where}")
    raise MoyeError(f"kernel '{kernel.name}' needs {total} bytes of shared memory, more than "
                    f"the {limit} an {arch} block may use:\n" + "\n".join(lines))
