"""The rewrite reads a function's source without a tokenizer where it can
(rewrite._block): the statement it parses is the one inspect's lines give,
whatever the layout; where the lines it finds do not parse, inspect's are
read."""
import ast
import functools
import inspect

import pytest

from moye.compiler import rewrite


def black_style(
    a,
    b,
):
    return a + b


def ends_in_pass(a):
    if a:
        pass


def ends_in_dead_code(a):
    return a
    b = [
        a,
    ]
    return b


def bracket_at_column_zero(a):
    return (a,
            a
)


def string_at_column_zero(a):
    x = """
text
"""
# a comment at column zero
    return x + a


def outer():
    def inner(a):
        x = a
        return x

    return inner


def wrapping(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args)
    return wrapper


def one_line(a): return a


@functools.lru_cache(
    None)
def decorator_over_two_lines(a):
    return a


FUNCTIONS = [black_style, ends_in_pass, ends_in_dead_code, bracket_at_column_zero,
             string_at_column_zero, outer, outer(), one_line,
             decorator_over_two_lines.__wrapped__, rewrite.rewrite_function]


@pytest.mark.parametrize("fn", FUNCTIONS + [wrapping(black_style)],
                         ids=lambda fn: fn.__qualname__)
def test_the_definition_is_the_one_inspect_reads(fn):
    assert (rewrite._block(fn) is None) == hasattr(fn, "__wrapped__")
    lines, first, fdef = rewrite._definition(fn)
    want_lines, want_first = inspect.getsourcelines(fn)
    want = rewrite._parse(want_lines, want_first)
    assert first == want_first
    assert ast.dump(fdef, include_attributes=True) == ast.dump(want, include_attributes=True)
