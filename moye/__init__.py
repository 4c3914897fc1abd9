"""moye: CuTe's programming model for Python.

Layouts and their algebra, arrays seen through layouts, tiled copies and
tiled MMAs, and GPU kernels written in Python.
"""
import importlib as _importlib

from .errors import (BoundsError, CompileError, CudaError, DynamicValueError, KernelError,
                     KernelRuntimeError, LaunchError, LayoutError, MoyeError, MoyeTypeError,
                     ShapeError)
from .layout import *  # noqa: F401,F403
from .types import *  # noqa: F401,F403
from .array import *  # noqa: F401,F403
from .atom import *  # noqa: F401,F403
from .atom.arch import *  # noqa: F401,F403
from .atom.arch.copy_ops import *  # noqa: F401,F403
from .tiled import *  # noqa: F401,F403
from .compiler import *  # noqa: F401,F403
from .compiler import range  # noqa: A004  (moye.range; `from moye import *` keeps Python's)
from .device import *  # noqa: F401,F403
from .compiler.frontend import BACKENDS as _BACKENDS
from .backend.cuda.backend import CudaBackend as _CudaBackend
from .backend.cpu import CpuBackend as _CpuBackend
from .backend.cuda.backend import current_stream_getter as _current_stream_getter
from .compiler.hooks import HOOKS as _HOOKS

__version__ = "0.1.0"

_BACKENDS["cuda"] = _CudaBackend()
_BACKENDS["cpu"] = _CpuBackend()


def _cuda(module):
    """moye.backend.cuda.<module>, imported when first asked for."""
    return _importlib.import_module(f".backend.cuda.{module}", __name__)


# the autotuner's GPU name and streams (the compiler imports no backend)
_HOOKS.driver = lambda: _cuda("driver")
_HOOKS.current_stream = _current_stream_getter
# the driver's bindings (cuda.bindings.driver, about 90 ms on a CI machine) load with the
# first use of a GPU, which creates its CUDA context then too, not with `import moye`

# loaded on first use (PEP 562), not with `import moye`:
# name -> (its module, the attribute; None for the module itself)
_LAZY = {
    "ops": (".ops", None),              # the library layer, above device
    "analyze": (".analysis", "analyze"),
    "Config": (".compiler.autotune", "Config"),
    "autotune": (".compiler.autotune", "autotune"),
    "print_typst": (".viz", "print_typst"),     # the pictures of layouts
    "render": (".viz", "render"),
}


def __getattr__(name):
    """The names of _LAZY, imported when first asked for."""
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'moye' has no attribute {name!r}") from None
    value = _importlib.import_module(module, __name__)
    if attribute is not None:
        value = globals()[name] = getattr(value, attribute)
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


# `from moye import *` gives the public API, without moye.range (keep Python's)
__all__ = sorted([n for n, v in dict(globals()).items()
                  if not n.startswith("_") and n != "range" and type(v).__name__ != "module"]
                 + [n for n, (_, attribute) in _LAZY.items() if attribute is not None])
