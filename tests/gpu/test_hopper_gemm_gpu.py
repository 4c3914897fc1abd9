"""The warp-specialized Hopper GEMM on the GPU against float64: every shape
kind (tiles that fit, ragged M/N/K that TMA clips and zero-fills, more tiles
than blocks so the persistent loop and the pipeline's phases wrap, K shorter
than the ring), both input types, C poisoned first; and its SASS."""
import os
import shutil
import subprocess

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("hopper_only")]

TOL = {"float16": 2e-3, "bfloat16": 1e-2}


@pytest.mark.parametrize("cluster", [1, 2])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M, N, K, blocks", [(128, 256, 64, None), (1024, 1024, 1024, None),
                                             (1000, 1064, 1000, None), (777, 520, 4104, 3),
                                             (4096, 2048, 72, 7), (8, 8, 8, None),
                                             (2048, 4096, 4096, None),
                                             (1000, 999, 1001, None)])      # padded copies
def test_hopper_gemm(torch, dtype, M, N, K, blocks, cluster):
    from moye.examples import hopper_gemm as hg
    dt = getattr(torch, dtype)
    A = torch.randn(M, K, device="cuda").to(dt)
    B = torch.randn(N, K, device="cuda").to(dt)
    C = torch.full((M, N), float("nan"), device="cuda", dtype=dt)
    hg.matmul(C, A, B, blocks=blocks, cluster=cluster)
    torch.cuda.synchronize()
    ref = A.double() @ B.double().T
    assert not C.isnan().any()
    err = ((C.double() - ref).norm() / ref.norm()).item()
    assert err < TOL[dtype], err


def test_hopper_gemm_sass(torch, tmp_path):
    """HGMMA from shared memory, TMA loads and stores, stmatrix; no local memory."""
    from moye.examples import hopper_gemm as hg
    from moye.compiler.frontend import BACKENDS
    cuobjdump = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    if not os.path.exists(cuobjdump):
        pytest.skip("no cuobjdump")
    A = torch.randn(512, 512, device="cuda").half()
    kernel = hg.hopper_gemm_kernel.trace(*hg.launch_args(A, A, A, cluster=2)[2],
                                         block=hg.THREADS)[0]
    exe = BACKENDS["cuda"].compile(kernel, (hg.THREADS, 1, 1))
    path = tmp_path / "hopper_gemm.cubin"
    path.write_bytes(exe.cubin)
    sass = subprocess.run([cuobjdump, "-sass", str(path)], capture_output=True, text=True).stdout
    counts = {op: sass.count(op) for op in ("HGMMA.64x256x16.F32", "UTMALDG", "UTMASTG", "STSM",
                                            "LDL", "STL", ".MULTICAST")}
    print(counts)
    assert counts["HGMMA.64x256x16.F32"] >= 8 and counts["UTMALDG"] >= 2, counts
    assert counts["UTMASTG"] >= 1 and counts["STSM"] >= 16, counts
    assert counts["LDL"] == counts["STL"] == 0, counts
    assert counts[".MULTICAST"] >= 1, counts                 # B's slices, by cluster
