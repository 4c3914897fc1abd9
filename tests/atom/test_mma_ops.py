"""Every MMA op's thread-value layouts against the PTX ISA, on the host.

For each op: random A (M,K), B (N,K), C (M,N) of the op's types are
partitioned over the op's threads by a TiledMMA; every thread's fragments
must be the elements the PTX ISA's fragment formulas (ptx_fragments.py,
written independently of moye's layouts) give that lane, in register
order. D is then computed from the fragments as the ISA defines the
instruction, scattered back through partition_C, and compared with
mma_reference and with A @ B^T + C.
"""
import zlib
from collections import Counter

import ml_dtypes
import numpy as np
import pytest

import moye
from moye import Layout, MoYeArray, copyto, gemm, make_tiled_mma, size
from moye.atom import mma_reference
from moye.atom.arch import mma_ops_list, sm70, sm75, sm80, sm90, wgmma_op
from moye.types import BFloat16, Float16, Float32, TFloat32

from moye.backend.cpu import ptx_fragments as ptx

SYNC_OPS = sm70.SM70_OPS + sm75.SM75_OPS + sm80.SM80_OPS
WGMMA_OPS = tuple(
    wgmma_op(n, a, a, c, source)
    for n in (8, 64, 256)
    for a, c in ((Float16, Float32), (Float16, Float16), (BFloat16, Float32), (TFloat32, Float32))
    for source in ("SS", "RS")
) + tuple(wgmma_op(64, Float16, Float16, Float32, "SS", am, bm)
          for am, bm in (("MN", "K"), ("K", "MN"), ("MN", "MN")))

# MoYe.jl's mma_ops_list (src/arch/mma/make_mma_ops.jl): 51 ops; it leaves out s4/u4.
MOYE_51 = """
MMAOP_8x8x4_F64F64F64F64_TN MMAOP_16x8x4_F32TF32TF32F32_TN MMAOP_16x8x8_F32TF32TF32F32_TN
MMAOP_16x8x16_F32BF16BF16F32_TN MMAOP_16x8x8_F32BF16BF16F32_TN
MMAOP_8x8x4_F16F16F16F16_TT MMAOP_8x8x4_F16F16F16F16_NT MMAOP_8x8x4_F16F16F16F16_TN
MMAOP_8x8x4_F16F16F16F16_NN MMAOP_8x8x4_F32F16F16F16_TT MMAOP_8x8x4_F32F16F16F16_NT
MMAOP_8x8x4_F32F16F16F16_TN MMAOP_8x8x4_F32F16F16F16_NN MMAOP_16x8x8_F16F16F16F16_TN
MMAOP_16x8x16_F16F16F16F16_TN MMAOP_8x8x4_F32F16F16F32_TT MMAOP_8x8x4_F32F16F16F32_NT
MMAOP_8x8x4_F32F16F16F32_TN MMAOP_8x8x4_F32F16F16F32_NN MMAOP_16x8x8_F32F16F16F32_TN
MMAOP_16x8x16_F32F16F16F32_TN
""".split() + [f"MMAOP_{shape}_S32{a}{b}S32_TN{sat}"
               for shape in ("8x8x16", "16x8x16", "16x8x32")
               for a in ("S8", "U8") for b in ("S8", "U8") for sat in ("", "_SATURATE")] + \
    [f"MMAOP_{shape}_S32B1B1S32_TN_{op}POPC"
     for shape in ("8x8x128", "16x8x128", "16x8x256") for op in ("XOR", "AND")]
S4_U4 = [f"MMAOP_{shape}_S32{a}{b}S32_TN{sat}" for shape in ("8x8x32", "16x8x32", "16x8x64")
         for a in ("S4", "U4") for b in ("S4", "U4") for sat in ("", "_SATURATE")]

VERIFIED = Counter()
STARTED = Counter()


# -- operands --------------------------------------------------------------------------------
def random_values(rng, element_type, shape, edges=False):
    """Random values of `element_type` (exactly representable) as a NumPy array;
    with `edges`, a quarter of Int32 values sit at the ends of the range."""
    name = element_type.name
    if name == "TFloat32":
        bits = rng.standard_normal(shape).astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
        return bits.view(np.float32)
    if element_type.is_float:
        return rng.standard_normal(shape).astype(element_type.numpy)
    if name == "Int32":
        values = rng.integers(-2**20, 2**20, shape)
        if edges:       # so that wrapping and .satfinite show
            edge = rng.random(shape) < 0.25
            values[edge] = rng.choice([-2**31, -2**31 + 5, 2**31 - 6, 2**31 - 1], edge.sum())
        return values.astype(np.int32)
    info = {"Int8": (-128, 128), "UInt8": (0, 256), "Int4": (-8, 8), "UInt4": (0, 16),
            "UInt1": (0, 2)}[name]
    return rng.integers(*info, shape).astype(element_type.numpy)


def as_array(values):
    """A column-major MoYeArray over a copy of `values` (a matrix)."""
    return MoYeArray(np.asarray(values).ravel(order="F").copy(), Layout(values.shape))


def fragments(tiled, threads, operand, values):
    """(len(threads), values per thread) array: each thread's partition of
    `values` by the TiledMMA, in the order of its value mode."""
    array = as_array(values)
    rows = []
    for thread in threads:
        part = getattr(tiled.get_slice(int(thread)), f"partition_{operand}")(array)
        rows.append(part.numpy().ravel(order="F"))
    return np.stack(rows)


def matrices(op, rng):
    m, n, k = op.shape_mnk
    return (random_values(rng, op.a_type, (m, k)), random_values(rng, op.b_type, (n, k)),
            random_values(rng, op.c_type, (m, n), edges=True))


# -- checks -----------------------------------------------------------------------------------
def column_major_index(op, operand, rows, cols):
    """Index in moye's (M,K) / (N,K) / (M,N) tile of PTX position (row, col);
    PTX's B is K x N, so its row is k."""
    m, n, _ = op.shape_mnk
    if operand == "A":
        return rows + m * cols
    if operand == "B":
        return cols + n * rows
    return rows + m * cols


def expect_close(got, want, d_type, what):
    got, want = np.asarray(got), np.asarray(want)
    if d_type.is_float:
        eps = float(ml_dtypes.finfo(d_type.numpy).eps) if d_type.name != "TFloat32" else 2**-10
        scale = np.maximum(np.abs(want.astype(np.float64)), 1.0)
        err = np.abs(got.astype(np.float64) - want.astype(np.float64)) / scale
        assert np.all(err <= 2 * eps), f"{what}: max relative error {err.max()} (eps {eps})"
    else:
        assert np.array_equal(got.astype(np.int64), want.astype(np.int64)), what


def float64_reference(op, a, b, c):
    """A @ B^T + C in float64 (exact integers for integer ops; popc for b1)."""
    if op.info.get("kind") == "popc":
        a, b = a.astype(np.int64), b.astype(np.int64)
        dot = a @ b.T
        bits = dot if op.info["bitop"] == "and" else \
            a.sum(1)[:, None] + b.sum(1)[None, :] - 2 * dot
        return ptx._to_s32(bits + c.astype(np.int64), saturate=False)
    if op.d_type.is_integer:
        exact = a.astype(np.int64) @ b.astype(np.int64).T + c.astype(np.int64)
        return ptx._to_s32(exact, op.info.get("saturate", False))
    return a.astype(np.float64) @ b.astype(np.float64).T + c.astype(np.float64)


def _ptx_operand(op, operand):
    """The PTX operand whose fragment figure moye's layout of `operand`
    follows: C's layout is D's where the op adds C after the instruction."""
    return "d" if operand == "C" and op.info.get("c_after") else operand.lower()


def check_op(op, rng):
    """The whole host check of one op on one atom; returns nothing, asserts."""
    m, n, k = op.shape_mnk
    tiled = make_tiled_mma(op)
    # the hardware threads (lanes of the warp, threads of the warpgroup) of the atom
    threads = np.array([op.thr_id(v) for v in range(size(op.thr_id))])
    a, b, c = matrices(op, rng)
    smem_a = op.info.get("a_source") == "SS"

    # 1. each thread's fragments are the elements the PTX ISA gives that thread
    ptx_of = {}
    for operand, values in (("A", a), ("B", b), ("C", c)):
        held = fragments(tiled, threads, operand, np.arange(values.size).reshape(values.shape,
                                                                                   order="F"))
        frag_values = fragments(tiled, threads, operand, values)
        if operand == "B" and op.info.get("kind") == "wgmma" or operand == "A" and smem_a:
            # read from shared memory: every thread sees the whole tile, in order
            assert np.array_equal(held, np.broadcast_to(np.arange(values.size), held.shape)), \
                f"{op}: {operand} in shared memory is not the whole tile for every thread"
            continue
        rows, cols = ptx.fragment(op.ptx, _ptx_operand(op, operand), threads)
        want = column_major_index(op, operand, rows, cols)
        assert held.shape == want.shape, \
            f"{op}: {operand} fragments {held.shape}, the PTX ISA's {want.shape}"
        assert np.array_equal(held, want), f"{op}: {operand} fragments differ from the PTX ISA's"
        assert np.array_equal(frag_values, values.ravel(order="F")[want])
        ptx_of[operand] = (rows, cols, frag_values)

    # 2. D from the fragments, as the PTX ISA defines the instruction
    a_ptx = np.zeros((m, k), a.dtype)
    b_ptx = np.zeros((k, n), b.dtype)
    c_ptx = np.zeros((m, n), c.dtype)
    for target, operand, whole in ((a_ptx, "A", a), (b_ptx, "B", b.T), (c_ptx, "C", None)):
        if operand in ptx_of:
            rows, cols, vals = ptx_of[operand]
            target[rows, cols] = vals
        else:
            target[...] = whole
    d_ptx = ptx.ptx_mma(op.ptx, a_ptx, b_ptx, c_ptx)
    rows, cols, _ = ptx_of["C"]
    d_frags = d_ptx[rows, cols]

    # 3. back through partition_C into a poisoned D tile
    poison = np.full(m * n, np.nan if op.d_type.is_float else 0x5EADBEEF, op.d_type.numpy)
    d_tile = MoYeArray(poison, Layout((m, n)))
    for thread, frag in zip(threads, d_frags):
        part = tiled.get_slice(int(thread)).partition_C(d_tile)
        copyto(part, MoYeArray(np.ascontiguousarray(frag), Layout(part.shape)))
    d = d_tile.numpy()
    expect_close(d, mma_reference(op, a, b, c), op.d_type, f"{op}: D vs mma_reference")
    expect_close(d, float64_reference(op, a, b, c), op.d_type, f"{op}: D vs A @ B^T + C")


# -- the tests ----------------------------------------------------------------------------------
def test_moye_names():
    assert len(MOYE_51) == 51 and len(set(MOYE_51)) == 51
    assert set(mma_ops_list) == set(MOYE_51) | set(S4_U4)
    assert len(SYNC_OPS) == len(mma_ops_list) == 75
    for name in MOYE_51 + S4_U4:
        op = getattr(moye, name)
        assert op.name == name and mma_ops_list[name] == op.ptx
        assert ptx.parse(op.ptx)["kind"] == "mma"


def test_cute_aliases():
    for op in SYNC_OPS:
        cute = op.info["cute_name"]
        if cute is None:           # MoYe's F32F16F16F16 m8n8k4 ops: CuTe has none
            assert op.arch == 70 and op.c_type is Float16 and op.d_type is Float32
            continue
        assert getattr(moye, cute) is op, cute
    assert moye.SM80_16x8x8_F32TF32TF32F32_TN is moye.MMAOP_16x8x8_F32TF32TF32F32_TN
    assert moye.SM70_8x8x4_F32F16F16F32_TN.ptx == "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32"
    assert moye.SM80_16x8x256_S32U1U1S32_TN_ANDPOPC is moye.MMAOP_16x8x256_S32B1B1S32_TN_ANDPOPC
    assert moye.SM80_8x8x16_S32S8S8S32_TN is moye.SM75_8x8x16_S32S8S8S32_TN


def test_ptx_strings_and_registers():
    op = moye.MMAOP_16x8x8_F32TF32TF32F32_TN
    assert op.ptx == "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
    assert op.info["registers"] == {"a": (4, "b32"), "b": (2, "b32"), "c": (4, "f32"),
                                    "d": (4, "f32")}
    sat = moye.MMAOP_16x8x32_S32U8S8S32_TN_SATURATE
    assert sat.ptx == "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.u8.s8.s32"
    assert sat.info["saturate"] and sat.info["kind"] == "mma"
    xor = moye.MMAOP_8x8x128_S32B1B1S32_TN_XORPOPC
    assert xor.ptx == "mma.sync.aligned.m8n8k128.row.col.s32.b1.b1.s32.xor.popc"
    assert (xor.info["kind"], xor.info["bitop"], xor.info["min_sm"]) == ("popc", "xor", 75)
    assert moye.MMAOP_8x8x4_F64F64F64F64_TN.info["registers"]["c"] == (2, "f64")
    assert moye.MMAOP_8x8x4_F16F16F16F16_NT.ptx == \
        "mma.sync.aligned.m8n8k4.col.row.f16.f16.f16.f16"
    for op in SYNC_OPS:
        m, n, k = op.shape_mnk
        per_thread = {"a": m * k, "b": n * k, "c": m * n, "d": m * n}
        types = {"a": op.a_type, "b": op.b_type, "c": op.c_type, "d": op.d_type}
        for operand, (count, reg) in op.info["registers"].items():
            bits = 64 if reg == "f64" else 32
            assert count * bits * size(op.thr_id) == per_thread[operand] * types[operand].bits, \
                (op, operand)
    # the registers hold what the TV layouts give each thread
    for op in SYNC_OPS:
        assert size(op.a_layout, 1) * op.a_type.bits == 32 * op.info["registers"]["a"][0] * \
            (2 if op.info["registers"]["a"][1] == "f64" else 1)


def test_wgmma_op():
    op = wgmma_op(128, Float16, Float16, Float32)
    assert op is moye.MMAOP_64x128x16_F32F16F16F32_SS_TN is wgmma_op(128, "fp16", "half", "float32")
    assert op.ptx == "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16"
    assert op.shape_mnk == (64, 128, 16) and size(op.thr_id) == 128 and op.arch == 90
    assert op.info["registers"] == {"a": (1, "b64"), "b": (1, "b64"), "c": (64, "f32"),
                                    "d": (64, "f32")}
    rs = wgmma_op(8, TFloat32, TFloat32, Float32, "RS")
    assert rs.name == "MMAOP_64x8x8_F32TF32TF32F32_RS_TN"
    assert rs.info["registers"]["a"] == (4, "b32")
    assert rs.info["cute_name"] == "SM90_64x8x8_F32TF32TF32_RS_TN"
    assert wgmma_op(24, Float16, Float16, Float16, "SS", "MN", "MN").name == \
        "MMAOP_64x24x16_F16F16F16F16_SS_NT"
    assert wgmma_op(256, Float16, Float16, Float16).info["registers"]["d"] == (64, "b32")
    for bad in ((12, Float16, Float16, Float32), (264, Float16, Float16, Float32),
                (64, BFloat16, BFloat16, BFloat16), (64, Float16, BFloat16, Float32)):
        with pytest.raises(moye.MoyeError):
            wgmma_op(*bad)
    with pytest.raises(moye.MoyeError, match="K-major"):
        wgmma_op(64, TFloat32, TFloat32, Float32, "SS", "MN")
    with pytest.raises(moye.MoyeError, match="registers"):
        wgmma_op(64, Float16, Float16, Float32, "RS", "MN")


def test_ptx_formulas_are_bijections():
    """Each fragment formula (as transcribed) covers its matrix once: a check
    on ptx_fragments itself."""
    for op in SYNC_OPS + WGMMA_OPS:
        m, n, k = op.shape_mnk
        threads = ptx.threads_of(op.ptx)
        for operand, extent in (("a", (m, k)), ("b", (k, n)), ("c", (m, n))):
            if op.info.get("kind") == "wgmma" and (operand == "b" or
                                                   operand == "a" and op.info["a_source"] == "SS"):
                continue
            rows, cols = ptx.fragment(op.ptx, operand, threads)
            if op.arch == 70:    # one matrix per quad pair
                groups = ptx.quad_pair(threads)
                index = rows + extent[0] * cols + extent[0] * extent[1] * groups[:, None]
                total = 4 * extent[0] * extent[1]
            else:
                index, total = rows + extent[0] * cols, extent[0] * extent[1]
            assert sorted(index.ravel()) == list(range(total)), (op, operand)


def test_m16n8k256_isa_typo():
    """The ISA's m16n8k256 A formula, read literally (col = 32 t + i for
    i < 64), gives one element to two lanes; the (i & 0x1F) reading, which
    CuTe's layout and ours follow, is a bijection."""
    lanes = ptx.LANES
    for literal, bijective in ((True, False), (False, True)):
        rows, cols = ptx.m16n8k256_a(lanes >> 2, lanes % 4, literal)
        index = np.broadcast_to(rows + 16 * cols, (32, 128)).ravel()
        assert (sorted(index) == list(range(16 * 256))) is bijective


@pytest.mark.parametrize("op", SYNC_OPS, ids=lambda op: op.name)
def test_mma_sync_op_against_ptx(op):
    STARTED[f"sm{op.arch}"] += 1
    check_op(op, np.random.default_rng(zlib.crc32(op.name.encode())))
    VERIFIED[f"sm{op.arch}"] += 1


@pytest.mark.parametrize("op", WGMMA_OPS, ids=lambda op: op.name)
def test_wgmma_op_against_ptx(op):
    STARTED["sm90 (wgmma)"] += 1
    check_op(op, np.random.default_rng(zlib.crc32(op.name.encode())))
    VERIFIED["sm90 (wgmma)"] += 1


@pytest.mark.parametrize("op", sm70.SM70_OPS, ids=lambda op: op.name)
def test_sm70_quad_pairs_cover_the_warp(op):
    """2x2 atoms of an m8n8k4 op use all 32 lanes: quad pair c (lanes 4c..4c+3,
    16+4c..) computes block (c % 2, c // 2) of the 16x16 tile, each lane
    holding what the PTX ISA gives it within its computation."""
    rng = np.random.default_rng(7)
    tiled = make_tiled_mma(op, Layout((2, 2, 1)))
    lanes = np.arange(32)
    assert sorted(tiled.thr_layout_vmnk(i) for i in range(32)) == list(range(32))
    a = random_values(rng, op.a_type, (16, 4))
    b = random_values(rng, op.b_type, (16, 4))
    c = random_values(rng, op.c_type, (16, 16))
    block = ptx.quad_pair(lanes)
    bm, bn = (block % 2)[:, None], (block // 2)[:, None]
    for operand, values in (("A", a), ("B", b), ("C", c)):
        held = fragments(tiled, lanes, operand, np.arange(values.size).reshape(values.shape,
                                                                                 order="F"))
        rows, cols = ptx.fragment(op.ptx, _ptx_operand(op, operand), lanes)
        if operand == "A":
            want = (rows + 8 * bm) + 16 * cols
        elif operand == "B":
            want = (cols + 8 * bn) + 16 * rows
        else:
            want = (rows + 8 * bm) + 16 * (cols + 8 * bn)
        assert np.array_equal(held, want), (op, operand)
    d = MoYeArray.zeros(op.d_type, Layout((16, 16)))
    gemm(tiled, d, as_array(a), as_array(b), as_array(c))
    expect_close(d.numpy(), float64_reference(op, a, b, c), op.d_type, f"{op}: 2x2 gemm")


@pytest.mark.parametrize("op", [
    moye.MMAOP_16x8x8_F32TF32TF32F32_TN, moye.MMAOP_16x8x16_F16F16F16F16_TN,
    moye.MMAOP_16x8x16_F32BF16BF16F32_TN, moye.MMAOP_8x8x4_F64F64F64F64_TN,
    moye.MMAOP_16x8x32_S32S8U8S32_TN_SATURATE, moye.MMAOP_16x8x64_S32U4S4S32_TN,
    moye.MMAOP_8x8x128_S32B1B1S32_TN_XORPOPC, moye.MMAOP_16x8x256_S32B1B1S32_TN_ANDPOPC,
], ids=lambda op: op.name)
def test_gemm_on_tiles_of_2x2_atoms(op):
    """gemm(tiled_mma, D, A, B, C) over a (2M, 2N, 2K) tile of 2x2 atoms."""
    rng = np.random.default_rng(11)
    tiled = make_tiled_mma(op, Layout((2, 2, 1)))
    m, n, k = tiled.tile_size(0), tiled.tile_size(1), 2 * op.shape_mnk[2]
    assert (m, n) == (2 * op.shape_mnk[0], 2 * op.shape_mnk[1]) and size(tiled) == 128
    a = random_values(rng, op.a_type, (m, k))
    b = random_values(rng, op.b_type, (n, k))
    c = random_values(rng, op.c_type, (m, n))
    d = MoYeArray(np.full(m * n, 7, op.d_type.numpy), Layout((m, n)))
    gemm(tiled, d, as_array(a), as_array(b), as_array(c))
    want = float64_reference(op, a, b, c)
    if op.d_type.is_float:   # rounded to the accumulator type after each of the 2 k-steps
        bound = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)).T + \
            np.abs(c.astype(np.float64))
        eps = float(ml_dtypes.finfo(op.d_type.numpy).eps)
        assert np.all(np.abs(d.numpy().astype(np.float64) - want) <= 2 * eps * bound), op
    else:
        expect_close(d.numpy(), want, op.d_type, f"{op}: gemm")


def test_report_counts():
    """Runs last in this module (in its process: pytest-xdist shares the
    per-op checks among processes): every per-op check started there ran
    to its end, and prints how many were verified, by arch."""
    if not STARTED:
        pytest.skip("run with the per-op tests to count them")
    print("\nMMA ops verified against the PTX ISA:",
          ", ".join(f"{arch}: {count}" for arch, count in sorted(VERIFIED.items())))
    assert VERIFIED == STARTED, f"verified {dict(VERIFIED)}, started {dict(STARTED)}"
