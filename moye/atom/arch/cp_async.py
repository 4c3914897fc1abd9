"""cp.async: one thread copies 4, 8 or 16 bytes from global to shared memory
without passing through registers (sm_80+).

From the PTX ISA (`cp.async.ca.shared.global [dst], [src], cp-size` and
`cp.async.cg.shared.global [dst], [src], 16`): cp-size is 4, 8 or 16 bytes;
`.ca` caches the data at all levels (L1 too), `.cg` only in L2 and allows
16 bytes only. Each thread issues its own copy, so, like UniversalCopy, the
op has one thread and its source and destination are one value of the
copied type: (1, bits) -> bit. MoYe: CPOP_ASYNC_CACHEALWAYS{T},
CPOP_ASYNC_CACHEGLOBAL{T}; CuTe: SM80_CP_ASYNC_CACHEALWAYS<S,D>, ...
"""
from ... import ir
from ...errors import MoyeError
from ...layout import Layout
from ...types import as_element_type
from ..copy import CopyOp

_OPS = {}
_CACHE_OPS = {"ca": ("CPOP_ASYNC_CACHEALWAYS", (4, 8, 16)),
              "cg": ("CPOP_ASYNC_CACHEGLOBAL", (16,))}


def cp_async_op(cache_op, T, D=None):
    """The cp.async op with cache operator `cache_op` ("ca" or "cg") copying
    one `T` (stored as one `D`, of the same size) per thread."""
    prefix, sizes = _CACHE_OPS[cache_op]
    T = as_element_type(T)
    D = T if D is None else as_element_type(D)
    nbytes = T.bits // 8
    if T.bits % 8 or nbytes not in sizes:
        if cache_op == "cg":
            hint = "use a 16-byte type (UInt128), or CPOP_ASYNC_CACHEALWAYS for 4 or 8 bytes"
        else:
            hint = "use UInt32, UInt64 or UInt128"
        have = f"{T.bits} bits" if T.bits % 8 else f"{nbytes} byte" + "s" * (nbytes > 1)
        raise MoyeError(f"{prefix}({T}): cp.async.{cache_op} copies "
                        f"{'16 bytes only' if cache_op == 'cg' else '4, 8 or 16 bytes'}, and "
                        f"{T} has {have}; {hint}")
    if D.bits != T.bits:
        raise MoyeError(f"{prefix}({T}, {D}): source and destination types must have the same "
                        f"size; {T} has {T.bits} bits, {D} has {D.bits}")
    key = (cache_op, T.name, D.name)
    op = _OPS.get(key)
    if op is None:
        args = f"{T}" if D is T else f"{T}, {D}"
        op = _OPS[key] = CopyOp(
            f"{prefix}({args})", Layout(1), Layout((1, T.bits)), Layout((1, D.bits)),
            kind="cp_async", bits=T.bits, arch=80, instruction=ir.CpAsync, cache_op=cache_op, bytes=nbytes,
            ptx=f"cp.async.{cache_op}.shared.global [dst], [src], {nbytes}",
            cute_name=f"{prefix.replace('CPOP_', 'SM80_CP_')}<{args}>")
    return op


def CPOP_ASYNC_CACHEALWAYS(T, D=None):
    """cp.async.ca of one `T` (4, 8 or 16 bytes) per thread.
    CuTe: SM80_CP_ASYNC_CACHEALWAYS.
        >>> op = CPOP_ASYNC_CACHEALWAYS(UInt64)
        >>> op.src_bits, op.info["ptx"]
        ((1,64):(0,1), 'cp.async.ca.shared.global [dst], [src], 8')
    """
    return cp_async_op("ca", T, D)


def CPOP_ASYNC_CACHEGLOBAL(T, D=None):
    """cp.async.cg of one 16-byte `T` per thread (L2 only).
    CuTe: SM80_CP_ASYNC_CACHEGLOBAL.
        >>> CopyAtom(CPOP_ASYNC_CACHEGLOBAL(UInt128), Float16).val_layout_dst
        (1,8):(0,1)
    """
    return cp_async_op("cg", T, D)


SM80_CP_ASYNC_CACHEALWAYS = CPOP_ASYNC_CACHEALWAYS
SM80_CP_ASYNC_CACHEGLOBAL = CPOP_ASYNC_CACHEGLOBAL

__all__ = ["CPOP_ASYNC_CACHEALWAYS", "CPOP_ASYNC_CACHEGLOBAL", "SM80_CP_ASYNC_CACHEALWAYS",
           "SM80_CP_ASYNC_CACHEGLOBAL"]
