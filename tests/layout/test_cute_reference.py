"""moye against CuTe itself: 4069 cases that CuTe's Python DSL (4.8.1) computed
on random layouts (tests/layout/data/cute_cases.json; how they were made and
what the DSL does differently from CuTe's C++: cute_reference/README.md).

Comparison rules, from those differences: the stride of a size-1 mode is
compared as 0 on both sides; raked_product is compared after coalescing
each mode (the DSL coalesces them, C++ does not); complement without a
cotarget was asked of the DSL as complement(L, cosize(L)). Where CuTe
refused an input, moye must refuse it too, with a LayoutError.
"""
import json
from pathlib import Path

import pytest

import moye
from moye import Layout, LayoutError, Swizzle
from moye.layout import inttuple as T

CASES = json.loads((Path(__file__).parent / "data" / "cute_cases.json").read_text())


def tup(x):
    if isinstance(x, list):
        return tuple(tup(e) for e in x)
    return x


def arg(a):
    if isinstance(a, dict):
        if "shape" in a:
            return Layout(tup(a["shape"]), tup(a["stride"]))
        if "tiler" in a:
            return tuple(arg(e) for e in a["tiler"])
        if "shape_arg" in a:
            return tup(a["shape_arg"])
        if "order" in a:
            return tup(a["order"])
        if "swizzle" in a:
            return Swizzle(*a["swizzle"])
        if "profile" in a:
            return tup(a["profile"])
    return tup(a)


def normal(layout):
    """Size-1 modes' strides as 0."""
    def fix(s, d):
        if isinstance(s, tuple):
            return tuple(fix(a, b) for a, b in zip(s, d))
        return 0 if s == 1 else d
    return Layout(layout.shape, fix(layout.shape, layout.stride))


def run(op, args):
    if op == "complement" and len(args) == 1:
        return moye.complement(args[0], moye.cosize(args[0]))
    if op == "recast_layout":
        new_bits, old_bits, layout = args
        return moye.recast_layout(layout, old_bits, new_bits)
    if op == "swizzle_composition":
        C = moye.composition(args[0], args[1])
        return [C(i) for i in range(moye.size(C))]
    if op == "swizzle_layout_composition":
        sw, a, b = args
        C = moye.composition(moye.composition(sw, a), b)
        return [C(i) for i in range(moye.size(C))]
    if op == "make_ordered_layout":
        return moye.make_ordered_layout(*args)
    if op == "tile_to_shape":
        return moye.tile_to_shape(*args)
    return getattr(moye, op)(*args)


def compare(op, got, want):
    if isinstance(want, dict) and "values" in want:
        return got == want["values"]
    if not isinstance(want, dict):
        return got == want
    want = Layout(tup(want["shape"]), tup(want["stride"]))
    if op == "raked_product":
        got = moye.coalesce(got, tuple(1 for _ in got.shape)) \
            if isinstance(got.shape, tuple) else moye.coalesce(got)
        want = moye.coalesce(want, tuple(1 for _ in want.shape)) \
            if isinstance(want.shape, tuple) else moye.coalesce(want)
    return normal(got) == normal(want)


def cpp_refuses(op, args):
    """Inputs CuTe's C++ rejects at compile time that the DSL computes anyway
    (with ceil_div, or producing empty modes): moye follows the C++."""
    if op == "recast_layout":
        new_bits, old_bits, layout = args
        from math import gcd
        g = gcd(new_bits, old_bits)
        up, down = new_bits // g, old_bits // g
        strides = [d for d in T.flatten_to_tuple(layout.stride)]
        if up > 1 and any(d and d % up and up % d for d in strides):
            return True                        # upcast's static divisibility assert
        if down > 1 and up == 1 and not any(abs(d) == 1 for d in strides):
            return True                        # downcast needs a stride-1 mode
    if op == "tile_to_shape":
        block, target = args[0], args[1]
        shape = T.product_each(moye.append(block, n=len(target)).shape)
        return not T.evenly_divides(T.product_each(target), shape)
    return False


# The DSL's left_inverse of an all-zero-stride layout is 1:0; C++'s algorithm
# keeps the size of the last sorted mode (32:0 below). Both are left inverses
# on the image {0}; moye follows the C++.
CPP_DIFFERS = {("left_inverse", "(((1,4),8):((0,0),0),)")}


def check(case):
    op, args = case["op"], [arg(a) for a in case["args"]]
    refused = case["error"] is not None or _empty_modes(case["result"]) or cpp_refuses(op, args)
    if (op, str(tuple(args))) in CPP_DIFFERS:
        return "ok"
    try:
        got = run(op, args)
    except LayoutError as e:
        return "ok" if refused else f"moye refused what CuTe computed: {e}"
    if refused:
        return f"CuTe refused ({case['error'][:60]}) but moye gave {got}"
    if compare(op, got, case["result"]):
        return "ok"
    return f"moye gave {got}, CuTe {case['result']}"


def _empty_modes(result):
    """The DSL returns size-0 modes where C++ static-asserts (complement)."""
    if not isinstance(result, dict) or "shape" not in result:
        return False
    return 0 in T.flatten_to_tuple(tup(result["shape"]))


@pytest.mark.parametrize("op", sorted({c["op"] for c in CASES}))
def test_moye_agrees_with_cute(op):
    cases = [c for c in CASES if c["op"] == op and not str(c["error"]).startswith("crash")]
    bad = []
    for c in cases:
        verdict = check(c)
        if verdict != "ok":
            bad.append(f"{op}{tuple(c['args'])}: {verdict}")
    assert not bad, f"{len(bad)} of {len(cases)} disagree:\n" + "\n".join(bad[:15])
