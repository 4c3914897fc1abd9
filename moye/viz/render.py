"""Compile moye's Typst pictures to SVG, PNG or PDF with the `typst` package
(the Typst compiler's Python binding), imported only when a picture is drawn."""
import os
import re
from pathlib import Path

from ..errors import LayoutError, MoyeError, MoyeTypeError
from .typst import typst_source

FORMATS = ("svg", "png", "pdf")


def _compile(source, fmt, ppi=None):
    try:
        import typst
    except ImportError as e:
        raise ImportError("moye.viz needs the `typst` package to render pictures "
                          "(pip install typst); print_typst works without it") from e
    return typst.compile(source.encode(), format=fmt, ppi=ppi)


_LONG_DECIMAL = re.compile(rb"(-?\d+\.\d{3})\d+")
_GLYPH_ID = re.compile(rb"\b(g[0-9A-F]{32})\b")
_DEFAULTS = re.compile(rb' (x="0" y="0"|fill-rule="nonzero")')


def _shorten(svg_bytes):
    """Typst's SVG, about 40% smaller: coordinates to a thousandth of a
    point (Typst writes nine decimals), short glyph ids, no attributes that
    repeat SVG's defaults."""
    ids = {}
    svg_bytes = _LONG_DECIMAL.sub(lambda m: b"%.3f" % float(m.group(0)), svg_bytes)
    svg_bytes = _GLYPH_ID.sub(lambda m: ids.setdefault(m.group(1), b"g%d" % len(ids)), svg_bytes)
    return _DEFAULTS.sub(b"", svg_bytes)


def render(obj, path, *, ppi=None):
    """Draw `obj` (a layout, TiledCopy or TiledMMA) into `path`; the suffix
    (.svg, .png or .pdf) picks the format, `ppi` the resolution of a PNG
    (Typst's default: 144). Returns the path written."""
    if not isinstance(path, (str, os.PathLike)):
        raise MoyeTypeError(f"render: path must be a file name (a str or a Path), got "
                            f"{type(path).__name__} {path!r}")
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise LayoutError(f"render: cannot tell the format of {str(path)!r}; "
                          f"use a .svg, .png or .pdf file name")
    if ppi is not None and fmt != "png":
        raise LayoutError(f"render: ppi applies to .png files, not .{fmt}")
    if ppi is not None and (isinstance(ppi, bool) or not isinstance(ppi, (int, float))
                            or not ppi > 0):
        raise MoyeTypeError(f"render: ppi must be a positive number (pixels per inch), "
                            f"got {ppi!r}")
    if not path.parent.is_dir():
        raise MoyeError(f"render: cannot write {str(path)!r}: the folder "
                        f"{str(path.parent)!r} does not exist")
    data = _compile(typst_source(obj), fmt, ppi)
    try:
        path.write_bytes(_shorten(data) if fmt == "svg" else data)
    except OSError as e:
        raise MoyeError(f"render: cannot write {str(path)!r}: {e.strerror or e}") from e
    return path


def svg(obj):
    """The SVG picture of `obj`, as text."""
    return _shorten(_compile(typst_source(obj), "svg")).decode()
