"""Device functions in a module of their own, for test_func.py: kernels in
another module call them."""
import moye


@moye.func
def clamp_low(v, low):
    """A run-time `if` in a helper."""
    if v < low:
        v = low
    return v


@moye.func
def power(x, n):
    """A run-time `for` in a helper: x ** n for a run-time n >= 0."""
    acc = 1.0
    for _ in range(n):
        acc = acc * x
    return acc


@moye.func
def halvings(x):
    """A run-time `while`: how many halvings bring x below 1."""
    count = 0
    while x >= 1.0:
        x = x * 0.5
        count = count + 1
    return count


@moye.func
def clamped_power(x, n):
    """A helper calling helpers."""
    return clamp_low(power(x, n), 0.5)


@moye.func
def first_above(frag, limit):
    """`return` inside a static loop: the index of the first element of a
    static list above a static limit (or -1)."""
    for i in range(len(frag)):
        if frag[i] > limit:
            return i
    return -1


@moye.func
def tree_sum(values, lo, hi):
    """Recursion on static values: the sum of values[lo:hi] as a tree."""
    if hi - lo == 1:
        return values[lo]
    mid = (lo + hi) // 2
    return tree_sum(values, lo, mid) + tree_sum(values, mid, hi)


@moye.func
def countdown(n):
    """Recursion on a run-time value: it cannot end while inlining."""
    r = 0
    if n > 0:
        r = countdown(n - 1) + 1
    return r
