"""Every hand-written CUDA twin in benchmarks/twins/ compiles with NVRTC (no GPU
needed), for sm_80 and sm_90a. A twin's kernels are its `extern "C" __global__`
functions; a twin that needs a newer architecture says so in a line
`// nvrtc-archs: sm_90a` (the architectures it compiles for, space-separated)."""
import pathlib
import re

import pytest

from moye.backend.cuda import cache, nvrtc

TWINS = sorted((pathlib.Path(__file__).parents[2] / "benchmarks" / "twins").glob("*.cu"))
ARCHS = ["sm_80", "sm_90a"]


def kernels(source):
    """The names of the source's extern "C" __global__ functions."""
    return re.findall(r'extern\s+"C"\s+__global__\s+(?:void\s+)?(?:__launch_bounds__\([^)]*\)\s*)?'
                      r'(?:void\s+)?(\w+)\s*\(', source)


def archs(source):
    declared = re.search(r"^//\s*nvrtc-archs:\s*(.+)$", source, re.M)
    return declared.group(1).split() if declared else ARCHS


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    import os
    old = os.environ.get("MOYE_CACHE_DIR")
    os.environ["MOYE_CACHE_DIR"] = str(tmp_path_factory.mktemp("moye-cache"))
    cache.clear_memory()
    yield
    if old is None:
        os.environ.pop("MOYE_CACHE_DIR", None)
    else:
        os.environ["MOYE_CACHE_DIR"] = old
    cache.clear_memory()


def test_the_folder_has_twins():
    assert {"attention_simt.cu", "attention_mma.cu"} <= {p.name for p in TWINS}


def test_kernel_names_are_found():
    src = 'extern "C" __global__ void __launch_bounds__(128) f(int* x) {}\n' \
          'extern "C" __global__ void g(float y) {}\n'
    assert kernels(src) == ["f", "g"]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("twin", TWINS, ids=lambda p: p.name)
def test_twin_compiles(twin, arch):
    source = twin.read_text()
    if arch not in archs(source):
        pytest.skip(f"{twin.name} is for {' '.join(archs(source))}")
    names = kernels(source)
    assert names, f"{twin.name} has no extern \"C\" __global__ kernel"
    module = nvrtc.compile_cuda(source, names, arch, filename=twin.name)
    assert module.cubin[:4] == b"\x7fELF"
    assert set(module.lowered_names) == set(names)
