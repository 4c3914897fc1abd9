"""moye.kernel: Python functions traced into kernels (see frontend.py)."""
from .builtins import *  # noqa: F401,F403
from .builtins import __all__ as _builtins_all
from .hopper import *  # noqa: F401,F403
from .hopper import __all__ as _hopper_all
from .wgmma import *  # noqa: F401,F403
from .wgmma import __all__ as _wgmma_all
from .pipeline import TmaPipeline
from .control import range  # noqa: A004  (moye.range, not exported by *)
from .control import range_constexpr
from .frontend import CompiledKernel, KernelFunction, kernel
from .tracer import KernelError
from . import threads as _threads  # noqa: F401  (registers the thread-index check)

__all__ = ["kernel", "KernelFunction", "CompiledKernel", "KernelError", "range_constexpr"] + _builtins_all + _hopper_all + \
    _wgmma_all + ["TmaPipeline"]
