"""The CUDA backend: IR -> C++ (codegen) -> cubin (NVRTC, cached) -> launch."""
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
            stream = _torch_stream()
        smem += self.kernel.dynamic_smem
        if smem > 48 * 1024 and smem > self.smem_limit_set:
            self.function.set_max_dynamic_shared_memory(smem)
            self.smem_limit_set = smem
        args = [(t, v) for t, (_, v) in zip(self.param_types, values)]
        driver.launch(self.function, grid, block, args, shared_mem=smem, stream=stream)


def _torch_stream():
    import sys
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.current_stream().cuda_stream
    return 0


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
        return CudaExecutable(kernel, source, function, types)

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
