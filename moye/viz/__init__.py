"""moye.viz: pictures of layouts, tiled copies and tiled MMAs.

`print_typst(obj)` prints a standalone Typst document (MoYe's print_typst),
`typst_source(obj)` returns it, `render(obj, "x.svg")` compiles it to SVG,
PNG or PDF. Layouts, TiledCopy and TiledMMA also draw themselves in
notebooks (`_repr_svg_`). Only rendering needs the `typst` package, and
imports it when first used.
"""
from ..errors import MoyeError
from ..layout import ComposedLayout, Layout
from ..tiled import TiledCopy, TiledMMA
from .render import render, svg
from .typst import cells, print_typst, thread_color, typst_source

__all__ = ["print_typst", "typst_source", "render", "svg", "thread_color"]

# Larger pictures take long to draw and are unreadable in a notebook: those
# objects show their text instead.
REPR_MAX_CELLS = 4096


def _repr_svg_(self):
    """The notebook picture; None (the text repr) where it cannot or should not be drawn."""
    try:
        n = cells(self)
        if type(n) is not int or n > REPR_MAX_CELLS:
            return None
        return svg(self)
    except (ImportError, MoyeError, TypeError):
        return None


for _cls in (Layout, ComposedLayout, TiledCopy, TiledMMA):
    _cls._repr_svg_ = _repr_svg_
