"""moye.autotune: run several configurations of a kernel, or of a host
function that launches kernels, keep the fastest per key, and remember it.

    @moye.autotune(configs=[moye.Config(BLOCK=64), moye.Config(BLOCK=128)], key=["n"])
    @moye.kernel
    def scale(y, x, n, BLOCK: moye.Constexpr): ...

    scale[lambda c: (n + c.BLOCK - 1) // c.BLOCK, lambda c: c.BLOCK](y, x, n)

The first call with a new key (the shapes and dtypes of the key's arrays,
the values of its other arguments, on this device) runs every config on
the call's own arguments and times it: CUDA events on the launch's stream,
or time.perf_counter on the CPU backend. The fastest is kept in memory and
in a small JSON file per tuned function under the disk cache's folder
(`$MOYE_CACHE_DIR/autotune/`), which a later process reads instead of
timing again. With $MOYE_AUTOTUNE=0 nothing is timed: every call uses the
`default`. See docs/autotune.md.

The compiler imports no backend: the disk cache's folder, the CUDA driver
and the current-stream getter come through hooks.HOOKS.
"""
import functools
import hashlib
import inspect
import json
import math
import os
import re
import statistics
import threading
import time
from collections.abc import Mapping

from ..errors import LaunchError, MoyeError, MoyeTypeError
from ..layout.scalar import is_int
from .arguments import as_array_arg, by_position, spec_text, static_key
from .device_function import DeviceFunction
from .disk import atomic_write, cache_directory
from .frontend import KernelFunction, backend_named, default_backend
from .hooks import HOOKS
from .identity import function_key

FORMAT = "moye-autotune-1"      # the tuning files' format; a file of another is ignored
_NO_DEFAULT = inspect.Parameter.empty


class Config(Mapping):
    """The meta-parameters of one autotuning candidate, by name: a tuned
    kernel's Constexpr parameters, or keyword arguments of a tuned
    function. Read them as `c.BLOCK` or `c["BLOCK"]`.

        >>> c = Config(BLOCK=128, STAGES=2)
        >>> c.BLOCK, c["STAGES"], c
        (128, 2, Config(BLOCK=128, STAGES=2))
    """
    __slots__ = ("_values", "_exact")

    def __init__(self, **values):
        self._values = values
        # the exact key (1, 1.0 and True differ): checks now that every value can be keyed
        self._exact = tuple((k, static_key(v, k)) for k, v in sorted(values.items()))

    def __getitem__(self, name):
        return self._values[name]

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"{self!r} has no {name!r}") from None

    def __eq__(self, other):
        return isinstance(other, Config) and self._exact == other._exact

    def __hash__(self):
        return hash(self._exact)

    def __repr__(self):
        return f"Config({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"


def _config_text(c):
    """A stable text of a config, for the tuning file."""
    return spec_text(c._exact)


def as_config(c, what):
    """`c` (a Config or a dict of meta-parameters) as a Config; a
    MoyeTypeError naming `what` for anything else."""
    if isinstance(c, Config):
        return c
    if isinstance(c, dict) and all(isinstance(k, str) for k in c):
        return Config(**c)
    raise MoyeTypeError(f"{what} must be a moye.Config(...) or a dict of meta-parameters by "
                        f"name, got {type(c).__name__} {c!r}")


def tuning_enabled():
    """False where $MOYE_AUTOTUNE is 0 (or false, off, no): tuned functions
    then time nothing and use their default."""
    return os.environ.get("MOYE_AUTOTUNE", "1").strip().lower() not in ("0", "false", "off", "no")


def autotune(configs, key=(), *, default=None, reset_to_zero=(), restore_value=(), prune=None,
             warmup=2, repeat=10, timer=None):
    """Decorate a `@moye.kernel`, or a Python function that launches
    kernels, to run the fastest of `configs` for each key (module doc).

    - `configs`: moye.Config(...) or dicts. For a kernel they fill its
      Constexpr parameters by name, and the launch is
      `tuned[grid, block](*the other args)` (or `[grid, block, cluster]`),
      where grid, block, cluster and `smem=` may each be a function of the
      Config. A function is called as `f(*args, **kwargs, **config)`.
    - `key`: names of arguments whose values select the tuning: an array
      by its shape and dtype, anything else by its value.
    - `default`: the config where $MOYE_AUTOTUNE=0: a Config, or a function
      of the key's arguments (by name) returning one; by default configs[0].
    - `reset_to_zero`: arrays the call accumulates into (zero when called):
      zeroed before every timed run and before the call's own run.
    - `restore_value`: arrays the call overwrites and also reads: copied
      before tuning and restored after each candidate.
    - `prune(configs, **key_arguments)`: the candidates worth timing.
    - `warmup`, `repeat`: untimed runs, then timed runs (their median);
      `timer(run, config)`, if given, measures instead: milliseconds.

    A candidate that fails (does not compile, too much shared memory) is
    left out, its error kept in `tuned.errors`; if all fail, a MoyeError
    lists them. `tuned.best_config(*args)` is the config these arguments
    get.

        >>> def timer(run, config):          # for the example: larger tiles are faster
        ...     run()
        ...     return 1.0 / config.tile
        >>> @autotune(configs=[Config(tile=4), Config(tile=8)], key=["n"], timer=timer)
        ... def work(n, tile):
        ...     return n // tile
        >>> work(64), work.best_config(64)      # tile=8, timed once (or read from the cache)
        (8, Config(tile=8))
    """
    if not isinstance(configs, (list, tuple)) or not configs:
        raise MoyeError(f"moye.autotune: configs must be a non-empty list of moye.Config(...), "
                        f"got {configs!r}")
    configs = tuple(as_config(c, f"moye.autotune: configs[{i}]") for i, c in enumerate(configs))
    key, reset_to_zero, restore_value = (_names(v, what) for v, what in (
        (key, "key"), (reset_to_zero, "reset_to_zero"), (restore_value, "restore_value")))
    if default is not None and not callable(default):
        default = as_config(default, "moye.autotune: default")
    for v, what in ((prune, "prune"), (timer, "timer")):
        if v is not None and not callable(v):
            raise MoyeTypeError(f"moye.autotune: {what} must be a function, got "
                                f"{type(v).__name__} {v!r}")
    for v, what, least in ((warmup, "warmup", 0), (repeat, "repeat", 1)):
        if not is_int(v) or isinstance(v, bool) or v < least:
            raise MoyeTypeError(f"moye.autotune: {what} must be an int >= {least}, got {v!r}")

    def decorate(fn):
        return Autotuner(fn, configs, key, default, reset_to_zero, restore_value, prune,
                         int(warmup), int(repeat), timer)
    return decorate


def _names(names, what):
    """A tuple of argument names, or a MoyeTypeError naming `what`."""
    if isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names):
        return tuple(names)
    hint = f" such as {what}=[{names!r}]" if isinstance(names, str) else ""
    raise MoyeTypeError(f"moye.autotune: {what} must be a list of argument names{hint}, "
                        f"got {names!r}")


class Autotuner:
    """A kernel or function under moye.autotune (see autotune). What it
    chose: `best_config(*args)`; `cache`, `timings` and `errors` hold each
    tuned slot's (backend, key values) config, milliseconds per config and
    the failed configs' errors."""

    def __init__(self, fn, configs, key, default, reset_to_zero, restore_value, prune,
                 warmup, repeat, timer):
        if isinstance(fn, DeviceFunction) or not callable(fn):
            raise MoyeTypeError(f"moye.autotune decorates a @moye.kernel or a Python function that "
                                f"launches kernels, got {type(fn).__name__} {fn!r}")
        self.fn, self.configs, self.key, self.default = fn, configs, key, default
        self.reset_to_zero, self.restore_value, self.prune = reset_to_zero, restore_value, prune
        self.warmup, self.repeat, self.timer = warmup, repeat, timer
        self.kernel = fn if isinstance(fn, KernelFunction) else None
        target = self.kernel.fn if self.kernel else fn
        functools.update_wrapper(self, target, updated=())
        self._qualified = f"{getattr(target, '__module__', None)}." \
                          f"{getattr(target, '__qualname__', type(target).__qualname__)}"
        self._tuned = frozenset().union(*configs)          # the names the configs set
        if self.kernel is not None:
            self._read_kernel(self.kernel)
        else:
            self._read_function(fn)
        for c in configs:
            self._check_config(c, "config")
        if isinstance(default, Config):
            self._check_config(default, "the default")
        for names, what in ((key, "key"), (reset_to_zero, "reset_to_zero"),
                            (restore_value, "restore_value")):
            for n in names:
                self._check_argument(n, what)
        self._texts = [_config_text(c) for c in configs]
        self.cache, self.timings, self.errors = {}, {}, {}
        self._lock = threading.RLock()
        self._stem = None                   # the tuning file's name, computed once
        self._file = (None, {})             # (path, records) as last read or written

    def __repr__(self):
        return f"<moye.autotune {self._qualified}: {len(self.configs)} configs, key {self.key}>"

    # -- the arguments a call gives, by name --------------------------------------------

    def _read_kernel(self, k):
        """A kernel's call: its parameters but the tuned ones, by position."""
        params = k._param_names
        wrong = sorted(self._tuned - k.constexpr_names)
        if wrong:
            what = "keys {} are not Constexpr parameters" if len(wrong) > 1 else \
                "key {} is not a Constexpr parameter"
            raise MoyeError(f"moye.autotune of kernel {k.name}: config "
                            f"{what.format(', '.join(map(repr, wrong)))} of "
                            f"{k.name}({', '.join(params)}); a config sets Constexpr "
                            "parameters by name")
        self._call_names = [n for n in params if n not in self._tuned]
        self._positions = {n: i for i, n in enumerate(self._call_names)}
        self._defaults = k._defaults
        self._signature = f"{k.name}[grid, block]({', '.join(self._call_names)})"

    def _read_function(self, fn):
        """A function's call: its positional parameters and keywords."""
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            raise MoyeTypeError(f"moye.autotune: cannot read the parameters of {fn!r}") from None
        kinds = inspect.Parameter
        named = [n for n, p in params.items() if p.kind not in (kinds.VAR_POSITIONAL,
                                                                kinds.VAR_KEYWORD)]
        self._call_names = [n for n in named if n not in self._tuned]
        self._positions = {n: i for i, (n, p) in enumerate(params.items())
                           if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)}
        self._defaults = {n: p.default for n, p in params.items() if p.default is not _NO_DEFAULT}
        self._keywords = any(p.kind is kinds.VAR_KEYWORD for p in params.values())
        name = getattr(fn, "__name__", type(fn).__name__)
        self._signature = f"{name}({', '.join(named)})"
        bad = [n for n in self._tuned if (n not in named and not self._keywords) or
               (n in params and params[n].kind is kinds.POSITIONAL_ONLY)]
        if bad:
            raise MoyeError(f"moye.autotune of {self._signature}: config keys "
                            f"{', '.join(map(repr, sorted(bad)))} are not keyword parameters of "
                            f"{name}; a config is passed as keyword arguments")
        tuned_positions = [i for n, i in self._positions.items() if n in self._tuned]
        self._first_tuned = min(tuned_positions, default=None)

    def _check_config(self, c, what):
        """A config (or default) sets only names the tuner passes, and, for
        a kernel, every tuned parameter that has no default."""
        extra = sorted(set(c) - self._tuned)
        if extra:
            raise MoyeError(f"moye.autotune of {self._signature}: {what} {c!r} sets "
                            f"{', '.join(map(repr, extra))}, which no config in configs sets")
        if self.kernel is not None:
            missing = sorted(n for n in self._tuned if n not in c and n not in self._defaults)
            if missing:
                raise MoyeError(f"moye.autotune of kernel {self.kernel.name}: {what} {c!r} "
                                f"sets no {', '.join(map(repr, missing))}, which other configs "
                                "set and the kernel gives no default")

    def _check_argument(self, name, what):
        if name in self._tuned:
            raise MoyeError(f"moye.autotune of {self._signature}: {what} names {name!r}, which "
                            "the configs set; it names arguments the caller gives")
        if name not in self._call_names:
            raise MoyeError(f"moye.autotune of {self._signature}: {what} names {name!r}, which "
                            f"is not an argument of {self._signature}")

    def _argument(self, name, args, kwargs):
        """The value of argument `name` in a call."""
        i = self._positions.get(name)
        if i is not None and i < len(args):
            return args[i]
        if name in kwargs:
            return kwargs[name]
        if name in self._defaults:
            return self._defaults[name]
        raise LaunchError(f"{self._signature}: the call gives no argument {name!r}")

    def _array_argument(self, name, args, kwargs, what):
        a = self._argument(name, args, kwargs)
        if as_array_arg(a, name) is None:
            raise MoyeTypeError(f"{self._signature}: argument {name!r} (in {what}) must be an "
                                f"array, got {type(a).__name__}")
        return a

    def _kernel_args(self, args, config):
        """The kernel's arguments in order: the call's, with the config's
        (or the kernel's defaults) in the tuned parameters' places."""
        out, given = [], iter(args)
        for name in self.kernel._param_names:
            if name in self._tuned:
                out.append(config[name] if name in config else self._defaults[name])
                continue
            value = next(given, _NO_DEFAULT)
            if value is _NO_DEFAULT:
                value = self._argument(name, (), {})
            out.append(value)
        return out

    # -- calls ---------------------------------------------------------------------------

    def __getitem__(self, dims):
        """A tuned kernel's launch function: `tuned[grid, block](*args,
        smem=0, stream=None, backend=None)`, or `[grid, block, cluster]`;
        grid, block, cluster and smem may be functions of the Config."""
        if self.kernel is None:
            raise MoyeTypeError(f"{self._signature} is a tuned function: call it as "
                                f"{self.__name__}(*args); a tuned kernel takes [grid, block]")
        if not isinstance(dims, tuple) or len(dims) not in (2, 3):
            raise LaunchError(f"launch a tuned kernel as {self.kernel.name}[grid, block](*args) "
                              f"or [grid, block, cluster]; got {self.kernel.name}[{dims!r}]")
        kernel = self.kernel

        def launch(*args, smem=0, stream=None, backend=None, **keywords):
            if keywords:
                args = by_position(self._call_names, self._defaults, args, keywords)
            if len(args) > len(self._call_names):
                raise LaunchError(f"{self._signature} takes {len(self._call_names)} arguments "
                                  f"({', '.join(sorted(self._tuned))} set by the autotuner), "
                                  f"got {len(args)}")

            def run(config):
                kernel[tuple(_resolved(d, config) for d in dims)](
                    *self._kernel_args(args, config), smem=_resolved(smem, config),
                    stream=stream, backend=backend)
            run(self._choose(args, {}, run, backend, stream))
        return launch

    def __call__(self, *args, **kwargs):
        """A tuned function's call: f(*args, **kwargs, **the chosen config)."""
        if self.kernel is not None:
            raise LaunchError(f"a tuned kernel is launched with a grid and a block: "
                              f"{self.kernel.name}[grid, block](*args), each a value or a "
                              f"function of the Config, e.g. "
                              f"{self.kernel.name}[grid, lambda c: c.BLOCK](...)")
        taken = sorted(self._tuned.intersection(kwargs))
        if self._first_tuned is not None and len(args) > self._first_tuned:
            taken.append(list(self._positions)[self._first_tuned])
        if taken:
            raise LaunchError(f"{self._signature}: {', '.join(map(repr, taken))} "
                              "set by moye.autotune's configs; the call gives the other arguments")
        fn = self.fn

        def run(config):
            return fn(*args, **kwargs, **config)
        return run(self._choose(args, kwargs, run, None, None))

    def best_config(self, *args, **kwargs):
        """The Config a call with these arguments uses, running nothing: the
        one tuned (in this process or the disk cache), the default where
        $MOYE_AUTOTUNE=0, None where their key was not tuned yet."""
        if not tuning_enabled():
            return self._default_config(args, kwargs)
        slot = self._slot(args, kwargs, None)
        config = self.cache.get(slot)
        return config if config is not None else self._load(slot)

    # -- choosing ------------------------------------------------------------------------

    def _choose(self, args, kwargs, run, backend, stream):
        """The config of this call: the default (tuning off), the one tuned
        for its slot, or the fastest after timing each with `run(config)`."""
        if not tuning_enabled():
            return self._default_config(args, kwargs)
        slot = self._slot(args, kwargs, backend)
        config = self.cache.get(slot)
        if config is None:
            with self._lock:
                config = self.cache.get(slot)
                if config is None:
                    config = self._load(slot)
                if config is None:
                    config = self._tune(slot, args, kwargs, run, stream)
                self.cache[slot] = config
        return config

    def _slot(self, args, kwargs, backend):
        """(backend, key values) of a call: an array by (shape, dtype name),
        anything else by its exact static key."""
        parts = []
        for name in self.key:
            value = self._argument(name, args, kwargs)
            a = as_array_arg(value, name)
            parts.append(static_key(value, name) if a is None else (tuple(a.shape), a.dtype.name))
        return self._backend(args, kwargs, backend), tuple(parts)

    def _backend(self, args, kwargs, backend):
        """Where the call runs: `backend=`, the kernel's own, its first
        array's device, else the default backend."""
        backend = backend_named(backend) or (self.kernel and self.kernel.backend)
        if backend:
            return backend
        for value in args + tuple(kwargs.values()):
            try:
                a = as_array_arg(value)
            except MoyeError:               # not an array moye takes: not one to launch on
                continue
            if a is not None:
                return "cuda" if a.device == "cuda" else "cpu"
        return default_backend()

    def _default_config(self, args, kwargs):
        if self.default is None:
            return self.configs[0]
        if isinstance(self.default, Config):
            return self.default
        named = {n: self._argument(n, args, kwargs) for n in self.key}
        c = as_config(self.default(**named), f"the default of {self._signature} (returned)")
        self._check_config(c, "the default")
        return c

    def _candidates(self, args, kwargs):
        if self.prune is None:
            return self.configs
        named = {n: self._argument(n, args, kwargs) for n in self.key}
        kept = self.prune(list(self.configs), **named)
        if not isinstance(kept, (list, tuple)) or not kept:
            raise MoyeError(f"moye.autotune of {self._signature}: prune must return a non-empty "
                            f"list of configs, got {kept!r}")
        kept = [as_config(c, "a config prune returned") for c in kept]
        foreign = [c for c in kept if c not in self.configs]
        if foreign:
            raise MoyeError(f"moye.autotune of {self._signature}: prune returned {foreign[0]!r}, "
                            "which is not in configs; it returns some of the configs it is given")
        return kept

    def _tune(self, slot, args, kwargs, run, stream):
        """Time each candidate on the call's arguments; the fastest. The
        restore_value arrays are restored after each, the reset_to_zero ones
        zeroed before each run and once more before the call's own run."""
        zeroed = [self._array_argument(n, args, kwargs, "reset_to_zero")
                  for n in self.reset_to_zero]
        kept = [(a, _copy(a)) for a in (self._array_argument(n, args, kwargs, "restore_value")
                                        for n in self.restore_value)]
        times, errors = {}, {}
        for config in self._candidates(args, kwargs):
            def once(config=config):
                for a in zeroed:
                    _zero(a)
                return run(config)
            try:
                ms = self.timer(once, config) if self.timer else \
                    measure(once, slot[0], stream, self.warmup, self.repeat)
            except Exception as e:          # noqa: BLE001 - a candidate's failure, kept
                errors[config] = e.with_traceback(None)
                continue
            finally:
                for a, saved in kept:
                    _restore(a, saved)
            if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not ms >= 0 or \
                    math.isinf(ms):
                raise MoyeTypeError(f"moye.autotune of {self._signature}: the timer returned "
                                    f"{ms!r} for {config!r}; it returns milliseconds (a float)")
            times[config] = float(ms)
        self.timings[slot], self.errors[slot] = times, errors
        if not times:
            listed = "\n".join(f"  {c!r}: {type(e).__name__}: {e}" for c, e in errors.items())
            raise MoyeError(f"moye.autotune of {self._signature}: every config failed for "
                            f"{_slot_text(self.key, slot)}:\n{listed}")
        best = min(times, key=times.get)
        for a in zeroed:
            _zero(a)
        self._store(slot, best, times[best])
        return best

    # -- the tuning file -----------------------------------------------------------------

    def _path(self):
        if self._stem is None:
            identity = self.kernel.code_identity() if self.kernel is not None else \
                f"{self._qualified}:{function_key(self.fn)}"
            h = hashlib.sha256("\0".join([identity, "|".join(self.key)] + self._texts).encode())
            name = re.sub(r"[^A-Za-z0-9_.-]", "_", self._qualified)
            self._stem = f"{name[-100:]}-{h.hexdigest()[:20]}.json"
        return os.path.join(cache_directory(), "autotune", self._stem)

    def _record_key(self, slot):
        backend, parts = slot
        device = HOOKS.driver().device_name() if backend == "cuda" else backend
        return f"{device}|{spec_text(parts)}"

    def _load(self, slot):
        """The config the tuning file holds for `slot`, or None (none, or a
        record this tuner's configs do not match). The file is read once."""
        path = self._path()
        if self._file[0] != path:
            self._file = (path, read_records(path))
        record = self._file[1].get(self._record_key(slot))
        if isinstance(record, dict):
            i = record.get("config")
            if type(i) is int and 0 <= i < len(self.configs) and \
                    record.get("text") == self._texts[i]:
                return self.configs[i]
        return None

    def _store(self, slot, config, ms):
        """Add `slot`'s choice to the tuning file (merged with what other
        processes wrote since it was read)."""
        path = self._path()
        records = read_records(path)
        i = self.configs.index(config)
        records[self._record_key(slot)] = {"config": i, "text": self._texts[i], "ms": ms}
        write_records(path, records, self._qualified)
        self._file = (path, records)


def _resolved(x, config):
    return x(config) if callable(x) else x


def _slot_text(names, slot):
    backend, parts = slot
    return f"{backend}, key {dict(zip(names, parts))}" if names else backend


# -- the arrays tuning overwrites ---------------------------------------------------------

def _zero(a):
    if hasattr(a, "zero_"):             # torch
        a.zero_()
    else:
        a[...] = 0


def _copy(a):
    if hasattr(a, "clone"):             # torch
        return a.clone()
    if hasattr(a, "copy"):              # NumPy, CuPy
        return a.copy()
    raise MoyeTypeError(f"restore_value: cannot copy a {type(a).__name__} (moye copies torch "
                        "tensors, NumPy and CuPy arrays)")


def _restore(a, saved):
    if hasattr(a, "copy_"):             # torch
        a.copy_(saved)
    else:
        a[...] = saved


# -- timing -------------------------------------------------------------------------------

def measure(run, backend="cpu", stream=None, warmup=2, repeat=10):
    """The median milliseconds of `run()` over `repeat` runs after `warmup`
    untimed ones: by CUDA events on `stream` (by default the one a launch
    uses: torch's current stream, else the legacy default stream) with
    backend "cuda", by time.perf_counter otherwise.

        >>> measure(lambda: sum(range(1000)), warmup=1, repeat=3) > 0
        True
    """
    for _ in range(warmup):
        run()
    if backend == "cuda":
        return _cuda_median(run, stream, repeat)
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def _cuda_median(run, stream, repeat):
    """The median of `repeat` runs, each between two events recorded on
    the stream; one synchronization at the end."""
    import cuda.bindings.driver as cu       # loaded only where a GPU is timed
    driver = HOOKS.driver()
    handle = driver.stream_handle(stream) if stream is not None else HOOKS.current_stream()()

    def check(result, what):
        if int(result[0]) != 0:
            driver.raise_error(result[0], what)
        return result[1] if len(result) > 1 else None

    events = []
    try:
        for _ in range(2 * repeat):
            events.append(check(cu.cuEventCreate(0), "cuEventCreate"))
        for i in range(repeat):
            check(cu.cuEventRecord(events[2 * i], handle), "cuEventRecord")
            run()
            check(cu.cuEventRecord(events[2 * i + 1], handle), "cuEventRecord")
        check(cu.cuEventSynchronize(events[-1]), "cuEventSynchronize")
        return statistics.median(check(cu.cuEventElapsedTime(events[2 * i], events[2 * i + 1]),
                                       "cuEventElapsedTime") for i in range(repeat))
    finally:
        for e in events:
            cu.cuEventDestroy(e)


# -- tuning files -------------------------------------------------------------------------

def read_records(path):
    """The records of the tuning file at `path`; {} where there is none, or
    it is not a regular file or not JSON of this format (a damaged file is
    ignored, and replaced at the next tuning)."""
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT or \
            not isinstance(data.get("records"), dict):
        return {}
    return data["records"]


def write_records(path, records, function):
    """Write a tuning file atomically (disk.atomic_write). A folder that
    cannot be written only costs tuning again."""
    text = json.dumps({"format": FORMAT, "function": function, "records": records},
                      indent=1, sort_keys=True)
    atomic_write(path, text.encode("utf-8"))
