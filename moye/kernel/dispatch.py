"""The launch fast path: `kern[grid, block](*args)` in about the time of a
cuLaunchKernel, without binding the arguments again.

Binding (arguments.bind_arguments) finds a call's specialization and its
runtime values but costs tens of microseconds. So once a specialization
has been launched, moye writes a launch function for it: Python source, in
which each check is a comparison with a constant and each value is read
once, ending in the backend's own lines that pack the values and launch.
`kern[grid, block]` returns the launch function last used with that
configuration. A call the function's checks reject goes to the kernel's
`_dispatch`, which tries the configuration's other recent launch functions
(their probes: the same function, answering NOT_MINE where the checks
fail), then finds the specialization by a key of the arguments, or binds
them.

What decides a specialization, and so what the checks and the key hold,
argument by argument:

- an array: its type (how it is read), element type, exact strides (they
  fix the rank, the unit-stride mode and how far the strides divide),
  whether its address is 16-byte aligned, its device, and whether it needs
  64-bit indices (checked first against a cheap bound on its extents);
- an int: whether it fits in 32 bits; a float or a bool: its type;
- a static argument: its value where its == is exact (ints, strings,
  moye's layouts and atoms), else its static_key (floats by their bits,
  tuples, Constexpr values, arrays by content);
- a TMACopy (kernel/hopper.py): its `spec` (op, element type, tile, device);
  the backend gets the TMACopy and passes its tensor map.

Arrays are read by kind: a torch tensor by data_ptr(), shape, stride(),
dtype and is_cuda; a CuPy array by data.ptr, shape, strides and dtype;
anything else (`__cuda_array_interface__`, DLPack, NumPy) through
as_array_arg. The launch function passes the backend, per argument that is
not static, an array's address and shape or a scalar's value; the strides
are in the checks, so the backend's lines hold them as constants.

Exact strides in the key can select a kernel whose unit-stride mode is not
the one binding would pick (an extent-1 mode of stride 1 beside another
stride-1 mode): that kernel is still right, as the mode it takes for stride
1 has stride 1.
"""
import numpy as np

from .arguments import (INDEX_LIMIT, as_array_arg, is_static, keyed_as_is,
                        keyword_arguments_error, needs_64bit_indices, static_key)

ENTRIES_LIMIT = 1024          # specializations kept per kernel and block for the fast path
MISSING = type("Missing", (), {"__repr__": lambda self: "MISSING"})()
NOT_MINE = type("NotMine", (), {"__repr__": lambda self: "NOT_MINE"})()


def not_mine(args, smem, stream, backend):
    """The fallback of a probe: the arguments select another specialization."""
    return NOT_MINE


def arg_kind(a, annotated):
    """How an argument is read: "static", "torch", "cupy", "array", "int",
    "scalar", "tma", or None where moye cannot take it."""
    if is_static(a, annotated):
        return "static"
    t = type(a)
    if t.__name__ == "TMACopy":
        return "tma"
    module = t.__module__
    if module.startswith("torch") and hasattr(a, "data_ptr"):
        return "torch"
    if module.startswith("cupy") and hasattr(getattr(a, "data", None), "ptr") and \
            hasattr(a, "strides") and hasattr(a, "itemsize"):
        return "cupy"
    if isinstance(a, bool):
        return "scalar"
    if isinstance(a, (int, np.integer)):
        return "int"
    if isinstance(a, (float, np.floating)):
        return "scalar"
    if hasattr(a, "__cuda_array_interface__") or hasattr(a, "__dlpack__") or \
            isinstance(a, np.ndarray):
        return "array"
    return None


class _Arg:
    """How to read argument `i` of a kind: `steps`, in order, are ("read",
    line), ("none", variable) (as_array_arg found no array) and ("part",
    expression, comparison): the parts make the key, and the launch
    function compares each with its value in the key. `values` are what the
    backend gets; `width` is (shape variable, element strides expression)
    for an array's index-width test."""

    def __init__(self, i, name, a, kind):
        x = f"a{i}"
        self.i, self.kind, self.name = i, kind, name
        self.steps, self.values, self.width = [], [], None
        if kind == "static":
            self._part(*((x, "value") if keyed_as_is(a) else (f"static_key({x}, {name!r})", "!=")))
            return
        if kind == "tma":
            self._part(f"{x}.spec", "!=")
            self.values.append(x)
            return
        if kind == "int":
            self._part(f"-2147483648 <= {x} < 2147483648", "is not")
        if kind in ("int", "scalar"):
            self.values.append(x)
            return
        p, n, s = f"p{i}", f"n{i}", f"s{i}"
        elements = s
        if kind == "torch":
            self._part(f"{x}.dtype", "is not")
            self._part(f"{x}.is_cuda", "is not")
            self._read(f"{s} = {x}.stride()")
            self._part(s, "!=")
            self._read(f"{p} = {x}.data_ptr()")
        elif kind == "cupy":
            self._part(f"{x}.dtype", "!=")
            self._read(f"{s} = {x}.strides")              # in bytes
            self._part(s, "!=")
            self._read(f"{p} = {x}.data.ptr")
            elements = f"tuple(d // {x}.itemsize for d in {s})"
        else:
            x = f"r{i}"
            self._read(f"{x} = as_array(a{i}, {name!r})")
            self.steps.append(("none", x))
            self._part(f"{x}.dtype", "is not")
            self._part(f"{x}.device", "!=")
            self._read(f"{s} = {x}.strides")
            self._part(s, "!=")
            self._read(f"{p} = {x}.ptr")
        self._part(f"{p} & 15 == 0", "is not")
        self._read(f"{n} = {x}.shape")
        self.values += [p, n]
        self.width = (n, elements)

    def _read(self, line):
        self.steps.append(("read", line))

    def _part(self, expr, cmp):
        self.steps.append(("part", expr, cmp))


def _arguments(names, defaults, constexpr_names, args):
    """The _Arg of each parameter for a call with `args` (defaults filled
    in), or None where some argument has no reading."""
    n = len(args)
    if n > len(names) or any(m not in defaults for m in names[n:]):
        return None
    full = list(args) + [defaults[m] for m in names[n:]]
    out = []
    for i, (name, a) in enumerate(zip(names, full)):
        kind = arg_kind(a, name in constexpr_names)
        if kind is None:
            return None
        out.append(_Arg(i, name, a, kind))
    return out


def _compile(source, what, env):
    exec(compile(source, f"<moye {what}>", "exec"), env)  # noqa: S102


def _env():
    return {"static_key": static_key, "as_array": as_array_arg, "wide": needs_64bit_indices,
            "MISSING": MISSING}


def make_key_reader(names, defaults, constexpr_names, args):
    """`key_of(args)`: the key of a call with arguments of these types (None
    for other types), or None where some argument has no cheap reading.
    `key_of.kinds` says which arguments are arrays and which scalars."""
    spec = _arguments(names, defaults, constexpr_names, args)
    if spec is None:
        return None
    n = len(args)
    env = _env()
    lines = ["def key_of(args):", f"    if len(args) != {n}:", "        return None"]
    if n:
        lines.append("    " + "".join(f"a{i}, " for i in range(n)) + "= args")
        env.update({f"t{i}": type(a) for i, a in enumerate(args)})
        lines.append("    if " + " or ".join(f"type(a{i}) is not t{i}" for i in range(n)) + ":")
        lines.append("        return None")
    parts = []
    for arg in spec:
        if arg.i >= n:
            env[f"d{arg.i}"] = defaults[arg.name]
            lines.append(f"    a{arg.i} = d{arg.i}")
        for step in arg.steps:
            if step[0] == "read":
                lines.append("    " + step[1])
            elif step[0] == "none":
                lines += [f"    if {step[1]} is None:", "        return None"]
            else:
                parts.append(step[1])
        if arg.width is not None:
            parts.append(f"wide({arg.width[0]}, {arg.width[1]})")
    lines.append("    return (" + "".join(p + ", " for p in parts) + ")")
    source = "\n".join(lines) + "\n"
    _compile(source, f"key of {', '.join(names)}", env)
    key_of = env["key_of"]
    key_of.source = source
    key_of.kinds = tuple("array" if a.width else "tma" if a.kind == "tma" else "scalar"
                         for a in spec if a.values)
    return key_of


def _test(expr, cmp, const, value):
    """The condition under which key part `expr` differs from `const`
    (whose value is `value`)."""
    if cmp == "value":
        return f"not ({expr} is {const} or {expr} == {const})"
    if value is True or value is False:
        if expr.endswith(" & 15 == 0"):         # alignment: whether the low bits are set
            low = expr[:-len(" == 0")]
            return f"not {low}" if value is False else low
        return f"not {expr}" if value is True else expr
    return f"{expr} {cmp} {const}"


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


def make_entry(names, defaults, constexpr_names, args, key, binding, backend_code):
    """The Entry of a specialization, from the call that selected it (its
    `args` and their `key`), its binding, and `backend_code(values)`: the
    backend's lines that launch (and the names they use besides), given
    per argument that is not static the names of its values."""
    spec = _arguments(names, defaults, constexpr_names, args)
    n = len(args)
    env = _env()
    env.update(keyword_arguments_error=keyword_arguments_error, names=tuple(names))
    params = []
    for i, name in enumerate(names):
        if i < n or name not in defaults:
            params.append(f"a{i}=MISSING")
        else:
            env[f"d{i}"] = defaults[name]
            params.append(f"a{i}=d{i}")
        env[f"t{i}"] = type(args[i] if i < n else defaults[name])
    every = "(" + "".join(f"a{i}, " for i in range(len(names))) + ") + rest"
    miss = ["            return fallback(" + every + ", smem, stream, backend)"]
    # a missing argument is MISSING, whose type is no argument's
    head = ["rest", "backend is not None"] + [f"type(a{i}) is not t{i}" for i in range(len(names))]
    conds, values, k = [], [], 0
    pending = None                          # a read not yet written: (variable, right side)
    arrays = iter(info for kind, _, info in binding.kinds if kind == "array")

    def flush():
        nonlocal pending
        if pending is not None:
            conds.append(("read", f"{pending[0]} = {pending[1]}"))
            pending = None

    def inline(test):
        """`test` with the pending read done inside it where it begins with
        the read's variable: `(s0 := a0.stride()) != k2`."""
        nonlocal pending
        if pending is None:
            return test
        var, right = pending
        if test.startswith(var) and not (test[len(var):][:1].isalnum() or
                                         test[len(var):][:1] == "_"):
            pending = None
            return f"({var} := {right})" + test[len(var):]
        flush()
        return test

    for arg in spec:
        for step in arg.steps:
            if step[0] == "read":
                flush()
                pending = tuple(step[1].split(" = ", 1))
            elif step[0] == "none":
                flush()
                conds.append(("check", f"{step[1]} is None"))
            else:
                expr, cmp, const = step[1], step[2], f"k{k}"
                env[const] = value = key[k]
                k += 1
                conds.append(("check", inline(_test(expr, cmp, const, value))))
        if arg.width is not None:
            strides = tuple(int(d) for d in next(arrays).strides)
            test = _width_check(arg.width[0], strides, key[k])
            k += 1
            if test:
                conds.append(("check", inline(test)))
        flush()
        if arg.values:
            values.append(tuple(arg.values))
    body = []
    for what, text in conds:             # consecutive checks make one `if ... or ...`
        if what == "check" and body and body[-1][0] == "check":
            body[-1] = ("check", f"{body[-1][1]} or {text}")
        else:
            body.append((what, text))
    body = [line for what, text in body
            for line in (["        " + text] if what == "read" else
                         [f"        if {text}:"] + miss)]
    assert k == len(key), (k, key)
    code, backend_env = backend_code(values)
    sig = "".join(p + ", " for p in params) + ("/, " if params else "")
    lines = ["def make(grid, fallback):",
             "    gx, gy, gz, *cluster = grid",
             "    cluster = tuple(cluster) or None",
             f"    def launch({sig}*rest, smem=0, stream=None, backend=None, **keywords):",
             "        if keywords:",
             "            keyword_arguments_error(names, keywords)",
             "        if " + " or ".join(head) + ":"] + miss + body
    lines += ["        " + line for line in code]
    lines.append("    return launch")
    source = "\n".join(lines) + "\n"
    clash = env.keys() & backend_env.keys()
    if clash:
        raise AssertionError(f"the backend's launch code reuses the names {sorted(clash)}")
    env.update(backend_env)
    _compile(source, f"launch of {', '.join(names)}", env)
    return Entry(env["make"], source)
