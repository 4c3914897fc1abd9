"""The targets: what a launch may ask of the GPU, in one place for the
frontend and both backends: the grid and block limits the CUDA driver checks, the shared
memory a block may use per architecture, the instructions each
architecture has, and the types `smem=` and `stream=` take.

The CPU backend targets an architecture too (by default `CPU_ARCH`, which
has every instruction moye emits) and applies the same limits, so a kernel
the GPU would refuse fails on the CPU first.

    >>> check_block((32, 32, 2))
    Traceback (most recent call last):
    ...
    moye.errors.LaunchError: block (32, 32, 2) has 2048 threads; a block has at most 1024
"""
from ..errors import LaunchError, MoyeTypeError
from ..layout.scalar import is_int
from .verify import ARCH_NAME  # noqa: F401  (an NVRTC target: sm_80, sm_90a, sm_100f)
from .instr import shared_bytes
from .values import where

MAX_BLOCK_THREADS = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2 ** 31 - 1, 65535, 65535)
# the largest thread-block cluster: 8 blocks are portable; up to 16 run where the device
# allows non-portable sizes (sm_90: the CUDA backend opts every kernel in)
MAX_CLUSTER_BLOCKS = 16

# Shared memory a block may use, by architecture (bytes; the opt-in maximum).
SMEM_LIMIT = {"sm_70": 96 * 1024, "sm_75": 64 * 1024, "sm_80": 163 * 1024,
              "sm_86": 99 * 1024, "sm_89": 99 * 1024, "sm_90": 227 * 1024,
              "sm_90a": 227 * 1024, "sm_100a": 227 * 1024}
CPU_ARCH = "sm_90a"         # the CPU backend's default target: every instruction moye emits

_XYZ = "xyz"


def check_block(block):
    """Refuse a block (x, y, z) the driver would: more than 1024 threads, or
    a dimension beyond (1024, 1024, 64)."""
    for n, most, axis in zip(block, MAX_BLOCK, _XYZ):
        if n > most:
            raise LaunchError(f"block {block} has {n} threads along {axis}; a block has at "
                              f"most {MAX_BLOCK} per dimension")
    n = block[0] * block[1] * block[2]
    if n > MAX_BLOCK_THREADS:
        raise LaunchError(f"block {block} has {n} threads; a block has at most "
                          f"{MAX_BLOCK_THREADS}")


def check_grid(grid):
    """Refuse a grid (x, y, z) beyond (2**31 - 1, 65535, 65535) blocks.

        >>> check_grid((1, 70000, 1))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        moye.errors.LaunchError: grid (1, 70000, 1) has 70000 blocks along y; a grid has ...
    """
    for n, most, axis in zip(grid, MAX_GRID, _XYZ):
        if n > most:
            raise LaunchError(f"grid {grid} has {n} blocks along {axis}; a grid has at most "
                              f"{MAX_GRID}")


def check_smem(smem):
    """Refuse a `smem=` (bytes of dynamic shared memory) that is not an int >= 0."""
    if not is_int(smem):
        raise LaunchError(f"smem must be an int (bytes of dynamic shared memory), got "
                          f"{type(smem).__name__} {smem!r}")
    if smem < 0:
        raise LaunchError(f"smem must be >= 0 (bytes of dynamic shared memory), got {smem}")


def check_stream(stream):
    """Refuse a `stream=` that is none of: None, an int handle, a torch or
    CuPy stream (`cuda_stream`, `ptr`), an object with `__cuda_stream__`, a
    cuda.bindings CUstream (`getPtr`)."""
    if stream is None or is_int(stream):
        return
    if any(hasattr(stream, a) for a in ("__cuda_stream__", "cuda_stream", "ptr", "getPtr")):
        return
    raise LaunchError(f"stream must be None, an int handle, a torch/CuPy stream or a CUstream, "
                      f"got {type(stream).__name__} {stream!r}")


def check_arch_name(arch):
    """Refuse an `arch` that is not an NVRTC target name (None: the device's)."""
    if arch is None or isinstance(arch, str) and ARCH_NAME.match(arch):
        return
    if is_int(arch):
        raise MoyeTypeError(f"arch must be a string such as 'sm_80' or 'sm_90a', got the int "
                            f"{arch} (did you mean 'sm_{arch}'?)")
    raise LaunchError(f"arch must be a string such as 'sm_80' or 'sm_90a', got {arch!r}")


def check_arch(arch):
    """Refuse an architecture moye has no limits for."""
    check_arch_name(arch)
    if arch not in SMEM_LIMIT:
        raise LaunchError(f"arch {arch!r} is not one moye knows; it knows "
                          f"{', '.join(SMEM_LIMIT)}")


def check_shared_memory(kernel, arch):
    """Refuse a kernel whose shared arrays exceed what `arch` gives a block;
    the message names the shared arrays' lines."""
    try:
        check_launch_smem(kernel.name, shared_bytes(kernel), 0, arch)
    except LaunchError as e:
        lines = []
        for a in kernel.arrays:
            if a.space == "shared":
                loc = kernel.array_locs.get(a.id)
                lines.append(f"  {a.size * a.elem.bits // 8} bytes at "
                             f"{where(loc) if loc else '?'}")
        raise LaunchError(str(e) + "".join("\n" + s for s in lines)) from None


def check_launch_smem(name, static, smem, arch):
    """Refuse `smem` more bytes beside a kernel's `static` ones where they
    exceed what `arch` gives a block (a launch's check; the kernel IR may
    not be at hand)."""
    limit = SMEM_LIMIT.get(arch)
    if limit is not None and static + smem > limit:
        more = f" ({static} in its shared arrays + smem={smem})" if smem else ""
        raise LaunchError(f"kernel '{name}' needs {static + smem} bytes of shared memory{more}, "
                          f"more than the {limit} an {arch} block may use")

