"""CUDA C++ -> cubin with NVRTC, through cuda.bindings.nvrtc; cached (cache.py).

Where NVRTC comes from. cuda.bindings loads libnvrtc with cuda.pathfinder,
which looks in site-packages (`site.getsitepackages()`), conda, the system
loader path and $CUDA_HOME, but not in folders that are only on sys.path
(PYTHONPATH, `pip install --target`). So before the first NVRTC call moye
loads the library itself, and pathfinder then finds it already loaded:

1. $MOYE_NVRTC, the path of a libnvrtc.so to use;
2. the nvidia-cuda-nvrtc wheel in any sys.path entry
   (``nvidia/cu13/lib/libnvrtc.so.13``; ``nvidia/cuda_nvrtc/lib`` for CUDA 12);
3. otherwise whatever cuda.pathfinder finds (a CUDA toolkit, say).

Generated code includes no header (its 16-bit floats are float16.PRELUDE).
Hand-written sources given to compile_cuda may include CUDA's (cuda_fp16.h,
cuda_bf16.h, ...): they are not in the NVRTC wheel but in the
nvidia-cuda-runtime wheel (``nvidia/cu13/include``) or a toolkit's include
folder, which include_dirs finds. NVRTC supplies the C++ and libcu++ pieces
they need (<nv/target>, <cstring>) itself.
"""
import ctypes
import glob
import importlib.util
import json
import os
import re
import sys
from dataclasses import dataclass, field

from ...errors import CompileError, LaunchError, MoyeError
from ...ir import ARCH_NAME
from . import cache

__all__ = ["CompiledModule", "CompileError", "compile_cuda", "include_dirs", "version",
           "compiler_id", "cache_identity", "describe", "standard_options"]


@dataclass(frozen=True)
class CompiledModule:
    """What NVRTC made of a translation unit: the cubin (SASS for one
    architecture), NVRTC's log (warnings), the mangled name of each name
    expression, and the PTX when asked for."""
    cubin: bytes
    log: str = ""
    lowered_names: dict = field(default_factory=dict)
    ptx: str = None
    arch: str = ""


_state = {}


def _bindings_major():
    """cuda-bindings' major version (13 where unknown): the NVRTC and header
    wheels' folders follow it. Read from its version file where the package
    is not imported yet (importing it costs a warm start about 3 ms)."""
    if "bindings major" not in _state:
        version = getattr(sys.modules.get("cuda.bindings"), "__version__", None)
        try:
            if version is None:
                folder = importlib.util.find_spec("cuda.bindings").submodule_search_locations[0]
                with open(os.path.join(folder, "_version.py")) as f:
                    version = re.search(r"__version__\s*=\s*[\"'](\d+)", f.read()).group(1)
            _state["bindings major"] = int(str(version).split(".")[0])
        except Exception:
            _state["bindings major"] = 13
    return _state["bindings major"]


def _wheel_lib_dirs():
    """Folders on sys.path holding an NVRTC wheel's libraries (best first)."""
    major = _bindings_major()
    sub = f"nvidia/cu{major}/lib" if major >= 13 else "nvidia/cuda_nvrtc/lib"
    dirs = []
    for entry in sys.path:
        d = os.path.join(entry or os.getcwd(), sub)
        if os.path.isfile(os.path.join(d, f"libnvrtc.so.{major}")) and d not in dirs:
            dirs.append(d)
    return dirs, f"libnvrtc.so.{major}"


def _library_file():
    """The libnvrtc moye loads itself: $MOYE_NVRTC, or a wheel's on
    sys.path; None where cuda.pathfinder is left to find one."""
    path = os.environ.get("MOYE_NVRTC")
    if not path and sys.platform.startswith("linux"):
        dirs, soname = _wheel_lib_dirs()
        path = os.path.join(dirs[0], soname) if dirs else None
    return path


def _preload():
    """Load libnvrtc (and its builtins) from $MOYE_NVRTC or a wheel on
    sys.path, so cuda.bindings uses it; None where neither exists."""
    if "preloaded" in _state:
        return _state["preloaded"]
    path = _library_file()
    if path:
        folder = os.path.dirname(os.path.abspath(path))
        builtins = [p for p in glob.glob(os.path.join(folder, "libnvrtc-builtins.so.*"))
                    if ".alt." not in p]
        # RTLD_LOCAL: libnvrtc carries its own C++ runtime, whose symbols must
        # not bind libraries loaded later (torch); cuda.bindings finds the
        # library by its soname either way
        try:
            for lib in builtins[:1] + [path]:
                ctypes.CDLL(lib, mode=ctypes.RTLD_LOCAL)
        except OSError as e:
            raise MoyeError(f"cannot load NVRTC from {path}: {e}") from None
    _state["preloaded"] = path
    return path


def _nvrtc():
    """cuda.bindings.nvrtc, with NVRTC located first."""
    mod = _state.get("module")
    if mod is None:
        try:
            from cuda.bindings import nvrtc as mod
        except ImportError as e:
            raise MoyeError("the CUDA backend needs cuda-bindings and nvidia-cuda-nvrtc: "
                            "pip install 'cuda-bindings>=13.0,<13.1' "
                            "'nvidia-cuda-nvrtc>=13.0,<13.1' 'nvidia-cuda-runtime>=13.0,<13.1'"
                            ) from e
        _preload()
        try:
            mod.nvrtcVersion()
        except Exception as e:
            raise MoyeError(f"cannot load NVRTC ({e}); install nvidia-cuda-nvrtc, or set "
                            "MOYE_NVRTC to the path of a libnvrtc.so") from None
        _state["module"] = mod
    return mod


def _check(result, what):
    """The values of an NVRTC call's result tuple; a MoyeError if it failed."""
    err = result[0]
    if err != 0:
        nvrtc = _nvrtc()
        name = nvrtc.nvrtcGetErrorString(err)[1].decode(errors="replace")
        raise MoyeError(f"NVRTC {what} failed: {name}")
    return result[1] if len(result) == 2 else result[1:]


def version():
    """NVRTC's version, "major.minor"."""
    if "version" not in _state:
        major, minor = _check(_nvrtc().nvrtcVersion(), "nvrtcVersion")
        _state["version"] = f"{major}.{minor}"
    return _state["version"]


def library_path():
    """The file NVRTC was loaded from (None if it cannot be told)."""
    _nvrtc()
    if "library" not in _state:
        path = _state.get("preloaded")
        if not path:
            try:
                from cuda.pathfinder import load_nvidia_dynamic_lib
                path = load_nvidia_dynamic_lib("nvrtc").abs_path
            except Exception:
                path = None
        _state["library"] = path and os.path.realpath(path)
    return _state["library"]


def compiler_id():
    """NVRTC's identity for cache keys: its version and which library file
    (path, size, mtime), so a patch release invalidates the cache."""
    if "id" not in _state:
        path, stamp = library_path(), ""
        if path:
            try:
                st = os.stat(path)
                stamp = f"{path}:{st.st_size}:{st.st_mtime_ns}"
            except OSError:
                stamp = path
        _state["id"] = f"nvrtc-{version()}:{stamp}"
    return _state["id"]


def cache_identity():
    """NVRTC's identity in the specialization cache's keys, found without
    loading it where moye knows its file (loading costs tens of ms, too
    much for a warm start from the disk cache): the file's path, size and
    mtime, which fix its version; else compiler_id() (version and file)."""
    if "cache id" not in _state:
        path = _library_file()
        try:
            st = os.stat(path) if path else None
        except OSError:
            st = None
        _state["cache id"] = (f"nvrtc-file:{os.path.realpath(path)}:{st.st_size}:"
                              f"{st.st_mtime_ns}" if st else compiler_id())
    return _state["cache id"]


def include_dirs():
    """The folder holding cuda_fp16.h, cuda_bf16.h and cuda_fp8.h: the
    nvidia-cuda-runtime wheel on sys.path, else a toolkit's include folder."""
    if "include" not in _state:
        major = _bindings_major()
        subs = [f"nvidia/cu{major}/include"] if major >= 13 else ["nvidia/cuda_runtime/include"]
        candidates = [os.path.join(e or os.getcwd(), s) for e in sys.path for s in subs]
        for var in ("CUDA_HOME", "CUDA_PATH"):
            if os.environ.get(var):
                candidates.append(os.path.join(os.environ[var], "include"))
        candidates.append("/usr/local/cuda/include")
        found = [d for d in candidates if os.path.isfile(os.path.join(d, "cuda_fp16.h"))]
        _state["include"] = found[:1]       # one folder: never mix two CUDA versions' headers
    return list(_state["include"])


def describe():
    """Where NVRTC and the headers were found (for logs and bug reports)."""
    return (f"NVRTC {version()} from {library_path() or '(found by cuda.pathfinder)'}; "
            f"headers from {', '.join(include_dirs()) or '(none found)'}")


def supported_archs():
    """The SM numbers this NVRTC can compile for (75, 80, 86, ...)."""
    if "archs" not in _state:
        _state["archs"] = tuple(_check(_nvrtc().nvrtcGetSupportedArchs(), "supported archs"))
    return _state["archs"]


def _check_arch(arch):
    m = ARCH_NAME.match(arch)
    if m is None:
        raise LaunchError(f"compile_cuda: arch must look like 'sm_80' or 'sm_90a', got {arch!r}")
    if int(m.group(1)) not in supported_archs():
        ok = ", ".join(f"sm_{a}" for a in supported_archs())
        raise LaunchError(f"NVRTC {version()} cannot compile for {arch}; it supports {ok}")


def standard_options(arch):
    """The options every compilation gets (before the caller's)."""
    return (["-std=c++17", f"--gpu-architecture={arch}", "-default-device"]
            + [f"-I{d}" for d in include_dirs()])


def compile_cuda(source, names, arch, options=(), filename="moye_kernel.cu", ptx=False):
    """Compile one CUDA C++ translation unit to a cubin for `arch` ("sm_80",
    "sm_90a", ...), from the cache when it was compiled before.

    `names` are the kernels' name expressions ("copy_kernel" for an
    ``extern "C"`` kernel, "gemm<128>" for a template instance); the result's
    `lowered_names` maps each to the symbol to look up in the module.
    `options` are extra NVRTC options ("-lineinfo", "--use_fast_math", ...).
    Raises CompileError, showing NVRTC's log and the lines it points at, if
    NVRTC rejects the source.
    """
    names = (names,) if isinstance(names, str) else tuple(names)
    _check_arch(arch)
    opts = standard_options(arch) + list(options)
    key = cache.key(source, arch, opts, compiler_id(), repr(names), filename, bool(ptx))
    blob = cache.get(key)
    if blob is not None:
        module = _decode(blob)
        if module is not None:
            return module
    module = _compile(source, names, arch, opts, filename, ptx)
    cache.put(key, _encode(module))
    return module


def _compile(source, names, arch, opts, filename, want_ptx):
    nvrtc = _nvrtc()
    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], []),
                  "nvrtcCreateProgram")
    try:
        for n in names:
            _check(nvrtc.nvrtcAddNameExpression(prog, n.encode()), "nvrtcAddNameExpression")
        bopts = [o.encode() for o in opts]
        err = nvrtc.nvrtcCompileProgram(prog, len(bopts), bopts)[0]
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        buf = _buffer(size)
        _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = bytes(buf).rstrip(b"\x00").decode(errors="replace").strip()
        if err == nvrtc.nvrtcResult.NVRTC_ERROR_COMPILATION:
            ptx = _ptx(nvrtc, prog) if "ptxas" in log else None     # inline PTX went wrong
            raise CompileError(explain(log, source, arch, filename, ptx), log, source, arch)
        if err != 0:
            name = nvrtc.nvrtcGetErrorString(err)[1].decode(errors="replace")
            raise MoyeError(f"NVRTC refused the options {opts}: {name}\n{log}")
        size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        buf = _buffer(size)
        _check(nvrtc.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
        cubin = bytes(buf)
        ptx = _ptx(nvrtc, prog) if want_ptx else None
        lowered = {n: _check(nvrtc.nvrtcGetLoweredName(prog, n.encode()),
                             "nvrtcGetLoweredName").decode() for n in names}
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return CompiledModule(cubin, log, lowered, ptx, arch)


def _ptx(nvrtc, prog):
    size = _check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
    text = _buffer(size)
    _check(nvrtc.nvrtcGetPTX(prog, text), "nvrtcGetPTX")
    return bytes(text).rstrip(b"\x00").decode(errors="replace")


def _buffer(size):
    """A writable buffer of `size` bytes for NVRTC to fill. Not `b" " *
    size`: of size 1 (an empty log, just its NUL) that is CPython's shared
    one-byte b" ", and NVRTC wrote a NUL into it for the whole process (on
    Python 3.12 the C++ moye generated next lost spaces: `inty_shape0_2`).
        >>> type(_buffer(1)).__name__, len(_buffer(1))
        ('bytearray', 1)
    """
    return bytearray(size)


def _encode(m):
    head = json.dumps({"log": m.log, "lowered_names": m.lowered_names, "arch": m.arch,
                       "cubin": len(m.cubin), "ptx": m.ptx is not None}).encode()
    return head + b"\0" + m.cubin + (m.ptx.encode() if m.ptx is not None else b"")


def _decode(blob):
    try:
        head, body = blob.split(b"\0", 1)
        meta = json.loads(head)
        n = meta["cubin"]
        cubin, rest = body[:n], body[n:]
        if len(cubin) != n or cubin[:4] != b"\x7fELF":
            return None
        ptx = rest.decode() if meta["ptx"] else None
        return CompiledModule(cubin, meta["log"], meta["lowered_names"], ptx, meta["arch"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def explain(log, source, arch, filename="moye_kernel.cu", ptx=None, context=3, max_sites=12):
    """The message of a CompileError: NVRTC's log, then the generated lines
    around each line it reports (numbered, the reported line marked '>'),
    and for ptxas errors (inline PTX) the PTX lines around them."""
    src = re.compile(rf"^{re.escape(filename)}\((\d+)\): (?:catastrophic )?error", re.MULTILINE)
    parts = [f"NVRTC could not compile the CUDA C++ that moye generated for {arch}. "
             "This is a moye bug, not a mistake in your kernel: please report it with this "
             "message.", "", "NVRTC log:", log or "(empty)"]
    lines = source.splitlines()
    excerpt = _excerpt(lines, [int(m.group(1)) for m in src.finditer(log)], context, max_sites)
    if excerpt:
        parts += ["", f"Generated source ({filename}, {len(lines)} lines):"] + excerpt
    if ptx:
        sites = [int(m.group(1)) for m in re.finditer(r"^ptxas .*?, line (\d+); error", log,
                                                        re.MULTILINE)]
        excerpt = _excerpt(ptx.splitlines(), sites, context, max_sites)
        if excerpt:
            parts += ["", "PTX (the errors above are ptxas's, in these lines):"] + excerpt
    saved = _save_failed_source(source)
    if saved:
        parts += ["", f"The whole generated source is in {saved}"]
    return "\n".join(parts)


def _excerpt(lines, sites, context, max_sites):
    """Numbered lines around `sites` (1-based), each site marked '>'; gaps as '...'."""
    marked = sorted({n for n in sites if 1 <= n <= len(lines)})[:max_sites]
    shown = sorted({i for n in marked
                    for i in range(max(1, n - context), min(len(lines), n + context) + 1)})
    out, prev = [], None
    for i in shown:
        if prev is not None and i != prev + 1:
            out.append("  ...")
        out.append(f"{'>' if i in marked else ' '}{i:5d}  {lines[i - 1].expandtabs(4)}")
        prev = i
    return out


def _save_failed_source(source):
    import hashlib
    path = os.path.join(cache.directory(), "failed",
                        hashlib.sha256(source.encode()).hexdigest()[:16] + ".cu")
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(source)
    except OSError:
        return None
    return path
