"""The CPU backend: kernels interpreted with NumPy (see interpreter.py).
The interpreter loads with the first kernel compiled for the CPU
(executable.py), not with `import moye`."""
from ...errors import KernelRuntimeError
from ... import ir
from ...ir.targets import CPU_ARCH, check_arch, check_shared_memory


def __getattr__(name):
    if name == "race_checking":         # it lives beside the launches it changes
        from .executable import race_checking
        return race_checking
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class CpuBackend:
    """Runs kernels on the CPU as they would run on a GPU of architecture
    `arch` (by default sm_90a, which has every instruction moye emits): a
    kernel that needs more shared memory than `arch` gives a block, or an
    instruction `arch` lacks, is refused as the CUDA backend refuses it.
    `kern.compile(..., backend="cpu", arch="sm_80")` targets another one."""
    name = "cpu"

    def __init__(self, arch=CPU_ARCH):
        check_arch(arch)
        self.arch = arch

    def available(self):
        return True

    def compile(self, kernel, block, arch=None):
        arch = arch or self.arch
        check_arch(arch)
        check_shared_memory(kernel, arch)
        ir.check_architecture(kernel, arch)
        from .executable import CpuExecutable
        return CpuExecutable(kernel, arch)

    def compile_specialization(self, spec, trace, block, arch=None):
        return self.compile(trace(), block, arch)

    def source(self, kernel, block):
        return ir.format_kernel(kernel)


__all__ = ["CpuBackend", "KernelRuntimeError", "race_checking"]
