"""Every copy instruction of moye.atom.arch: cp.async (sm_80), ldmatrix
(sm_75) and stmatrix (sm_90), under MoYe's names and CuTe's.
    >>> LDSM_U32x4_N.info["ptx"], SM90_U16x8_STSM_T.name
    ('ldmatrix.sync.aligned.m8n8.x4.shared.b16', 'STSM_U16x8_T')
"""
from . import cp_async, ldmatrix, stmatrix
from .cp_async import *  # noqa: F401,F403
from .ldmatrix import *  # noqa: F401,F403
from .stmatrix import *  # noqa: F401,F403

__all__ = cp_async.__all__ + ldmatrix.__all__ + stmatrix.__all__
