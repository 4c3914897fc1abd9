"""print_layout elides large layouts as NumPy elides large arrays."""
import time

import pytest

from moye import Layout, MoyeTypeError, Swizzle, composition
from moye.layout import printing
from moye.layout.printing import layout_to_text


def test_an_elided_grid_shows_the_corners(monkeypatch):
    monkeypatch.setattr(printing, "MAX_EXTENT", 4)
    monkeypatch.setattr(printing, "EDGE_ITEMS", 1)
    assert layout_to_text(Layout((5, 6), (6, 1))) == "\n".join([
        "(5,6):(6,1)",
        "         0   ...     5 ",
        "     +-----+-----+-----+",
        "  0  |   0 | ... |   5 |",
        "     +-----+-----+-----+",
        "...  | ... | ... | ... |",
        "     +-----+-----+-----+",
        "  4  |  24 | ... |  29 |",
        "     +-----+-----+-----+",
    ])


def test_a_grid_up_to_the_limit_is_drawn_in_full():
    text = layout_to_text(Layout((2, 256)))
    assert "..." not in text
    assert text.splitlines()[3].count("|") == 257


def test_a_huge_layout_prints_at_once_with_its_corner_offsets():
    layout = Layout((65536, 65536))
    start = time.perf_counter()
    lines = layout_to_text(layout).splitlines()
    assert time.perf_counter() - start < 1
    assert len(lines) == 2 + 2 * 17 + 1                    # 8 + ... + 8 rows
    first = [c.strip() for c in lines[3].split("|")[1:-1]]
    last = [c.strip() for c in lines[-2].split("|")[1:-1]]
    assert first[:2] == ["0", "65536"] and first[8] == "..." and \
        first[-1] == str(65535 * 65536)
    assert last[0] == "65535" and last[-1] == str(65535 + 65535 * 65536)
    assert lines[2 + 2 * 8 + 1].split("|")[0].strip() == "..."


def test_a_swizzled_layout_is_drawn():
    text = layout_to_text(composition(Swizzle(1, 0, 1), Layout((2, 2), (2, 1))))
    assert [line.split("|")[1:-1] for line in text.splitlines()[3::2]] == \
        [[" 0 ", " 1 "], [" 3 ", " 2 "]]


@pytest.mark.parametrize("bad", [5, "(2,3):(1,2)", (2, 3), None])
def test_print_layout_refuses_what_is_not_a_layout(bad):
    with pytest.raises(MoyeTypeError, match="print_layout: expected a Layout or ComposedLayout"):
        layout_to_text(bad)
