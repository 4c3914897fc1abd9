"""The launch fast path: `kern[grid, block](*args)` in about the time of a
cuLaunchKernel, without binding the arguments again.

Binding (binder.bind) finds a call's specialization and its run-time values
but costs microseconds. So once a specialization has been launched, moye
writes a launch function for it (make_entry): with prepared_launch, the
one place moye makes Python source and `exec`s it. It exists for speed:
checks that are comparisons with constants, each argument read once, the
values packed and cuLaunchKernel called in the same function, cost a
fraction of a loop over the records, and a Python call more (to a
launcher taking the values) would add about a third to moye's own host
time per launch. Its
inputs are the specialization's binder records (binder.Binding), the call
that selected it (for the classes of its arguments and their exact
strides), and the backend's FastLaunch: named values, no text, for the
CUDA driver's launch sequence (the only backend with a fast path).

prepared_launch writes one more kind of launch function, for callers that
hold every argument's kind fixed themselves (the ops' replayed calls): it
rereads only the arrays' addresses (and their alignment), all other
values being constants of the call it was made from; a TMA copy's tensor
map is the recorded one with the new array's address written in.

`kern[grid, block]` returns the launch function last used with that
configuration. A call the function's checks reject goes to the kernel's
`_dispatch`, which tries the configuration's other recent launch functions
(their probes: the same function, answering NOT_MINE where the checks
fail), then binds.

What the checks hold, record by record:

- ArrayParam: the argument's class and element type (as its library
  names it), its device, its exact strides (they fix the rank, the
  unit-stride mode and the divisibility, and the launch passes them as
  constants), whether its address is 16-byte aligned, and whether it needs
  64-bit indices (checked first against a cheap bound on its extents).
  A torch tensor is read by data_ptr(), shape, stride(), dtype and
  is_cuda; a CuPy array by data.ptr, shape, strides and dtype; anything
  else through arguments.as_array_arg;
- ScalarParam: the value's class and, for an int, whether it fits in 32 bits;
- StaticParam: its value where its == is exact (ints, strings, moye's
  layouts and atoms), a flat tuple of such ints, bools, strings and None
  by its == and its elements' exact types, else its static_key;
- TMAParam: the TMACopy's spec.

Exact strides can select a kernel whose unit-stride mode is not the one
binding would pick (an extent-1 mode of stride 1 beside another stride-1
mode): that kernel is still right, as the mode it takes for stride 1 has
stride 1.
"""
import struct
from dataclasses import fields

import numpy as np

from .arguments import BY_VALUE, INDEX_LIMIT, MISSING, as_array_arg, by_position, \
    keyed_as_is, needs_64bit_indices, static_key
from .binder import ArrayParam, ScalarParam, StaticParam, TMAParam
from .identity import UNBOUND

ENTRIES_LIMIT = 1024          # fast paths kept per kernel
NOT_MINE = type("NotMine", (), {"__repr__": lambda self: "NOT_MINE"})()


def not_mine(args, smem, stream, backend):
    """The fallback of a probe: the arguments select another specialization."""
    return NOT_MINE


def array_reader(a):
    """How the fast path reads array argument `a`: "torch", "cupy" or "any"."""
    module = type(a).__module__
    if module.startswith("torch") and hasattr(a, "data_ptr"):
        return "torch"
    if module.startswith("cupy") and hasattr(getattr(a, "data", None), "ptr") and \
            hasattr(a, "strides") and hasattr(a, "itemsize"):
        return "cupy"
    return "any"


def entry_key(args, binding):
    """What a launch function depends on beyond the binding's key: the
    classes of the arguments (their count included) and the arrays' exact
    strides."""
    return (tuple(map(type, args)),
            tuple(a.strides for p, a in zip(binding.params, binding.arguments)
                  if type(p) is ArrayParam))


def _width_check(shape, strides, wide):
    """A condition under which an array of these (constant) element strides
    needs other index widths than `wide`: a cheap bound on the extents,
    then the exact test."""
    exact = f"wide({shape}, {strides})"
    if wide:
        return f"not {exact}"
    if not strides:
        return None
    # sum(n_k * max(1, |d_k|)) < 2**31 - 1 bounds every extent and the span
    bound = " + ".join(f"{shape}[{k}]" + (f" * {abs(d)}" if abs(d) > 1 else "")
                       for k, d in enumerate(strides))
    return f"{bound} >= {INDEX_LIMIT - 1} and {exact}"


class _Writer:
    """The checks and values of one launch function, argument by argument:
    `checks` are ("read", line) or ("check", condition-that-rejects);
    `values` the expressions of the IR parameters, in order."""

    def __init__(self, env):
        self.env, self.checks, self.values = env, [], []

    def const(self, value):
        name = f"k{len(self.env)}"
        self.env[name] = value
        return name

    def check(self, condition):
        self.checks.append(("check", condition))

    def argument(self, i, p, a, call_arg):
        x = f"a{i}"
        if type(p) is StaticParam:
            if keyed_as_is(call_arg):
                k = self.const(call_arg)
                self.check(f"not ({x} is {k} or {x} == {k})")
            elif type(call_arg) is tuple and all(type(e) in BY_VALUE for e in call_arg):
                # a flat tuple of ints, ...: its == and its elements' exact types
                k, types = self.const(call_arg), self.const(tuple(map(type, call_arg)))
                self.check(f"{x} != {k} or tuple(map(type, {x})) != {types}")
            else:
                self.check(f"static_key({x}, {p.name!r}) != {self.const(p.key)}")
        elif type(p) is TMAParam:
            self.check(f"{x}.spec != {self.const(p.spec)}")
            self.values.append(f"_tensor_map({x})")
        elif type(p) is ScalarParam:
            if isinstance(call_arg, (int, np.integer)) and not isinstance(call_arg, bool):
                fits = f"-{INDEX_LIMIT} <= {x} < {INDEX_LIMIT}"
                self.check(f"not ({fits})" if p.dtype.bits == 32 else fits)
            self.values.append(x)
        else:
            self._array(i, p, a, call_arg)

    def _array(self, i, p, a, call_arg):
        x, ptr, shape, s = f"a{i}", f"p{i}", f"n{i}", f"s{i}"
        reader = array_reader(call_arg)
        if reader == "torch":
            self.check(f"{x}.dtype is not {self.const(call_arg.dtype)}")
            self.check(f"not {x}.is_cuda" if call_arg.is_cuda else f"{x}.is_cuda")
            self.check(f"({s} := {x}.stride()) != {self.const(tuple(call_arg.stride()))}")
            address = f"({ptr} := {x}.data_ptr())"
        elif reader == "cupy":
            self.check(f"{x}.dtype != {self.const(call_arg.dtype)}")
            self.check(f"{x}.strides != {self.const(tuple(call_arg.strides))}")
            address = f"({ptr} := {x}.data.ptr)"
        else:
            x = f"r{i}"
            self.checks.append(("read", f"{x} = as_array(a{i}, {p.name!r})"))
            self.check(f"{x} is None")
            self.check(f"{x}.dtype is not {self.const(p.dtype)} or {x}.device != {p.device!r}")
            self.check(f"{x}.strides != {self.const(tuple(a.strides))}")
            address = f"({ptr} := {x}.ptr)"
        self.check(f"{address} & 15" if p.aligned else f"not {address} & 15")
        self.checks.append(("read", f"{shape} = {x}.shape"))
        strides = tuple(int(d) for d in a.strides)
        width = _width_check(shape, strides, p.wide)
        if width:
            self.check(width)
        self.values += [ptr] + [f"{shape}[{k}]" for k in range(p.rank)] + \
            [str(strides[k]) for k in p.stride_modes]


class Entry:
    """A specialization on the fast path. `make(grid, fallback)` writes its
    launch function for a grid (x, y, z, then the cluster's x, y, z for a
    launch in clusters): it launches, or returns `fallback(args,
    smem, stream, backend)` where the arguments select another
    specialization. Per launch configuration it keeps the launch function
    (whose fallback dispatches again) and the probe (whose fallback is
    not_mine). `source` is the Python of `make`."""

    def __init__(self, make, source):
        self.make, self.source = make, source
        self.launchers, self.probes = {}, {}

    def launcher(self, config, grid, fallback):
        return self._get(self.launchers, config, grid, fallback)

    def installed(self, config):
        """The launch function made for `config`, if any."""
        return self.launchers.get(config)

    def probe(self, config, grid):
        return self._get(self.probes, config, grid, not_mine)

    def _get(self, cache, config, grid, fallback):
        f = cache.get(config)
        if f is None:
            f = self.make(grid, fallback)
            if config is not None:
                if len(cache) >= 64:
                    cache.clear()
                cache[config] = f
        return f


def make_entry(names, defaults, args, binding, fast, watch=()):
    """The Entry of a specialization, from the call that selected it (its
    `args`, defaults not filled in), its `binding` and the backend's
    FastLaunch `fast`; its launch functions also check that the globals
    of `watch` (identity.function_key_and_watch) are bound as they were."""
    n = len(args)
    env = {"static_key": static_key, "as_array": as_array_arg, "wide": needs_64bit_indices,
           "MISSING": MISSING, "by_position": by_position, "names": tuple(names),
           "defaults": defaults}
    env.update({"_" + f.name: getattr(fast, f.name) for f in fields(fast)})
    params, head = [], ["rest", "backend is not None"]
    for j, (space, name, was) in enumerate(watch):      # a global rebound: kernel._current
        env[f"_ws{j}"], env[f"_wv{j}"] = space, was
        head.append(f"_ws{j}.get({name!r}, _unbound) is not _wv{j}")
    env["_unbound"] = UNBOUND
    for i, name in enumerate(names):
        call_arg = args[i] if i < n else defaults[name]
        if i < n:
            params.append(f"a{i}=MISSING")       # a missing argument's type is no argument's
        else:
            env[f"d{i}"] = defaults[name]
            params.append(f"a{i}=d{i}")
        env[f"t{i}"] = type(call_arg)
        head.append(f"type(a{i}) is not t{i}")
    writer = _Writer(env)
    for i, (p, a) in enumerate(zip(binding.params, binding.arguments)):
        writer.argument(i, p, a, args[i] if i < n else defaults[names[i]])
    miss = "            return fallback((" + "".join(f"a{i}, " for i in range(len(names))) + \
        ") + rest, smem, stream, backend)"
    body = []
    for what, text in [("check", " or ".join(head))] + writer.checks:
        if what == "check" and body and body[-1][0] == "check":     # one `if ... or ...`
            body[-1] = ("check", f"{body[-1][1]} or {text}")
        else:
            body.append((what, text))
    sig = "".join(p + ", " for p in params) + ("/, " if params else "")
    lines = ["def make(grid, fallback):",
             "    gx, gy, gz, *cluster = grid",
             "    cluster = tuple(cluster) or None",
             f"    def launch({sig}*rest, smem=0, stream=None, backend=None, **keywords):",
             "        if keywords:",
             "            return fallback(by_position(names, defaults, (" +
             "".join(f"a{i}, " for i in range(len(names))) + ") + rest, keywords), smem, "
             "stream, backend)"]
    for what, text in body:
        lines += [f"        {text}"] if what == "read" else [f"        if {text}:", miss]
    lines += ["        if stream is None:",
              "            stream = _current_stream()",
              "        elif type(stream) is not int:",
              "            stream = _stream_handle(stream)",
              f"        smem = _launch_smem(smem) if smem else {fast.dynamic_smem}"]
    lines += _launch_sequence(writer.values, fast) + ["    return launch"]
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<moye launch of {', '.join(names)}>", "exec"), env)  # noqa: S102
    return Entry(env["make"], source)


def _launch_sequence(values, fast):
    """The lines (in a launch function's body) of the CUDA driver's launch
    sequence (see FastLaunch), given `stream` and `smem`: a parameter buffer
    from the pool (cuLaunchKernel releases the GIL: another thread must not
    refill one it reads), the `values` (expressions) packed with one struct
    call, the launch."""
    bx, by, bz = fast.block
    return ["        try:",
            "            slot = _slots.pop()",
            "        except IndexError:",
            "            slot = _new_slot()",
            "        buf, at, params = slot",
            f"        _pack(buf, at{''.join(', ' + v for v in values)})",
            "        if cluster is None:",
            f"            err = _launch(_function, gx, gy, gz, {bx}, {by}, {bz}, smem, "
            "stream or None, params, 0)[0]",
            "        else:",
            "            err = _launch_ex(_cluster_config((gx, gy, gz), _block, smem, stream, "
            "cluster), _function, params, 0)[0]",
            "        if err is not _ok:",
            "            _failed(err, (gx, gy, gz), _block, smem, stream, params, cluster)",
            "        _slots.append(slot)"]


def prepared_launch(binding, fast, grid, count):
    """A launch of `binding`'s specialization with its values, where only
    the arrays' addresses change: `launch(*arrays)` takes the arrays
    among the kernel's `count` arguments (their places are
    `launch.places`), in order, reads their data_ptr() (torch tensors) and
    launches on torch's current stream. In a TMA copy's place it takes the
    array at the address of the copy's new tensor map: the map is the
    bound copy's, moved there (fast.tensor_map_at). Nothing else of the
    arguments is read: it is for callers that hold the arrays' dtypes,
    shapes, strides and device and the other arguments fixed
    (replay.Recipe). It returns NOT_MINE, launching nothing, where an
    address's 16-byte alignment is not the specialization's (a tensor
    map's must be aligned). None where the specialization takes an array
    from a default. Written as Python source like make_entry's launch
    functions, the other values constants."""
    env = {"NOT_MINE": NOT_MINE, "grid": tuple(grid)}
    env.update({"_" + f.name: getattr(fast, f.name) for f in fields(fast)})
    bound, values, trial, aligned, misaligned, at = binding.values(), [], [], [], [], 0
    places = tuple(i for i, p in enumerate(binding.params) if type(p) in (ArrayParam, TMAParam))
    if places and places[-1] >= count:
        return None
    for i, p in enumerate(binding.params):
        if type(p) is TMAParam:
            env[f"m{i}"] = fast.tensor_map_at(bound[at])
            aligned.append(f"p{i}")
            values.append(f"m{i}(p{i} := a{i}.data_ptr())")
            trial.append(fast.tensor_map(bound[at]))
            at += 1
            continue
        if type(p) is ArrayParam:
            (aligned if p.aligned else misaligned).append(f"p{i}")
            values.append(f"(p{i} := a{i}.data_ptr())")
            trial.append(0)
            tail = bound[at + 1:at + len(p.ir_params)]
        else:
            tail = bound[at:at + len(p.ir_params)]
        for v in tail:
            env[f"k{len(env)}"] = v
            values.append(f"k{len(env) - 1}")
            trial.append(v)
        at += len(p.ir_params)
    try:            # values struct takes as they are (else: None, the launch path converts)
        buf, offset, _ = fast.slots[-1] if fast.slots else fast.new_slot()
        fast.pack(buf, offset, *trial)
    except (struct.error, TypeError):
        return None
    checks = [f"({' | '.join(aligned)}) & 15"] if aligned else []
    checks += [f"not {p} & 15" for p in misaligned]
    lines = ["def make():",
             "    gx, gy, gz, *cluster = grid",
             "    cluster = tuple(cluster) or None",
             f"    smem = {fast.dynamic_smem}",
             f"    def launch({''.join(f'a{i}, ' for i in places)}/):"]
    # the addresses are read as the values are packed: check them after, before the launch
    body = _launch_sequence(values, fast)
    packed = next(k for k, line in enumerate(body) if "_pack(" in line) + 1
    check = [f"        if {' or '.join(checks)}:", "            _slots.append(slot)",
             "            return NOT_MINE"] if checks else []
    lines += body[:packed] + check + ["        stream = _current_stream()"] + body[packed:]
    lines.append("    return launch")
    source = "\n".join(lines) + "\n"
    exec(compile(source, "<moye prepared launch>", "exec"), env)  # noqa: S102
    launch = env["make"]()
    launch.source, launch.places = source, places
    return launch
