"""Host time of moye's launch path up to the driver call, without a GPU.

The CUDA backend runs with stand-ins: specializations are traced, not
compiled, and cuLaunchKernel is a Python function that returns at once, so
what is timed is moye's own work per launch: the launch function's checks,
reading the arrays, packing the parameter buffer, the stream. Workloads:

- `trivial[1, 32](7)`: the trivial kernel (one int parameter);
- `copy1[1, 32](y, x)` on objects read as torch tensors (data_ptr(), shape,
  stride(), dtype, is_cuda), as CuPy arrays, and as plain
  `__cuda_array_interface__` arrays; and `f(y, x)` with `f = copy1[1, 32]`;
- `copy1` alternating between two specializations (float32, float16);
- binding alone (the slow path's first step) for torch-like and NumPy
  arrays, and the CPU backend's host work before its interpreter (binding
  and the parameter values) for NumPy arrays.

Each figure is the minimum over ROUNDS rounds of BATCH calls (this is
meant for a shared machine: the minimum is the least disturbed round). The
stand-in cuLaunchKernel's own call is timed alone and shown.

    python benchmarks/bind_overhead.py [--json out.json]

It runs on an older checkout too (before compiler/binder.py), to compare.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import moye  # noqa: E402
from moye import sync_threads  # noqa: E402
from moye.backend.cuda import backend as cuda_backend  # noqa: E402
from moye.backend.cuda import driver  # noqa: E402

BATCH, ROUNDS = 5000, 15


class FakeDriver:
    """cuda.bindings' driver with a cuLaunchKernel that does nothing."""

    def __init__(self):
        from cuda.bindings import driver as real
        for name in ("CUresult", "CUfunction", "CUstream", "CUlaunchConfig", "CUlaunchAttribute",
                     "CUlaunchAttributeID"):
            setattr(self, name, getattr(real, name))
        self.result = (real.CUresult.CUDA_SUCCESS,)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):  # noqa: N802
        return self.result

    def cuLaunchKernelEx(self, config, f, params, extra):  # noqa: N802
        return self.result


def stand_in_backend():
    """The CUDA backend with FakeDriver, tracing instead of compiling."""
    fake = FakeDriver()
    driver._state["cu"] = fake
    cuda_backend.current_stream_getter = lambda: lambda: 0

    def compile_specialization(self, spec, trace, block, arch=None):
        kernel = trace()
        function = driver.Function(fake.CUfunction(0x1000), None, kernel.name)
        return cuda_backend.CudaExecutable(kernel, None, function, [p.type for p in kernel.params])
    cuda_backend.CudaBackend.compile_specialization = compile_specialization
    cuda_backend.CudaBackend.available = lambda self: True
    return fake


class _TorchDtype:
    __module__ = "torch"

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return "torch." + self.name


FLOAT32, FLOAT16 = _TorchDtype("float32"), _TorchDtype("float16")


class TorchLike:
    """What moye reads of a CUDA torch tensor."""
    __module__ = "torch"

    def __init__(self, ptr, shape, strides, dtype=FLOAT32):
        self.ptr, self.shape, self.strides, self.dtype, self.is_cuda = \
            ptr, tuple(shape), tuple(strides), dtype, True

    def data_ptr(self):
        return self.ptr

    def stride(self):
        return self.strides


class CupyLike:
    """What moye reads of a CuPy array."""
    __module__ = "cupy"

    def __init__(self, ptr, n):
        self.dtype, self.itemsize = np.dtype(np.float32), 4
        self.data = type("MemoryPointer", (), {"ptr": ptr})()
        self.shape, self.strides = (n,), (4,)
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (ptr, False),
                                         "strides": (4,), "version": 3}


class CAI:
    """A plain __cuda_array_interface__ array."""

    def __init__(self, ptr, n):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (ptr, False),
                                         "strides": None, "version": 3}


@moye.kernel
def copy1(y, x):
    y[0] = x[0]


@moye.kernel
def trivial(n):
    """The trivial kernel: one runtime int, no work."""
    if n < 0:
        sync_threads()


def binder_calls():
    """(bind(args), values(binding)) of this checkout's binder."""
    try:
        from moye.compiler.binder import bind_arguments

        def values(binding):
            return binding.values()
    except ImportError:                         # before compiler/binder.py
        from moye.compiler.arguments import bind_arguments, runtime_values as values
    return bind_arguments, values


def best_us(fn):
    for _ in range(BATCH // 10):
        fn()
    best = float("inf")
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(BATCH):
            fn()
        best = min(best, (time.perf_counter() - t0) / BATCH * 1e6)
    return best


def workloads(fake):
    bind_arguments, values = binder_calls()
    out = {}
    handle = fake.CUfunction(0x1000)
    out["stand-in cuLaunchKernel alone"] = \
        lambda: fake.cuLaunchKernel(handle, 1, 1, 1, 32, 1, 1, 0, None, 0, 0)
    trivial[1, 32](7)
    f = trivial[1, 32]
    out["trivial[1, 32](7)"] = lambda: trivial[1, 32](7)
    out["f(7), f = trivial[1, 32]"] = lambda: f(7)
    for what, y, x in [("torch-like", TorchLike(0x10000, (1024,), (1,)),
                        TorchLike(0x20000, (1024,), (1,))),
                       ("CuPy-like", CupyLike(0x10000, 1024), CupyLike(0x20000, 1024)),
                       ("__cuda_array_interface__", CAI(0x10000, 1024), CAI(0x20000, 1024))]:
        copy1[1, 32](y, x)
        g = copy1[1, 32]
        out[f"copy1[1, 32](y, x), {what}"] = lambda y=y, x=x: copy1[1, 32](y, x)
        out[f"f(y, x), f = copy1[1, 32], {what}"] = lambda g=g, y=y, x=x: g(y, x)
    y, x = TorchLike(0x10000, (64, 64), (64, 1)), TorchLike(0x20000, (64, 64), (64, 1))
    h16 = TorchLike(0x30000, (64, 64), (64, 1), FLOAT16)
    for _ in range(8):
        copy1[2, 32](y, x)
        copy1[2, 32](h16, h16)

    def alternate():
        copy1[2, 32](y, x)
        copy1[2, 32](h16, h16)
    out["copy1 alternating float32/float16 (per launch, x2)"] = alternate
    sig, names = copy1.signature, copy1.constexpr_names
    out["bind, two torch-like arrays"] = lambda: bind_arguments(sig, names, (y, x))
    a, b = np.zeros((64, 64), np.float32), np.ones((64, 64), np.float32)
    out["bind, two NumPy arrays"] = lambda: bind_arguments(sig, names, (a, b))
    out["CPU host path: bind + values, two NumPy arrays"] = \
        lambda: values(bind_arguments(sig, names, (a, b)))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    args = parser.parse_args()
    fake = stand_in_backend()
    rows = [{"workload": what, "us": best_us(fn)} for what, fn in workloads(fake).items()]
    tree = "binder" if Path(__file__).resolve().parent.parent.joinpath(
        "moye/compiler/binder.py").exists() else "before the binder"
    print(f"host time per call, stand-in driver, no GPU ({tree}; min of {ROUNDS} x {BATCH})")
    print(f"{'workload':58} {'us':>7}")
    for r in rows:
        print(f"  {r['workload']:56} {r['us']:7.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"tree": tree, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
