"""The CPU backend's runtime error and how it names a kernel's source line."""
from ...errors import MoyeError


class KernelRuntimeError(MoyeError):
    """A kernel did something invalid while running on the CPU backend."""


def where(loc):
    """`file:line: text` of an IR statement's source location."""
    if loc is None:
        return "the kernel"
    return f"{loc.file.rsplit('/', 1)[-1]}:{loc.line}: {loc.text}"
