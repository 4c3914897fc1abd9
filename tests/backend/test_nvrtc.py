"""NVRTC compiles hand-written CUDA C++ like the generator's for sm_80 and
sm_90a (no GPU needed); its failures read as moye bugs with the lines shown."""
import os

import pytest

import moye
from moye.backend.cuda import nvrtc

from .cuda_sources import SM80, SM80_KERNELS, SM90A, SM90A_KERNELS


pytestmark = pytest.mark.usefixtures("cache_dir")      # a private disk cache (conftest)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_sm80_kernels_compile(arch):
    m = nvrtc.compile_cuda(SM80, SM80_KERNELS, arch)
    assert m.cubin[:4] == b"\x7fELF" and m.arch == arch
    assert m.lowered_names["mma_kernel"] == "mma_kernel"               # extern "C"
    assert m.lowered_names["add_kernel<7>"] == "_Z10add_kernelILi7EEvPi"  # a template instance
    for name in m.lowered_names.values():
        assert name.encode() in m.cubin


def test_a_silent_compile_leaves_pythons_shared_bytes_alone():
    """NVRTC's empty log is one NUL byte, written into the buffer moye hands
    it: once CPython's shared b" " (b" " * 1), which then held a NUL for the
    whole process (on Python 3.12 the next generated C++ lost spaces)."""
    source = 'extern "C" __global__ void quiet_%d(int* p) { p[0] = 1; }' % os.getpid()
    m = nvrtc.compile_cuda(source, [f"quiet_{os.getpid()}"], "sm_80", ptx=True)
    assert m.log == "" and m.cubin[:4] == b"\x7fELF" and ".entry quiet_" in m.ptx
    assert bytes([32]) == b" " and b" " * 3 == bytes([32, 32, 32])


def test_sm90a_kernels_compile_with_ptx():
    m = nvrtc.compile_cuda(SM90A, SM90A_KERNELS, "sm_90a", ptx=True)
    assert m.cubin[:4] == b"\x7fELF"
    assert ".target sm_90a" in m.ptx
    for instruction in ("wgmma.mma_async", "setmaxnreg.inc", "cp.async.bulk.tensor.2d",
                        "%cluster_ctarank"):
        assert instruction in m.ptx
    assert "setmaxnreg" in m.log            # ptxas's warning reaches the log


def test_wgmma_needs_the_arch_specific_target():
    with pytest.raises(moye.CompileError) as e:
        nvrtc.compile_cuda(SM90A, SM90A_KERNELS, "sm_90")
    msg = str(e.value)
    assert "moye bug" in msg
    assert "not supported on .target 'sm_90'" in msg
    assert "PTX (the errors above are ptxas's" in msg
    assert ">   " in msg and "wgmma.fence.sync.aligned;" in msg      # the PTX line, marked


def test_compile_error_shows_the_generated_lines(cache_dir):
    src = ('extern "C" __global__ void k(float* x) {\n'
           '  int i = threadIdx.x;\n'
           '  x[i] = undefined_name;\n'
           '  x[i + 1] = 2.0f;\n'
           '}\n')
    with pytest.raises(nvrtc.CompileError) as e:
        nvrtc.compile_cuda(src, ["k"], "sm_80")
    err = e.value
    assert isinstance(err, moye.MoyeError)
    msg = str(err)
    assert "This is a moye bug" in msg
    assert 'identifier "undefined_name" is undefined' in msg          # NVRTC's log
    assert ">    3    x[i] = undefined_name;" in msg                   # the line, marked
    assert "     2    int i = threadIdx.x;" in msg                     # and its neighbours
    assert err.log and err.source == src and err.arch == "sm_80"
    saved = msg.rsplit("is in ", 1)[1].strip()
    assert open(saved).read() == src
    assert not list(cache_dir.glob("*.bin"))                      # nothing cached


def test_compile_error_marks_every_site_once():
    body = "\n".join(f"  // filler {i}" for i in range(30))
    src = f'extern "C" __global__ void k() {{\n  a1;\n{body}\n  a2;\n}}\n'
    with pytest.raises(nvrtc.CompileError) as e:
        nvrtc.compile_cuda(src, "k", "sm_80")
    msg = str(e.value)
    assert ">    2    a1;" in msg and ">   33    a2;" in msg
    assert "  ..." in msg                                             # the gap between them
    assert "filler 15" not in msg


def test_options_are_passed_and_keyed():
    src = 'extern "C" __global__ void k(int* x) { x[0] = VALUE; }'
    a = nvrtc.compile_cuda(src, "k", "sm_80", options=["-DVALUE=3"], ptx=True)
    b = nvrtc.compile_cuda(src, "k", "sm_80", options=["-DVALUE=4"], ptx=True)
    assert "3;" in a.ptx and "4;" in b.ptx


def test_bad_architectures_are_user_errors():
    src = 'extern "C" __global__ void k() {}'
    with pytest.raises(moye.MoyeError, match="cannot compile for sm_70; it supports sm_75"):
        nvrtc.compile_cuda(src, "k", "sm_70")
    with pytest.raises(moye.MoyeError, match="arch must look like 'sm_80'"):
        nvrtc.compile_cuda(src, "k", "compute_80")
    with pytest.raises(moye.MoyeError) as e:
        nvrtc.compile_cuda(src, "k", "sm_80", options=["--no-such-option"])
    assert not isinstance(e.value, moye.CompileError)


def test_nvrtc_and_headers_are_found():
    assert nvrtc.version().startswith("13.")
    assert any(os.path.isfile(os.path.join(d, "cuda_bf16.h")) for d in nvrtc.include_dirs())
    assert "NVRTC 13." in nvrtc.describe()
