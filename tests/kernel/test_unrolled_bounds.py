"""unrolled.check_range proves an index in bounds from bounds on its value
(not by evaluating every iteration) only where that is sound: whenever it
says "inside", every iteration's value is inside; otherwise the per-iteration
check decides, with its own errors."""
import random

import pytest

from moye.errors import BoundsError
from moye.compiler import tracer, unrolled


def _random_expression(rng, ivs):
    """A random integer expression over loop variables `ivs` (Syms)."""
    x = rng.choice(ivs)
    for _ in range(rng.randrange(1, 6)):
        other = rng.choice(ivs + [rng.randrange(-7, 8)])
        op = rng.choice(["+", "-", "*", "//", "%", "neg", "abs"])
        if op == "+":
            x = x + other
        elif op == "-":
            x = other - x if rng.random() < 0.5 else x - other
        elif op == "*":
            x = x * other
        elif op in ("//", "%"):
            d = rng.choice([c for c in range(-5, 6) if c] + ivs)
            x = x // d if op == "//" else x % d
        elif op == "neg":
            x = -x
        else:
            x = abs(x)
    return x


@pytest.mark.parametrize("seed", range(40))
def test_bounds_agree_with_every_iteration(seed):
    rng = random.Random(seed)
    b = tracer.Builder("k")
    b.unrolled += 2
    with tracer.tracing_context(b):
        ivs = [unrolled.loop_variable(b, rng.randrange(-3, 3), rng.randrange(3, 9),
                                      rng.choice([1, 2, 3])) for _ in range(2)]
        for _ in range(10):
            try:
                x = _random_expression(rng, ivs)
            except Exception:               # a static division by zero, say
                continue
            value = x.value if isinstance(x, tracer.Sym) else x
            try:
                seen = unrolled.values(b, value)
            except unrolled.Unknown:
                seen = None
            lo, hi = rng.randrange(-20, 1), rng.randrange(1, 40)
            if unrolled._inside(b, value, lo, hi):
                assert seen is not None and all(lo <= v < hi for v in seen), (seen, lo, hi)
            # the public check is unchanged: a BoundsError exactly where some value is out
            if seen is None:
                continue
            if all(lo <= v < hi for v in seen):
                unrolled.check_range(x, lo, hi, "i")
            else:
                with pytest.raises(BoundsError, match=f"is {[v for v in seen if not lo <= v < hi][0]} "):
                    unrolled.check_range(x, lo, hi, "i")


def test_affine_index_is_proved_without_evaluating_iterations(monkeypatch):
    b = tracer.Builder("k")
    b.unrolled += 2
    with tracer.tracing_context(b):
        i = unrolled.loop_variable(b, 0, 8, 1)
        j = unrolled.loop_variable(b, 0, 4, 1)
        idx = (i % 4) * 8 + j * 2 + i // 4
        monkeypatch.setattr(unrolled, "values", lambda *a: pytest.fail("evaluated iterations"))
        unrolled.check_range(idx, 0, 32, "i")
