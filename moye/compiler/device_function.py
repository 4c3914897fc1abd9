"""@moye.func: device functions, helpers that kernels and other helpers call.

A `DeviceFunction` wraps a Python function. Called while a kernel is being
traced, it runs its body with the kernel's control-flow rewrite
(rewrite.py), so a run-time `if`, `for` or `while` inside it becomes kernel
control flow: the helper is inlined where it is called, as CUDA inlines a
`__device__ __forceinline__` function. Its `return` may leave the control
flow it opened itself only where that is static (as a kernel's may not
leave run-time control flow).

Called outside a kernel it is the plain Python function: the same helper
serves host code (a `moye.reduce` of a host array with a helper as its op,
a unit test of the helper on numbers).

Recursion is inlining too, so it must end on static values: a helper that
calls itself more than RECURSION_LIMIT deep while one kernel is traced is
refused (a run-time condition cannot stop the inlining).

The kernel's cache key covers helpers: `identity.function_key` walks the
globals a kernel reads, and a DeviceFunction is keyed by its public field
`fn`, whose code (and everything it reads) is hashed in turn.
"""
import functools
import inspect
import traceback

from ..errors import MoyeTypeError
from .rewrite import rewrite_function, source_stamp
from .tracer import KernelError, tracing

RECURSION_LIMIT = 64
"""How deep one @moye.func may call itself while a kernel is traced."""


class DeviceFunction:
    """A helper for kernels (see the module doc). `fn` is the function as
    written; `rewritten` the one that runs while tracing."""

    def __init__(self, fn):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self._rewritten = None
        self._stamp = source_stamp(fn)      # its file when defined (rewrite_function)
        self._depth = 0

    def __repr__(self):
        return f"<moye.func {self.fn.__qualname__}>"

    def __get__(self, obj, owner=None):
        """As a method: bound to its object like a plain function."""
        return self if obj is None else functools.partial(self, obj)

    @property
    def rewritten(self):
        """The function with its control flow rewritten (or as it is, when
        its source cannot be read)."""
        if self._rewritten is None:
            self._rewritten = rewrite_function(self.fn, helper=True, stamp=self._stamp) or \
                self.fn
        return self._rewritten

    def __call__(self, *args, **kwargs):
        if not tracing():
            return self.fn(*args, **kwargs)
        fn = self.rewritten
        if self._depth >= RECURSION_LIMIT:
            raise KernelError(
                f"moye.func '{self.fn.__qualname__}' calls itself more than {RECURSION_LIMIT} "
                "deep while the kernel is traced: a device function is inlined, so its "
                "recursion must end on static values (a run-time condition cannot stop it); "
                "write the recursion as a loop")
        self._depth += 1
        try:
            return fn(*args, **kwargs)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:
            if getattr(e, "located", False) or getattr(e, "moye_func", None) is self:
                raise                   # named already (by an inner call of itself)
            raise self._located(e) from e
        finally:
            self._depth -= 1

    def _located(self, e):
        """`e` as a KernelError naming the line of this function it came
        from; the kernel's own error adds the line that called it."""
        code = self.fn.__code__
        lines = [f for f in traceback.extract_tb(e.__traceback__)
                 if f.filename == code.co_filename and f.name == code.co_name]
        where = f", {lines[0].filename}:{lines[0].lineno}: {lines[0].line}" if lines else ""
        err = KernelError(f"in moye.func '{self.fn.__qualname__}'{where}\n  "
                          f"{type(e).__name__}: {e}")
        err.moye_func = self
        return err


def func(fn=None):
    """Mark `fn` as a device function: kernels and other device functions
    call it, from any module; it is inlined, with the same control-flow
    rewrite as a kernel (run-time `if`/`for`/`while` inside), and its source
    is part of the kernel's cache key. Outside a kernel it runs as plain
    Python. CUDA: a `__device__` function.
        >>> import moye, numpy as np
        >>> @moye.func
        ... def relu(v):
        ...     if v < 0:                       # a run-time condition in a helper
        ...         v = 0.0
        ...     return v
        >>> @moye.kernel
        ... def apply(out, x):
        ...     out[moye.thread_idx.x] = relu(x[moye.thread_idx.x])
        >>> out = np.full(4, np.nan, np.float32)
        >>> apply[1, 4](out, np.array([-1.0, 2.0, -3.0, 4.0], np.float32))
        >>> out.tolist(), relu(-5.0)
        ([0.0, 2.0, 0.0, 4.0], 0.0)
    """
    if fn is None:
        return func
    if isinstance(fn, DeviceFunction):
        return fn
    if not inspect.isfunction(fn):
        raise MoyeTypeError(f"moye.func decorates a Python function (def ...), got "
                            f"{type(fn).__name__} {fn!r}")
    if fn.__code__.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE |
                               inspect.CO_ASYNC_GENERATOR):
        raise MoyeTypeError(f"moye.func: '{fn.__qualname__}' is a generator or coroutine; a "
                            "device function is a plain def")
    return DeviceFunction(fn)
