"""Every example kernel traces and compiles with NVRTC for sm_80 and sm_90a
(no GPU needed), so a code-generation regression fails CI."""
import math
import re

import numpy as np
import pytest

import moye
from moye import Float32, Layout
from moye import ir
from moye.backend.cuda import cache, nvrtc
from moye.compiler.frontend import BACKENDS

ARCHS = ["sm_80", "sm_90a"]


def colmajor(shape):
    return np.asfortranarray(np.ones(shape, np.float32))


def example_specializations():
    from moye.examples import copy_kernel, matmul_smem, tiled_matmul, transpose
    t = Layout((32, 8))
    a, b = colmajor((256, 256)), colmajor((256, 256))
    A, B, C = colmajor((256, 64)), colmajor((128, 64)), colmajor((256, 128))
    sA, cA, sB, cB, mma = tiled_matmul.make_config(Float32)
    return {
        "copy": (copy_kernel.copy_kernel, (b, a, Layout((32, 32)), copy_kernel.BLOCK, t)),
        "copy_padded": (copy_kernel.copy_kernel, (b, a, Layout((32, 32), (1, 33)),
                                                  copy_kernel.BLOCK, t)),
        "transpose": (transpose.transpose_kernel, (b, a, transpose.SMEM, transpose.BLOCK, t)),
        "matmul_smem": (matmul_smem.matmul_kernel, (A, Layout((128, 8)), t, B, Layout((128, 8)),
                                                    t, C, Layout((128, 128)), t)),
        "tiled_matmul": (tiled_matmul.matmul_kernel, (A, sA, cA, B, sB, cB, C, mma)),
        **tensor_core_specializations(),
        **attention_specializations(),
    }


def attention_specializations():
    """The FA2-style attention examples, SIMT (float32) and mma.sync (float16)."""
    from moye.examples import attention_mma, attention_simt
    out = {}
    for name, ex, dt in (("attention_simt", attention_simt, np.float32),
                         ("attention_mma", attention_mma, np.float16)):
        q = np.ones((2, 128, 64), dt)
        out[name] = (ex.attention_kernel, (q, q, q, q, 0.18, *ex.make_config()), ex.THREADS)
    return out


def tensor_core_specializations():
    from moye.examples import gemm, tensor_core_matmul as tcm
    out = {}
    for variant, (kern, config, dtype, _) in tcm.VARIANTS.items():
        dt = np.float32 if dtype == "float32" else np.float16
        args, _ = config()
        out[f"tensor_core_{variant}"] = (kern, (np.ones((128, 64), dt), np.ones((128, 64), dt),
                                               colmajor((128, 128)), *args), 128)
        args, _ = config(residue=True)          # predicated for tiles that overhang
        out[f"tensor_core_{variant}_residue"] = (kern, (np.ones((100, 40), dt),
                                                        np.ones((72, 40), dt),
                                                        colmajor((100, 72)), *args), 128)
    h = np.ones((256, 128), np.float16)
    for a_major, b_major in (("K", "K"), ("MN", "MN")):
        args, threads = gemm.make_config("Float16", a_major, b_major)
        A = h if a_major == "K" else np.ones((128, 256), np.float16).T
        D = np.zeros((256, 256), np.float16)
        out[f"gemm_{a_major}{b_major}"] = (gemm.gemm_kernel, (A, A, D, D, 1.0, 0.0, *args),
                                           threads)
        # predicated (M, N, K not multiples of the tile), D stored element by element
        args, threads = gemm.make_config("Float16", a_major, b_major, residue=True, d_vector=1)
        out[f"gemm_{a_major}{b_major}_residue"] = (gemm.gemm_kernel,
                                                   (A, A, D, D, 1.0, 0.5, *args), threads)
    return out


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


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", list(example_specializations()))
def test_example_compiles(name, arch):
    kern, args, *threads = example_specializations()[name]
    threads = threads[0] if threads else 256
    kernel, _, _ = kern.trace(*args, block=threads)
    module = BACKENDS["cuda"].compile_only(kernel, (threads, 1, 1), arch)
    assert module.cubin[:4] == b"\x7fELF"


def seed_kernel_specializations():
    """Seeds 000/001's vectorized copies and cp.async matmuls, and the
    double-buffered TF32 tensor-core matmul."""
    from moye.examples import async_matmul, tensor_core_double_buffer as tcdb, vectorized_copy
    a, b = colmajor((256, 128)), colmajor((256, 128))
    out = {f"vectorized_copy_{name.split()[0]}_{name.split()[1][1]}":
           (vectorized_copy.copy_vec_kernel, (b, a, tiled_copy, vectorized_copy.BLOCK), 256)
           for name, tiled_copy in vectorized_copy.COPIES.items()}
    A, B, C = colmajor((256, 64)), colmajor((128, 64)), colmajor((256, 128))
    for variant, kern in async_matmul.KERNELS.items():
        sA, cA, sB, cB, mma = async_matmul.make_config(variant)
        out[f"async_matmul_{variant}"] = (kern, (A, sA, cA, B, sB, cB, C, mma), 256)
    sA, gA, cA, sB, gB, cB, mma = tcdb.make_config()
    out["tensor_core_double_buffer"] = (
        tcdb.matmul_kernel, (colmajor((256, 64)), sA, gA, cA, np.ones((256, 64), np.float32),
                             sB, gB, cB, colmajor((256, 256)), mma), 128)
    return out


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", list(seed_kernel_specializations()))
def test_seed_kernel_compiles(name, arch):
    kern, args, threads = seed_kernel_specializations()[name]
    kernel, _, _ = kern.trace(*args, block=threads)
    module = BACKENDS["cuda"].compile_only(kernel, (threads, 1, 1), arch)
    assert module.cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("arch", ARCHS)
def test_sgemm_compiles_without_spills(arch):
    """The SIMT SGEMM's default configuration: no spills, at most 128
    registers (two 256-thread blocks per SM)."""
    import re

    from moye.backend.cuda import nvrtc
    from moye.examples import sgemm
    args, threads = sgemm.make_config()
    A, C = colmajor((256, 64)), colmajor((256, 256))
    kernel, _, _ = sgemm.sgemm_kernel.trace(A, A, C, *args, block=threads)
    source = BACKENDS["cuda"].source(kernel, (threads, 1, 1))
    module = nvrtc.compile_cuda(source, [ir.symbol(kernel.name)], arch,
                                options=("--ptxas-options=-v",))
    assert module.cubin[:4] == b"\x7fELF"
    log = module.log or ""
    assert "0 bytes spill stores" in log and "0 bytes spill loads" in log, log
    assert int(re.search(r"Used (\d+) registers", log).group(1)) <= 128, log


def tma_specializations():
    """The TMA example's kernels (Hopper only: TMA and mbarrier transactions)."""
    from moye.examples import tma_copy
    out = {}
    for dtype in (np.float16, np.float32):
        src = np.zeros((100, 72), dtype)
        dst = np.zeros((72, 104), dtype)[:, :100]      # rows padded to 16 bytes
        tile = tma_copy.swizzled_tile(64, dtype)
        load = moye.make_tma_copy(moye.TMA_LOAD, src, tile)
        store = moye.make_tma_copy(moye.TMA_STORE, src, tile)
        out[f"tma_copy_{dtype.__name__}"] = (tma_copy.tma_copy_kernel, (load, store))
        sq = tma_copy._square(dtype)
        b = sq.shape[0]
        out[f"tma_transpose_{dtype.__name__}"] = (
            tma_copy.tma_transpose_kernel,
            (moye.make_tma_copy(moye.TMA_LOAD, src, sq),
             moye.make_tma_copy(moye.TMA_STORE, dst, sq), Layout((128 // b, b), (b, 1))))
    return out


@pytest.mark.parametrize("name", list(tma_specializations()))
def test_tma_kernel_compiles_for_sm90a(name):
    kern, args = tma_specializations()[name]
    kernel, _, _ = kern.trace(*args, block=128)
    source = BACKENDS["cuda"].source(kernel, (128, 1, 1))
    assert "const __grid_constant__ moye_tensor_map" in source
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in source
    assert "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group" in source
    module = BACKENDS["cuda"].compile_only(kernel, (128, 1, 1), "sm_90a")
    assert module.cubin[:4] == b"\x7fELF"


def test_mbarrier_try_wait_compiles_for_sm90a():
    from tests.kernel.test_hopper_cpu import phases_kernel
    kernel, _, _ = phases_kernel.trace(np.zeros((64, 5), np.int32), block=64)
    module = BACKENDS["cuda"].compile_only(kernel, (64, 1, 1), "sm_90a")
    assert module.cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("bN", [64, 128, 256])
def test_wgmma_matmul_compiles_for_sm90a(bN):
    from moye.examples import wgmma_matmul
    A = np.ones((128, 128), np.float16)
    load_a, load_b, mma = wgmma_matmul.tiles(A, np.ones((bN, 128), np.float16), bN)
    kernel, _, _ = wgmma_matmul.wgmma_matmul_kernel.trace(np.zeros((128, bN), np.float32), load_a,
                                                          load_b, mma, 2, block=128)
    source = BACKENDS["cuda"].source(kernel, (128, 1, 1))
    assert source.count("wgmma.fence.sync.aligned;") == 1
    assert source.count(f"wgmma.mma_async.sync.aligned.m64n{bN}k16.f32.f16.f16 ") == 4
    assert source.count("wgmma.commit_group.sync.aligned;") == 1
    assert source.count("wgmma.wait_group.sync.aligned 0;") == 1
    # 128B swizzle (1 << 62), SBO 1024 bytes, LBO 16 bytes, the start address >> 4
    assert source.count("0x4000004000010000ull | ") == 8
    module = BACKENDS["cuda"].compile_only(kernel, (128, 1, 1), "sm_90a")
    assert module.cubin[:4] == b"\x7fELF"


def test_tensor_map_parameters_survive_the_disk_cache_metadata():
    import ctypes
    from moye.backend.cuda import backend
    name = backend._type_name(ir.TENSOR_MAP)
    assert name == "opaque:moye_tensor_map:128:64"
    assert backend._type(name) == ir.TENSOR_MAP
    assert ctypes.sizeof(backend._ctype(ir.TENSOR_MAP)) == 128


@pytest.mark.parametrize("dtype, cluster", [(np.float16, 1), ("bfloat16", 1), (np.float16, 2)])
def test_hopper_gemm_compiles_for_sm90a_without_spills(dtype, cluster):
    """The warp-specialized GEMM: setmaxnreg under __launch_bounds__(384, 1),
    wgmma 64x256x16 from 128B-swizzled stages, stmatrix and TMA stores; no
    spills (the consumers' 128 fp32 accumulators fit)."""
    import ml_dtypes

    from moye.backend.cuda import nvrtc
    from moye.examples import hopper_gemm as hg
    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    A, B, C = np.zeros((300, 72), dt), np.zeros((520, 72), dt), np.zeros((300, 520), dt)
    kernel, _, _ = hg.hopper_gemm_kernel.trace(
        *hg.launch_args(C, A, B, blocks=132, cluster=cluster)[2], block=hg.THREADS)
    source = BACKENDS["cuda"].source(kernel, (hg.THREADS, 1, 1))
    assert "__launch_bounds__(384, 1)" in source
    assert "setmaxnreg.dec.sync.aligned.u32 40;" in source
    assert "setmaxnreg.inc.sync.aligned.u32 232;" in source
    ptx = "bf16.bf16" if dtype == "bfloat16" else "f16.f16"
    # 2 k-tile bodies (the first and the loop) x 4 k-steps
    assert source.count(f"wgmma.mma_async.sync.aligned.m64n256k16.f32.{ptx} ") == 8
    # the epilogue: one loop over its 4 boxes (NVRTC unrolls it), 4 stmatrix and one
    # TMA store per box
    assert re.search(r"#pragma unroll\n\s*for \(int (i_\d+) = 0; \1 < 4; \1 \+= 1\)", source)
    assert source.count("stmatrix.sync.aligned.m8n8.x4.shared.b16") == 4
    assert source.count("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group") == 1
    assert (".multicast::cluster" in source) == (cluster > 1)
    assert ("barrier.cluster.wait" in source) == (cluster > 1)
    module = nvrtc.compile_cuda(source, [ir.symbol(kernel.name)], "sm_90a",
                                options=("--ptxas-options=-v",))
    log = module.log or ""
    assert "0 bytes spill stores" in log and "0 bytes spill loads" in log, log
    assert "C7508" not in log, log                       # setmaxnreg was not ignored


WGMMA_KINDS = [  # (A, B, C types, op options, the PTX spelling, its operands after D)
    (("Float16", "Float16", "Float32"), dict(source="RS"),
     "m64n64k16.f32.f16.f16", "{%32, %33, %34, %35}, %36, p, 1, 1, 0;"),
    (("BFloat16", "BFloat16", "Float32"), dict(source="RS", b_major="MN", swizzle=32),
     "m64n64k16.f32.bf16.bf16", "{%32, %33, %34, %35}, %36, p, 1, 1, 1;"),
    (("TFloat32", "TFloat32", "Float32"), dict(source="RS"),
     "m64n64k8.f32.tf32.tf32", "{%32, %33, %34, %35}, %36, p, 1, 1;"),
    (("Float16", "Float16", "Float16"), dict(a_major="MN", b_major="MN", swizzle=0),
     "m64n64k16.f16.f16.f16", "%16, %17, p, 1, 1, 1, 1;"),
    (("Float16", "Float16", "Float32"), dict(a_major="MN", swizzle=64),
     "m64n64k16.f32.f16.f16", "%32, %33, p, 1, 1, 1, 0;"),
    (("Float8E4M3", "Float8E4M3", "Float32"), dict(swizzle=32),
     "m64n64k32.f32.e4m3.e4m3", "%32, %33, p, 1, 1;"),
    (("Float8E4M3", "Float8E5M2", "Float16"), dict(source="RS"),
     "m64n64k32.f16.e4m3.e5m2", "{%16, %17, %18, %19}, %20, p, 1, 1;"),
    (("Float8E5M2", "Float8E5M2", "Float32"), dict(source="RS"),
     "m64n64k32.f32.e5m2.e5m2", "{%32, %33, %34, %35}, %36, p, 1, 1;"),
]


@pytest.mark.parametrize("types, options, shape, operands", WGMMA_KINDS,
                         ids=lambda x: x if isinstance(x, str) and "%" not in x else None)
def test_wgmma_kinds_compile_for_sm90a_without_spills(types, options, shape, operands):
    """RS (A in 4 b32 registers), MN-major tiles (the transpose immediates),
    tf32, fp8 and f16 accumulators (N/4 b32 registers): the PTX spelling and
    operands, and one k-tile compiles with no spills."""
    import re

    from moye import types as T
    from moye.backend.cuda import nvrtc
    from tests.kernel.test_wgmma_cpu import trace_case, wgmma_case
    a, b, c = (getattr(T, t) for t in types)
    kernel = trace_case(a, b, c, 64, k_tiles=1, **options)
    source = BACKENDS["cuda"].source(kernel, (128, 1, 1))
    bk = wgmma_case(a, b, c, 64, k_tiles=1, **options)[2]
    assert source.count(f"wgmma.mma_async.sync.aligned.{shape} ") == bk // (256 // a.bits)
    assert re.search(re.escape(f"wgmma.mma_async.sync.aligned.{shape} ") + r"\{[^}]*\}, "
                     + re.escape(operands), source), source
    module = nvrtc.compile_cuda(source, [ir.symbol(kernel.name)], "sm_90a",
                                options=("--ptxas-options=-v",))
    log = module.log or ""
    assert "0 bytes spill stores" in log and "0 bytes spill loads" in log, log


@pytest.mark.parametrize("name", ["exp", "max", "main", "double", "printf", "dim3", "atomicAdd"])
def test_a_kernel_may_be_named_like_a_cuda_or_cpp_name(name):
    namespace = {}
    exec(f"def {name}(out, x):\n    out[0] = x\n", namespace)
    kern = moye.kernel(namespace[name])
    out = np.zeros(4, np.float32)
    source = kern.cuda_source(out, 1.5, block=1)
    assert f'extern "C" __global__ void __launch_bounds__(1) moye_{name}(' in source
    module = BACKENDS["cuda"].compile_only(kern.trace(out, 1.5, block=1)[0], (1, 1, 1), "sm_80")
    assert module.cubin[:4] == b"\x7fELF" and f"moye_{name}".encode() in module.cubin
    kern[1, 1](out, 2.5, backend="cpu")
    np.testing.assert_array_equal(out, [2.5, 0, 0, 0])


@moye.kernel
def _float64_numbers(out):
    out[0] = moye.cast(0.1, moye.Float64)
    out[1] = moye.cast(-1.7976931348623157e308, moye.Float64)


def test_a_number_cast_to_float64_keeps_its_value():
    """cast(0.1, Float64) is the double 0.1, not the float 0.1f widened (and
    a double beyond float's range compiles)."""
    out = np.zeros(2)
    source = _float64_numbers.cuda_source(out, block=1)
    assert "0.1f" not in source and "static_cast<double>(0.1)" in source
    BACKENDS["cuda"].compile_only(_float64_numbers.trace(out, block=1)[0], (1, 1, 1), "sm_80")
    _float64_numbers[1, 1](out, backend="cpu")
    assert out.tolist() == [0.1, -1.7976931348623157e308]


@moye.kernel
def _infinite_operands(out, x):
    i = moye.thread_idx.x
    out[i] = moye.ifelse(x[i] == -math.inf, 1.0, moye.ifelse(x[i] == math.inf, 2.0, 3.0))


def test_an_infinite_operand_compiles():
    """An infinity compared with (an operand, not a stored value) is a C++
    expression, not `-inff`."""
    x = np.array([-np.inf, np.inf, 0.5], np.float32)
    out = np.zeros(3, np.float32)
    _infinite_operands[1, 3](out, x, backend="cpu")
    assert out.tolist() == [1.0, 2.0, 3.0]
    assert "inff" not in _infinite_operands.cuda_source(out, x, block=3)
    BACKENDS["cuda"].compile_only(_infinite_operands.trace(out, x, block=3)[0], (3, 1, 1),
                                  "sm_80")


@moye.kernel
def _running_max(out, x):
    m = -math.inf
    for i in range(4):
        m = moye.maximum(m, x[i])
    out[0] = m


def test_an_infinite_float32_literal_is_a_float():
    """max(-inf, x) of a float32 x runs in float32: the infinity is written
    -1.0f/0.0f, not the double -1.0/0.0 (which made it max(double, double):
    FP64 instructions in the attention kernels' softmax); PTX has no f64."""
    x, out = np.array([-3.0, 2.0, -1.0, 0.5], np.float32), np.zeros(1, np.float32)
    _running_max[1, 1](out, x, backend="cpu")
    assert out.tolist() == [2.0]
    source = _running_max.cuda_source(out, x, block=1)
    assert "(-1.0f/0.0f)" in source and "(-1.0/0.0)" not in source and "double" not in source
    kernel = _running_max.trace(out, x, block=1)[0]
    ptx = nvrtc.compile_cuda(source, [ir.symbol(kernel.name)], "sm_80", ptx=True).ptx
    assert ".f32" in ptx and ".f64" not in ptx


def test_min_max_of_an_int64_and_a_literal_compile():
    """max(int64_t, 0) is ambiguous in C++: the literal takes the result's type."""
    @moye.kernel
    def clamp(out, idx):
        i = moye.thread_idx.x
        out[i] = moye.minimum(moye.maximum(idx[i], 0), 9)
    idx = np.array([-5, 3, 12, 7], np.int64)
    out = np.zeros(4, np.int64)
    clamp[1, 4](out, idx, backend="cpu")
    assert out.tolist() == [0, 3, 9, 7]
    kernel = clamp.trace(out, idx, block=4)[0]
    for arch in ("sm_80", "sm_90a"):
        BACKENDS["cuda"].compile_only(kernel, (4, 1, 1), arch)


def test_sm90_kernels_may_launch_clusters_of_16():
    """A kernel loaded for sm_90 or later is let launch clusters of more than
    the portable 8 blocks; an older target is not asked; a device that
    refuses the attribute still loads the kernel."""
    from moye.backend.cuda.backend import CudaExecutable
    from moye.errors import CudaError

    class Function:
        def __init__(self, refuse=False):
            self.calls, self.refuse = [], refuse

        def set_attribute(self, name, value):
            self.calls.append((name, value))
            if self.refuse:
                raise CudaError("CUDA_ERROR_NOT_SUPPORTED")

    for arch, asked in (("sm_90a", True), ("sm_100a", True), ("sm_80", False), ("sm_89", False)):
        f = Function()
        CudaExecutable(None, "", f, [], arch)
        assert f.calls == ([("non_portable_cluster_size_allowed", 1)] if asked else [])
    f = Function(refuse=True)
    assert CudaExecutable(None, "", f, [], "sm_90a").function is f and len(f.calls) == 1


@moye.kernel
def _scaled_copy(out, x):
    i = moye.thread_idx.x
    out[i] = moye.cast(moye.cast(x[i], moye.Float32) * 2.0, out.dtype)


@pytest.mark.parametrize("x_dtype, out_dtype, sixteen", [
    (np.float32, np.float32, False),
    (np.int32, np.float32, False),
    (np.float16, np.float32, True),
    (np.float32, np.float16, True),
    ("bfloat16", np.float32, True),
    ("bfloat16", np.float16, True)])
def test_a_kernel_includes_no_header_and_defines_16_bit_floats_where_it_uses_them(
        x_dtype, out_dtype, sixteen):
    """CUDA's cuda_fp16.h and cuda_bf16.h were most of NVRTC's time on a
    small kernel: no kernel includes a header, one with 16-bit floats
    starts with moye's own definitions of them, and each source compiles
    for both architectures."""
    import ml_dtypes
    from moye.backend.cuda.float16 import PRELUDE
    x_dtype = ml_dtypes.bfloat16 if x_dtype == "bfloat16" else x_dtype
    x, out = np.ones(32, x_dtype), np.zeros(32, out_dtype)
    source = _scaled_copy.cuda_source(out, x, block=32)
    assert "#include" not in source
    assert source.startswith(PRELUDE) == sixteen
    for arch in ARCHS:
        BACKENDS["cuda"].compile_only(_scaled_copy.trace(out, x, block=32)[0], (32, 1, 1), arch)
