"""The kernel IR's old place: it is the package `moye.ir` now, re-exported
here while code written against `moye.kernel.ir` is updated."""
from ..ir import *  # noqa: F401,F403
