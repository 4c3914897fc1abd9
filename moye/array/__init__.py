"""moye.array: arrays seen through layouts, on the host and in kernels."""
from .array import MoYeArray
from .engine import HostEngine, layout_offsets
from .identity import ArithTuple, make_identity_array, make_identity_tensor
from .ops import (copyto, elementwise, fill_, make_fragment_like, recast, transpose, view,
                  zeros_)
from .tiling import (TileIterator, inner_partition, local_partition, local_tile, outer_partition,
                     parallelize, tile, tiles)

make_tensor = MoYeArray
clear = zeros_
fill = fill_

__all__ = ["MoYeArray", "HostEngine", "layout_offsets", "copyto", "elementwise", "fill_",
           "make_fragment_like", "recast", "transpose", "view", "zeros_", "inner_partition",
           "local_partition", "local_tile", "outer_partition", "parallelize", "tile", "tiles",
           "TileIterator", "ArithTuple", "make_identity_array", "make_identity_tensor",
           "make_tensor", "clear", "fill"]
