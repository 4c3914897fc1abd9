"""CuTe's text picture of a layout: a grid of offsets, one cell per coordinate.

A grid of more than `MAX_EXTENT` rows (or columns) is elided as NumPy
elides a large array: its first and last `EDGE_ITEMS` rows (columns) are
drawn, with a row (column) of ``...`` between, so printing a layout takes
the same time whatever its size.
"""
from ..errors import LayoutError, MoyeTypeError
from .layout import Layout, cosize, size
from .swizzle import ComposedLayout

MAX_EXTENT = 256        # rows or columns drawn in full; more are elided
EDGE_ITEMS = 8          # rows or columns drawn at each end of an elided axis


def _shown(n):
    """The indices drawn along an axis of extent n; None stands for the elided ones."""
    if n <= MAX_EXTENT:
        return list(range(n))
    return list(range(EDGE_ITEMS)) + [None] + list(range(n - EDGE_ITEMS, n))


def layout_to_text(layout):
    """The grid `print_layout` prints, as a string (CuTe's print_layout format).
    A rank-1 layout is drawn as one row."""
    if not isinstance(layout, (Layout, ComposedLayout)):
        raise MoyeTypeError(f"print_layout: expected a Layout or ComposedLayout, got "
                            f"{type(layout).__name__} {layout!r}")
    if len(layout) == 1:
        rows, cols, at = 1, size(layout), (lambda m, n: layout(n))
    elif len(layout) == 2:
        rows, cols, at = size(layout[0]), size(layout[1]), (lambda m, n: layout(m, n))
    else:
        raise LayoutError(f"print_layout: layout {layout} has rank {len(layout)}; "
                          "only rank-1 and rank-2 layouts can be drawn")
    for n in (rows, cols):
        if type(n) is not int:
            raise LayoutError(f"print_layout: layout {layout} has a dynamic shape")
    rows, cols = _shown(rows), _shown(cols)
    dots = "..."
    width = max(len(str(cosize(layout))), len(dots) if None in rows + cols else 0) + 2
    label = max(2, len(str(rows[-1])), len(dots) if None in rows else 0)   # row indices
    indent = " " * (label + 2)
    rule = indent + ("+" + "-" * width) * len(cols) + "+"
    lines = [str(layout), indent + "".join(f"  {dots if n is None else n:>{width - 2}} "
                                           for n in cols)]
    for m in rows:
        cells = (dots if m is None or n is None else at(m, n) for n in cols)
        lines.append(rule)
        lines.append(f"{dots if m is None else m:>{label}}  "
                     + "".join(f"| {c:>{width - 2}} " for c in cells) + "|")
    lines.append(rule)
    return "\n".join(lines)


def print_layout(layout):
    """Print the grid of offsets of a rank-2 (or rank-1) layout. CuTe: print_layout.
    An axis of more than MAX_EXTENT (256) indices shows its first and last
    EDGE_ITEMS (8), with ``...`` between, as NumPy prints large arrays.
        >>> print_layout(Layout((2, 3), (3, 1)))
        (2,3):(3,1)
              0   1   2 
            +---+---+---+
         0  | 0 | 1 | 2 |
            +---+---+---+
         1  | 3 | 4 | 5 |
            +---+---+---+
    """
    print(layout_to_text(layout))
