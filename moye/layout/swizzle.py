"""Swizzles and composed layouts.

``Swizzle(B, M, S)`` permutes offsets by XOR-ing the B bits starting at bit
``M + S`` into the B bits starting at bit ``M`` (for S > 0): the standard way
to spread a tile's rows over shared-memory banks. It is its own inverse.

A ``ComposedLayout(outer, offset, inner)`` is the function
``c -> outer(offset + inner(c))``: a layout (`inner`) followed by a fixed
function of offsets such as a swizzle. Its shape is the inner layout's;
composition, divides, products, slicing and the mode functions act on the
inner layout and keep the outer function and the offset, as in CuTe.
"""
from ..errors import LayoutError, MoyeTypeError
from . import inttuple as T
from . import scalar as S
from .layout import Layout, norm_coord, as_layout, cosize, make_layout, slice_and_offset


class Swizzle:
    """The bit permutation Sw<B,M,S> of offsets (CuTe's Swizzle).
        >>> sw = Swizzle(3, 4, 3)
        >>> sw(0b1000010000), sw(sw(123)) == 123
        (592, True)
    """
    __slots__ = ("bits", "base", "shift", "yyy_mask", "zzz_mask")

    def __init__(self, bits, base, shift=None):
        shift = bits if shift is None else shift
        bits, base, shift = (S.require_static(v, f"Swizzle: {name}")
                             for name, v in (("B", bits), ("M", base), ("S", shift)))
        if bits < 0 or base < 0:
            raise LayoutError(f"Swizzle({bits},{base},{shift}): B and M must be >= 0")
        if abs(shift) < bits:
            raise LayoutError(f"Swizzle({bits},{base},{shift}): |S| must be at least B")
        self.bits, self.base, self.shift = bits, base, shift
        mask = (1 << bits) - 1
        self.yyy_mask = mask << (base + max(0, shift))
        self.zzz_mask = mask << (base - min(0, shift))

    def __call__(self, offset):
        if type(offset) is int:
            y = offset & self.yyy_mask
            return offset ^ (y >> self.shift if self.shift >= 0 else y << -self.shift)
        if self.bits == 0:
            return offset
        y = offset & self.yyy_mask
        return offset ^ (y >> self.shift if self.shift >= 0 else y << -self.shift)

    @property
    def period(self):
        """Adding a multiple of this to an offset commutes with the swizzle."""
        return 1 << (self.bits + self.base + abs(self.shift))

    def __eq__(self, other):
        return isinstance(other, Swizzle) and \
            (self.bits, self.base, self.shift) == (other.bits, other.base, other.shift)

    def __hash__(self):
        return hash(("Swizzle", self.bits, self.base, self.shift))

    def __str__(self):
        return f"Sw<{self.bits},{self.base},{self.shift}>"

    __repr__ = __str__

    def upcast(self, n):
        """The swizzle of the same bytes seen as n-times wider elements."""
        log2n = _log2(n, "upcast")
        new_base = self.base - log2n
        if new_base >= 0:
            return Swizzle(self.bits, new_base, self.shift)
        return Swizzle(max(self.bits + new_base, 0), 0, self.shift)

    def downcast(self, n):
        """The swizzle of the same bytes seen as n-times narrower elements."""
        return Swizzle(self.bits, self.base + _log2(n, "downcast"), self.shift)


def _log2(n, what):
    if type(n) is not int or n <= 0 or n & (n - 1):
        raise LayoutError(f"{what} of a swizzle needs a power-of-two factor, got {n!r}")
    return n.bit_length() - 1


class _Chain:
    """The function x -> f(g(x)) of two offset functions."""
    __slots__ = ("f", "g")

    def __init__(self, f, g):
        self.f, self.g = f, g

    def __call__(self, x):
        return self.f(self.g(x))

    def __eq__(self, other):
        return isinstance(other, _Chain) and self.f == other.f and self.g == other.g

    def __hash__(self):
        return hash((self.f, self.g))

    def __str__(self):
        return f"{self.f} o {self.g}"


class ComposedLayout:
    """``outer o offset o inner``: c -> outer(offset + inner(c)) (CuTe's
    ComposedLayout). Build one with ``composition(Swizzle(...), layout)``.
        >>> L = composition(Swizzle(1, 0, 1), Layout((2, 2), (2, 1)))
        >>> L, [L(i) for i in range(4)]
        (Sw<1,0,1> o 0 o (2,2):(2,1), [0, 3, 1, 2])
    """
    __slots__ = ("outer", "offset", "inner")

    def __init__(self, outer, offset, inner):
        if not isinstance(inner, (Layout, ComposedLayout)):
            inner = as_layout(inner, "ComposedLayout inner layout")
        self.outer, self.offset, self.inner = outer, S.as_scalar(offset, "offset"), inner

    @property
    def shape(self):
        return self.inner.shape

    def __call__(self, *coord):
        c = coord[0] if len(coord) == 1 else coord
        c = norm_coord(c)
        if T.has_none(c):
            sub, off = slice_and_offset(c, self.inner)
            return ComposedLayout(self.outer, S.add(self.offset, off), sub)
        return self.outer(S.add(self.offset, self.inner(c)))

    def __len__(self):
        return len(self.inner)

    def __iter__(self):
        return (ComposedLayout(self.outer, self.offset, m) for m in self.inner)

    def __getitem__(self, i):
        return ComposedLayout(self.outer, self.offset, self.inner[i])

    def __eq__(self, other):
        return isinstance(other, ComposedLayout) and self.outer == other.outer and \
            S.same(self.offset, other.offset) and self.inner == other.inner

    def __hash__(self):
        return hash((self.outer, self.offset if type(self.offset) is int else id(self.offset),
                     self.inner))

    def __str__(self):
        return f"{self.outer} o {T.fmt(self.offset)} o {self.inner}"

    __repr__ = __str__

    # -- the protocol the algebra and the mode functions use ----------------
    def __moye_through__(self, fn, *args):
        return ComposedLayout(self.outer, self.offset, fn(self.inner, *args))

    def __moye_cosize__(self, *modes):
        return cosize(self.inner, *modes)

    def __moye_slice_and_offset__(self, coord):
        """The slice keeps the offset inside the outer function, except a part
        that is a multiple of the swizzle's period, which passes through it
        unchanged and goes out with the returned offset (as a stage index of
        a multistage buffer does)."""
        sub, off = slice_and_offset(coord, self.inner)
        period = getattr(self.outer, "period", None)
        if not period:
            return ComposedLayout(self.outer, S.add(self.offset, off), sub), 0
        if S.known_divisor(off) % period == 0:
            return ComposedLayout(self.outer, self.offset, sub), off
        kept, out = _split_by_period(coord, self.inner, period)
        return ComposedLayout(self.outer, S.add(self.offset, kept), sub), out

    def __moye_upcast__(self, n, upcast):
        """upcast(self, n), given algebra's upcast for the parts."""
        outer = self.outer.upcast(n) if isinstance(self.outer, Swizzle) else upcast(self.outer, n)
        return ComposedLayout(outer, S.floordiv(self.offset, n), upcast(self.inner, n))

    def __moye_downcast__(self, n, downcast):
        """downcast(self, n), given algebra's downcast for the parts."""
        outer = self.outer.downcast(n) if isinstance(self.outer, Swizzle) else downcast(self.outer, n)
        return ComposedLayout(outer, S.mul(self.offset, n), downcast(self.inner, n))


def _split_by_period(coord, inner, period):
    """The offset of slicing `inner` at `coord`, as (kept, out): the sum of
    the coordinates' terms that are not known multiples of `period`, and of
    those that are. A slice offset is a sum of one term per coordinate, so a
    dynamic stage index passes out of the swizzle while a static column
    offset beside it stays inside (and the swizzled part is loop-invariant)."""
    flat = T.flatten_to_tuple(coord)
    kept = out = 0
    for i, c in enumerate(flat):
        if c is None or S.is_const(c, 0):
            continue
        alone = tuple(x if j == i else (None if x is None else 0) for j, x in enumerate(flat))
        term = slice_and_offset(T.unflatten(alone, coord), inner)[1]
        if S.known_divisor(term) % period == 0:
            out = S.add(out, term)
        else:
            kept = S.add(kept, term)
    return kept, out


def compose_function(fn, rhs):
    """composition(fn, rhs) for a function of offsets `fn` (a Swizzle):
    the ComposedLayout fn o 0 o rhs."""
    if not callable(fn):
        raise MoyeTypeError(f"composition: cannot compose {fn!r} with {rhs!r}")
    if isinstance(fn, Swizzle) and fn.bits == 0 and isinstance(rhs, Layout):
        return rhs                       # the identity swizzle, dropped as CuTe does
    if isinstance(rhs, (Layout, ComposedLayout)):
        inner = rhs
    elif type(rhs) is tuple and rhs and all(isinstance(r, Layout) for r in rhs):
        inner = make_layout(*rhs)
    else:
        inner = as_layout(rhs, "composition rhs")
    return ComposedLayout(fn, 0, inner)


def compose_with_composed(lhs, rhs):
    """composition(Layout, ComposedLayout): lhs o outer o offset o inner."""
    return ComposedLayout(_Chain(lhs, rhs.outer), rhs.offset, rhs.inner)


def make_composed_layout(outer, offset, inner):
    """CuTe: make_composed_layout."""
    return ComposedLayout(outer, offset, inner)
