"""moye: CuTe's programming model for Python.

Layouts and their algebra, arrays seen through layouts, tiled copies and
tiled MMAs, and GPU kernels written in Python.
"""
import os as _os

from .errors import (CompileError, CudaError, DynamicValueError, LayoutError, MoyeError,
                     ShapeError)
from .layout import *  # noqa: F401,F403
from .types import *  # noqa: F401,F403
from .array import *  # noqa: F401,F403

__version__ = "0.1.0"
from .atom import *  # noqa: F401,F403,E402
from .tiled import *  # noqa: F401,F403,E402
from .kernel import *  # noqa: F401,F403,E402
from .kernel import range  # noqa: E402,A004  (moye.range; `from moye import *` keeps builtins.range)
from .kernel.frontend import BACKENDS as _BACKENDS  # noqa: E402
from .backend.cuda.backend import CudaBackend as _CudaBackend  # noqa: E402

from .backend.cpu import CpuBackend as _CpuBackend  # noqa: E402

_BACKENDS["cuda"] = _CudaBackend()
if _os.path.exists("/dev/nvidiactl"):
    # a GPU machine will use the driver: load its bindings now (tens of ms)
    # rather than inside the first kernel launch
    try:
        import cuda.bindings.driver  # noqa: F401
    except ImportError:
        pass
_BACKENDS["cpu"] = _CpuBackend()

# `from moye import *` gives the public API, without moye.range (keep Python's)
__all__ = sorted(n for n, v in dict(globals()).items()
                 if not n.startswith("_") and n != "range" and type(v).__name__ != "module")
from .viz import print_typst, render; __all__ += ["print_typst", "render"]  # noqa: E402,E702
from .atom.arch import *; from .atom.arch import __all__ as _arch_all; __all__ += _arch_all  # noqa
from .atom.arch.copy_ops import *; from .atom.arch.copy_ops import __all__ as _copy_all; __all__ += _copy_all  # noqa
from .analysis import analyze; __all__ += ["analyze"]  # noqa: E402,E702
