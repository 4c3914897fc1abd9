"""moye.device: what kernel bodies call besides layouts and arrays: thread
indices, barriers, shared memory, math, warp shuffles (builtins.py), atomics
(atomics.py), copy and MMA atoms as instructions (atoms.py, fragments.py), wgmma, TMA,
mbarriers, clusters and pipelines. Built on moye.compiler.
"""
from .builtins import *  # noqa: F401,F403
from .builtins import __all__ as _builtins_all
from .atomics import *  # noqa: F401,F403
from .atomics import __all__ as _atomics_all
from .hopper import *  # noqa: F401,F403
from .hopper import __all__ as _hopper_all
from .wgmma import *  # noqa: F401,F403
from .wgmma import __all__ as _wgmma_all
from .pipeline import TmaPipeline
from .fastmath import *  # noqa: F401,F403
from .fastmath import __all__ as _fastmath_all
from . import atoms as _atoms  # noqa: F401  (registers the lowering of atoms)
from .reductions import *  # noqa: F401,F403
from .reductions import __all__ as _reduce_all
from .dsmem import *  # noqa: F401,F403
from .dsmem import __all__ as _dsmem_all

__all__ = _builtins_all + _atomics_all + _hopper_all + _wgmma_all + ["TmaPipeline"] + \
    _fastmath_all + _reduce_all + _dsmem_all
