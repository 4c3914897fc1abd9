"""Typst pictures: the labels drawn in each cell, and that Typst compiles them."""
import re

import pytest

from moye import (CopyAtom, Float32, Float64, Layout, LayoutError, Swizzle, UInt128,
                  UniversalCopy, UniversalFMA, composition, make_tiled_copy, make_tiled_mma)
from moye.viz import print_typst, render, thread_color, typst_source

ROW = re.compile(r"^  i\((\d+)\), (.*),$")


def seed_copy():
    """Seed 000's tiled copy: six threads, each a 2x3 block of the 4x9 tile."""
    return make_tiled_copy(CopyAtom(UniversalCopy(Float64), Float64),
                           Layout((2, 3), (3, 1)), Layout((2, 3), (1, 2)))


def tokens(line):
    """A table row of the source: ("i", n) for an index, None for a blank,
    (color, T, V) for a thread's cell."""
    found = re.findall(r"i\((\d+)\)|c\((\d+)\)\[T(\d+) \\ V(\d+)\]|(\[\])", line)
    return [("i", int(i)) if i else None if blank else (int(k), int(t), int(v))
            for i, k, t, v, blank in found]


def table_rows(source):
    """The rows of every table in `source`, in order: [(row index, cells)]."""
    return [(int(match.group(1)), tokens(match.group(2)))
            for match in map(ROW.match, source.splitlines()) if match]


def test_seed_copy_labels_each_cell_with_its_thread_and_value():
    # As drawn in the seed (1-based there): rows 0-1 are threads 0,1,2 by
    # blocks of three columns, rows 2-3 threads 3,4,5; within a block the
    # values run down the columns, as val_layout (2,3):(1,2) says.
    expected = [[(3 * (m // 2) + n // 3, m % 2 + 2 * (n % 3)) for n in range(9)]
                for m in range(4)]
    assert expected[0][:4] == [(0, 0), (0, 2), (0, 4), (1, 0)]
    source = typst_source(seed_copy())
    assert len(re.findall(r"\[T\d+ \\ V\d+\]", source)) == 2 * 36   # no other labels
    rows = table_rows(source)
    assert [m for m, _ in rows] == [0, 1, 2, 3] * 2                # src, then dst
    for m, cells in rows:
        assert [(t, v) for _, t, v in cells] == expected[m]
        assert all(k == t for k, t, _ in cells)                      # filled by thread


def test_copy_labels_follow_the_tv_layouts():
    tc = seed_copy()
    rows = table_rows(typst_source(tc))
    for table, layout_tv in ((rows[:4], tc.get_layoutS_TV()), (rows[4:], tc.get_layoutD_TV())):
        drawn = {(m, n): (t, v) for m, cells in table for n, (_, t, v) in enumerate(cells)}
        assert len(drawn) == 36
        for t in range(6):
            for v in range(6):
                idx = layout_tv(t, v)
                assert drawn[idx % 4, idx // 4] == (t, v)


def test_vectorized_copy_draws_the_same_owners():
    vec = make_tiled_copy(CopyAtom(UniversalCopy(UInt128), Float64),
                          Layout((2, 3), (3, 1)), Layout((2, 3), (1, 2)))
    assert table_rows(typst_source(vec)) == table_rows(typst_source(seed_copy()))


def test_mma_draws_b_on_top_a_left_c_middle():
    mma = make_tiled_mma(UniversalFMA(Float32), Layout((4, 4)))    # thread m + 4n owns C(m,n)
    table = typst_source(mma).split("#table(")[1].splitlines()
    assert table[1].startswith("  rows:") and table[-1] == ")"
    lines = [tokens(line) for line in table[2:-1]]
    idx = [("i", n) for n in range(4)]
    assert lines[0] == [None, None, None] + idx                       # n above B
    assert lines[1] == [None, None, ("i", 0)] + [(4 * n, 4 * n, 0) for n in range(4)]  # B, k=0
    assert lines[2] == [None, ("i", 0), None] + [None] * 4            # k above A
    for m, line in enumerate(lines[3:]):                               # m | A | gap | C
        assert line == [("i", m), (m, m, 0), None] + [(m + 4 * n, m + 4 * n, 0) for n in range(4)]
    assert len(lines) == 3 + 4


def drawn_tables(source):
    """{(m, n): (T, V)} of each table that follows a caption, in order."""
    tables = []
    for line in source.splitlines():
        if line.startswith("titled("):
            tables.append({})
        match = ROW.match(line)
        if match:
            m = int(match.group(1))
            for n, tok in enumerate(tokens(match.group(2))):
                if tok is not None:
                    tables[-1][m, n] = tok[1:]
    return tables


def test_ldmatrix_picture_follows_the_ptx_semantics():
    # ldmatrix .x4: thread t gives the address of row t % 8 of matrix t // 8;
    # its register r receives row t // 4, columns 2 (t % 4) and + 1 of matrix r
    # (values 2r and 2r + 1 of the 16-bit destination).
    from moye import LDSM_U32x4_N, UInt16
    tc = make_tiled_copy(CopyAtom(LDSM_U32x4_N, UInt16), Layout((16, 2)), Layout((2, 4)))
    src, dst = drawn_tables(typst_source(tc))
    assert len(src) == len(dst) == 32 * 8
    for cell, (t, v) in dst.items():
        r, e = divmod(v, 2)
        assert src[cell] == (8 * r + t // 4, 2 * (t % 4) + e)
    # the destination is the raked (16,2) threads by (2,4) values
    assert all(dst[m, n] == (m // 2 + 16 * (n // 4), m % 2 + 2 * (n % 4))
               for m in range(32) for n in range(8))


def test_tensor_core_mma_picture_follows_the_ptx_fragments():
    # mma.m16n8k8 tf32 (PTX ISA): group g = t // 4, t % 4 = i. A holds
    # (g + 8 (v % 2), i + 4 (v // 2)); B holds (k = i + 4v, n = g);
    # C holds (g + 8 (v // 2), 2i + v % 2).
    from moye import MMAOP_16x8x8_F32TF32TF32F32_TN
    table = typst_source(make_tiled_mma(MMAOP_16x8x8_F32TF32TF32F32_TN))
    lines = [tokens(line) for line in table.split("#table(")[1].splitlines()[2:-1]]
    assert [len(row) for row in lines] == [1 + 8 + 1 + 8] * (1 + 8 + 1 + 16)
    b_rows, a_and_c = lines[1:9], lines[10:]
    for k, row in enumerate(b_rows):
        for n, (_, t, v) in enumerate(row[10:]):
            assert (k, n) == (t % 4 + 4 * v, t // 4)
    for m, row in enumerate(a_and_c):
        for k, (_, t, v) in enumerate(row[1:9]):
            assert (m, k) == (t // 4 + 8 * (v % 2), t % 4 + 4 * (v // 2))
        for n, (_, t, v) in enumerate(row[10:]):
            assert (m, n) == (t // 4 + 8 * (v // 2), 2 * (t % 4) + v % 2)


def test_layout_cells_hold_offsets():
    layout = Layout((2, (2, 2)), (1, (4, 2)))
    source = typst_source(layout)
    assert source.startswith("// (2,(2,2)):(1,(4,2))\n")
    cells = re.findall(r"^  i\((\d+)\), (.*),$", source, re.M)
    assert [[int(o) for o in re.findall(r"c\(\d+\)\[(\d+)\]", line)] for _, line in cells] == \
        [[layout(m, n) for n in range(4)] for m in range(2)]


def test_swizzled_layout_cells_hold_swizzled_offsets():
    layout = composition(Swizzle(3, 0, 3), Layout((8, 8), (8, 1)))
    source = typst_source(layout)
    offsets = [[int(o) for o in re.findall(r"c\(\d+\)\[(\d+)\]", line)]
               for _, line in re.findall(r"^  i\((\d+)\), (.*),$", source, re.M)]
    assert offsets == [[8 * m + (n ^ m) for n in range(8)] for m in range(8)]


def test_print_typst_prints_the_source(capsys):
    print_typst(Layout((2, 3)))
    assert capsys.readouterr().out == typst_source(Layout((2, 3)))


def test_what_cannot_be_drawn():
    with pytest.raises(LayoutError, match="rank 3"):
        typst_source(Layout((2, 2, 2)))
    with pytest.raises(TypeError, match="cannot draw"):
        typst_source(42)


def test_thread_colors_are_distinct():
    assert len({thread_color(t) for t in range(256)}) == 256
    assert thread_color(256) == thread_color(0)


# -- compiling with Typst ---------------------------------------------------------

@pytest.fixture(scope="module")
def typst():
    return pytest.importorskip("typst")


@pytest.mark.parametrize("make", [
    seed_copy,
    lambda: make_tiled_mma(UniversalFMA(Float32), Layout((16, 16))),
    lambda: Layout((4, 8), (8, 1)),
    lambda: Layout(5),
    lambda: composition(Swizzle(3, 0, 3), Layout((8, 8), (8, 1))),
], ids=["copy", "mma", "layout", "rank1", "swizzle"])
def test_typst_compiles_to_svg(typst, make):
    svg = typst.compile(typst_source(make()).encode(), format="svg").decode()
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")


def test_repr_svg(typst):
    for obj in (Layout((2, 3)), seed_copy(), make_tiled_mma(UniversalFMA(Float32), Layout((2, 2))),
                composition(Swizzle(1, 0, 1), Layout((2, 2), (2, 1)))):
        assert obj._repr_svg_().startswith("<svg")
    assert Layout((2, 2, 2))._repr_svg_() is None              # not drawable: the text repr
    assert Layout((128, 128))._repr_svg_() is None             # too large for a notebook


@pytest.mark.parametrize("suffix, magic", [(".svg", b"<svg"), (".png", b"\x89PNG"),
                                           (".pdf", b"%PDF")])
def test_render_writes_by_suffix(typst, tmp_path, suffix, magic):
    path = render(seed_copy(), tmp_path / f"copy{suffix}")
    assert path.read_bytes().startswith(magic)


def test_render_png_resolution(typst, tmp_path):
    import struct
    small = render(Layout((2, 3)), tmp_path / "a.png", ppi=72).read_bytes()
    large = render(Layout((2, 3)), tmp_path / "b.png", ppi=288).read_bytes()
    width = (lambda png: struct.unpack(">I", png[16:20])[0])
    assert width(large) == pytest.approx(4 * width(small), abs=4)


def test_render_rejects_unknown_suffix(tmp_path):
    with pytest.raises(ValueError, match=".svg, .png or .pdf"):
        render(Layout(2), tmp_path / "x.jpg")


def test_pictures_up_to_max_cells_are_drawn_and_larger_ones_refused():
    from moye.viz.typst import MAX_CELLS
    assert MAX_CELLS == 256 * 256
    source = typst_source(Layout((256, 256)))
    assert source.count("c(") - 1 == 256 * 256         # one cell each (and c's definition)
    with pytest.raises(LayoutError, match=r"\(256,257\):\(1,256\) would have 65792 cells"):
        typst_source(Layout((256, 257)))
