"""CuTe's text picture of a layout: a grid of offsets, one cell per coordinate."""
from ..errors import LayoutError
from .layout import Layout, cosize, size  # noqa: F401  (Layout: doctests)


def layout_to_text(layout):
    """The grid `print_layout` prints, as a string (CuTe's print_layout format).
    A rank-1 layout is drawn as one row."""
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
    width = len(str(cosize(layout))) + 2
    rule = "    " + ("+" + "-" * width) * cols + "+"
    lines = [str(layout), "    " + "".join(f"  {n:>{width - 2}} " for n in range(cols))]
    for m in range(rows):
        lines.append(rule)
        lines.append(f"{m:>2}  " + "".join(f"| {at(m, n):>{width - 2}} " for n in range(cols)) + "|")
    lines.append(rule)
    return "\n".join(lines)


def print_layout(layout):
    """Print the grid of offsets of a rank-2 (or rank-1) layout. CuTe: print_layout.
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
