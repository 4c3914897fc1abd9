"""The binder (compiler/binder.py): parameter records, the specialization key
and the values of a launch, against the IR parameter list tracing makes."""
import numpy as np
import pytest

import moye
from moye import LaunchError, MoyeTypeError
from moye import ir
from moye.compiler.binder import (ArrayParam, ScalarParam, StaticParam, bind, key_text)

rng = np.random.default_rng(17)


def _bind(*args, names=None, constexpr=(), defaults=None):
    names = names or [f"a{i}" for i in range(len(args))]
    return bind(names, defaults or {}, {names[i] for i in constexpr}, args)


@pytest.mark.parametrize("dtype, shape, view, unit, divisibility", [
    (np.float32, (8,), lambda a: a, 0, (1,)),
    (np.float32, (6, 8), lambda a: a, 1, (4, 1)),                # 8 capped at a 16-byte vector
    (np.float32, (6, 8), lambda a: a.T, 0, (1, 4)),              # column-major view
    (np.float32, (6, 10), lambda a: a[:, :4], 1, (2, 1)),        # row pitch 10
    (np.float16, (4, 6, 8), lambda a: a[:, ::2, :], 2, (8, 8, 1)),
    (np.float64, (5, 3), lambda a: a[:, 1:2], None, (1, 1)),     # extent-1 unit mode: none
    (np.int8, (3, 16), lambda a: a[:, ::3], None, (16, 1)),
])
def test_array_records(dtype, shape, view, unit, divisibility):
    a = view(np.zeros(shape, dtype))
    p = _bind(a).params[0]
    assert type(p) is ArrayParam
    assert (p.dtype.numpy, p.rank, p.unit, p.divisibility, p.device, p.wide) == \
        (np.dtype(dtype), a.ndim, unit, divisibility, "cpu", False)
    # the IR parameters: pointer, every extent, every stride but the unit mode's
    roles = [q.role for q in p.ir_params]
    assert roles == ["pointer"] + ["extent"] * a.ndim + ["stride"] * (a.ndim - (unit is not None))
    assert p.ir_params[0].type == ir.PtrType(p.dtype, "global")


def test_unaligned_and_scalar_records():
    a = np.zeros(9, np.float32)[1:]
    p = _bind(a).params[0]
    assert not p.aligned and p.alignment == 4
    b = _bind(1, 2**40, 2.5, np.float64(1.0), True)
    assert [p.dtype.name for p in b.params] == ["Int32", "Int64", "Float32", "Float64", "Bool"]
    assert all(type(p) is ScalarParam for p in b.params)


def test_keys_equal_and_unequal():
    def key(*args, constexpr=()):
        return _bind(*args, constexpr=constexpr).key
    a, b = np.zeros((4, 8), np.float32), np.ones((4, 8), np.float32)
    assert key(a, 1) == key(b, 7)                              # other data, same kinds
    assert key(np.zeros((16, 8), np.float32), 1) == key(a, 1)  # extents are run-time values
    assert hash(key(a, 1)) == hash(key(b, 7))
    assert key(a, 1) != key(a.astype(np.float16), 1)           # element type
    assert key(a, 1) != key(a.T, 1)                            # unit-stride mode
    assert key(a, 1) != key(np.zeros((4, 9), np.float32)[:, :8], 1)     # stride divisibility
    assert key(a, 1) != key(a.reshape(32), 1)                  # rank
    assert key(a, 1) != key(a, 2**40)                          # Int32 and Int64
    assert key(a, 1.0) != key(a, 1)
    assert key(a, 2, constexpr=[1]) != key(a, 3, constexpr=[1])         # static values
    assert key(a, 0.0, constexpr=[1]) != key(a, -0.0, constexpr=[1])
    assert key(a, moye.Layout(4, 1)) == key(a, moye.Layout(4, 1))
    assert type(_bind(moye.Layout(4, 1)).params[0]) is StaticParam


def test_key_text_is_stable_and_complete():
    a = np.zeros((4, 8), np.float32)
    text = key_text(_bind(a, 3, 0.5, constexpr=[2]).key)
    assert text == ("(array(Float32,2,1,(4, 1),True,False,cpu),scalar(Int32),"
                    "static('float','0x1.0000000000000p-1'))")
    assert key_text(_bind(a, 3, -0.0, constexpr=[2]).key) != \
        key_text(_bind(a, 3, 0.0, constexpr=[2]).key)


@moye.kernel
def mixed(y, x, a, k: moye.Constexpr, n):
    i = moye.thread_idx.x
    if i < n:
        y[i, 0] = a * x[k, i] + y[i, 0]


def test_values_follow_the_ir_parameter_list():
    """Binding.values() fills the traced kernel's parameters in order, and
    the CPU backend runs on them (checked against NumPy)."""
    y = rng.standard_normal((8, 3)).astype(np.float32)[:, ::2]    # strides (3, 2)
    x = rng.standard_normal((3, 8)).astype(np.float32).T.T       # (8, 1)
    kernel, binding, params = mixed.trace(y, x, 1.5, 2, 6, block=8)
    assert params == binding.params
    names = [p.name for p in kernel.params]
    assert names == [q.name for q in binding.ir_params()] == [
        "y", "y.shape[0]", "y.shape[1]", "y.stride[0]", "y.stride[1]",
        "x", "x.shape[0]", "x.shape[1]", "x.stride[0]", "a", "n"]
    assert binding.values()[1:5] == [8, 2, 3, 2] and binding.values()[6:] == [3, 8, 8, 1.5, 6]
    assert binding.values()[0] == y.ctypes.data
    expect = y.copy()
    expect[:6, 0] = np.float32(1.5) * x[2, :6] + y[:6, 0]
    mixed[1, 8](y, x, 1.5, 2, 6)
    np.testing.assert_array_equal(y, expect)


def test_bad_inputs_name_the_argument():
    with pytest.raises(LaunchError, match=r"takes 2 arguments \(y, x\), got 1 \(missing x\)"):
        bind(["y", "x"], {}, set(), (np.zeros(4),))
    with pytest.raises(MoyeTypeError, match="argument 'x': a Python list is not|argument 'x': list"):
        bind(["y", "x"], {}, set(), (np.zeros(4), [1.0, 2.0]))
    with pytest.raises(MoyeTypeError, match="argument 'x': object is not an array"):
        bind(["y", "x"], {}, set(), (np.zeros(4), object()))
    with pytest.raises(MoyeTypeError, match="argument 'y'.*complex128"):
        bind(["y"], {}, set(), (np.zeros(4, np.complex128),))


def test_defaults_and_compiled_kernel_difference():
    b = bind(["y", "a"], {"a": 2.0}, set(), (np.zeros(4, np.float32),))
    assert b.values()[-1] == 2.0 and b.params[1] == ScalarParam("a", moye.Float32)
    other = bind(["y", "a"], {"a": 2.0}, set(), (np.zeros(4, np.float16),))
    assert other.difference(b).startswith(": argument 'y' is a Float16 array on the cpu")
    assert b.difference(b) == ""


def test_a_tensor_map_argument_must_say_how_a_kernel_sees_it():
    """The binder knows TMA copies by their base class; a subclass that does not
    define `traced` is refused by name when a kernel is traced with it."""
    from moye.compiler.binder import TMAParam, TensorMapArgument

    class Incomplete(TensorMapArgument):
        spec, device = ("incomplete",), "cpu"

    b = bind(["t"], {}, set(), (Incomplete(),))
    assert tuple(b.params) == (TMAParam("t", ("incomplete",), "cpu"),)

    @moye.kernel
    def uses(t):
        pass

    with pytest.raises(MoyeTypeError, match="Incomplete does not say how a kernel sees it"):
        uses.trace(Incomplete(), block=1)
