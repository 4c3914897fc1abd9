"""The CUDA driver through cuda.bindings.driver: context, modules, launch."""
import ctypes

from ...errors import MoyeError

_state = {}


def _cu():
    from cuda.bindings import driver
    return driver


def _check(result, what):
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        cu = _cu()
        name = cu.cuGetErrorName(err)[1] if hasattr(cu, "cuGetErrorName") else err
        raise MoyeError(f"CUDA {what} failed: {name.decode() if isinstance(name, bytes) else name}")
    if isinstance(result, tuple):
        return result[1] if len(result) == 2 else result[1:]
    return None


def init():
    """Initialize the driver and make device 0's primary context current."""
    if "ctx" in _state:
        return _state
    cu = _cu()
    _check(cu.cuInit(0), "cuInit")
    dev = _check(cu.cuDeviceGet(0), "cuDeviceGet")
    ctx = _check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    _check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    _state.update(dev=dev, ctx=ctx)
    return _state


def device_count():
    try:
        cu = _cu()
        if int(cu.cuInit(0)[0]) != 0:
            return 0
        return _check(cu.cuDeviceGetCount(), "cuDeviceGetCount")
    except Exception:
        return 0


def device_arch():
    """"sm_XY" of device 0, with the 'a' suffix on 9.0 (wgmma, TMA multicast)."""
    st = init()
    cu = _cu()
    attr = cu.CUdevice_attribute
    major = _check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                           st["dev"]), "attribute")
    minor = _check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                           st["dev"]), "attribute")
    arch = f"sm_{major}{minor}"
    return arch + "a" if (major, minor) in ((9, 0), (10, 0)) else arch


class Function:
    def __init__(self, handle, module):
        self.handle, self.module = handle, module

    def set_max_dynamic_shared_memory(self, nbytes):
        cu = _cu()
        attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _check(cu.cuFuncSetAttribute(self.handle, attr, nbytes), "cuFuncSetAttribute")


class Module:
    def __init__(self, handle):
        self.handle = handle

    def get_function(self, name):
        h = _check(_cu().cuModuleGetFunction(self.handle, name.encode()), "cuModuleGetFunction")
        return Function(h, self)


def load_module(cubin):
    init()
    return Module(_check(_cu().cuModuleLoadData(cubin), "cuModuleLoadData"))


_CTYPES = {"Float32": ctypes.c_float, "TFloat32": ctypes.c_float, "Float64": ctypes.c_double,
           "Int32": ctypes.c_int32, "UInt32": ctypes.c_uint32, "Int64": ctypes.c_int64,
           "UInt64": ctypes.c_uint64, "Bool": ctypes.c_bool, "Int16": ctypes.c_int16,
           "Int8": ctypes.c_int8, "UInt8": ctypes.c_uint8, "UInt16": ctypes.c_uint16}


def pack(types, values):
    """The kernel-params array for cuLaunchKernel, and the objects it points to."""
    holders = []
    for t, v in zip(types, values):
        if hasattr(t, "space"):                       # a pointer
            holders.append(ctypes.c_uint64(v))
        elif isinstance(v, (bytes, bytearray)):       # an opaque struct (e.g. a TMA descriptor)
            holders.append((ctypes.c_char * len(v)).from_buffer_copy(v))
        else:
            holders.append(_CTYPES[t.name](v))
    params = (ctypes.c_void_p * len(holders))(*[ctypes.addressof(h) for h in holders])
    return params, holders


def launch(function, grid, block, args, shared_mem=0, stream=0):
    """Launch `function`; `args` are (type, value) pairs in parameter order."""
    cu = _cu()
    types = [t for t, _ in args]
    values = [v for _, v in args]
    params, holders = pack(types, values)
    _check(cu.cuLaunchKernel(function.handle, grid[0], grid[1], grid[2], block[0], block[1],
                             block[2], shared_mem, stream, ctypes.addressof(params), 0),
           "cuLaunchKernel")


_raw = {}


def raw_launch():
    """libcuda's cuLaunchKernel through ctypes: the cheapest call from Python
    (the fast launch path; everything else goes through cuda.bindings)."""
    fn = _raw.get("launch")
    if fn is None:
        init()
        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.cuLaunchKernel
        u = ctypes.c_uint
        fn.argtypes = [ctypes.c_void_p, u, u, u, u, u, u, u, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.c_void_p]
        fn.restype = ctypes.c_int
        _raw["launch"] = fn
    return fn


def raise_error(code, what):
    cu = _cu()
    _check((cu.CUresult(code),), what)
