"""Hostile inputs to the printers and pictures: non-layouts, pictures too
large to draw (which used to run for minutes), bad file names and formats,
and analyze given the wrong kinds."""
import os
import tempfile

import pytest

from moye import (CopyAtom, Float32, Layout, LayoutError, MoyeError, MoyeTypeError, UniversalCopy,
                  analyze, make_tiled_copy, print_layout)
from moye.viz import render, typst_source

from .hostile import Hostile, check, ids


def tiled_copy(threads=(32, 1)):
    return make_tiled_copy(CopyAtom(UniversalCopy(Float32), Float32), Layout(threads),
                           Layout((1, 1)))


def scratch(name):
    """A path in the temporary folder (a case that wrongly renders writes nothing here)."""
    return os.path.join(tempfile.gettempdir(), name)


def render_into_a_folder():
    """render to a path that is a folder: the write fails."""
    folder = os.path.join(tempfile.mkdtemp(), "picture.svg")
    os.mkdir(folder)
    render(Layout(2), folder)


CASES = [
    Hostile("print_layout of an int", lambda: print_layout(5),
            MoyeTypeError, r"print_layout: expected a Layout or ComposedLayout, got int 5"),
    Hostile("print_layout of a string", lambda: print_layout("(2,3):(1,2)"),
            MoyeTypeError, r"print_layout: expected a Layout .*got str '\(2,3\):\(1,2\)'"),
    Hostile("print_layout of rank 3", lambda: print_layout(Layout((2, 2, 2))),
            LayoutError, r"layout \(2,2,2\):\(1,2,4\) has rank 3; only rank-1 and rank-2"),
    Hostile("typst_source of a tuple", lambda: typst_source((4, 8)),
            MoyeTypeError, r"print_typst: cannot draw tuple \(4, 8\); expected a Layout"),
    Hostile("a 4096x4096 layout picture", lambda: typst_source(Layout((4096, 4096))),
            LayoutError, r"\(4096,4096\):\(1,4096\) would have 16777216 cells; .*at most 65536",
            seconds=10),
    Hostile("a 65536x65536 layout picture", lambda: typst_source(Layout((65536, 65536))),
            LayoutError, r"would have 4294967296 cells; pictures have at most 65536",
            seconds=10),
    Hostile("a TiledCopy picture of 131072 cells",
            lambda: typst_source(tiled_copy((256, 256))),
            LayoutError, r"this TiledCopy would have 131072 cells", seconds=10),
    Hostile("render to a .gif", lambda: render(Layout(2), scratch("layout.gif")),
            LayoutError, r"format of '.*layout\.gif'; use a \.svg, \.png or \.pdf"),
    Hostile("render an .svg with ppi", lambda: render(Layout(2), scratch("layout.svg"), ppi=300),
            LayoutError, r"ppi applies to \.png files, not \.svg"),
    Hostile("render with ppi=-5", lambda: render(Layout(2), scratch("layout.png"), ppi=-5),
            MoyeTypeError, r"ppi must be a positive number .*got -5"),
    Hostile("render to the path 5", lambda: render(Layout(2), 5),
            MoyeTypeError, r"path must be a file name .*got int 5"),
    Hostile("render into a missing folder", lambda: render(Layout(2), "/no/such/dir/a.svg"),
            MoyeError, r"cannot write '/no/such/dir/a\.svg': the folder '/no/such/dir' does not"),
    Hostile("render onto a folder", render_into_a_folder,
            MoyeError, r"render: cannot write '.*picture\.svg': Is a directory"),
    Hostile("analyze a layout as the tiled copy", lambda: analyze(Layout(32), Layout(32), None),
            MoyeTypeError, r"analyze: expected a TiledCopy, got 32:1"),
    Hostile("analyze a string layout", lambda: analyze(tiled_copy(), "32:1", None),
            MoyeTypeError, r"analyze: src_layout must be a layout, an array or None .*got str"),
    Hostile("analyze dtype 'complex'",
            lambda: analyze(tiled_copy(), Layout(32), None, dtype="complex"),
            MoyeTypeError, r"unknown element type name 'complex'"),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_hostile(case):
    check(case)
