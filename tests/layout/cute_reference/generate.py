"""Generate tests/layout/data/cute_cases.json: CuTe's own answers for the layout algebra.

Run by hand, never by CI. It needs NVIDIA's CuTe Python DSL (PyPI `nvidia-cutlass-dsl`),
installed in a virtualenv outside the repository, e.g.

    python3 -m venv /work/cutedsl-venv
    /work/cutedsl-venv/bin/pip install nvidia-cutlass-dsl
    /work/cutedsl-venv/bin/python tests/layout/cute_reference/generate.py

No GPU or driver is needed: the DSL folds static layouts while it traces a `@cute.jit`
function, and the traced function is never compiled or launched (we call it once, plainly,
on the host; it returns after tracing).

The output is a JSON list of cases {"op", "args", "result", "error"}; see README.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import sys
from itertools import permutations

import cutlass
import cutlass.cute as cute
from cutlass.cute.core import _pack_tile

SEED = 20240611
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(os.path.join(HERE, "..", "data", "cute_cases.json"))

# --------------------------------------------------------------------------------------
# Pure-python helpers on nested int tuples (shapes / strides)
# --------------------------------------------------------------------------------------


def leaves(t):
    if isinstance(t, tuple):
        out = []
        for e in t:
            out.extend(leaves(e))
        return out
    return [t]


def unflatten(flat, like):
    it = iter(flat)

    def go(x):
        if isinstance(x, tuple):
            return tuple(go(e) for e in x)
        return next(it)

    return go(like)


def size(shape):
    return math.prod(leaves(shape))


def cosize(shape, stride):
    return sum((s - 1) * d for s, d in zip(leaves(shape), leaves(stride))) + 1


def values(shape, stride):
    """The layout's function over its domain, colexicographic, (negative strides not used)."""
    ss, dd = leaves(shape), leaves(stride)
    out = [0]
    for s, d in zip(ss, dd):
        out = [v + i * d for i in range(s) for v in out]
    return out


def injective(shape, stride):
    v = values(shape, stride)
    return len(set(v)) == len(v)


def rank(shape):
    return len(shape) if isinstance(shape, tuple) else 1


def modes(shape):
    return list(shape) if isinstance(shape, tuple) else [shape]


def to_json(x):
    if isinstance(x, tuple):
        return [to_json(e) for e in x]
    if isinstance(x, bool):
        raise TypeError(f"unexpected bool {x!r}")
    if isinstance(x, int):
        return x
    raise TypeError(f"not a static int tuple: {x!r} ({type(x)})")


def from_json(x):
    if isinstance(x, list):
        return tuple(from_json(e) for e in x)
    return x


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


# --------------------------------------------------------------------------------------
# Random inputs
# --------------------------------------------------------------------------------------


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def mode_int(self):
        r = self.r
        return r.choice([1, 2, 2, 3, 4, 4, 5, 6, 7, 8, 8, 2, 4, 3, 6])

    def shape(self, max_size=512, max_rank=4, depth=2, allow_int=True):
        r = self.r
        for _ in range(1000):
            rk = r.choice([1, 1, 2, 2, 2, 3, 3, 4][: 2 + 2 * max_rank])
            rk = min(rk, max_rank)
            ms = []
            for _ in range(rk):
                if depth >= 2 and r.random() < 0.3:
                    sub = []
                    for _ in range(r.choice([2, 2, 3])):
                        if depth >= 3 and r.random() < 0.15:
                            sub.append(tuple(self.mode_int() for _ in range(2)))
                        else:
                            sub.append(self.mode_int())
                    ms.append(tuple(sub))
                else:
                    ms.append(self.mode_int())
            if rk == 1 and allow_int and not isinstance(ms[0], tuple) and r.random() < 0.6:
                s = ms[0]
            else:
                s = tuple(ms)
            if size(s) <= max_size:
                return s
        raise RuntimeError("no shape")

    def compact(self, shape, order=None, gaps=False):
        ls = leaves(shape)
        n = len(ls)
        order = list(range(n)) if order is None else order
        st = [0] * n
        acc = 1
        for i in order:
            if gaps and self.r.random() < 0.35:
                acc *= self.r.choice([2, 3])
            st[i] = acc
            acc *= ls[i]
        return unflatten(st, shape)

    def stride(self, shape, kind=None):
        r = self.r
        n = len(leaves(shape))
        kind = kind or r.choice(["col", "col", "row", "perm", "perm", "gaps", "gaps",
                                 "zeros", "zeros", "random", "size1zero"])
        if kind == "col":
            return self.compact(shape)
        if kind == "row":
            return self.compact(shape, list(reversed(range(n))))
        if kind == "perm":
            o = list(range(n))
            r.shuffle(o)
            return self.compact(shape, o)
        if kind == "gaps":
            o = list(range(n))
            r.shuffle(o)
            return self.compact(shape, o, gaps=True)
        if kind == "zeros":
            d = leaves(self.stride(shape, r.choice(["col", "perm", "gaps"])))
            for i in range(n):
                if r.random() < 0.35:
                    d[i] = 0
            return unflatten(d, shape)
        if kind == "size1zero":  # DSL style: size-1 modes get stride 0
            d = leaves(self.stride(shape, r.choice(["col", "perm", "gaps"])))
            ss = leaves(shape)
            d = [0 if s == 1 else x for s, x in zip(ss, d)]
            return unflatten(d, shape)
        if kind == "random":
            return unflatten([r.choice([0, 1, 1, 2, 3, 4, 5, 6, 8, 12, 16]) for _ in range(n)], shape)
        raise ValueError(kind)

    def layout(self, max_size=512, kind=None, **kw):
        s = self.shape(max_size=max_size, **kw)
        return s, self.stride(s, kind)

    def injective_layout(self, max_size=512, **kw):
        for _ in range(1000):
            s = self.shape(max_size=max_size, **kw)
            d = self.stride(s, self.r.choice(["col", "row", "perm", "gaps", "gaps", "gaps", "random"]))
            if injective(s, d):
                return s, d
        raise RuntimeError

    def factor_shape(self, n, max_rank=3):
        """A shape (int or tuple) of size exactly n."""
        r = self.r
        fs = []
        m = n
        while m > 1 and len(fs) < max_rank - 1 and r.random() < 0.6:
            d = r.choice([x for x in divisors(m) if x > 1])
            fs.append(d)
            m //= d
        fs.append(m)
        r.shuffle(fs)
        if len(fs) == 1 and r.random() < 0.7:
            return fs[0]
        return tuple(fs)


def L(shape, stride):
    return {"shape": to_json(shape), "stride": to_json(stride)}


def case(op, *args):
    return {"op": op, "args": list(args)}


# --------------------------------------------------------------------------------------
# Case construction (pure python)
# --------------------------------------------------------------------------------------


def tile_elem(g, n, allow_none=True, valid=True):
    """A tiler element for a mode of size n: an int, a layout, or None."""
    r = g.r
    c = r.random()
    if allow_none and c < 0.1:
        return None
    ds = divisors(n) if valid else list(range(1, 2 * n + 1))
    t = r.choice(ds)
    if c < 0.55:
        return t
    # a layout of size t, strided so its image lies in [0, n) when valid
    rest = max(1, n // t)
    sh = g.factor_shape(t, max_rank=2)
    st = g.compact(sh, None)
    if valid:
        mult = r.choice(divisors(rest))
    else:
        mult = r.choice([1, 2, 3])
    st = unflatten([x * mult for x in leaves(st)], sh)
    if r.random() < 0.3 and isinstance(sh, tuple):
        # permuted compact
        o = list(range(len(leaves(sh))))
        r.shuffle(o)
        st = unflatten([x * mult for x in leaves(g.compact(sh, o))], sh)
    return L(sh, st)


def tuple_tiler(g, shape, allow_none=True, valid=True, full_rank=False):
    ms = modes(shape)
    k = len(ms) if full_rank else g.r.randint(1, len(ms))
    els = [tile_elem(g, size(ms[i]), allow_none, valid) for i in range(k)]
    if all(e is None for e in els):
        els[0] = size(ms[0])
    return {"tiler": els}


def layout_tiler(g, shape, valid=True):
    n = size(shape)
    r = g.r
    t = r.choice(divisors(n)) if valid else r.randint(1, n)
    sh = g.factor_shape(t)
    rest = max(1, n // t)
    st = g.compact(sh, None)
    if r.random() < 0.4 and isinstance(sh, tuple):
        o = list(range(len(leaves(sh))))
        r.shuffle(o)
        st = g.compact(sh, o)
    mult = r.choice(divisors(rest)) if valid else r.choice([1, 2, 3, 5])
    # sometimes put the multiplier only on the outer mode(s) (a strided tile)
    if isinstance(sh, tuple) and r.random() < 0.5:
        fl = leaves(st)
        j = r.randrange(len(fl))
        fl[j] = fl[j] * mult
        st = unflatten(fl, sh)
    else:
        st = unflatten([x * mult for x in leaves(st)], sh)
    return L(sh, st)


def profile_of(g, shape):
    """A coalesce target profile congruent to a prefix of shape's structure."""
    r = g.r
    if not isinstance(shape, tuple):
        return 1
    out = []
    for m in shape:
        if isinstance(m, tuple) and r.random() < 0.5:
            out.append(tuple(1 for _ in m) if r.random() < 0.7 else profile_of(g, m))
        else:
            out.append(1)
    return tuple(out)


def build_cases(n_per_op):
    g = Gen(SEED)
    r = g.r
    cases = []
    N = n_per_op

    # ---------------- hand cases ----------------
    hand = [
        case("complement", L(4, 2), 24),
        case("complement", L((4,), (2,)), 24),
        case("complement", L(4, 1), 24),
        case("complement", L(6, 4), 24),
        case("complement", L((4, 6), (1, 4)), 24),
        case("complement", L((2, 4), (1, 6)), 24),
        case("complement", L((2, 2), (1, 6)), 24),
        case("complement", L((2, 2), (1, 6))),
        case("complement", L(4, 2), {"shape_arg": [4, 6]}),
        case("logical_divide", L((3, 4), (1, 10)), 2),
        case("logical_divide", L((3, 4), (1, 10)), L(2, 1)),
        case("logical_divide", L((4, 2, 3), (2, 1, 8)), L(4, 2)),
        case("logical_divide", L((9, (4, 8)), (59, (13, 1))), {"tiler": [L(3, 3), L((2, 4), (1, 8))]}),
        case("zipped_divide", L((9, (4, 8)), (59, (13, 1))), {"tiler": [L(3, 3), L((2, 4), (1, 8))]}),
        case("tiled_divide", L((9, (4, 8)), (59, (13, 1))), {"tiler": [L(3, 3), L((2, 4), (1, 8))]}),
        case("flat_divide", L((9, (4, 8)), (59, (13, 1))), {"tiler": [L(3, 3), L((2, 4), (1, 8))]}),
        case("zipped_divide", L(((2, 4), 6), ((1, 2), 8)), {"tiler": [None, 3]}),
        case("logical_divide", L(((2, 4), 6), ((1, 2), 8)), {"tiler": [None, 3]}),
        case("zipped_divide", L((8, 6), (1, 8)), {"tiler": [L(4, 2), None]}),
        case("logical_divide", L((8, 6), (1, 8)), {"tiler": [L(4, 2), None]}),
        case("right_inverse", L((4, 2), (0, 1))),
        case("left_inverse", L((4, 2), (0, 1))),
        case("left_inverse", L(4, 2)),
        case("logical_product", L((2, 2), (1, 2)), L((3, 4), (4, 1))),
        case("blocked_product", L((2, 2), (1, 2)), L((3, 4), (4, 1))),
        case("raked_product", L((2, 2), (1, 2)), L((3, 4), (4, 1))),
        case("zipped_product", L((2, 2), (1, 2)), L((3, 4), (4, 1))),
        case("tiled_product", L((2, 2), (1, 2)), L((3, 4), (4, 1))),
        case("flat_product", L((2, 2), (1, 2)), L((3, 4), (4, 1))),
        case("composition", L((6, 2), (8, 2)), L((4, 3), (3, 1))),
        case("composition", L((10, 2), (16, 4)), L((5, 4), (1, 5))),
        case("composition", L((4, 6, 8), (1, 4, 24)), {"tiler": [2, 3]}),
        case("composition", L(4, 2), L(8, 1)),
        case("composition", L((4, 6), (1, 4)), L(8, 2)),
        case("composition", L((4, 9), (1, 4)), L(6, 2)),
        case("composition", L((4, 9), (1, 4)), L(12, 3)),
        case("composition", L((4, 9), (1, 4)), L((2, 3), (2, 8))),
        case("composition", L((4, 9), (1, 4)), L((4, 3), (9, 1))),
        case("composition", L((4, 9), (1, 4)), L((2, 9), (2, 4))),
        case("composition", L((4, 9), (1, 4)), L(9, 4)),
        case("composition", L((4, 9), (1, 4)), L((3, 4), (12, 1))),
        case("composition", L((4, 9), (1, 4)), L(6, 6)),
        case("composition", L((4, 9), (1, 4)), {"tiler": [2, 3]}),
        case("composition", L((4, 9), (1, 4)), {"tiler": [None, 3]}),
        case("composition", L((4, 9), (1, 4)), {"tiler": [L(2, 2), L(3, 3)]}),
        case("composition", L((4, 9), (1, 4)), {"shape_arg": [2, 3]}),
        case("composition", L((4, 9), (1, 4)), 12),
        case("composition", L((4, 9), (1, 4)), {"shape_arg": [12]}),
        case("composition", L((4, 9), (4, 1)), L(6, 2)),
        case("composition", L((4, 9), (9, 1)), L((3, 4), (1, 9))),
        # TiledCopy-style thread/value layouts
        case("composition", L((2, 3), (3, 1)), L((2, 3), (1, 2))),
        case("composition", L((2, 3), (1, 2)), L((2, 3), (3, 1))),
        case("max_common_vector", L((2, 3), (3, 1)), L((2, 3), (1, 2))),
        case("max_common_layout", L((2, 3), (3, 1)), L((2, 3), (1, 2))),
        # behaviours worth pinning (see README)
        case("composition", L((3, 4), (1, 10)), L(6, 2)),       # accepted, but != A(B(i))
        case("composition", L(((4, 2), 2), ((6, 3), 24)), L((8,), (3,))),
        case("complement", L((7, 2), (4, 5))),                   # inadmissible: a size-0 mode
        case("complement", L(6, 3), {"shape_arg": [16, 2]}),
        case("complement", L(4, 1), {"shape_arg": [3, 8]}),
        case("complement", L(4, 2), {"shape_arg": [12, 2]}),
        case("complement", L(4, 2), {"shape_arg": [2, 12]}),
        case("coalesce", L((1,), (3,))),
        case("coalesce", L(1, 3)),
        case("coalesce", L((2, 1, 3), (1, 5, 2))),
        case("filter", L((1, 1), (0, 0))),
        case("make_layout_like", L((4, 1), (1, 7))),
        case("logical_divide", L(7, 1), 2),
        case("zipped_divide", L((8, 6), (1, 8)), {"tiler": [2, None]}),
        case("blocked_product", L(8, 1), L((2,), (1,))),
        case("raked_product", L(((7, 2),), ((2, 1),)), L(2, 1)),
        case("make_ordered_layout", {"shape_arg": [4, 2, 2, 7]}, {"order": [2, 0, 2, 0]}),
        case("tile_to_shape", L((2, 2), (2, 1)), {"shape_arg": [9, 4]}, {"order": [0, 1]}),
        case("recast_layout", 16, 8, L((3, 6), (1, 3))),
    ]
    for lay in (L((2, 3), (3, 1)), L((2, 3), (1, 2))):
        for op in ("coalesce", "filter", "right_inverse", "left_inverse", "make_layout_like",
                   "nullspace"):
            hand.append(case(op, lay))
        hand.append(case("complement", lay, 6))
        hand.append(case("complement", lay, 12))
        hand.append(case("complement", lay))
        hand.append(case("logical_divide", lay, 2))
        hand.append(case("logical_divide", lay, 3))
        hand.append(case("zipped_divide", lay, {"tiler": [2, None]}))
        hand.append(case("zipped_divide", lay, {"tiler": [2, 3]}))
    cases += hand

    # ---------------- coalesce ----------------
    for _ in range(N):
        s, d = g.layout()
        cases.append(case("coalesce", L(s, d)))
    for _ in range(N // 2):
        s, d = g.layout()
        if not isinstance(s, tuple):
            s = (s, g.mode_int())
            d = g.stride(s)
        cases.append(case("coalesce", L(s, d), {"profile": to_json(profile_of(g, s))}))

    # ---------------- filter / filter_zeros ----------------
    for op in ("filter", "filter_zeros"):
        for _ in range(N):
            s, d = g.layout(kind=r.choice(["zeros", "zeros", "size1zero", "col", "random"]))
            cases.append(case(op, L(s, d)))

    # ---------------- composition ----------------
    for i in range(N):
        sa, da = g.layout()
        na = size(sa)
        mode = r.random()
        if mode < 0.55:  # image inside A's domain, compact-ish pieces
            t = r.choice(divisors(na))
            sb = g.factor_shape(t)
            mult = r.choice(divisors(na // t))
            o = list(range(len(leaves(sb))))
            r.shuffle(o)
            db = unflatten([x * mult for x in leaves(g.compact(sb, o, gaps=r.random() < 0.2))], sb)
        elif mode < 0.75:  # B with arbitrary strides, small
            sb, db = g.layout(max_size=max(1, na))
        elif mode < 0.9:  # B reaching past A's size
            sb = g.factor_shape(na * r.choice([2, 3]))
            db = g.compact(sb)
        else:  # strided B with stride not dividing A's modes
            sb = r.randint(1, 8)
            db = r.choice([3, 5, 6, 7])
        cases.append(case("composition", L(sa, da), L(sb, db)))
    for i in range(N // 2):
        sa, da = g.layout()
        valid = r.random() < 0.85
        cases.append(case("composition", L(sa, da), tuple_tiler(g, sa, allow_none=True, valid=valid)))
    for i in range(N // 3):
        sa, da = g.layout()
        c = r.random()
        if c < 0.3:
            b = r.choice(divisors(size(sa)))
        else:
            b = {"shape_arg": to_json(tuple(r.choice(divisors(size(m))) for m in modes(sa)[: r.randint(1, rank(sa))]))}
        cases.append(case("composition", L(sa, da), b))

    # ---------------- complement ----------------
    for i in range(N):
        s, d = g.injective_layout(max_size=128)
        cs = cosize(s, d)
        c = r.random()
        if c < 0.25:
            cases.append(case("complement", L(s, d)))  # default cotarget = cosize
        elif c < 0.9:
            cases.append(case("complement", L(s, d), cs * r.choice([1, 1, 2, 3, 4, 6])))
        else:
            cases.append(case("complement", L(s, d), r.randint(1, 2 * cs)))
    for i in range(N // 6):
        s, d = g.injective_layout(max_size=64)
        cs = cosize(s, d)
        cases.append(case("complement", L(s, d), {"shape_arg": [cs, r.choice([1, 2, 3])]}))

    # ---------------- inverses ----------------
    for op in ("right_inverse", "left_inverse"):
        for i in range(N):
            if r.random() < 0.75:
                s, d = g.injective_layout()
            else:
                s, d = g.layout()
            cases.append(case(op, L(s, d)))

    # ---------------- divides ----------------
    for op in ("logical_divide", "zipped_divide", "tiled_divide", "flat_divide"):
        for i in range(N):
            sa, da = g.layout()
            valid = r.random() < 0.88
            c = r.random()
            if c < 0.35:
                tl = layout_tiler(g, sa, valid)
            elif c < 0.45:
                tl = r.choice(divisors(size(sa))) if valid else r.randint(1, 9)
            else:
                tl = tuple_tiler(g, sa, allow_none=True, valid=valid,
                                 full_rank=(op != "logical_divide" and r.random() < 0.5))
            cases.append(case(op, L(sa, da), tl))

    # ---------------- products ----------------
    for op in ("logical_product", "zipped_product", "tiled_product", "flat_product",
               "blocked_product", "raked_product"):
        for i in range(N):
            # A mostly complement-admissible (compact, possibly with gaps): products take
            # complement(A, ...), and CuTe may die with SIGFPE on inadmissible A
            sa, da = g.layout(max_size=32, max_rank=3,
                              kind=(r.choice(["col", "row", "perm", "gaps", "gaps", "col", "zeros"])
                                    if r.random() < 0.9 else None))
            sb, db = g.layout(max_size=16, max_rank=3,
                              kind=r.choice(["col", "row", "perm", "gaps", "zeros"]))
            # only logical_product accepts a tuple tiler in the DSL (the others need a Layout)
            if op != "logical_product" or r.random() < 0.7:
                b = L(sb, db)
            else:
                b = {"tiler": [L(m, g.stride(m, r.choice(["col", "row", "perm"])))
                               for m in [g.factor_shape(r.randint(1, 6)) for _ in range(r.randint(1, rank(sa)))]]}
            cases.append(case(op, L(sa, da), b))

    # ---------------- tile_to_shape ----------------
    for i in range(N):
        rk = r.choice([1, 2, 2, 2, 3])
        sa = tuple(r.choice([1, 2, 2, 3, 4]) for _ in range(rk))
        da = g.stride(sa, r.choice(["col", "row", "perm"]))
        if r.random() < 0.2:
            # swizzle-free atom with nested mode
            sa = ((2, 2),) + sa[1:]
            da = g.stride(sa, r.choice(["col", "row", "perm"]))
        valid = r.random() < 0.9
        trg = []
        for m in sa:
            k = r.choice([1, 2, 3, 4])
            trg.append(size(m) * k if valid else size(m) * k + r.choice([0, 1]))
        for _ in range(r.choice([0, 0, 1])):
            trg.append(r.choice([2, 3, 4]))
        order = list(range(len(trg)))
        r.shuffle(order)
        if r.random() < 0.4:
            order = list(range(len(trg)))
        cases.append(case("tile_to_shape", L(sa, da), {"shape_arg": trg}, {"order": order}))

    # ---------------- make_ordered_layout ----------------
    for i in range(N):
        s = g.shape(max_size=512, depth=2 if r.random() < 0.3 else 1, allow_int=False)
        n = len(leaves(s))
        c = r.random()
        if c < 0.6:
            o = list(range(n))
            r.shuffle(o)
            o = unflatten(o, s)
        elif c < 0.8:  # ties
            o = unflatten([r.randint(0, max(0, n - 2)) for _ in range(n)], s)
        else:  # top-level-only order (flat) for a flat shape
            s = tuple(g.mode_int() for _ in range(r.randint(1, 4)))
            o = list(range(len(s)))
            r.shuffle(o)
            o = tuple(o)
        cases.append(case("make_ordered_layout", {"shape_arg": to_json(s)}, {"order": to_json(o)}))

    # ---------------- make_layout_like ----------------
    for i in range(N):
        s, d = g.layout()
        cases.append(case("make_layout_like", L(s, d)))

    # ---------------- max_common_vector / layout ----------------
    for op in ("max_common_vector", "max_common_layout"):
        for i in range(N):
            s = g.shape(max_size=256)
            k1 = r.choice(["col", "col", "row", "perm", "gaps", "zeros"])
            da = g.stride(s, k1)
            if r.random() < 0.35:
                db = da
            else:
                db = g.stride(s, r.choice(["col", "col", "row", "perm", "gaps"]))
            cases.append(case(op, L(s, da), L(s, db)))

    # ---------------- nullspace ----------------
    for i in range(N):
        s, d = g.layout(kind=r.choice(["zeros", "zeros", "size1zero", "col", "gaps", "random"]))
        if not isinstance(s, tuple):  # the DSL's (pure Python) nullspace fails on int shapes
            s, d = (s,), (d,)
        cases.append(case("nullspace", L(s, d)))

    # ---------------- recast_layout ----------------
    pairs = [(16, 8), (32, 8), (32, 16), (64, 16), (8, 16), (8, 32), (16, 32), (16, 64),
             (8, 4), (4, 8), (32, 32), (128, 32), (8, 6)]
    for i in range(N):
        s, d = g.layout(kind=r.choice(["col", "row", "perm", "gaps", "zeros"]))
        nb, ob = r.choice(pairs)
        cases.append(case("recast_layout", nb, ob, L(s, d)))

    # ---------------- swizzle composed with a layout ----------------
    for i in range(N // 2 + 20):
        b = r.randint(0, 3)
        m = r.randint(0, 4)
        s_ = r.randint(max(1, b), 4)
        sh, st = g.layout(max_size=256, kind=r.choice(["col", "row", "perm", "gaps"]))
        cases.append(case("swizzle_composition", {"swizzle": [b, m, s_]}, L(sh, st)))
    for i in range(N // 3):
        b = r.randint(1, 3)
        m = r.randint(0, 3)
        s_ = r.randint(b, 4)
        sa, da = g.layout(max_size=256, kind=r.choice(["col", "row", "perm"]))
        t = r.choice(divisors(size(sa)))
        sb = g.factor_shape(t)
        db = unflatten([x * r.choice(divisors(size(sa) // t)) for x in leaves(g.compact(sb))], sb)
        cases.append(case("swizzle_layout_composition", {"swizzle": [b, m, s_]}, L(sa, da), L(sb, db)))

    return cases


# --------------------------------------------------------------------------------------
# Asking CuTe (trace time, inside @cute.jit)
# --------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def short_error(e):
    msg = _ANSI.sub("", str(e)).strip()
    m = re.search(r"error: unknown: (.*)", msg)
    if m:
        msg = m.group(1)
    msg = msg.splitlines()[0] if msg else type(e).__name__
    return f"{type(e).__name__}: {msg}"[:240]


def mk_layout(j):
    s, d = from_json(j["shape"]), from_json(j["stride"])
    lay = cute.make_layout(s, stride=d)
    got = (lay.shape, lay.stride)
    if got != (s, d):
        raise AssertionError(f"DSL changed input layout {s}:{d} into {got}")
    return lay


def mk_arg(a):
    if isinstance(a, dict):
        if "shape" in a:
            return mk_layout(a)
        if "tiler" in a:
            return tuple(None if e is None else (e if isinstance(e, int) else mk_layout(e))
                         for e in a["tiler"])
        if "shape_arg" in a:
            return from_json(a["shape_arg"])
        if "profile" in a:
            return from_json(a["profile"])
        if "order" in a:
            return from_json(a["order"])
        if "swizzle" in a:
            return cute.make_swizzle(*a["swizzle"])
    return a


def layout_result(x):
    if not isinstance(x, cute.Layout) or isinstance(x, cute.ComposedLayout):
        raise TypeError(f"result is not a plain Layout: {type(x)} {x}")
    return {"shape": to_json(x.shape), "stride": to_json(x.stride)}


def run_case(c):
    op, args = c["op"], c["args"]
    a = [mk_arg(x) for x in args]
    if op == "coalesce":
        if len(a) == 2:
            return layout_result(cute.coalesce(a[0], target_profile=a[1]))
        return layout_result(cute.coalesce(a[0]))
    if op == "filter":
        return layout_result(cute.filter(a[0]))
    if op == "filter_zeros":
        return layout_result(cute.filter_zeros(a[0]))
    if op == "composition":
        return layout_result(cute.composition(a[0], a[1]))
    if op == "complement":
        if len(a) == 1:  # C++ complement(L) == complement(L, cosize(L)); the DSL requires a cotarget
            return layout_result(cute.complement(a[0], cute.cosize(a[0])))
        return layout_result(cute.complement(a[0], a[1]))
    if op in ("right_inverse", "left_inverse", "make_layout_like", "nullspace"):
        return layout_result(getattr(cute, op)(a[0]))
    if op in ("zipped_divide", "tiled_divide", "flat_divide") and isinstance(a[1], int):
        # these DSL wrappers pack tuple tilers but not int ones; pack like logical_divide does
        return layout_result(getattr(cute, op)(a[0], _pack_tile(a[1])))
    if op in ("logical_divide", "zipped_divide", "tiled_divide", "flat_divide",
              "logical_product", "zipped_product", "tiled_product", "flat_product",
              "blocked_product", "raked_product"):
        return layout_result(getattr(cute, op)(a[0], a[1]))
    if op == "tile_to_shape":
        return layout_result(cute.tile_to_shape(a[0], a[1], a[2]))
    if op == "make_ordered_layout":
        return layout_result(cute.make_ordered_layout(a[0], order=a[1]))
    if op == "max_common_vector":
        v = cute.max_common_vector(a[0], a[1])
        if not isinstance(v, int):
            raise TypeError(f"non-static result {v!r}")
        return v
    if op == "max_common_layout":
        return layout_result(cute.max_common_layout(a[0], a[1]))
    if op == "recast_layout":
        return layout_result(cute.recast_layout(a[0], a[1], a[2]))
    if op == "swizzle_composition":
        # C++ composition(Swizzle, Layout) == ComposedLayout(Swizzle, 0, Layout)
        cl = cute.make_composed_layout(a[0], 0, a[1])
        n = cute.size(a[1])
        return {"values": [int_or_fail(cl(i)) for i in range(n)]}
    if op == "swizzle_layout_composition":
        # (Swizzle o 0 o A) o B  -- composition of a swizzled layout with a layout
        cl = cute.make_composed_layout(a[0], 0, a[1])
        res = cute.composition(cl, a[2])
        n = cute.size(a[2])
        return {"values": [int_or_fail(res(i)) for i in range(n)]}
    raise KeyError(op)


def int_or_fail(v):
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"non-static value {v!r}")
    return v


def run_all(cases, sink):
    for c in cases:
        try:
            res, err = run_case(c), None
        except AssertionError:
            raise
        except Exception as e:  # CuTe refused the input
            res, err = None, short_error(e)
        sink.write(json.dumps({"op": c["op"], "args": c["args"], "result": res, "error": err},
                              separators=(",", ":")) + "\n")
        sink.flush()


_WORK = {}


@cute.jit
def _trace(dummy: cutlass.Constexpr):
    # Everything happens at trace time; the helper is plain Python (not AST-rewritten).
    run_all(_WORK["cases"], _WORK["sink"])


def worker(cases_path, start, out_path):
    with open(cases_path) as f:
        cases = json.load(f)
    with open(out_path, "a") as sink:
        _WORK["cases"], _WORK["sink"] = cases[start:], sink
        _trace(0)


def ask_cute(cases, tmpdir):
    """Run the cases in worker processes; a case that kills the process (CuTe's C++ code
    can raise SIGFPE on some inputs) is recorded as an error and the worker restarted."""
    import subprocess
    cases_path = os.path.join(tmpdir, "cases.json")
    out_path = os.path.join(tmpdir, "results.jsonl")
    with open(cases_path, "w") as f:
        json.dump(cases, f)
    open(out_path, "w").close()
    done = []
    while len(done) < len(cases):
        start = len(done)
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", cases_path,
                            str(start), out_path], capture_output=True, text=True)
        with open(out_path) as f:
            lines = [json.loads(x) for x in f if x.strip()]
        done = lines
        if p.returncode != 0 and len(done) < len(cases):
            c = cases[len(done)]
            sig = -p.returncode if p.returncode < 0 else p.returncode
            tail = (p.stderr or "").strip().splitlines()[-1:] or [""]
            print(f"  worker died (rc={p.returncode}) on {c['op']} {c['args']} {tail[0][:200]}",
                  file=sys.stderr)
            rec = {"op": c["op"], "args": c["args"], "result": None,
                   "error": f"crash: CuTe DSL process died (rc={p.returncode})"}
            with open(out_path, "a") as f:
                f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            done.append(rec)
        elif p.returncode != 0:
            raise RuntimeError(p.stderr[-2000:])
    return done


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        worker(argv[1], int(argv[2]), argv[3])
        return
    import tempfile
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--per-op", type=int, default=150)
    args = ap.parse_args(argv)
    cases = build_cases(args.per_op)
    with tempfile.TemporaryDirectory() as tmp:
        results = ask_cute(cases, tmp)
    assert [c["op"] for c in results] == [c["op"] for c in cases]
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("[\n")
        for i, c in enumerate(results):
            f.write(json.dumps(c, separators=(",", ":")))
            f.write(",\n" if i + 1 < len(results) else "\n")
        f.write("]\n")
    # summary
    from collections import Counter
    tot, bad = Counter(), Counter()
    for c in results:
        tot[c["op"]] += 1
        bad[c["op"]] += c["error"] is not None
    print(f"nvidia-cutlass-dsl {getattr(cutlass, '__version__', '?')}: {len(results)} cases -> {args.out}")
    for op in tot:
        print(f"  {op:28s} {tot[op]:4d}  refused {bad[op]:3d}")


if __name__ == "__main__":
    main()
