"""A kernel compiled for the CPU backend: its launches run the interpreter
(interpreter.py) over NumPy views of the arguments' memory."""
from contextlib import contextmanager

import ml_dtypes
import numpy as np

from ...errors import MoyeError
from ... import ir
from ...compiler.binder import TMAParam
from ...ir.targets import CPU_ARCH, check_launch_smem
from .errors import ArgumentName
from .interpreter import Pointer, run_kernel
from .outputs import check_writable, written_params
from .tma import TensorMap


def _torch_numpy(t):
    """A NumPy view of CPU tensor `t`'s memory; NumPy has no bfloat16, so a
    bfloat16 tensor's bits are seen as int16 and read back as ml_dtypes'."""
    if str(t.dtype) == "torch.bfloat16":
        import torch
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _linear_view(arr, name):
    """A 1-D view of the memory an array spans, from its first element."""
    if hasattr(arr, "numpy") and type(arr).__module__.startswith("torch"):
        arr = _torch_numpy(arr.detach())
    arr = np.asarray(arr)
    item = arr.itemsize
    if any(s < 0 or s % item for s in arr.strides):
        raise MoyeError(f"argument '{name}': the CPU backend needs non-negative element strides")
    span = 1 + sum((n - 1) * s // item for n, s in zip(arr.shape, arr.strides)) if arr.size else 0
    # ml_dtypes' float8_e5m2 exports the typestr '<f1', which as_strided cannot read back
    base = arr.view(np.uint8) if item == 1 else arr
    return np.lib.stride_tricks.as_strided(base, shape=(span,), strides=(item,)).view(arr.dtype)


class CpuExecutable:
    def __init__(self, kernel, arch=CPU_ARCH):
        self.kernel, self.arch = kernel, arch
        self.shared = ir.shared_bytes(kernel)       # bytes of its shared arrays
        self.race_check = False
        self.written = written_params(kernel)

    def launch(self, grid, block, binding, smem=0, stream=None, race_check=None, cluster=None):
        """Run the kernel on the values of `binding` (binder.Binding): each
        IR parameter gets its value in order, a pointer the array's memory."""
        if smem:
            check_launch_smem(self.kernel.name, self.shared, smem, self.arch)
        for p, a in binding.arrays():
            if p.name in self.written:
                check_writable(self.kernel.name, p.name,
                               a.array.obj if isinstance(p, TMAParam) else a.obj)
        values = iter(binding.values())
        params = iter(self.kernel.params)
        env = {}
        for p, a in zip(binding.params, binding.arguments):
            for q in p.ir_params:
                value, param = next(values), next(params)
                if q.role == "pointer":
                    buf = _linear_view(a.obj, p.name)
                    value = Pointer(buf, np.zeros(1, np.int64), ArgumentName(
                        p.name, a.shape, [d * buf.itemsize for d in a.strides]))
                elif q.role == "tensor_map":
                    value = TensorMap(_linear_view(a.array.obj, p.name), a.args, p.name)
                elif q.role != "scalar":                # an array's extent or stride
                    value = np.int64(value)
                env[id(param.value)] = value
        rc = (self.race_check or _race_check_all) if race_check is None else race_check
        run_kernel(self.kernel, grid, block, env, race_check=rc, cluster=cluster)


_race_check_all = False


@contextmanager
def race_checking():
    """Within the block, every kernel launched on the CPU backend runs with
    `race_check` (the examples' tests use it to run them race-checked)."""
    global _race_check_all
    old, _race_check_all = _race_check_all, True
    try:
        yield
    finally:
        _race_check_all = old
