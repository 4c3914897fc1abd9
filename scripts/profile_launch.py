"""Host time of moye's launch path, measured without a GPU.

    python scripts/profile_launch.py [--stub] [--profile] [--n N]

The CUDA driver is replaced, not moye: a fake libcuda.so.1 (built here with
the C compiler, its source below) answers every driver call at once, so
moye's CUDA backend runs as it would on a GPU (NVRTC compiles the kernel for
sm_90a; the driver loads nothing and launches nothing). Each row is moye's
`kern[grid, block](...)` or a bare `cuLaunchKernel` through cuda.bindings
with a prebuilt parameter array; the difference is the Python moye adds to
a launch, which on a GPU comes on top of the driver's own few microseconds.
With --stub (or without a C compiler) cuda.bindings' cuLaunchKernel is
replaced by a Python no-op instead, and the bare row is that no-op.

torch and CuPy are stood in for by small classes with their attributes
(`data_ptr()`, `stride()`, `shape`, `dtype`, `is_cuda`; `data.ptr`,
`strides`, `__cuda_array_interface__`), read at about C speed; real torch
reads them somewhat slower. A fake `torch` module in sys.modules gives the
current stream.
"""
import argparse
import ctypes
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FAKE_LIBCUDA = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
typedef int CUresult;
static int noop(void) { return 0; }
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned smem, void* stream, void** params, void** extra) {
  return 0;
}
CUresult cuInit(unsigned flags) { return 0; }
CUresult cuDriverGetVersion(int* v) { *v = 13000; return 0; }
CUresult cuDeviceGetCount(int* n) { *n = 1; return 0; }
CUresult cuDeviceGet(int* d, int ordinal) { *d = ordinal; return 0; }
CUresult cuDeviceGetAttribute(int* v, int attr, int dev) {
  *v = attr == 75 ? 9 : attr == 76 ? 0 : 1 << 20;      /* compute capability 9.0 */
  return 0;
}
CUresult cuDeviceGetName(char* name, int len, int dev) {
  strncpy(name, "fake libcuda", len);
  return 0;
}
static char ctx, mod, fn;
CUresult cuDevicePrimaryCtxRetain(void** c, int dev) { *c = &ctx; return 0; }
CUresult cuModuleLoadData(void** m, const void* image) { *m = &mod; return 0; }
CUresult cuModuleGetFunction(void** f, void* m, const char* name) { *f = &fn; return 0; }
/* NVRTC asks the driver for its private export table: there is none */
CUresult cuGetExportTable(const void** table, const void* id) { *table = 0; return 500; }
CUresult cuGetErrorName(int e, const char** s) { *s = "CUDA_ERROR_FAKE"; return 0; }
CUresult cuGetErrorString(int e, const char** s) { *s = "fake driver"; return 0; }
CUresult cuGetProcAddress_v2(const char* sym, void** pfn, int ver, uint64_t flags, int* status) {
  char name[256];
  void* p = dlsym(RTLD_DEFAULT, sym);
  if (!p) { snprintf(name, sizeof name, "%s_v2", sym); p = dlsym(RTLD_DEFAULT, name); }
  *pfn = p ? p : (void*)noop;
  if (status) *status = 0;
  return 0;
}
"""


def fake_driver(tmp):
    """Load a fake libcuda.so.1 before cuda.bindings looks for one; False
    without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return False
    src, lib = Path(tmp, "fake_libcuda.c"), Path(tmp, "libcuda.so.1")
    src.write_text(FAKE_LIBCUDA)
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(lib),
                    str(src), "-ldl"], check=True)
    # dlopen("libcuda.so.1") by cuda.bindings finds this library by its soname
    ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
    return True


def stub_driver():
    """Without a fake libcuda: moye's driver module answers for the device
    and cuLaunchKernel is a Python no-op."""
    from cuda.bindings import driver as real

    from moye.backend.cuda import driver

    shim = types.SimpleNamespace(**{n: getattr(real, n) for n in dir(real)
                                    if not n.startswith("__")})
    ok = (real.CUresult.CUDA_SUCCESS,)
    shim.cuLaunchKernel = lambda *a: ok
    driver._state["cu"] = shim
    driver._state["raw"] = lambda *a: 0
    driver._state["device"] = {"dev": 0, "ctx": None, "ordinal": 0}
    driver._tls.ctx = object()
    driver.device_count = lambda: 1
    driver.device_arch = lambda: "sm_90a"
    driver.device_name = lambda: "no device (stubbed driver)"
    driver.load_module = lambda cubin: driver.Module(real.CUmodule(0))
    driver.Module.get_function = lambda self, name: driver.Function(real.CUfunction(0), self, name)
    return shim


# -- stand-ins for torch and CuPy ------------------------------------------------------

class _TorchDtype:
    __module__ = "torch"

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return "torch." + self.name

    __repr__ = __str__


class Tensor:
    """A CUDA tensor's metadata, read like torch's (C methods and attributes)."""
    __module__ = "torch"
    __slots__ = ("data_ptr", "stride", "shape", "dtype", "is_cuda", "numel", "device")

    def __init__(self, ptr, shape, strides, dtype):
        self.data_ptr = itertools.repeat(ptr).__next__
        self.stride = itertools.repeat(tuple(strides)).__next__
        n = 1
        for e in shape:
            n *= e
        self.numel = itertools.repeat(n).__next__
        self.shape, self.dtype, self.is_cuda = tuple(shape), dtype, True


class _MemoryPointer:
    __slots__ = ("ptr",)

    def __init__(self, ptr):
        self.ptr = ptr


class ndarray:  # noqa: N801 (CuPy's name)
    """A CuPy array's metadata: data.ptr, shape, strides in bytes, a NumPy
    dtype, and `__cuda_array_interface__` built on each access as CuPy does."""
    __module__ = "cupy"

    def __init__(self, ptr, shape, strides, dtype):
        import numpy as np
        self.data, self.shape, self.dtype = _MemoryPointer(ptr), tuple(shape), np.dtype(dtype)
        self.itemsize = self.dtype.itemsize
        self.strides = tuple(s * self.dtype.itemsize for s in strides)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "descr": [("", self.dtype.str)],
                "data": (self.data.ptr, False), "version": 3, "strides": self.strides,
                "stream": 1}


def install_fake_torch():
    stream = [0]
    torch = types.ModuleType("torch")
    torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda device: stream[0],
                                     _cuda_getDevice=lambda: 0)
    torch.float32 = _TorchDtype("float32")
    torch.Tensor = Tensor
    sys.modules["torch"] = torch
    return torch


# -- timing ------------------------------------------------------------------------

def per_call_us(fn, n, repeats=7):
    for _ in range(min(n, 2000)):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stub", action="store_true", help="no-op cuLaunchKernel in Python")
    parser.add_argument("--profile", action="store_true", help="cProfile the torch launch")
    parser.add_argument("--n", type=int, default=100000, help="launches per batch")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="moye_profile_launch_")
    os.environ["MOYE_CACHE_DIR"] = tmp
    faked = not args.stub and fake_driver(tmp)
    torch = install_fake_torch()
    import moye
    from moye.backend.cuda import driver
    if not faked:
        stub_driver()
    cu = driver._cu()

    def copy1(y, x):
        y[0] = x[0]
    # one kernel object per row group, so that rows do not share launch functions
    copy_t, copy_c, copy_k, copy_m = (moye.kernel(copy1) for _ in range(4))

    n = 1 << 20
    tx, ty = Tensor(1 << 32, (n,), (1,), torch.float32), Tensor(1 << 33, (n,), (1,), torch.float32)
    cx, cy = ndarray(1 << 34, (n,), (1,), "float32"), ndarray(1 << 35, (n,), (1,), "float32")
    copy_t[1, 32](ty, tx)
    f_t = copy_t[1, 32]
    copy_c[1, 32](cy, cx)
    f_c = copy_c[1, 32]
    kept = copy_k[1, 32]                # kept from before the first launch
    kept(ty, tx)
    copy_m[1, 32](ty, tx)
    copy_m[1, 32](cy, cx)
    f_m = copy_m[1, 32]

    function = driver.load_module(b"").get_function("f").handle
    value = ctypes.c_uint64(0)
    params = (ctypes.c_void_p * 1)(ctypes.addressof(value))
    address = ctypes.addressof(params)
    raw = cu.cuLaunchKernel
    rows = [("bare cuLaunchKernel (cuda.bindings, prebuilt params)",
             lambda: raw(function, 1, 1, 1, 32, 1, 1, 0, 0, address, 0)),
            ("moye copy[1, 32](y, x), torch tensors", lambda: copy_t[1, 32](ty, tx)),
            ("moye f(y, x), f = copy[1, 32], torch tensors", lambda: f_t(ty, tx)),
            ("moye copy[1, 32](y, x), CuPy arrays", lambda: copy_c[1, 32](cy, cx)),
            ("moye f(y, x), f = copy[1, 32], CuPy arrays", lambda: f_c(cy, cx)),
            ("moye f(y, x), f kept from before the first launch", lambda: kept(ty, tx)),
            ("moye f(y, x) + f(cy, cx): two launches, one f", lambda: (f_m(ty, tx), f_m(cy, cx)))]
    results = []
    for name, fn in rows:
        try:
            results.append((name, per_call_us(fn, args.n)))
        except Exception as e:               # noqa: BLE001 (a row that fails says why)
            results.append((name, f"fails: {type(e).__name__}: {e}"))
    bare = results[0][1]
    print(f"driver: {'fake libcuda.so.1' if faked else 'stubbed in Python'}; "
          f"Python {sys.version.split()[0]}")
    print(f"{'workload':56} {'us':>7} {'- bare':>7}")
    for name, us in results:
        if isinstance(us, str):
            print(f"{name:56} {us}")
        else:
            print(f"{name:56} {us:7.3f} {us - bare:7.3f}")
    if args.profile:
        import cProfile
        import pstats
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(args.n):
            f_t(ty, tx)
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(12)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
