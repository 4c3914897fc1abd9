"""moye.compiler: a Python function -> IR -> a launched kernel.

The AST rewrite (rewrite.py) and the tracer (tracer.py, control.py,
unrolled.py, memory.py) turn a kernel's body into IR; the binder
(binder.py, arguments.py) defines its parameters and specialization key;
frontend.py and dispatch.py are `@moye.kernel` and the launch path. The
device library (moye.device) is built on this package; nothing here
imports it.
"""
from .arguments import Constexpr
from .control import range  # noqa: A004  (moye.range, not exported by *)
from .control import range_constexpr
from .frontend import CompiledKernel, KernelFunction, kernel
from .device_function import DeviceFunction, func
from .tracer import KernelError
from . import threads as _threads  # noqa: F401  (registers the thread-index check)

__all__ = ["kernel", "KernelFunction", "CompiledKernel", "KernelError", "Constexpr",
           "range_constexpr", "func", "DeviceFunction"]
