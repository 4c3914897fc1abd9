"""moye.atom: copy and MMA atoms; moye.atom.arch holds the instructions."""
from .copy import CopyAtom, CopyOp, UniversalCopy
from .mma import MMAAtom, MMAOp, UniversalFMA, mma_reference

__all__ = ["CopyAtom", "CopyOp", "UniversalCopy", "MMAAtom", "MMAOp", "UniversalFMA",
           "mma_reference"]
