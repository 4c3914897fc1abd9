"""CUDA C++ -> cubin with NVRTC (cuda.bindings.nvrtc, the nvidia-cuda-nvrtc
wheel; headers from the nvidia-cuda-runtime wheel), cached in memory and on
disk (see cache.py)."""
import os
from dataclasses import dataclass

from ...errors import MoyeError
from . import cache


class CompileError(MoyeError):
    """NVRTC rejected generated code: a moye bug; the message shows the lines."""


@dataclass
class CompiledModule:
    cubin: bytes
    log: str


def include_dirs():
    """Folders holding cuda_fp16.h and friends (from the CUDA wheels)."""
    dirs = []
    try:
        import nvidia
        for root in nvidia.__path__:
            for sub in ("cu13/include", "cuda_runtime/include", "cu12/include"):
                d = os.path.join(root, sub)
                if os.path.exists(os.path.join(d, "cuda_fp16.h")):
                    dirs.append(d)
    except ImportError:
        pass
    env = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if env and os.path.isdir(os.path.join(env, "include")):
        dirs.append(os.path.join(env, "include"))
    return dirs


def version():
    from cuda.bindings import nvrtc
    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


def _check(result, what):
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        raise MoyeError(f"NVRTC {what} failed: {err}")
    return result[1:] if isinstance(result, tuple) and len(result) > 2 else \
        (result[1] if isinstance(result, tuple) and len(result) == 2 else None)


def compile_cuda(source, names, arch, options=(), filename="moye_kernel.cu"):
    """A cubin for `arch` ("sm_80", "sm_90a", ...), from the cache when possible."""
    opts = ["-std=c++17", f"--gpu-architecture={arch}", "-default-device"] \
        + [f"-I{d}" for d in include_dirs()] + list(options)
    key = cache.key(source, arch, tuple(options), version())
    cubin = cache.get(key)
    if cubin is not None:
        return CompiledModule(cubin, "")
    from cuda.bindings import nvrtc
    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], []),
                  "create")
    try:
        bopts = [o.encode() for o in opts]
        result = nvrtc.nvrtcCompileProgram(prog, len(bopts), bopts)
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        log = log.decode(errors="replace").rstrip("\x00 \n")
        err = result[0] if isinstance(result, tuple) else result
        if int(err) != 0:
            raise CompileError(_explain(log, source, arch))
        size = _check(nvrtc.nvrtcGetCUBINSize(prog), "cubin size")
        cubin = b" " * size
        nvrtc.nvrtcGetCUBIN(prog, cubin)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    cache.put(key, cubin)
    return CompiledModule(cubin, log)


def _explain(log, source, arch):
    """NVRTC's log with the generated lines around each error."""
    import re
    lines = source.splitlines()
    shown = []
    for m in re.finditer(r"\((\d+)\): (?:error|catastrophic error)", log):
        n = int(m.group(1))
        lo, hi = max(1, n - 3), min(len(lines), n + 2)
        shown.append("\n".join(f"{'>' if i == n else ' '}{i:5d}  {lines[i - 1]}"
                               for i in range(lo, hi + 1)))
    return (f"NVRTC could not compile the generated CUDA C++ for {arch}. This is a moye bug; "
            f"please report it with the kernel.\n{log}\n\n" + "\n...\n".join(shown))
