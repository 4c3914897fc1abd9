"""The CPU backend's runtime error and how it names a kernel's source line
and the array an access falls in."""
from ...errors import KernelRuntimeError  # noqa: F401  (the backends' modules import it here)
from ...ir import where  # noqa: F401  (likewise)


class ArgumentName:
    """An array argument as errors name it (`'x'`), which also knows its
    shape and byte strides, so it can turn an offset into a coordinate."""

    def __init__(self, name, shape, byte_strides):
        self.name, self.shape, self.byte_strides = name, tuple(shape), tuple(byte_strides)

    def __str__(self):
        return f"'{self.name}'"

    def coordinate(self, byte):
        """The coordinate at byte offset `byte`, largest stride first; the
        mode an access overruns shows as out of its extent. None for a
        one-mode array (the index is the coordinate)."""
        if len(self.shape) < 2:
            return None
        coord = [0] * len(self.shape)
        for i in sorted(range(len(self.shape)), key=lambda i: -self.byte_strides[i]):
            if self.byte_strides[i] > 0:
                coord[i], byte = divmod(byte, self.byte_strides[i])
        return tuple(int(c) for c in coord)
