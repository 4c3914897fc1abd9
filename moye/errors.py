"""The one exception hierarchy of moye: catch `MoyeError` to catch ours."""


class MoyeError(Exception):
    """Base class of every error moye raises on purpose."""


class LayoutError(MoyeError, ValueError):
    """An operation of the layout algebra got inputs it cannot accept
    (mismatched ranks, a failed divisibility condition, a non-injective
    complement, ...)."""


class DynamicValueError(LayoutError):
    """A value known only at run time was given where CuTe requires a value
    known while tracing (a static int)."""


class CompileError(MoyeError):
    """NVRTC rejected the CUDA C++ that moye generated: a bug in moye, not in
    the user's kernel. The message shows NVRTC's log and the generated lines
    it points at; `log`, `source` and `arch` hold the whole story."""

    def __init__(self, message, log="", source="", arch=""):
        super().__init__(message)
        self.log, self.source, self.arch = log, source, arch


class CudaError(MoyeError):
    """A CUDA driver call failed; `name` is the driver's error name
    (``CUDA_ERROR_INVALID_VALUE``, ...)."""

    def __init__(self, message, name=""):
        super().__init__(message)
        self.name = name


class ShapeError(MoyeError, ValueError):
    """Arrays whose shapes do not fit together (a copy, a broadcast)."""


class BoundsError(MoyeError, IndexError):
    """An access outside what an array's buffer or layout holds: a
    coordinate past an extent, a negative offset, a thread id outside a
    thread layout."""


class MoyeTypeError(MoyeError, TypeError):
    """A value of the wrong kind: a float or a NumPy array where an int is
    due, an object where a layout is due."""


class LaunchError(MoyeError, ValueError):
    """A kernel launch the driver would refuse (grid, block, shared memory,
    stream), one spelled wrong, or one with an argument it cannot take (an
    array on a device the backend cannot reach, a read-only output)."""


class KernelError(MoyeError):
    """A mistake in a kernel, found while tracing; the message names the line."""


class KernelRuntimeError(MoyeError):
    """A kernel did something invalid while running on the CPU backend."""
