"""moye.ops.replay: the raw ops' later calls of a signature replay the
first one's launches on new tensors. Every replayed result is compared,
element by element, with the same call run in full (`fn.__wrapped__`), with
the outputs poisoned (tests/ops/conftest.py) in both; what cannot be
replayed runs in full each time."""
import functools

import numpy as np
import pytest

import moye
from moye.compiler.dispatch import NOT_MINE
from moye.errors import BoundsError
from moye.ops import (attention_op, cross_entropy_op, layer_norm_op, log_softmax_op, replay,
                      rms_norm_op, rows, softmax_op)

torch = pytest.importorskip("torch")


def _randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=torch.float64) + 0.25).to(dtype)


def _target(shape, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, n, shape, generator=g)
    t.view(-1)[::3] = -100                       # some rows ignored
    return t


def _state(fn, *args):
    """The recipe `fn` keeps for a call on `args` (None: not recorded)."""
    return fn.recipes.get(replay.signature(args))


def _calls(shape, dtype):
    """(raw function, arguments maker) of every raw op on torch tensors."""
    n = shape[-1]

    def softmax(seed):
        return (_randn(*shape, dtype=dtype, seed=seed),)

    def backward(seed):
        return (_randn(*shape, dtype=dtype, seed=seed), _randn(*shape, dtype=dtype, seed=seed + 7))

    def stats(seed):
        return _randn(*shape[:-1], seed=seed).abs() + 0.5

    return [
        (softmax_op.softmax, softmax),
        (softmax_op.softmax_backward, backward),
        (log_softmax_op.log_softmax, softmax),
        (log_softmax_op.log_softmax_backward, backward),
        (rms_norm_op.rms_norm_forward,
         lambda s: (*softmax(s), _randn(n, dtype=dtype, seed=s), 1e-6)),
        (rms_norm_op.rms_norm_forward, lambda s: (*softmax(s), None, 1e-6)),
        (rms_norm_op.rms_norm_backward,
         lambda s: (*backward(s), _randn(n, dtype=dtype, seed=s), stats(s))),
        (layer_norm_op.layer_norm_forward,
         lambda s: (*softmax(s), _randn(n, dtype=dtype, seed=s), _randn(n, dtype=dtype, seed=s + 1),
                    1e-5)),
        (layer_norm_op.layer_norm_backward,
         lambda s: (*backward(s), None, _randn(*shape[:-1], seed=s), stats(s))),
        (layer_norm_op.layer_norm_backward,
         lambda s: (*backward(s), _randn(n, dtype=dtype, seed=s), _randn(*shape[:-1], seed=s),
                    stats(s))),
        (cross_entropy_op.cross_entropy_forward,
         lambda s: (*softmax(s), _target(shape[:-1], n, s))),
        (cross_entropy_op.cross_entropy_forward,
         lambda s: (*softmax(s), _target(shape[:-1], n, s).clamp(min=3).int(), 3)),
        (cross_entropy_op.cross_entropy_backward,
         lambda s: (stats(s), *softmax(s), _target(shape[:-1], n, s), stats(s + 1))),
    ]


def _equal(a, b):
    """Exactly equal results: tensors (NaN nowhere: poisoned outputs are
    NaN), None, or tuples of these."""
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(map(_equal, a, b))
    if a is None or b is None:
        return a is b
    return a.shape == b.shape and a.dtype == b.dtype and not a.isnan().any() and \
        torch.equal(a, b)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("shape", [(5, 40), (2, 3, 33)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_later_calls_replay_the_first(shape, dtype, device, monkeypatch):
    # cross-entropy checks targets on the host on the CPU only: here as on a CUDA device
    monkeypatch.setattr(cross_entropy_op, "_check_range", lambda *args: None)
    for fn, make_on_cpu in _calls(shape, dtype):
        def make(seed):
            return tuple(a.to(device) if torch.is_tensor(a) else a for a in make_on_cpu(seed))
        replay.forget()
        first = make(1)
        got = fn(*first)
        assert isinstance(_state(fn, *first), replay.Recipe), fn.__name__
        assert _equal(got, fn.__wrapped__(*first)), fn.__name__
        for seed in (2, 3):                          # replayed, on new data each time
            args = make(seed)
            got = fn(*args)
            assert _equal(got, fn.__wrapped__(*args)), (fn.__name__, seed)
            assert len(fn.recipes) == 1


def test_a_replay_makes_new_outputs():
    x = _randn(4, 16)
    y1 = softmax_op.softmax(x)
    y2 = softmax_op.softmax(x)
    assert y1.data_ptr() != y2.data_ptr() and torch.equal(y1, y2)
    (rstd1, rstd2) = (rms_norm_op.rms_norm_forward(x, None, 1e-6)[1] for _ in range(2))
    assert rstd1.data_ptr() != rstd2.data_ptr()


def test_each_signature_has_its_recipe():
    replay.forget()
    fn = softmax_op.softmax
    calls = [(_randn(3, 8),), (_randn(3, 9),), (_randn(3, 8, dtype=torch.float16),),
             (_randn(3, 8), 0), (_randn(3, 8), -1), (_randn(3, 1, 8),)]
    for args in calls:
        fn(*args)
    assert len(fn.recipes) == len(calls)
    for seed, args in enumerate(calls):
        new = tuple(_randn(*a.shape, dtype=a.dtype, seed=seed + 9) if torch.is_tensor(a) else a
                    for a in args)
        assert _equal(fn(*new), fn.__wrapped__(*new))
    # a view at an address of other alignment: the kernel's launch picks its specialization
    x = _randn(4, 9, seed=3)[1:]
    assert x.data_ptr() % 16 and replay.signature((x,)) == replay.signature(calls[1])
    assert _equal(fn(x), fn.__wrapped__(x))


def test_calls_that_work_on_the_host_run_in_full():
    replay.forget()
    # rows of no elements: the norms write their statistics on the host
    x = torch.empty(3, 0)
    for _ in range(2):
        y, mean, rstd = layer_norm_op.layer_norm_forward(x, None, None, 0.25)
        assert torch.equal(mean, torch.zeros(3)) and torch.equal(rstd, torch.full((3,), 2.0))
    assert _state(layer_norm_op.layer_norm_forward, x, None, None, 0.25) is replay._FULL
    # cross-entropy on the CPU reads the targets to check them
    logits, t = _randn(4, 6), torch.tensor([1, 5, -100, 0])
    cross_entropy_op.cross_entropy_forward(logits, t)
    assert _state(cross_entropy_op.cross_entropy_forward, logits, t) is replay._FULL
    with pytest.raises(BoundsError, match=r"target\[1\] is 6"):
        cross_entropy_op.cross_entropy_forward(logits, torch.tensor([1, 6, -100, 0]))
    # a reduction in torch ops: its result is no output of the call
    loss = cross_entropy_op.cross_entropy(logits, t)
    assert _state(cross_entropy_op.cross_entropy, logits, t) is replay._FULL
    assert torch.equal(loss, cross_entropy_op.cross_entropy(logits, t))
    # softmax along a dimension that is not last: its kernel reads a copy made on the host
    x = _randn(5, 7)
    softmax_op.softmax(x, 0)
    assert _state(softmax_op.softmax, x, 0) is replay._FULL
    x2 = _randn(5, 7, seed=4)
    assert _equal(softmax_op.softmax(x2, 0), softmax_op.softmax.__wrapped__(x2, 0))


def test_aliased_arguments():
    replay.forget()
    fn = softmax_op.softmax_backward
    y, dy = _randn(4, 10), _randn(4, 10, seed=1)
    fn(y, y)                                  # dy is y: the signature runs in full
    assert _state(fn, y, y) is replay._FULL
    assert _equal(fn(y, dy), fn.__wrapped__(y, dy))
    replay.forget()
    assert _equal(fn(y, dy), fn.__wrapped__(y, dy))
    assert isinstance(_state(fn, y, dy), replay.Recipe)
    assert _equal(fn(dy, dy), fn.__wrapped__(dy, dy))      # replayed on aliased arguments
    # the public op with weight and bias one tensor
    x, w = _randn(3, 10), _randn(10, seed=2)
    for _ in range(2):
        assert _equal(moye.ops.layer_norm(x, w, w), moye.ops.layer_norm.__wrapped__(x, w, w))
    assert _state(moye.ops.layer_norm, x, w, w) is replay._FULL


def test_plan_options_forget_the_recipes():
    x = _randn(2, 64)
    softmax_op.softmax(x)
    assert softmax_op.softmax.recipes
    with rows.plan_options(elements=4, max_threads=32):
        assert not softmax_op.softmax.recipes
        assert _equal(softmax_op.softmax(x), softmax_op.softmax.__wrapped__(x))
    assert not softmax_op.softmax.recipes


def test_inference_tensors():
    with torch.inference_mode():
        x = _randn(3, 20)
        w = _randn(20, seed=1)
        for seed in (1, 2):
            x = _randn(3, 20, seed=seed)
            got = rms_norm_op.rms_norm_forward(x, w, 1e-6)
            assert _equal(got, rms_norm_op.rms_norm_forward.__wrapped__(x, w, 1e-6))
        assert isinstance(_state(rms_norm_op.rms_norm_forward, x, w, 1e-6), replay.Recipe)
        z = torch.empty(2, 0)                  # host work, seen without version counters
        layer_norm_op.layer_norm_forward(z, None, None, 1.0)
        assert _state(layer_norm_op.layer_norm_forward, z, None, None, 1.0) is replay._FULL


def test_signature():
    x = torch.zeros(2, 3)
    assert replay.signature((x, -1)) == ((torch.Tensor, torch.float32, (2, 3), (3, 1),
                                          torch.device("cpu")), (int, -1))
    assert replay.signature((x, 1)) != replay.signature((x, 1.0)) != replay.signature((x, True))
    assert replay.signature((x.t(),)) != replay.signature((x.t().contiguous(),))
    for not_replayed in [(np.zeros(3),), (1, 2.0), (x, np.float64(1.0)), (x, [1])]:
        assert replay.signature(not_replayed) is None
    class Wrapped(torch.Tensor):                # a subclass may wrap results: not replayed
        pass
    assert replay.signature((x.as_subclass(Wrapped),)) is None
    assert replay.signature((torch.nn.Parameter(x),)) is not None
    # a public op's (autograd=True): None where a gradient is recorded
    xg = x.clone().requires_grad_()
    assert replay.signature((xg, -1), autograd=True) is None
    assert replay.signature((xg, -1)) == replay.signature((x, -1))
    with torch.no_grad():
        assert replay.signature((xg, -1), autograd=True) == replay.signature((x, -1))


# -- the record's checks, on replayed functions of the test's own ----------------------------

@moye.kernel
def _double(y, x):
    i = moye.thread_idx.x
    y[i] = x[i] * 2.0


def _launch(y, x):
    replay.launch(_double, (1, x.shape[0]), (y, x), "cpu")


@replay.replayed
def _doubled(x):
    y = replay.output(torch.empty_like(x))
    _launch(y, x)
    return y


@replay.replayed
def _doubled_then_changed(x):
    y = replay.output(torch.empty_like(x))
    _launch(y, x)
    y.add_(1.0)                                # host work without host_work()
    return y


@replay.replayed
def _doubled_from_a_host_copy(x):
    y = replay.output(torch.empty_like(x))
    _launch(y, x * 1.0)
    return y


@replay.replayed
def _returns_its_input(x):
    y = replay.output(torch.empty_like(x))
    _launch(y, x)
    return x


@replay.replayed
def _returns_a_list(x):
    y = replay.output(torch.empty_like(x))
    _launch(y, x)
    return [y]


@replay.replayed
def _twice_doubled(x):
    return _doubled(_doubled(x))


@pytest.mark.parametrize("fn,replays", [(_doubled, True), (_doubled_then_changed, False),
                                        (_doubled_from_a_host_copy, False),
                                        (_returns_its_input, False), (_returns_a_list, False)])
def test_what_a_record_keeps(fn, replays):
    x = _randn(8, seed=5)
    first = fn(x)
    assert isinstance(_state(fn, x), replay.Recipe) == replays
    assert (_state(fn, x) is replay._FULL) != replays
    x2 = _randn(8, seed=6)
    got, want = fn(x2), fn.__wrapped__(x2)
    assert type(got) is type(want) and type(first) is type(want)
    got, want = (got[0], want[0]) if isinstance(got, list) else (got, want)
    assert torch.equal(got, want)


@moye.kernel
def _tally(counts, x):
    i = moye.thread_idx.x
    moye.atomic_add(counts, x[i], 1)


@replay.replayed
def _histogram(x):
    counts = rows.zeros(x, (4,), "int32")         # the kernel adds to its zeros
    replay.launch(_tally, (1, x.shape[0]), (counts, x), "cpu")
    return counts


def test_a_zero_filled_output_is_zero_filled_again_by_each_replay():
    """rows.zeros makes an output the kernels count on being zero: a replay
    makes it zero-filled again (an empty one would add to leftovers)."""
    first = _histogram(torch.tensor([0, 1, 1, 3], dtype=torch.int32))
    recipe = _state(_histogram, torch.tensor([0, 1, 1, 3], dtype=torch.int32))
    assert isinstance(recipe, replay.Recipe) and recipe.outputs[0][5] is True
    assert first.tolist() == [1, 2, 0, 1]
    for seed in range(3):
        x = torch.randint(0, 4, (4,), generator=torch.Generator().manual_seed(seed),
                          dtype=torch.int32)
        assert _histogram(x).tolist() == torch.bincount(x, minlength=4).tolist()


_KEPT = torch.zeros(64)
_fetches = []


def _fetch_kept(n):
    """A buffer kept between calls, as workspace.kept gives one."""
    _fetches.append(n)
    return _KEPT[:n]


@replay.replayed
def _quadrupled_through_a_kept_buffer(x):
    remake = functools.partial(_fetch_kept, x.shape[0])
    scratch = replay.output(remake(), remake=remake)
    _launch(scratch, x)
    y = replay.output(torch.empty_like(x))
    _launch(y, scratch)
    return y


@replay.replayed
def _returns_a_kept_buffer(x):
    remake = functools.partial(_fetch_kept, x.shape[0])
    scratch = replay.output(remake(), remake=remake)
    _launch(scratch, x)
    return scratch


def test_a_kept_buffer_is_fetched_again_by_each_replay():
    """An output made with `remake` (workspace.py's buffers, kept between
    calls) is not allocated by a replay: the replay calls remake, whose
    buffer the launches take. A call whose result is such a buffer runs
    in full (the next call would overwrite it)."""
    _fetches.clear()
    first = _quadrupled_through_a_kept_buffer(_randn(8, seed=1))
    recipe = _state(_quadrupled_through_a_kept_buffer, _randn(8, seed=1))
    assert isinstance(recipe, replay.Recipe)
    assert [o[6] is not None for o in recipe.outputs] == [True, False]
    for seed in range(2, 5):
        x = _randn(8, seed=seed)
        assert torch.equal(_quadrupled_through_a_kept_buffer(x), x * 4.0)
    assert _fetches == [8] * 4 and torch.equal(_KEPT[:8], x * 2.0)
    assert not torch.equal(first, x * 4.0)
    _returns_a_kept_buffer(_randn(8, seed=1))
    assert _state(_returns_a_kept_buffer, _randn(8, seed=1)) is replay._FULL


class _Kernel:
    """A kernel's stand-in: its launches in full, as (config, args)."""

    def __init__(self):
        self.full = []

    def __getitem__(self, config):
        return lambda *args, backend: self.full.append((config, args))


def _prepared(answer, seen):
    """A prepared launch's stand-in taking the arrays at places 0 and 1,
    noting them, giving `answer` (None: launched; NOT_MINE: run in full)."""
    def launch(*arrays):
        seen.append(arrays)
        return answer
    launch.places = (0, 1)
    return launch


@pytest.mark.parametrize("answer", [None, "NOT_MINE"])
def test_a_prepared_launch_takes_a_views_tensor_and_views_are_made_where_needed(answer):
    """Pool: x (argument), y (output), then the views (x as (2, 4),
    y[::2], y as (2, 4)), a constant. The launch takes both
    views; the result is y's (2, 4) view. Prepared, the launch gets x and y
    themselves (their addresses are the views'), and only the result's
    view is made; where it answers NOT_MINE, every view is made and the
    launch runs in full on them."""
    seen, kernel = [], _Kernel()
    answer = NOT_MINE if answer else None
    views = ((0, (2, 4), (4, 1)), (1, (4,), (2,)), (1, (2, 4), (4, 1)))
    launches = ((kernel, (1, 1), None, (2, 3, 5), _prepared(answer, seen), None),)
    recipe = replay.Recipe((0,), ((0, None, (8,), torch.float32, "cpu", False, None),), views,
                           (7,), launches, 4)
    x = _randn(8, seed=3)
    out = recipe.run((x,))
    (got_x, got_y), = seen
    assert got_x is x and got_y.shape == (8,) and out.shape == (2, 4)
    assert out.data_ptr() == got_y.data_ptr()
    if answer is None:
        assert kernel.full == []
    else:
        (config, (vx, vy, c)), = kernel.full
        assert vx.shape == (2, 4) and vx.data_ptr() == x.data_ptr() and c == 7
        assert vy.shape == (4,) and vy.stride() == (2,) and vy.data_ptr() == got_y.data_ptr()


def test_keywords_share_the_record_of_their_places():
    x = _randn(3, 5)
    replay.forget()
    fn = softmax_op.softmax
    assert _equal(fn(x, dim=-1), fn.__wrapped__(x))
    assert _equal(fn(x, -1), fn.__wrapped__(x))
    assert list(fn.recipes) == [replay.signature((x, -1))]
    assert _equal(fn(x, dim=0), fn.__wrapped__(x, 0)) and _equal(fn(x), fn.__wrapped__(x))
    assert len(fn.recipes) == 3            # (x, -1), (x, 0) and (x,)
    with pytest.raises(TypeError, match="dim"):          # Python's own errors
        fn(x, 0, dim=0)
    with pytest.raises(TypeError, match="axis"):
        fn(x, axis=0)
    with pytest.raises(TypeError):
        fn(dim=0)


@replay.replayed
def _scaled(x, *, by=2.0, plus=None):
    y = replay.output(torch.empty_like(x))
    replay.launch(_scale, (1, x.shape[0]), (y, x, by, 0.0 if plus is None else plus), "cpu")
    return y


@moye.kernel
def _scale(y, x, by, plus):
    i = moye.thread_idx.x
    y[i] = x[i] * by + plus


def test_keyword_only_arguments_are_bound_and_replayed():
    """A function with keyword-only arguments (the public attention's
    causal, scale): calls with and without them are recorded under their
    bound places (defaults filled in) and replayed, each with its values."""
    x = _randn(5)
    replay.forget()
    assert torch.equal(_scaled(x), x * 2.0)
    assert torch.equal(_scaled(x, by=2.0, plus=None), x * 2.0)      # the same record
    assert list(_scaled.recipes) == [replay.signature((x, 2.0, None))]
    assert isinstance(_state(_scaled, x, 2.0, None), replay.Recipe)
    for by, plus in ((3.0, 1.0), (3.0, 1.0), (0.5, None)):
        assert torch.equal(_scaled(x + 1, by=by, plus=plus), (x + 1) * by + (plus or 0.0))
    assert len(_scaled.recipes) == 3
    with pytest.raises(TypeError, match="positional"):             # Python's own errors
        _scaled(x, 3.0)
    with pytest.raises(TypeError, match="factor"):
        _scaled(x, factor=3.0)


def test_nested_calls_run_in_full():
    x = _randn(3, 5)
    replay.forget()
    # a replayed function called while another is recorded runs in full, inside the record
    y = _twice_doubled(x[0])
    assert torch.equal(y, x[0] * 4) and not _doubled.recipes
    assert isinstance(_state(_twice_doubled, x[0]), replay.Recipe)
    assert torch.equal(_twice_doubled(x[1]), x[1] * 4)


def _public_calls(shape, dtype):
    """(public op, arguments maker, keywords) of every moye.ops function."""
    n = shape[-1]
    calls = {fn: make for fn, make in _calls(shape, dtype)}

    def make(fn):
        return calls[fn]
    ce = cross_entropy_op
    return [
        (moye.ops.softmax, make(softmax_op.softmax), {"dim": -1}),
        (moye.ops.softmax_backward, make(softmax_op.softmax_backward), {}),
        (moye.ops.log_softmax, make(log_softmax_op.log_softmax), {}),
        (moye.ops.log_softmax_backward, make(log_softmax_op.log_softmax_backward), {"dim": -1}),
        (moye.ops.rms_norm, lambda s: (_randn(*shape, dtype=dtype, seed=s),
                                       _randn(n, dtype=dtype, seed=s)), {"eps": 1e-5}),
        (moye.ops.rms_norm_forward, make(rms_norm_op.rms_norm_forward), {}),
        (moye.ops.rms_norm_backward, make(rms_norm_op.rms_norm_backward), {}),
        (moye.ops.layer_norm, lambda s: (_randn(*shape, dtype=dtype, seed=s), None, None), {}),
        (moye.ops.layer_norm_forward, make(layer_norm_op.layer_norm_forward), {}),
        (moye.ops.layer_norm_backward, make(layer_norm_op.layer_norm_backward), {}),
        (moye.ops.cross_entropy, lambda s: (_randn(*shape, dtype=dtype, seed=s),
                                            _target(shape[:-1], n, s)), {"reduction": "none"}),
        (moye.ops.cross_entropy_forward, make(ce.cross_entropy_forward), {}),
        (moye.ops.cross_entropy_backward, make(ce.cross_entropy_backward), {"ignore_index": -100}),
    ]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_public_calls_replay_without_a_gradient(dtype, device, monkeypatch):
    monkeypatch.setattr(cross_entropy_op, "_check_range", lambda *args: None)
    shape = (4, 3, 40)
    for fn, make_on_cpu, keywords in _public_calls(shape, dtype):
        def make(seed):
            return tuple(a.to(device) if torch.is_tensor(a) else a for a in make_on_cpu(seed))
        replay.forget()
        for seed in (1, 2, 3):                  # recorded, then replayed on new data
            args = make(seed)
            assert _equal(fn(*args, **keywords), fn.__wrapped__(*args, **keywords)), fn.__name__
        assert [type(r) for r in fn.recipes.values()] == [replay.Recipe], fn.__name__


def test_public_calls_that_record_a_gradient_run_in_full():
    replay.forget()
    x, w = _randn(4, 24).requires_grad_(), _randn(24, seed=1)
    for _ in range(2):
        y = moye.ops.rms_norm(x, w)
        assert y.grad_fn is not None
    assert not moye.ops.rms_norm.recipes
    with torch.no_grad():                       # no gradient to record: replayed
        ys = [moye.ops.rms_norm(x, w) for _ in range(2)]
    assert not ys[1].requires_grad and _equal(ys[1], y.detach())
    assert list(moye.ops.rms_norm.recipes.values())[0] is not replay._FULL
    y = moye.ops.rms_norm(x, w)                 # grad enabled again: in full
    assert y.grad_fn is not None
    # torch.compile traces the ops as they are, and records nothing
    replay.forget()
    torch._dynamo.reset()
    compiled = torch.compile(lambda a: moye.ops.softmax(a * 2.0), backend="eager", fullgraph=True)
    with torch.no_grad():
        assert _equal(compiled(x), softmax_op.softmax(x.detach() * 2.0))
    assert not moye.ops.softmax.recipes


def test_public_ops_take_parameters_without_the_custom_op(monkeypatch):
    from moye.ops import torch_ops

    def no_dispatch(name):
        raise AssertionError(f"moye::{name} dispatched in eager mode")
    monkeypatch.setattr(torch_ops, "op", no_dispatch)
    x = _randn(6, 24).requires_grad_()
    w = torch.nn.Parameter(_randn(24, seed=2))
    for _ in range(2):                              # recorded, then replayed
        x.grad = w.grad = None
        y = moye.ops.rms_norm(x, w, 1e-6)
        y.square().sum().backward()
        xd, wd = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
        yd = xd * torch.rsqrt(xd.square().mean(-1, keepdim=True) + 1e-6) * wd
        yd.square().sum().backward()
        torch.testing.assert_close(y.double(), yd, rtol=2e-5, atol=2e-5)
        torch.testing.assert_close(x.grad.double(), xd.grad, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(w.grad.double(), wd.grad, rtol=1e-4, atol=1e-4)


def test_attention_forward_and_backward_replay():
    """The raw attention ops the custom op calls (with autograd, every
    training step) are replayed: their later calls on new tensors give what
    the same calls run in full give, GQA and causal, with and without dlse."""
    replay.forget()

    def make(seed):
        q = _randn(1, 2, 9, 64, dtype=torch.float16, seed=seed)
        k, v = (_randn(1, 1, 12, 64, dtype=torch.float16, seed=seed + s) for s in (1, 2))
        return q, k, v

    for seed in (1, 2, 3):
        q, k, v = make(seed)
        args = (q, k, v, True, 0.2)
        out = attention_op.attention_forward(*args)
        assert _equal(out, attention_op.attention_forward.__wrapped__(*args)), seed
        do = _randn(*q.shape, dtype=torch.float16, seed=seed + 5)
        for dlse in (None, _randn(1, 2, 9, seed=seed + 6)):
            args = (do, q, k, v, *out, True, 0.2, dlse)
            got = attention_op.attention_backward(*args)
            assert _equal(got, attention_op.attention_backward.__wrapped__(*args)), seed
    for fn, count in ((attention_op.attention_forward, 1), (attention_op.attention_backward, 2)):
        assert [type(r) for r in fn.recipes.values()] == [replay.Recipe] * count, fn.__name__


def test_attention_with_one_tensor_for_k_and_v_runs_in_full():
    """k and v the same tensor: the record cannot tell which place a launch
    took, so the signature runs in full each time, with the right result."""
    replay.forget()
    for seed in (1, 2):
        q = _randn(1, 1, 9, 64, dtype=torch.float16, seed=seed)
        kv = _randn(1, 1, 12, 64, dtype=torch.float16, seed=seed + 1)
        got = attention_op.attention_forward(q, kv, kv, False, None)
        assert _equal(got, attention_op.attention_forward.__wrapped__(q, kv, kv.clone(), False,
                                                                       None)), seed
    assert list(attention_op.attention_forward.recipes.values()) == [replay._FULL]
