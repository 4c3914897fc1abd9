"""The FA2-style attention examples and their hand-written CUDA twins
(benchmarks/twins/attention_*.cu) on a GPU against float64: outputs poisoned
with NaN, every element checked."""
import ctypes
import math
import pathlib

import pytest

pytestmark = pytest.mark.gpu

TWINS = pathlib.Path(__file__).parents[2] / "benchmarks" / "twins"
SHAPES = [(1, 64), (3, 256), (8, 1024)]          # (batch * heads, seqlen)


def inputs(torch, bh, seqlen, dtype):
    g = torch.Generator(device="cuda").manual_seed(bh * seqlen)
    return tuple(torch.randn(bh, seqlen, 64, device="cuda", dtype=dtype, generator=g)
                 for _ in range(3))


def reference(torch, q, k, v):
    s = q.double() @ k.double().transpose(1, 2) / math.sqrt(64)
    return torch.softmax(s, -1) @ v.double()


def max_error(torch, o, ref):
    assert not torch.isnan(o).any()
    return float((o.double() - ref).abs().max() / ref.abs().max())


@pytest.mark.parametrize("bh, seqlen", SHAPES)
def test_attention_simt(torch, bh, seqlen):
    from moye.examples import attention_simt
    q, k, v = inputs(torch, bh, seqlen, torch.float32)
    o = torch.full_like(q, float("nan"))
    attention_simt.launch(q, k, v, o)
    torch.cuda.synchronize()
    assert max_error(torch, o, reference(torch, q, k, v)) < 1e-5


@pytest.mark.parametrize("out", ["float16", "float32"])
@pytest.mark.parametrize("bh, seqlen", SHAPES)
def test_attention_mma(torch, bh, seqlen, out):
    from moye.examples import attention_mma
    q, k, v = inputs(torch, bh, seqlen, torch.float16)
    o = torch.full(q.shape, float("nan"), device="cuda", dtype=getattr(torch, out))
    attention_mma.launch(q, k, v, o)
    torch.cuda.synchronize()
    assert max_error(torch, o, reference(torch, q, k, v)) < 2e-3


def run_twin(name, q, k, v, o, smem):
    from moye.backend.cuda import driver, nvrtc
    m = nvrtc.compile_cuda((TWINS / f"{name}.cu").read_text(), [name], driver.device_arch())
    fn = driver.load_module(m.cubin).get_function(m.lowered_names[name])
    if smem > 48 * 1024:
        fn.set_max_dynamic_shared_memory(smem)
    bh, seqlen, _ = q.shape
    scale_log2 = 1 / math.sqrt(64) * math.log2(math.e)
    driver.launch(fn, (seqlen // 64, bh), 256 if name == "attention_simt" else 128,
                  [(ctypes.c_uint64, t.data_ptr()) for t in (q, k, v, o)]
                  + [(ctypes.c_int32, seqlen), (ctypes.c_float, scale_log2)], shared_mem=smem)
    driver.synchronize()


@pytest.mark.parametrize("bh, seqlen", SHAPES)
def test_simt_twin(torch, bh, seqlen):
    q, k, v = inputs(torch, bh, seqlen, torch.float32)
    o = torch.full_like(q, float("nan"))
    run_twin("attention_simt", q, k, v, o, (3 * 64 * 65 + 64 * 64) * 4)
    assert max_error(torch, o, reference(torch, q, k, v)) < 1e-5


@pytest.mark.parametrize("bh, seqlen", SHAPES)
def test_mma_twin(torch, bh, seqlen):
    q, k, v = inputs(torch, bh, seqlen, torch.float16)
    o = torch.full_like(q, float("nan"))
    run_twin("attention_mma", q, k, v, o, 0)
    assert max_error(torch, o, reference(torch, q, k, v)) < 2e-3
