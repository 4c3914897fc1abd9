"""Replayed host calls: a raw op's later calls on torch tensors of the same
kinds skip its checks and plans and redo only what reaches the device.

A raw host function (softmax_op.softmax, rms_norm_op.rms_norm_forward, ...)
checks its arguments, plans, allocates its outputs (`output`) and
launches kernels (`launch`). On torch tensors all of that depends on the
arguments' kinds alone (type, dtype, shape, strides, device) and on the
other arguments' values, not on the data: on CUDA tensors the ops read no
data on the host (they must not, for CUDA-graph capture). So `replayed`
records the first call of a signature (the outputs, the launches and their
arguments, the result) and a later call of the same signature replays it:
new outputs, the same launches on the new tensors, the result built from
them. The per-shape plan cache of the ops is this. A replayed CUDA launch
rereads only the tensors' addresses (kernel.prepared: the signature holds
everything else), and dispatches in full where an address's alignment
selects another specialization (the whole call runs in full where that
launch takes TMA copies: their maps are made from the call's views; it is
known before anything is launched). The public ops (functional.py) are
replayed too, so their later calls skip the layers above the raw
functions as well.

A record is kept only when it is complete, else the signature always runs
in full:
- each array a launch took is an argument or an output, or a view of one
  starting at its address (`x.reshape(m, n)`, `part[:used]`), or a
  buffer kept between calls (workspace.py: fetched again), and only
  one of them (arguments aliased to one another are not recorded); a
  launch that takes TMA copies is on CUDA, and each copy maps one of
  those tensors from its address (a replay moves the recorded tensor maps
  to the new tensors' addresses; where the arrays of such a launch do not
  lie as the record's did modulo 16 bytes, the call runs in full);
- the result is outputs or views of them, None, or tuples of these;
- no input or output changed on the host (their torch version counters)
  and the call did no other work on the host (`host_work`: reading values
  to check them, writing some).
"""
import contextlib
import functools
import inspect
import operator
import sys
from threading import get_ident

from ..device.hopper import TMACopy

# recipes kept per function (a new shape each call, as in a sweep, would grow without end)
RECIPES_LIMIT = 1024
_SCALARS = (int, float, bool, str, type(None))
_recordings = {}       # thread ident -> the _Recording of the call it records (no
                       # threading.local: its getattr costs 0.4 us, a dict lookup 0.07)
_FULL = object()       # a signature whose calls run in full
_MISS = object()       # Recipe.run's answer where this call must run in full
_torch = None          # torch, once a call was recorded (the recipes' allocator)
_RECIPES = []          # every replayed function's recipes, for forget()


class Recipe:
    """What a recorded call did, as steps on a pool of values that a replay
    fills in order: the call's tensor arguments (`inputs`: their places in
    the call), its new outputs (`outputs`: (pool index of a tensor to take
    empty_like of, or None; pool index of a tensor to take new_empty of, or
    None; size, dtype, device; whether it is made zero-filled; the function
    that gives a kept buffer again, or None) each), the views its
    launches took ((pool index, size, stride) each), the launches'
    non-tensor arguments and None (`constants`); then `launches` (kernel,
    config, backend, pool indices of the arguments, and the launch made
    ready for them by kernel.prepared, or None; where it takes TMA copies,
    whose places hold the tensors they map, the addresses modulo 16 of the
    arrays its prepared launch takes, else None) and the `result` (a pool
    index, or a tuple of them). Where every launch is prepared, a view is
    made only for the result (a prepared launch takes the view's tensor:
    it reads the address alone), or for a launch that runs in full."""
    __slots__ = ("inputs", "outputs", "views", "constants", "launches", "result", "_take",
                 "_steps", "_checks", "_result", "_first_view", "_result_views", "_all_prepared")

    def __init__(self, inputs, outputs, views, constants, launches, result):
        self.inputs, self.outputs, self.views = inputs, outputs, views
        self.constants, self.launches, self.result = constants, launches, result
        # what run() does, with the pool's reads as itemgetters (a list comprehension
        # costs several times as much). A prepared launch reads only its arrays' addresses,
        # and a view starts at its tensor's: it takes the tensor (views cost 1-2 us each)
        first = self._first_view = len(inputs) + len(outputs)

        def source(k):
            return views[k - first][0] if first <= k < first + len(views) else k
        self._take = _getter(inputs)
        self._steps = tuple(
            (_getter(places),
             prepared and _getter([source(places[i]) for i in prepared.places]),
             prepared, kernel, config, backend, maps)
            for kernel, config, backend, places, prepared, maps in launches)
        self._all_prepared = all(prepared is not None for *_, prepared, _ in launches)
        flat = (result,) if type(result) is int else result
        self._result_views = tuple(k - first for k in flat if first <= k < first + len(views))
        # the launches with TMA copies, checked before any launch: (arrays, their residues)
        self._checks = tuple((arrays, maps) for _, arrays, _, _, _, _, maps in self._steps
                             if maps)
        self._result = result if type(result) is int else _getter(result)

    def run(self, args):
        """The call replayed on `args`: its result, or _MISS, launching
        nothing, where a launch takes TMA copies and an address's alignment
        is not the record's."""
        pool = list(self._take(args))
        for like, near, size, dtype, device, zeroed, remake in self.outputs:
            if remake is not None:
                pool.append(output(remake(), zeroed))
                continue
            if zeroed:
                t = _torch.zeros(size, dtype=dtype, device=device)
            elif like is not None:
                t = _torch.empty_like(pool[like])
            elif near is not None:
                t = pool[near].new_empty(size, dtype=dtype)
            else:
                t = _torch.empty(size, dtype=dtype, device=device)
            pool.append(output(t, zeroed))
        views = self.views
        lazy = self._all_prepared and views     # the views made where a launch needs them
        if lazy:
            pool += (None,) * len(views)
            for i in self._result_views:
                source, size, stride = views[i]
                pool[self._first_view + i] = pool[source].as_strided(size, stride)
        else:
            for source, size, stride in views:
                pool.append(pool[source].as_strided(size, stride))
        pool += self.constants
        for arrays, residues in self._checks:
            if tuple(a.data_ptr() & 15 for a in arrays(pool)) != residues:
                return _MISS
        for take, arrays, prepared, kernel, config, backend, maps in self._steps:
            # (with its arrays where the record's were modulo 16, a launch with TMA copies
            # takes its prepared launch: the record's call took that specialization)
            if prepared is not None and prepared(*arrays(pool)) is None:
                continue
            if lazy:        # a launch in full (another specialization) takes the views
                for i, (source, size, stride) in enumerate(views):
                    pool[self._first_view + i] = pool[source].as_strided(size, stride)
                lazy = False
            kernel[config](*take(pool), backend=backend)
        result = self._result
        return pool[result] if type(result) is int else result(pool)


def _getter(places):
    """A function of a sequence giving the tuple of its items at `places`."""
    if len(places) > 1:
        return operator.itemgetter(*places)
    if places:
        k, = places
        return lambda seq: (seq[k],)
    return lambda seq: ()


class _Recording:
    """A call being recorded: its outputs (and their version counters when
    made) and launches as they happen."""

    def __init__(self):
        self.outputs, self.versions, self.launches, self.complete = [], [], [], True
        self.zeroed = set()         # indices of the outputs made zero-filled
        self.remakes = {}           # index of a kept buffer -> what gives it again


def output(tensor, zeroed=False, remake=None):
    """`tensor`, a raw function's new output (rows.empty, rows.zeros and the
    replays make every output through this; `zeroed`: made zero-filled, as
    a replay makes it again), noted while a call is recorded. A buffer kept
    between calls (workspace.py) comes with `remake`, which a replay calls
    for it instead of allocating."""
    rec = _recordings.get(get_ident()) if _recordings else None
    if rec is not None:
        if zeroed:
            rec.zeroed.add(len(rec.outputs))
        if remake is not None:
            rec.remakes[len(rec.outputs)] = remake
        rec.outputs.append(tensor)
        rec.versions.append(_versions([tensor]))
    return tensor


def host_work():
    """Say that the call being recorded works on the host beyond allocating
    and launching (it reads values to check them, or writes some): its
    signature then runs in full every time."""
    rec = _recordings.get(get_ident()) if _recordings else None
    if rec is not None:
        rec.complete = False


@contextlib.contextmanager
def unrecorded():
    """A block whose launches and outputs the call being recorded leaves
    out: work a replay need not redo (autotuning's timed runs, on scratch
    outputs)."""
    rec = _recordings.pop(get_ident(), None) if _recordings else None
    try:
        yield
    finally:
        if rec is not None:
            _recordings[get_ident()] = rec


def launch(kernel, config, args, backend):
    """kernel[config](*args, backend=backend), noted if a call is recorded:
    the one place the ops launch kernels."""
    rec = _recordings.get(get_ident()) if _recordings else None
    if rec is not None:
        rec.launches.append((kernel, config, backend, args))
    kernel[config](*args, backend=backend)


def replayed(fn=None, *, autograd=False):
    """`fn`, a raw op's host function, replaying its recorded calls on torch
    tensors of the same signature (see the module doc); calls with no torch
    tensor, and calls made while another is recorded, run as they are.
    Keyword arguments are bound to their places first (the later ones'
    defaults filled in), so `f(x, -1)` and `f(x, dim=-1)` share a record.
        >>> import torch
        >>> from moye.ops import softmax_op
        >>> x = torch.tensor([[0.0, 1.0]])
        >>> a, b = softmax_op.softmax(x), softmax_op.softmax(x + 1)   # recorded, replayed
        >>> torch.equal(a, b)
        True

    `@replayed(autograd=True)` is for a public op, whose torch calls may
    be traced by torch.compile or record a gradient: those run as they are."""
    if fn is None:
        return functools.partial(replayed, autograd=autograd)
    recipes = {}
    _RECIPES.append(recipes)
    positional, flat, count = _binder(fn)

    @functools.wraps(fn)
    def call(*args, **keywords):
        if autograd and _compiling():
            return fn(*args, **keywords)
        if keywords or (count is not None and len(args) != count):
            bound = positional(args, keywords)
            if bound is None:
                return fn(*args, **keywords)        # Python's own error
            args = bound
        key = signature(args, autograd)
        if key is None or (_recordings and get_ident() in _recordings):
            return flat(*args)
        recipe = recipes.get(key)
        if recipe is not None:
            out = recipe.run(args) if recipe is not _FULL else _MISS
            return out if out is not _MISS else flat(*args)
        out, recipe = _record(flat, args)
        if len(recipes) >= RECIPES_LIMIT:
            recipes.clear()
        recipes[key] = recipe
        return out
    call.recipes = recipes
    return call


def _binder(fn):
    """(positional, flat, count) of `fn`: positional(args, keywords) gives
    its arguments all in their places (keyword-only ones after the others),
    defaults filled in, or None where they do not bind (then `fn` raises,
    as where it takes *args or **keywords); flat(*those) calls `fn` with
    them, the keyword-only ones by name. `count`, where `fn` has keyword-only
    arguments, is how many it has in all: a call of fewer is bound first
    (so `attention(q, k, v, causal=True)` and `attention(q, k, v)` are
    replayed too); else None."""
    params = list(inspect.signature(fn).parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return (lambda args, keywords: None), fn, None
    names = [p.name for p in params]
    places = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    by_name = names[places:]
    defaults = {p.name: p.default for p in params if p.default is not p.empty}

    def positional(args, keywords):
        if len(args) > places:
            return None
        rest = names[len(args):]
        if any(k not in rest for k in keywords):
            return None
        try:
            return args + tuple(keywords[n] if n in keywords else defaults[n] for n in rest)
        except KeyError:            # a missing argument
            return None

    def flat(*values):
        return fn(*values[:places], **dict(zip(by_name, values[places:])))
    return positional, (flat if by_name else fn), (len(names) if by_name else None)


def forget():
    """Drop every recipe (rows.plan_options calls this: plans change)."""
    for recipes in _RECIPES:
        recipes.clear()


def signature(args, autograd=False):
    """The key of a call: per argument its kind (a torch tensor's type,
    dtype, shape, strides and device; a scalar's type and value), or None
    where a call is not replayed (no torch tensor, or another argument;
    with `autograd`, where a gradient is recorded)."""
    key, tensors, grad = [], False, False
    for a in args:
        t = type(a)
        kind = _KINDS.get(t)
        if kind is None:
            kind = _KINDS[t] = _kind(t)
        if kind == "tensor":
            key.append((t, a.dtype, a.shape, a.stride(), a.device))
            tensors = True
            if autograd:
                grad = grad or a.requires_grad
        elif kind == "scalar":
            key.append((t, a))
        else:
            return None
    if not tensors or (grad and sys.modules["torch"].is_grad_enabled()):
        return None
    return tuple(key)


def _compiling():
    """Whether torch.compile traces the call (torch imported, or not)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


_KINDS = {}     # type -> "tensor", "scalar" or "other"


def _kind(t):
    """A type's kind: torch.Tensor and nn.Parameter are "tensor"; other
    tensor subclasses are "other" (their __torch_function__ may wrap the
    result, which a replay would not)."""
    if t in _SCALARS:
        return "scalar"
    torch = sys.modules.get("torch")
    if torch is not None and t in (torch.Tensor, torch.nn.Parameter):
        return "tensor"
    return "other"


def _record(fn, args):
    """fn(*args) recorded: (its result, its Recipe, or _FULL for a call that
    cannot be replayed)."""
    global _torch
    _torch = sys.modules["torch"]
    inputs = [i for i, a in enumerate(args) if type(a) not in _SCALARS]
    before = _versions([args[i] for i in inputs])
    rec = _recordings[get_ident()] = _Recording()
    try:
        out = fn(*args)
    finally:
        del _recordings[get_ident()]
    changed = before != _versions([args[i] for i in inputs]) or \
        rec.versions != [_versions([t]) for t in rec.outputs] or \
        not all(t.is_contiguous() for t in rec.outputs)
    if not rec.complete or changed:
        return out, _FULL
    try:
        return out, _Planner([args[i] for i in inputs], rec.outputs, rec.zeroed,
                             rec.remakes).recipe(tuple(inputs), rec.launches, out)
    except (_Incomplete, RuntimeError):     # RuntimeError: a tensor without an address
        return out, _FULL


def _versions(tensors):
    """The torch version counters of `tensors` (their in-place changes), or
    None for inference tensors, which keep none (then host_work() alone
    says what a call changed)."""
    try:
        return [t._version for t in tensors]
    except RuntimeError:
        return None


class _Incomplete(Exception):
    """A record that misses something the call did."""


class _Planner:
    """A Recipe's pool, from a recorded call's tensor arguments and outputs:
    `place(a)` is the pool index of a launch's argument, adding views and
    constants as met."""

    def __init__(self, inputs, outputs, zeroed=(), remakes=None):
        self.tensors = inputs + outputs
        self.first_output = len(inputs)
        self.zeroed, self.remakes = zeroed, remakes or {}
        self.views, self.constants = [], []

    def recipe(self, inputs, launches, out):
        launches = tuple(self.launch(*launch) for launch in launches)
        result = self.result(out)
        outputs = tuple((self.like(k), self.near(k), tuple(t.shape), t.dtype, t.device,
                         k - self.first_output in self.zeroed,
                         self.remakes.get(k - self.first_output))
                        for k, t in enumerate(self.tensors) if k >= self.first_output)
        base = len(self.tensors) + len(self.views)
        views = tuple(self.views)
        launches = tuple((kernel, config, backend, _moved(places, base), prepared, maps)
                         for kernel, config, backend, places, prepared, maps in launches)
        return Recipe(inputs, outputs, views, tuple(self.constants), launches,
                      _moved(result, base))

    def launch(self, kernel, config, backend, args):
        """A launch's (kernel, config, backend, places, prepared
        launch or None, and where it takes TMA copies the addresses modulo
        16 of the arrays its prepared launch takes, else None). One that
        does must have a prepared launch (on CUDA: it cannot run in full on
        a replay, as its copies' views are not recorded)."""
        prepared = None if backend is not None else kernel.prepared(config, args)
        maps = None
        if any(type(a) is TMACopy for a in args):
            if prepared is None:
                raise _Incomplete
            maps = tuple((args[i].array.ptr if type(args[i]) is TMACopy else args[i].data_ptr())
                         & 15 for i in prepared.places)
        return kernel, config, backend, tuple(self.place(a) for a in args), prepared, maps

    def like(self, k):
        """The index of a tensor before output `k` (an argument or an earlier
        output) that empty_like makes it from (of its shape, dtype and
        device, and contiguous; empty_like costs half of empty), or None."""
        t = self.tensors[k]
        for j, a in enumerate(self.tensors[:k]):
            if a.shape == t.shape and a.dtype == t.dtype and a.device == t.device and \
                    a.is_contiguous():
                return j
        return None

    def near(self, k):
        """The index of a tensor before output `k` on its device, that
        new_empty makes it from (new_empty costs 2/3 of empty), or None."""
        t = self.tensors[k]
        for j, a in enumerate(self.tensors[:k]):
            if a.device == t.device:
                return j
        return None

    def place(self, a, constant=True):
        if type(a) is TMACopy:          # the place of the tensor it maps, from its address
            return self.tensor_at(a.array.ptr)
        if not hasattr(a, "data_ptr"):
            if not constant or type(a) is list:
                raise _Incomplete
            self.constants.append(a)
            return -len(self.constants)         # a constant's place, made final by _moved
        ptr = a.data_ptr()
        found = [k for k, t in enumerate(self.tensors)
                 if t.data_ptr() == ptr and t.dtype == a.dtype and t.device == a.device]
        if not found:
            raise _Incomplete           # not from the call's tensors
        if len(found) > 1:      # two of the call's tensors: which one the launch takes is
            raise _Incomplete   # not known (a later call may not alias them)
        t = self.tensors[found[0]]
        if a.shape == t.shape and a.stride() == t.stride():
            return found[0]
        view = (found[0], tuple(a.shape), tuple(a.stride()))
        if view not in self.views:
            self.views.append(view)
        return len(self.tensors) + self.views.index(view)

    def tensor_at(self, ptr):
        """The place of the one tensor of the call starting at `ptr`."""
        found = [k for k, t in enumerate(self.tensors) if t.data_ptr() == ptr]
        if len(found) != 1:
            raise _Incomplete
        return found[0]

    def result(self, out, top=True):
        """The result's place: an output (not an argument) or a view of one,
        or, at the top, a tuple of these and None."""
        if type(out) is tuple and top:
            return tuple(self.result(o, False) for o in out)
        if out is None and not top:
            return self.place(None)
        k = self.place(out, constant=False)
        source = self.views[k - len(self.tensors)][0] if k >= len(self.tensors) else k
        if source < self.first_output or source - self.first_output in self.remakes:
            raise _Incomplete           # an argument, or a buffer kept between calls
        return k


def _moved(spec, base):
    """`spec` with the constants' places (-1, -2, ...) moved after `base`."""
    if type(spec) is int:
        return spec if spec >= 0 else base - spec - 1
    return tuple(_moved(s, base) for s in spec)
