"""moye.layout: CuTe's layouts and their algebra, in pure Python."""
from .inttuple import (GenColMajor, GenRowMajor, capacity, ceil_div, colex_less, compact_col_major,
                       compact_order, compact_row_major, compatible, congruent, coord_to_coord,
                       coord_to_index, elem_less, increment, index_to_coord, inner_product,
                       lex_less, prefix_product, product, product_each, shape_div,
                       weakly_compatible, weakly_congruent)
from .inttuple import depth as tuple_depth, flatten as flatten_tuple, rank as tuple_rank
from .inttuple import unflatten as unflatten_tuple
from .layout import (Layout, append, as_layout, cosize, depth, dice, flatten, get, group_modes,
                     make_identity_layout, make_layout, make_layout_like, make_ordered_layout,
                     prepend, rank, replace, select, shape, size, slice_and_offset, stride, take,
                     transpose, unflatten)
from .algebra import (blocked_product, coalesce, complement, composition, downcast, filter,
                       filter_zeros, flat_divide, flat_product, left_inverse, logical_divide,
                       logical_product, max_common_layout, max_common_vector, nullspace,
                       raked_product, recast_layout, right_inverse, tile_to_shape, tile_unzip,
                       tiled_divide, tiled_product, upcast, zipped_divide, zipped_product,
                       make_fragment_like)
from .swizzle import ComposedLayout, Swizzle, make_composed_layout
from .printing import layout_to_text, print_layout
from .scalar import is_static
from .memo import clear_cache

__all__ = sorted(n for n, v in dict(globals()).items()
                 if not n.startswith("_") and type(v).__name__ != "module")
