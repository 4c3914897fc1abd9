"""Typst pictures of layouts, tiled copies and tiled MMAs (MoYe's print_typst).

Every picture is a complete, standalone Typst document: paste what
`print_typst` prints into the Typst web app (typst.app), or let
`moye.viz.render` compile it to SVG, PNG or PDF. The pictures are CuTe's
`print_latex` ones, 0-based:

- a layout: one cell per coordinate, holding the offset it maps to (shaded
  by offset mod 8, as CuTe does); a rank-1 layout is one row;
- a TiledCopy: the source and the destination of its tile side by side,
  each cell colored by the thread that owns it and labelled T#/V#;
- a TiledMMA: B on top, A on the left and C in the middle, cells colored by
  thread and labelled T#/V#.

Cells are filled by thread from `thread_color`: 16 hues, ordered so that
neighboring thread ids are far apart, at four lightnesses (changing every 16
threads) and four hue offsets (every 64), which gives 256 distinct light
colors; black text stays legible on all of them.
Where several threads hold the same element (A of a UniversalFMA tiled over
N, for instance) the cell shows the lowest thread id, as CuTe does.
"""
import json
import math

from ..errors import LayoutError, MoyeError, MoyeTypeError
from ..layout import ComposedLayout, Layout, size
from ..tiled import TiledCopy, TiledMMA

__all__ = ["typst_source", "print_typst", "thread_color", "MAX_CELLS"]

# The largest picture drawn, in cells (a 256x256 layout; Typst takes seconds
# to lay it out). Larger ones raise a LayoutError rather than run for minutes.
MAX_CELLS = 65536

# -- colors --------------------------------------------------------------------

_HUES = 16
_LIGHTNESS = (0.87, 0.77, 0.93, 0.82)   # by thread // 16, with the chroma that fits
_CHROMA = (0.085, 0.11, 0.055, 0.1)


def _oklch_to_hex(L, C, hue_deg):
    """An OKLCH color as #rrggbb (Björn Ottosson's OKLab matrices, clipped to sRGB)."""
    a, b = C * math.cos(math.radians(hue_deg)), C * math.sin(math.radians(hue_deg))
    l_ = (L + 0.3963377774 * a + 0.2158037573 * b) ** 3
    m_ = (L - 0.1055613458 * a - 0.0638541728 * b) ** 3
    s_ = (L - 0.0894841775 * a - 1.2914855480 * b) ** 3
    rgb = (4.0767416621 * l_ - 3.3077115913 * m_ + 0.2309699292 * s_,
           -1.2684380046 * l_ + 2.6097574011 * m_ - 0.3413193965 * s_,
           -0.0041960863 * l_ - 0.7034186147 * m_ + 1.7076147010 * s_)

    def encode(x):
        x = min(max(x, 0.0), 1.0)
        x = 12.92 * x if x <= 0.0031308 else 1.055 * x ** (1 / 2.4) - 0.055
        return round(255 * x)
    return "#" + "".join(f"{encode(x):02x}" for x in rgb)


def thread_color(thr):
    """The fill of thread `thr`'s cells, as #rrggbb; distinct for 256 threads.
        >>> thread_color(0), thread_color(1), thread_color(256) == thread_color(0)
        ('#ffbfb8', '#92e7d9', True)
    """
    thr %= 256
    hue = (7 * thr) % _HUES * (360 / _HUES) + 25 + (thr // 64) * (360 / _HUES / 4)
    tier = (thr // _HUES + thr // 64) % len(_LIGHTNESS)   # threads t and t + 64 differ too
    return _oklch_to_hex(_LIGHTNESS[tier], _CHROMA[tier], hue)


# CuTe's print_latex shades a layout's cells by offset mod 8; lighter here
_GRAYS = ("#ffffff", "#c8c8c8", "#e4e4e4", "#b4b4b4", "#f2f2f2", "#bebebe", "#d6d6d6", "#a8a8a8")


# -- Typst text ----------------------------------------------------------------

def _string(s):
    """A Typst string literal."""
    return json.dumps(str(s), ensure_ascii=False)


_PREAMBLE = """\
#set page(width: auto, height: auto, margin: 8pt)
#set text(font: "DejaVu Sans Mono", size: 7pt)
#set par(leading: 0.25em)
#set table(stroke: none, inset: 0pt, align: center + horizon)
"""

# c(k, body): a cell filled with colors.at(k) (k: thread id, or offset mod 8
# for a layout), labelled [T1 \ V4] or with its offset; i(n): an index;
# titled(title, body): a title centered over a table
_CELL_HELPERS = """\
#let c(k, body) = table.cell(fill: rgb(colors.at(k)), stroke: 0.4pt + luma(35%), body)
#let i(n) = box(inset: 3pt, text(fill: luma(40%), str(n)))
#let titled(title, body) = grid(align: center, row-gutter: 3pt, text(size: 8pt, title), body)
"""


def _colors(hexes):
    rows = [", ".join(f'"{h}"' for h in hexes[j:j + 8]) for j in range(0, len(hexes), 8)]
    return "#let colors = (\n" + "".join(f"  {r},\n" for r in rows) + ")\n"


def _dims(what, *extents):
    for n in extents:
        if type(n) is not int:
            raise LayoutError(f"print_typst: {what} has a dynamic extent; only static shapes "
                              "can be drawn")
    return extents


def _columns(n, width):
    """An index column, then n columns of `width`."""
    return f"(auto,) + ({width},) * {n}"


def _em(chars):
    """A cell side fitting `chars` characters of the 7pt monospace font."""
    return f"{max(2.6, 0.62 * chars + 1.0):.1f}em"


def _document(comment, colors, body):
    lines = ["// " + line for line in str(comment).splitlines()]
    return ("\n".join(lines) + "\n" + _PREAMBLE + _colors(colors) + _CELL_HELPERS
            + body + "\n")


# -- layouts ---------------------------------------------------------------------

def _layout_cells(layout):
    """rows, cols and offset(m, n) of a rank-1 or rank-2 layout, as print_layout draws it."""
    if len(layout) == 1:
        rows, cols = 1, size(layout)
        at = (lambda m, n: layout(n))
    elif len(layout) == 2:
        rows, cols = size(layout[0]), size(layout[1])
        at = (lambda m, n: layout(m, n))
    else:
        raise LayoutError(f"print_typst: layout {layout} has rank {len(layout)}; only rank-1 "
                          "and rank-2 layouts can be drawn")
    _dims(f"layout {layout}", rows, cols)
    return rows, cols, at


def _layout_source(layout):
    rows, cols, at = _layout_cells(layout)
    offsets = [[at(m, n) for n in range(cols)] for m in range(rows)]
    if any(type(o) is not int for row in offsets for o in row):
        raise LayoutError(f"print_typst: layout {layout} has dynamic offsets")
    side = _em(max(len(str(o)) for row in offsets for o in row))
    body = [f"#titled({_string(layout)}, table(columns: {_columns(cols, side)}, "
            f"rows: (auto, {side}),",
            "  [], " + ", ".join(f"i({n})" for n in range(cols)) + ","]
    for m in range(rows):
        body.append(f"  i({m}), " + ", ".join(f"c({o % 8})[{o}]" for o in offsets[m]) + ",")
    body.append("))")
    return _document(layout, _GRAYS, "\n".join(body))


# -- thread-value pictures -----------------------------------------------------

def _tv_owners(layout_tv, rows, cols):
    """{(m, n): (thread, value)} for a (thread, value) -> index layout over a
    (rows, cols) tile (index = m + rows * n); the lowest thread wins a shared cell."""
    nthr, nval = _dims(f"TV layout {layout_tv}", size(layout_tv, 0), size(layout_tv, 1))
    owner = {}
    for t in range(nthr):
        for v in range(nval):
            idx = layout_tv(t, v)
            if type(idx) is not int or not 0 <= idx < rows * cols:
                raise MoyeError(f"print_typst: TV layout {layout_tv} maps (T{t}, V{v}) to "
                                f"{idx}, outside the {rows}x{cols} tile")
            owner.setdefault((idx % rows, idx // rows), (t, v))
    return owner


def _tv_cell(tv):
    """The cell of (thread, value) `tv`, or an empty one."""
    if tv is None:
        return "[]"
    return f"c({tv[0]})[T{tv[0]} \\ V{tv[1]}]"


def _thread_colors(*owners):
    nthr = 1 + max((t for o in owners for t, _ in o.values()), default=0)
    return [thread_color(t) for t in range(nthr)]


def _tv_side(owners):
    most = max((max(len(str(t)), len(str(v))) + 1 for o in owners for t, v in o.values()),
               default=2)
    return _em(most)


def _tv_table(owner, rows, cols, side, title):
    lines = [f"titled({_string(title)}, table(columns: {_columns(cols, side)}, "
             f"rows: (auto, {side}),",
             "  [], " + ", ".join(f"i({n})" for n in range(cols)) + ","]
    for m in range(rows):
        cells = (_tv_cell(owner.get((m, n))) for n in range(cols))
        lines.append(f"  i({m}), " + ", ".join(cells) + ",")
    lines.append("))")
    return "\n".join(lines)


def _extent(x):
    return x if type(x) is int else size(x)


def _copy_source(tiled_copy):
    rows, cols = _dims("the copy tile", *(_extent(x) for x in tiled_copy.tiler_mn))
    src = _tv_owners(tiled_copy.get_layoutS_TV(), rows, cols)
    dst = _tv_owners(tiled_copy.get_layoutD_TV(), rows, cols)
    side = _tv_side((src, dst))
    body = ("#grid(columns: 2, column-gutter: 16pt,\n"
            + _tv_table(src, rows, cols, side, "src") + ",\n"
            + _tv_table(dst, rows, cols, side, "dst") + ",\n)")
    return _document(tiled_copy, _thread_colors(src, dst), body)


def _mma_source(tiled_mma):
    M, N, K = _dims("the MMA tile", *(tiled_mma.tile_size(i) for i in range(3)))
    a = _tv_owners(tiled_mma.get_layoutA_TV(), M, K)   # (m, k)
    b = _tv_owners(tiled_mma.get_layoutB_TV(), N, K)   # (n, k)
    c = _tv_owners(tiled_mma.get_layoutC_TV(), M, N)   # (m, n)
    side = _tv_side((a, b, c))
    blank = ", ".join(["[]"] * (K + 1))
    # one table: m index | A (K columns) | k index of B | C (N columns);
    # rows: n index | B (K rows, k down) | k index of A | C (M rows)
    lines = [f"#table(columns: {_columns(K, side)} + (auto,) + ({side},) * {N},",
             f"  rows: (auto,) + ({side},) * {K} + (auto, {side}),",
             f"  {blank}, [], " + ", ".join(f"i({n})" for n in range(N)) + ","]
    for k in range(K):
        lines.append(f"  {blank}, i({k}), "
                     + ", ".join(_tv_cell(b.get((n, k))) for n in range(N)) + ",")
    lines.append("  [], " + ", ".join(f"i({k})" for k in range(K)) + ", [], "
                 + ", ".join(["[]"] * N) + ",")
    for m in range(M):
        a_cells = (_tv_cell(a.get((m, k))) for k in range(K))
        c_cells = (_tv_cell(c.get((m, n))) for n in range(N))
        lines.append(f"  i({m}), " + ", ".join(a_cells) + ", [], " + ", ".join(c_cells) + ",")
    lines.append(")")
    return _document(tiled_mma, _thread_colors(a, b, c), "\n".join(lines))


# -- entry points --------------------------------------------------------------

def cells(obj):
    """How many cells the picture of `obj` has (an int, or a dynamic value)."""
    if isinstance(obj, TiledCopy):
        return 2 * size(obj.tiler_mn)
    if isinstance(obj, TiledMMA):
        m, n, k = obj.tile_shape
        return m * n + (m + n) * k
    return size(obj)


def typst_source(obj):
    """A standalone Typst document drawing `obj`: a rank-1/2 Layout or
    ComposedLayout, a TiledCopy or a TiledMMA, of at most MAX_CELLS cells.
    (MoYe: print_typst.)
        >>> typst_source(Layout((2, 3), (3, 1))).splitlines()[0]
        '// (2,3):(3,1)'
    """
    if not isinstance(obj, (Layout, ComposedLayout, TiledCopy, TiledMMA)):
        raise MoyeTypeError(f"print_typst: cannot draw {type(obj).__name__} {obj!r}; "
                            "expected a Layout, ComposedLayout, TiledCopy or TiledMMA")
    n = cells(obj)
    if type(n) is int and n > MAX_CELLS:
        what = f"layout {obj}" if isinstance(obj, (Layout, ComposedLayout)) else \
            f"this {type(obj).__name__}"
        raise LayoutError(f"print_typst: the picture of {what} would have {n} cells; pictures "
                          f"have at most {MAX_CELLS} (moye.viz.typst.MAX_CELLS): draw a tile "
                          "of it, or print_layout it (which elides large layouts)")
    if isinstance(obj, (Layout, ComposedLayout)):
        return _layout_source(obj)
    if isinstance(obj, TiledCopy):
        return _copy_source(obj)
    return _mma_source(obj)


def print_typst(obj):
    """Print a standalone Typst document drawing `obj` (a layout, TiledCopy or
    TiledMMA), to paste into typst.app or compile. MoYe: print_typst.
        >>> print_typst(Layout(2))  # doctest: +ELLIPSIS
        // 2:1
        #set page(width: auto, height: auto, margin: 8pt)
        ...
        #titled("2:1", table(columns: (auto,) + (2.6em,) * 2, rows: (auto, 2.6em),
          [], i(0), i(1),
          i(0), c(0)[0], c(1)[1],
        ))
    """
    print(typst_source(obj), end="")

