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
