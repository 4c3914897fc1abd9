"""Hostile inputs to the launch API: a kernel called wrong, arguments moye
cannot take, malformed array interfaces. Each must raise a moye error
that names the argument and says what is valid."""
import numpy as np
import pytest

import moye
from moye import LaunchError, MoyeTypeError

from .hostile import Hostile, check, ids


@moye.kernel(backend="cpu")
def copy8(dst, src):
    i = moye.thread_idx.x
    dst[i] = src[i]


def x():
    return np.random.default_rng(0).random(8).astype(np.float32)


def y():
    return np.full(8, np.nan, np.float32)


class CAI:
    """An object whose __cuda_array_interface__ is `interface`."""

    def __init__(self, interface):
        self.__cuda_array_interface__ = interface


def cai(**changes):
    """A CAI of 8 float32 at 0x100000, with `changes` (None: the key removed)."""
    d = {"shape": (8,), "typestr": "<f4", "data": (0x100000, False), "strides": None,
         "version": 3}
    d.update(changes)
    return CAI({k: v for k, v in d.items() if v is not None})


def with_src(src):
    """Launch copy8 with `src` (the error comes from binding it)."""
    return lambda: copy8[1, 8](y(), src)


class DLPackRaises:
    def __dlpack__(self, **kwargs):
        raise BufferError("cannot export a read-only array")


class DLPackNoCapsule:
    def __dlpack__(self, **kwargs):
        return 5


class DLPackBadDevice:
    def __dlpack__(self, **kwargs):
        return 5

    def __dlpack_device__(self):
        return "cuda:0"


def compiled():
    return copy8.compile(y(), x(), block=8)


CASES = [
    # calling the kernel wrong
    Hostile("a kernel called without [grid, block]", lambda: copy8(y(), x()),
            LaunchError, r"copy8\[grid, block\]\(\*args\)"),
    Hostile("a kernel argument by keyword and by position",
            lambda: copy8[1, 8](y(), x(), dst=y()),
            LaunchError, r"argument 'dst' is given twice, by position and by keyword"),
    Hostile("a kernel argument missing among keywords", lambda: copy8[1, 8](src=x()),
            LaunchError, r"takes 2 arguments \(dst, src\): 'dst' is missing"),
    Hostile("a misspelled launch keyword", lambda: copy8[1, 8](y(), x(), steam=0),
            LaunchError, r"no argument steam: its arguments are \(dst, src\); the launch's own "
            r"keywords are smem=, stream= and backend="),
    Hostile("backend='tpu' at launch", lambda: copy8[1, 8](y(), x(), backend="tpu"),
            LaunchError, r"backend must be one of 'cpu', 'cuda'.*got 'tpu'"),
    Hostile("moye.kernel(backend='tpu')", lambda: moye.kernel(backend="tpu"),
            LaunchError, r"backend must be one of .*got 'tpu'"),
    Hostile("moye.kernel(5)", lambda: moye.kernel(5),
            MoyeTypeError, r"decorates a Python function .*got int 5"),
    Hostile("too few arguments", lambda: copy8[1, 8](y()),
            LaunchError, r"takes 2 arguments \(dst, src\), got 1 \(missing src\)"),
    Hostile("too many arguments", lambda: copy8[1, 8](y(), x(), x()),
            LaunchError, r"takes 2 arguments \(dst, src\), got 3 \(1 too many\)"),
    Hostile("k[n] without a block", lambda: copy8[8](y(), x()),
            LaunchError, r"copy8\[grid, block\].*got copy8\[8\]"),
    # grid and block spellings
    Hostile("a float grid", lambda: copy8[1.5, 8](y(), x()),
            LaunchError, r"grid must be a positive int or a tuple of 1-3 .*got 1\.5"),
    Hostile("a string block", lambda: copy8[1, "8"](y(), x()),
            LaunchError, r"block must be a positive int .*got '8'"),
    Hostile("a negative grid", lambda: copy8[(-1, 2), 8](y(), x()),
            LaunchError, r"grid must be a positive int .*got \(-1, 2\)"),
    Hostile("a block of 0 threads", lambda: copy8[1, 0](y(), x()),
            LaunchError, r"block must be a positive int .*got \(0,\)"),
    Hostile("an empty block tuple", lambda: copy8[1, ()](y(), x()),
            LaunchError, r"block must be .*tuple of 1-3 .*got \(\)"),
    Hostile("a 4-tuple block", lambda: copy8[1, (2, 2, 2, 1)](y(), x()),
            LaunchError, r"block must be .*tuple of 1-3 .*got \(2, 2, 2, 1\)"),
    Hostile("block=True", lambda: copy8[1, True](y(), x()),
            LaunchError, r"block must be a positive int .*got True"),
    # compile, cuda_source, ir, CompiledKernel
    Hostile("compile with arch=90", lambda: copy8.compile(y(), x(), block=8, arch=90),
            MoyeTypeError, r"arch must be a string .*got the int 90 \(did you mean 'sm_90'\?\)"),
    Hostile("compile with arch='sm90'", lambda: copy8.compile(y(), x(), block=8, arch="sm90"),
            LaunchError, r"arch must be a string such as 'sm_80' .*got 'sm90'"),
    Hostile("cuda_source with block=-32", lambda: copy8.cuda_source(y(), x(), block=-32),
            LaunchError, r"block must be a positive int .*got \(-32,\)"),
    Hostile("ir with an argument missing", lambda: copy8.ir(y()),
            LaunchError, r"missing src"),
    Hostile("a CompiledKernel called without grid", lambda: compiled()(y(), x()),
            LaunchError, r"ck\(\*args, grid=\.\.\., block=\.\.\.\): grid is missing"),
    Hostile("a CompiledKernel called with float64", lambda: compiled()(y(), x().astype("f8"), grid=1),
            LaunchError, r"argument 'src' is a Float64 array.*compiled for a Float32 array"),
    # arguments of kinds moye cannot take
    Hostile("a Python list argument", with_src([1.0] * 8),
            MoyeTypeError, r"argument 'src': list is not an array.*np\.asarray"),
    Hostile("a dict argument", with_src({"a": 1}),
            MoyeTypeError, r"argument 'src': dict is not an array, a number or a static value"),
    Hostile("a complex64 NumPy array", with_src(np.zeros(8, np.complex64)),
            MoyeTypeError, r"argument 'src': a NumPy array has element type complex64"),
    Hostile("an object NumPy array", with_src(np.zeros(8, object)),
            MoyeTypeError, r"argument 'src': a NumPy array has element type object"),
    Hostile("a datetime64 NumPy array", with_src(np.zeros(8, "datetime64[s]")),
            MoyeTypeError, r"argument 'src': a NumPy array has element type datetime64"),
    # malformed __cuda_array_interface__
    Hostile("CAI that is not a dict", with_src(CAI(5)),
            LaunchError, r"argument 'src': its __cuda_array_interface__ is int 5, not a dict"),
    Hostile("CAI without typestr", with_src(cai(typestr=None)),
            LaunchError, r"argument 'src': its __cuda_array_interface__ has no 'typestr'"),
    Hostile("CAI of version 9", with_src(cai(version=9)),
            LaunchError, r"argument 'src': .* has version 9.*'version' 0-3"),
    Hostile("CAI with a mask", with_src(cai(mask=5)),
            LaunchError, r"argument 'src': .* has a mask"),
    Hostile("CAI typestr 'zz'", with_src(cai(typestr="zz")),
            LaunchError, r"argument 'src': .*typestr 'zz', not a NumPy type string"),
    Hostile("CAI of complex64", with_src(cai(typestr="<c8")),
            MoyeTypeError, r"argument 'src': .* element type complex64, which moye does not"),
    Hostile("CAI shape of floats", with_src(cai(shape=(8.0,))),
            MoyeTypeError, r"argument 'src': .*shape \(8\.0,\) holds a value that is not an int"),
    Hostile("CAI shape an int", with_src(cai(shape=8)),
            LaunchError, r"argument 'src': .*has shape 8, not a tuple"),
    Hostile("CAI negative extent", with_src(cai(shape=(-8,))),
            LaunchError, r"argument 'src': .*shape \(-8,\) has a negative extent"),
    Hostile("CAI strides not whole elements", with_src(cai(strides=(6,))),
            LaunchError, r"argument 'src': strides \(6,\) bytes are not multiples of the 4-byte"),
    Hostile("CAI more strides than extents", with_src(cai(strides=(4, 32))),
            LaunchError, r"argument 'src': .*1 extents but 2 strides \(4, 32\)"),
    Hostile("CAI address None", with_src(cai(data=(None, False))),
            LaunchError, r"argument 'src': .*null address None for an array of shape \(8,\)"),
    Hostile("CAI data not a pair", with_src(cai(data=0x100000)),
            LaunchError, r"argument 'src': .*has data 1048576, not \(address, read_only\)"),
    # malformed DLPack producers
    Hostile("__dlpack__ raises", with_src(DLPackRaises()),
            LaunchError, r"argument 'src': its __dlpack__\(\) failed \(BufferError: cannot"),
    Hostile("__dlpack__ returns no capsule", with_src(DLPackNoCapsule()),
            MoyeTypeError, r"argument 'src': __dlpack__\(\) returned int 5, not a DLPack capsule"),
    Hostile("__dlpack_device__ malformed", with_src(DLPackBadDevice()),
            MoyeTypeError, r"argument 'src': __dlpack_device__\(\) returned 'cuda:0'"),
    # element types
    Hostile("element type 'complex'", lambda: moye.as_element_type("complex"),
            MoyeTypeError, r"unknown element type name 'complex'; the names are .*float16"),
    Hostile("Int8(300)", lambda: moye.Int8(300),
            MoyeTypeError, r"Int8\(300\): .*out of bounds"),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_hostile(case):
    check(case)
