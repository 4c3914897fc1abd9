"""Hopper's bulk tensor copy engine (TMA): the ops, and the arguments of
cuTensorMapEncodeTiled that describe a tile of a global array.

A tensor map describes a global array in the engine's own order: dimension
0 is the contiguous one (its element stride is implicit), dimensions 1..r-1
have byte strides that are multiples of 16. A *box* is the tile one
instruction moves; it lands in shared memory densely, dimension 0 fastest,
and the whole box's bytes are then permuted by the swizzle, a function of
the shared-memory address: Swizzle<B,4,3> on bytes, B = 1, 2, 3 for the
32-, 64- and 128-byte modes (so a box's row, dimension 0, is exactly that
many bytes). Elements outside the array read as zeros and are not written.

moye describes a box by the shared-memory layout of the tile, in the
array's own mode order (as CuTe's make_tma_copy does): its mode sizes are
the box, and its Swizzle, which must be one of the three above seen in
elements, picks the swizzle mode. `tensor_map_args` checks that the layout
is exactly where the engine puts each element and returns the values to
pass to cuTensorMapEncodeTiled (no GPU needed; the CUDA backend's driver
makes the call).
"""
import functools
from dataclasses import dataclass

import numpy as np

from ...array.engine import layout_offsets as flat_offsets
from ... import ir
from ...errors import MoyeError
from ...layout import Layout, size
from ...layout.swizzle import ComposedLayout, Swizzle
from ...types import as_element_type


class TMAOp:
    """A TMA copy direction: TMA_LOAD (global to shared memory, completing on
    an mbarrier), TMA_STORE (shared to global memory, in bulk groups) or
    TMA_REDUCE_ADD (a store that adds to global memory, element by element
    atomically). CuTe: SM90_TMA_LOAD, SM90_TMA_STORE, SM90_TMA_REDUCE_ADD.
    `instruction` is the IR class it becomes, whose rules in `ir.lowering`
    are its C++ and CPU semantics."""

    def __init__(self, name, kind, ptx, instruction):
        self.name, self.kind, self.ptx, self.instruction = name, kind, ptx, instruction

    def __repr__(self):
        return self.name


TMA_LOAD = TMAOp("TMA_LOAD", "load", "cp.async.bulk.tensor.{r}d.shared::cluster.global"
                 ".mbarrier::complete_tx::bytes", ir.TmaLoad)
TMA_STORE = TMAOp("TMA_STORE", "store", ir.TmaStore.ptx, ir.TmaStore)
TMA_REDUCE_ADD = TMAOp("TMA_REDUCE_ADD", "reduce_add", ir.TmaReduceAdd.ptx, ir.TmaReduceAdd)
SM90_TMA_LOAD, SM90_TMA_STORE, SM90_TMA_REDUCE_ADD = TMA_LOAD, TMA_STORE, TMA_REDUCE_ADD
# the element types TMA_REDUCE_ADD adds (cp.reduce.async.bulk.tensor's .add)
REDUCE_ADD_TYPES = ("Float32", "Int32", "UInt32", "UInt64")

# cuTensorMapEncodeTiled's CUtensorMapDataType by element type (names without the prefix);
# types it has no name for move as unsigned integers of their size (bit copies)
_DATA_TYPE = {"Float16": "FLOAT16", "BFloat16": "BFLOAT16", "Float32": "FLOAT32",
              "TFloat32": "FLOAT32", "Float64": "FLOAT64", "Int32": "INT32", "UInt32": "UINT32",
              "Int64": "INT64", "UInt64": "UINT64"}
_UINT_OF_BYTES = {1: "UINT8", 2: "UINT16", 4: "UINT32", 8: "UINT64"}
SWIZZLE_MODES = {0: "NONE", 1: "32B", 2: "64B", 3: "128B"}       # B of Swizzle<B,4,3> on bytes
MAX_BOX = 256
MAX_RANK = 5


@dataclass(frozen=True)
class TensorMapArgs:
    """The arguments of cuTensorMapEncodeTiled (CUDA driver API), in the
    engine's dimension order. `data_type`, `swizzle` are the enum names
    without their CU_TENSOR_MAP_DATA_TYPE_ / CU_TENSOR_MAP_SWIZZLE_ prefix;
    interleave is NONE, L2 promotion 128B and out-of-bounds fill NONE (zeros)."""
    data_type: str
    rank: int
    global_address: int
    global_dim: tuple           # elements, dimension 0 first
    global_strides: tuple       # bytes, of dimensions 1..rank-1
    box_dim: tuple
    element_strides: tuple
    swizzle: str
    element_bytes: int
    interleave: str = "NONE"
    l2_promotion: str = "L2_128B"
    oob_fill: str = "NONE"

    @property
    def box_bytes(self):
        """Bytes one copy moves (what it completes on the mbarrier)."""
        return int(np.prod(self.box_dim)) * self.element_bytes

    @property
    def swizzle_bits(self):
        """B of the swizzle Swizzle<B,4,3> on shared-memory byte addresses."""
        return {v: k for k, v in SWIZZLE_MODES.items()}[self.swizzle]


def layout_offsets(layout, shape):
    """The offsets of `layout` at every coordinate of `shape` (its top-level
    mode sizes), as an int64 array of that shape; a ComposedLayout's outer
    function (a Swizzle) applied to them."""
    return flat_offsets(layout).reshape(shape, order="F")


def _tile_shape(smem_layout, rank, what):
    shape = smem_layout.shape
    modes = shape if isinstance(shape, tuple) else (shape,)
    if len(modes) != rank:
        raise MoyeError(f"{what}: smem_layout {smem_layout} has {len(modes)} modes, but the "
                        f"global array has {rank}; give the tile's layout with one mode per "
                        "array mode")
    box = []
    for k in range(rank):
        n = size(smem_layout[k]) if rank > 1 else size(smem_layout)
        if not isinstance(n, int):
            raise MoyeError(f"{what}: smem_layout {smem_layout} has a dynamic size")
        if not 1 <= n <= MAX_BOX:
            raise MoyeError(f"{what}: mode {k} of smem_layout {smem_layout} has {n} elements; "
                            f"a TMA box has 1 to {MAX_BOX} per dimension")
        box.append(n)
    return tuple(box)


def _swizzle_bits(smem_layout, ebytes, what):
    """B of the layout's swizzle seen on bytes, if it is Swizzle<B,4,3>."""
    if not isinstance(smem_layout, ComposedLayout):
        return 0
    sw = smem_layout.outer
    if not isinstance(sw, Swizzle):
        raise MoyeError(f"{what}: smem_layout {smem_layout} is composed with {sw}, not a "
                        "Swizzle; TMA writes shared memory plainly or swizzled")
    if sw.bits == 0:
        return 0
    log2e = ebytes.bit_length() - 1
    on_bytes = Swizzle(sw.bits, sw.base + log2e, sw.shift)
    if on_bytes.base != 4 or on_bytes.shift != 3 or on_bytes.bits not in (1, 2, 3):
        want = ", ".join(f"Sw<{b},{4 - log2e},3> ({SWIZZLE_MODES[b]})" for b in (1, 2, 3)
                         if 4 - log2e >= 0)
        raise MoyeError(f"{what}: the swizzle {sw} of smem_layout on {8 * ebytes}-bit elements "
                        f"is {on_bytes} on bytes, which TMA cannot do; it swizzles with "
                        f"Sw<1,4,3>, Sw<2,4,3> or Sw<3,4,3> on bytes, for these elements "
                        f"{want}")
    if not (isinstance(smem_layout.offset, int) and smem_layout.offset == 0):
        raise MoyeError(f"{what}: smem_layout {smem_layout} has an offset inside its swizzle; "
                        "a TMA tile starts at the swizzle's period")
    return on_bytes.bits


def engine_offsets(box, perm, ebytes, bits):
    """Where the engine puts each element of a box, in elements, indexed by
    the array's mode order: dense in dimension order, then Swizzle<bits,4,3>
    on bytes (`bits` 0: none)."""
    rank = len(box)
    strides, acc = [0] * rank, 1
    for d in range(rank):
        strides[perm[d]] = acc
        acc *= box[perm[d]]
    total = np.zeros((), np.int64)
    for k in range(rank):
        total = total[..., None] + (np.arange(box[k]) * strides[k]).reshape((1,) * k + (box[k],))
    if bits:
        total = Swizzle(bits, 4, 3)(total * ebytes) // ebytes
    return total


def tensor_map_args(dtype, shape, strides, address, smem_layout, what="make_tma_copy"):
    """(TensorMapArgs, perm): what cuTensorMapEncodeTiled takes for copies
    between a global array (element type, shape, element strides, address)
    and shared-memory tiles laid out as `smem_layout` (one mode per array
    mode). `perm[d]` is the array mode of the engine's dimension d.
        >>> args, perm = tensor_map_args("Float16", (1000, 512), (512, 1), 0,
        ...                              Layout((64, 64), (64, 1)))
        >>> args.global_dim, args.global_strides, args.box_dim, args.swizzle, perm
        ((512, 1000), (1024,), (64, 64), 'NONE', (1, 0))
    """
    dtype = as_element_type(dtype)
    if dtype.bits % 8:
        raise MoyeError(f"{what}: TMA moves whole bytes; {dtype} elements are {dtype.bits} bits")
    ebytes = dtype.bits // 8
    shape, strides = tuple(int(n) for n in shape), tuple(int(d) for d in strides)
    rank = len(shape)
    if not 1 <= rank <= MAX_RANK:
        raise MoyeError(f"{what}: the global array has rank {rank}; TMA takes 1 to {MAX_RANK}")
    if address % 16:
        raise MoyeError(f"{what}: the global array's address {address:#x} is not 16-byte "
                        "aligned, as TMA needs")
    unit = [k for k in range(rank) if strides[k] == 1 and shape[k] != 1]
    if not unit:
        unit = [k for k in range(rank) if strides[k] == 1]
    if not unit:
        raise MoyeError(f"{what}: the global array (shape {shape}, strides {strides}) has no "
                        "mode of stride 1; TMA's first dimension is contiguous")
    rest = sorted((k for k in range(rank) if k != unit[0]), key=lambda k: (strides[k], k))
    perm = (unit[0],) + tuple(rest)
    for k in rest:
        nbytes = strides[k] * ebytes
        if strides[k] <= 0 or nbytes % 16 or nbytes >= 2**40:
            raise MoyeError(f"{what}: the global array's stride {strides[k]} of mode {k} is "
                            f"{nbytes} bytes; TMA needs positive strides that are multiples of "
                            f"16 bytes (pad the array's rows to a multiple of {16 // ebytes} "
                            "elements and view the part you need)")
    for k, n in enumerate(shape):
        if not 1 <= n <= 2**32:
            raise MoyeError(f"{what}: mode {k} of the global array has {n} elements; TMA "
                            "takes 1 to 2**32")
    try:
        hash(smem_layout)
        check = _check_tile
    except TypeError:                       # not static: checked (and refused) uncached
        check = _check_tile.__wrapped__
    box, bits = check(smem_layout, rank, perm, ebytes, what)
    args = TensorMapArgs(
        data_type=_DATA_TYPE.get(dtype.name, _UINT_OF_BYTES.get(ebytes)), rank=rank,
        global_address=int(address), global_dim=tuple(shape[k] for k in perm),
        global_strides=tuple(strides[k] * ebytes for k in perm[1:]),
        box_dim=tuple(box[k] for k in perm), element_strides=(1,) * rank,
        swizzle=SWIZZLE_MODES[bits], element_bytes=ebytes)
    if args.data_type is None:
        raise MoyeError(f"{what}: TMA cannot move {dtype} elements")
    return args, perm


@functools.lru_cache(maxsize=256)
def _check_tile(smem_layout, rank, perm, ebytes, what):
    """(box, swizzle bits) of tiles laid out as `smem_layout` in shared
    memory, after checking that the layout puts every element where the
    engine writes it (static, so checked once per layout and mode order)."""
    box = _tile_shape(smem_layout, rank, what)
    bits = _swizzle_bits(smem_layout, ebytes, what)
    row = box[perm[0]] * ebytes
    if row % 16:
        raise MoyeError(f"{what}: the tile's contiguous mode {perm[0]} has {box[perm[0]]} "
                        f"elements, {row} bytes; TMA's box rows are multiples of 16 bytes")
    if bits and row != 16 << bits:
        raise MoyeError(f"{what}: with the {SWIZZLE_MODES[bits]} swizzle the tile's contiguous "
                        f"mode {perm[0]} must be {16 << bits} bytes ({(16 << bits) // ebytes} "
                        f"elements), got {box[perm[0]]} elements")
    want = engine_offsets(box, perm, ebytes, bits)
    got = layout_offsets(smem_layout, box)
    if not np.array_equal(want, got):
        i = np.argwhere(want != got)[0]
        dense = Layout(tuple(box), _dense_strides(box, perm))
        raise MoyeError(f"{what}: smem_layout {smem_layout} puts element {tuple(int(x) for x in i)}"
                        f" at {int(got[tuple(i)])}, where TMA writes it at {int(want[tuple(i)])}: "
                        f"the engine lays a box out as {dense}"
                        + (f" swizzled by {SWIZZLE_MODES[bits]}" if bits else "")
                        + " (contiguous in the array's contiguous mode)")
    return box, bits


def _dense_strides(box, perm):
    strides, acc = [0] * len(box), 1
    for d in range(len(box)):
        strides[perm[d]] = acc
        acc *= box[perm[d]]
    return tuple(strides)


__all__ = ["TMA_LOAD", "TMA_STORE", "TMA_REDUCE_ADD", "SM90_TMA_LOAD", "SM90_TMA_STORE",
           "SM90_TMA_REDUCE_ADD", "TMAOp"]
