"""Every hand-written CUDA twin in benchmarks/twins (the kernels that
benchmarks/compile_time.py times NVRTC on beside moye's examples) compiles
with NVRTC for sm_90a, and for sm_80 unless it uses Hopper's instructions.
No GPU needed; the twins are not run here."""
import sys
from pathlib import Path

import pytest

from moye.backend.cuda import nvrtc

TWINS = sorted((Path(__file__).resolve().parents[2] / "benchmarks" / "twins").glob("*.cu"))
HOPPER = ("wgmma.", "cp.async.bulk", "mbarrier", "setmaxnreg", "stmatrix")


def twin_symbols(source):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        from compile_time import twin_symbols as symbols
    finally:
        sys.path.pop(0)
    return symbols(source)


def test_there_are_twins():
    assert {"sgemm.cu", "hopper_gemm.cu", "attention_simt.cu", "attention_mma.cu"} <= \
        {p.name for p in TWINS}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("path", TWINS, ids=lambda p: p.stem)
def test_twin_compiles(path, arch, tmp_path, monkeypatch):
    source = path.read_text()
    if arch == "sm_80" and any(op in source for op in HOPPER):
        pytest.skip(f"{path.name} uses Hopper instructions")
    names = twin_symbols(source)
    assert names, f"{path.name} has no extern \"C\" __global__ kernel"
    monkeypatch.setenv("MOYE_CACHE_DIR", str(tmp_path))
    module = nvrtc.compile_cuda(source, names, arch, options=("--ptxas-options=-v",))
    assert module.cubin[:4] == b"\x7fELF"
    for name in names:
        assert name.encode() in module.cubin
    assert "spill stores" not in module.log.replace("0 bytes spill stores", ""), module.log
