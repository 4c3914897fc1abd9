"""The copy instructions' layouts against the PTX ISA.

ldmatrix / stmatrix: for each op, a TiledCopy is run for every warp by the
emulation in ptx_ldmatrix.py (written from the PTX ISA's words): each lane
gives the address its src partition starts at (which must be a 16-byte row
of 8 contiguous elements), and every register the hardware fills must hold
the element that moye's dst partition says it holds. Random data; every
element checked.
"""
import numpy as np
import pytest

from moye import (CPOP_ASYNC_CACHEALWAYS, CPOP_ASYNC_CACHEGLOBAL, LDSM_U16x2_T, LDSM_U16x4_T,
                  LDSM_U16x8_T, LDSM_U32x1_N, LDSM_U32x2_N, LDSM_U32x4_N,
                  MMAOP_16x8x8_F16F16F16F16_TN, MMAOP_16x8x16_F32F16F16F32_TN,
                  SM75_U32x4_LDSM_N, SM80_CP_ASYNC_CACHEALWAYS, SM80_CP_ASYNC_CACHEGLOBAL,
                  SM90_U16x8_STSM_T, STSM_U16x2_T, STSM_U16x4_T, STSM_U16x8_T, STSM_U32x1_N,
                  STSM_U32x2_N, STSM_U32x4_N, CopyAtom, CopyOp, Float16, Float32, Float64, Layout,
                  MoyeError, MoYeArray, Swizzle, UInt16, UInt32, UInt64, UInt128, UniversalCopy,
                  composition, copyto, cosize, make_tiled_copy, make_tiled_copy_A,
                  make_tiled_copy_B, make_tiled_copy_C, make_tiled_mma, shape, size)

from moye.backend.cpu.ptx_ldmatrix import ldmatrix, stmatrix

LDSM = (LDSM_U32x1_N, LDSM_U32x2_N, LDSM_U32x4_N, LDSM_U16x2_T, LDSM_U16x4_T, LDSM_U16x8_T)
STSM = (STSM_U32x1_N, STSM_U32x2_N, STSM_U32x4_N, STSM_U16x2_T, STSM_U16x4_T, STSM_U16x8_T)


# -- the facts ------------------------------------------------------------------------------
@pytest.mark.parametrize("op", LDSM + STSM, ids=str)
def test_matrix_op_facts(op):
    count, trans = op.info["count"], op.info["transpose"]
    load = op.kind == "ldsm"
    assert (op.arch, op.kind) == ((75, "ldsm") if load else (90, "stsm"))
    assert op.info["ptx"] == (f"{'ldmatrix' if load else 'stmatrix'}.sync.aligned.m8n8.x{count}"
                              f"{'.trans' if trans else ''}.shared.b16")
    assert size(op.thr_id) == 32
    rows, regs = (op.src_bits, op.dst_bits) if load else (op.dst_bits, op.src_bits)
    assert op.ref_bits == regs                  # the reference is the register side
    # every lane holds `count` 32-bit registers; 8*count lanes give a 128-bit row each
    assert size(regs, 1) == 32 * count and size(rows, 1) == 128
    assert sorted({rows(t, 0) for t in range(32)}) == [128 * r for r in range(8 * count)]
    assert sorted(regs(t, v) for t in range(32) for v in range(32 * count)) == \
        list(range(1024 * count))


def test_matrix_op_names_and_layouts():
    assert SM75_U32x4_LDSM_N is LDSM_U32x4_N and SM90_U16x8_STSM_T is STSM_U16x8_T
    assert str(LDSM_U32x1_N.src_bits) == "((8,4),128):((128,0),1)"
    assert str(LDSM_U32x4_N.dst_bits) == "(32,(32,4)):(32,(1,1024))"
    assert str(LDSM_U16x8_T.dst_bits) == "((4,8),(16,2,4)):((256,16),(1,128,1024))"
    assert (STSM_U32x2_N.src_bits, STSM_U32x2_N.dst_bits) == \
        (LDSM_U32x2_N.dst_bits, LDSM_U32x2_N.src_bits)
    assert str(CopyAtom(LDSM_U32x4_N, UInt16).val_layout_src) == "(32,8):(8,1)"
    assert str(CopyAtom(LDSM_U32x4_N, UInt16).val_layout_dst) == "(32,(2,4)):(2,(1,64))"


# -- the emulation ---------------------------------------------------------------------------
def _groups(part, n):
    """A thread's partition as its instructions: lists of `n` values each."""
    vals = [int(part[i]) for i in range(size(part))]
    assert len(vals) % n == 0
    return [vals[k:k + n] for k in range(0, len(vals), n)]


def _per_thread(tiled_copy, array, side):
    n = tiled_copy.atom.num_val_src if side == "S" else tiled_copy.atom.num_val_dst
    return [_groups(getattr(tiled_copy.get_slice(t), "partition_" + side)(array), n)
            for t in range(tiled_copy.num_threads)]


def _row_start(values, thread, k):
    """The address a lane gives: its instruction's values must be one row."""
    assert values == list(range(values[0], values[0] + 8)), \
        f"thread {thread}, instruction {k}: offsets {values} are not 8 contiguous elements"
    return values[0]


def _arrays(smem_layout):
    """Arrays over the smem layout holding each element's address and its
    logical (column-major) index."""
    n = cosize(smem_layout)
    addresses = MoYeArray(np.arange(n, dtype=np.int64), smem_layout)
    logical = MoYeArray(np.arange(size(smem_layout), dtype=np.int64), Layout(shape(smem_layout)))
    return addresses, logical


def check_ldmatrix(tiled_copy, smem_layout, rng):
    op = tiled_copy.atom.op
    count, trans = op.info["count"], op.info["transpose"]
    data = rng.integers(0, 1 << 16, cosize(smem_layout), dtype=np.uint16)
    smem = MoYeArray(data, smem_layout)
    addresses, logical = _arrays(smem_layout)
    src = _per_thread(tiled_copy, addresses, "S")      # where each lane's rows start
    dst = _per_thread(tiled_copy, logical, "D")        # what moye says each register holds
    assert len(src[0]) == len(dst[0])
    wrong, checked = [], set()
    for warp in range(tiled_copy.num_threads // 32):
        lanes = range(32 * warp, 32 * warp + 32)
        for k in range(len(src[0])):
            regs = ldmatrix(data, [_row_start(src[t][k], t, k) for t in lanes], count, trans)
            for lane, t in enumerate(lanes):
                for v, element in enumerate(dst[t][k]):
                    checked.add(element)
                    if regs[lane, v // 2, v % 2] != smem[element]:
                        wrong.append((t, k, v, element))
    assert checked == set(range(size(smem_layout)))   # (warps along N share A: some twice)
    assert not wrong, f"{op}: (thread, instruction, value, element) wrong: {wrong[:8]}"


def check_stmatrix(tiled_copy, smem_layout, rng):
    op = tiled_copy.atom.op
    count, trans = op.info["count"], op.info["transpose"]
    values = rng.integers(0, 1 << 15, size(smem_layout), dtype=np.uint16)
    out = np.full(cosize(smem_layout), 0xFFFF, dtype=np.uint16)        # poisoned
    addresses, logical = _arrays(smem_layout)
    src = _per_thread(tiled_copy, logical, "S")        # what moye says each register holds
    dst = _per_thread(tiled_copy, addresses, "D")      # where each lane's rows start
    for warp in range(tiled_copy.num_threads // 32):
        lanes = range(32 * warp, 32 * warp + 32)
        for k in range(len(src[0])):
            regs = np.empty((32, count, 2), dtype=np.uint16)
            for lane, t in enumerate(lanes):
                for v, element in enumerate(src[t][k]):
                    regs[lane, v // 2, v % 2] = values[element]
            stmatrix(out, [_row_start(dst[t][k], t, k) for t in lanes], regs, count, trans)
    stored = MoYeArray(out, smem_layout)
    wrong = [i for i in range(size(smem_layout)) if stored[i] != values[i]]
    assert not wrong, f"{op}: elements stored wrong: {wrong[:16]}"


def _check(tiled_copy, smem_layout, rng):
    if tiled_copy.atom.op.kind == "ldsm":
        check_ldmatrix(tiled_copy, smem_layout, rng)
    else:
        check_stmatrix(tiled_copy, smem_layout, rng)


@pytest.fixture
def rng():
    return np.random.default_rng(2024)


def test_seed_ldmatrix_tiled_copy(rng):
    """Seed 004: make_tiled_copy(CopyAtom{LDSM_U32x4_N, UInt16}, (16,2), (2,4)).
    thr and val describe the destination; a lane's source row runs down M."""
    tc = make_tiled_copy(CopyAtom(LDSM_U32x4_N, UInt16), Layout((16, 2)), Layout((2, 4)))
    assert tc.tiler_mn == (32, 8) and tc.num_threads == 32
    check_ldmatrix(tc, Layout((32, 8)), rng)
    check_ldmatrix(tc, Layout((32, 24)), rng)            # 3 instructions per thread
    check_ldmatrix(tc, Layout((32, 8), (1, 40)), rng)    # padded columns


# make_tiled_copy: non-transposed ops take (16,2) threads x (2, count) values on an
# M-contiguous tile; transposed ones (8,4) row-major threads x (1, 2*count) values.
@pytest.mark.parametrize("op", LDSM + STSM, ids=str)
def test_make_tiled_copy(op, rng):
    count = op.info["count"]
    if op.info["transpose"]:
        tc = make_tiled_copy(CopyAtom(op, UInt16), Layout((8, 4), (4, 1)), Layout((1, 2 * count)))
    else:
        tc = make_tiled_copy(CopyAtom(op, UInt16), Layout((16, 2)), Layout((2, count)))
    m, n = tc.tiler_mn
    _check(tc, Layout((m, n)), rng)
    _check(tc, Layout((m, 2 * n)), rng)


MMA16 = make_tiled_mma(MMAOP_16x8x16_F32F16F16F32_TN)                    # A 16x16, B 8x16, C 16x8
MMA16_2x2 = make_tiled_mma(MMAOP_16x8x16_F32F16F16F32_TN, Layout((2, 2, 1)))   # 4 warps
MMA8 = make_tiled_mma(MMAOP_16x8x8_F16F16F16F16_TN)                      # B 8x8


def _k_major(m, k):
    return Layout((m, k), (k, 1))


# (operand, op, mma, smem layout): K-major operands load with the plain ops,
# M/N-major ones with .trans; C stores row-major plain or column-major .trans.
MMA_CASES = [
    ("A", LDSM_U32x4_N, MMA16, _k_major(16, 16)),
    ("A", LDSM_U32x4_N, MMA16, _k_major(16, 64)),
    ("A", LDSM_U32x4_N, MMA16, composition(Swizzle(3, 3, 3), _k_major(16, 64))),
    ("A", LDSM_U16x8_T, MMA16, Layout((16, 16))),
    ("B", LDSM_U32x2_N, MMA16, _k_major(8, 16)),
    ("B", LDSM_U16x4_T, MMA16, Layout((8, 16))),
    ("B", LDSM_U32x1_N, MMA8, _k_major(8, 8)),
    ("B", LDSM_U16x2_T, MMA8, Layout((8, 8))),
    ("A", LDSM_U32x4_N, MMA16_2x2, composition(Swizzle(2, 3, 3), _k_major(32, 32))),
    ("B", LDSM_U32x2_N, MMA16_2x2, Layout((16, 32), (40, 1))),
    ("C", STSM_U32x2_N, MMA16, _k_major(16, 8)),
    ("C", STSM_U16x4_T, MMA16, Layout((16, 8))),
    ("C", STSM_U32x2_N, MMA16_2x2, _k_major(32, 16)),
    ("A", STSM_U32x4_N, MMA16, _k_major(16, 16)),
    ("A", STSM_U16x8_T, MMA16, Layout((16, 16))),
    ("B", STSM_U32x1_N, MMA8, _k_major(8, 8)),
    ("B", STSM_U16x2_T, MMA8, Layout((8, 8))),
]


@pytest.mark.parametrize("operand,op,mma,smem", MMA_CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2].num_threads}t-{c[3]}" for c in MMA_CASES])
def test_tiled_copy_for_mma(operand, op, mma, smem, rng):
    make = {"A": make_tiled_copy_A, "B": make_tiled_copy_B, "C": make_tiled_copy_C}[operand]
    _check(make(CopyAtom(op, Float16), mma), smem, rng)


def test_emulation_catches_a_wrong_layout(rng):
    """The check is not vacuous: a copy op whose layouts say "not transposed"
    while the instruction transposes is caught element by element."""
    liar = CopyOp("LIAR", LDSM_U32x4_N.thr_id, LDSM_U32x4_N.src_bits, LDSM_U32x4_N.dst_bits,
                  kind="ldsm", count=4, transpose=True)
    tc = make_tiled_copy_A(CopyAtom(liar, Float16), MMA16)
    check_ldmatrix(make_tiled_copy_A(CopyAtom(LDSM_U32x4_N, Float16), MMA16), _k_major(16, 16), rng)
    with pytest.raises(AssertionError, match="wrong"):
        check_ldmatrix(tc, _k_major(16, 16), rng)
    with pytest.raises(AssertionError, match="not 8 contiguous"):     # a row must be a row
        check_ldmatrix(make_tiled_copy_A(CopyAtom(LDSM_U16x8_T, Float16), MMA16),
                       _k_major(16, 16), rng)


# -- one-thread copies: UniversalCopy and cp.async ---------------------------------------------
@pytest.mark.parametrize("op,dtype,values", [
    (UniversalCopy(UInt128), Float32, 4), (UniversalCopy(UInt128), Float16, 8),
    (UniversalCopy(UInt64), Float32, 2), (UniversalCopy(Float64), Float32, 2),
    (CPOP_ASYNC_CACHEGLOBAL(UInt128), Float32, 4), (CPOP_ASYNC_CACHEGLOBAL(UInt128), Float16, 8),
    (CPOP_ASYNC_CACHEALWAYS(UInt64), Float16, 4), (CPOP_ASYNC_CACHEALWAYS(UInt32), Float32, 1),
], ids=str)
def test_vector_copy_partitions(op, dtype, values, rng):
    atom = CopyAtom(op, dtype)
    assert atom.num_val_src == atom.num_val_dst == values
    assert values * dtype.bits == op.bits
    tc = make_tiled_copy(atom, Layout((32, 8)), Layout((values, 1)))
    m, n = tc.tiler_mn
    gmem = Layout((m, 2 * n), (1, 4 * m))                 # a tile of a larger column-major matrix
    src = MoYeArray(rng.standard_normal(cosize(gmem)).astype(dtype.numpy), gmem)
    dst = MoYeArray.zeros(dtype, Layout((m, 2 * n)))
    dst.engine.write(dst.layout, np.nan)                  # poisoned
    for t in range(tc.num_threads):
        thr = tc.get_slice(t)
        part = thr.partition_S(src)
        assert part.shape[0] == (values, 1)
        # each instruction moves `values` contiguous elements, op.bits wide
        offsets = [part.layout(i) for i in range(size(part))]
        for k in range(0, len(offsets), values):
            assert offsets[k:k + values] == list(range(offsets[k], offsets[k] + values))
            assert offsets[k] * dtype.bits % op.bits == 0      # aligned to the vector
        copyto(tc, thr.partition_D(dst), part)
    assert np.array_equal(dst.numpy(), src.numpy())


def test_cp_async_facts():
    ca, cg = CPOP_ASYNC_CACHEALWAYS(UInt128), CPOP_ASYNC_CACHEGLOBAL(UInt128)
    assert SM80_CP_ASYNC_CACHEALWAYS(UInt128) is ca and SM80_CP_ASYNC_CACHEGLOBAL(UInt128) is cg
    assert (ca.kind, ca.arch, ca.info["cache_op"], ca.info["bytes"]) == ("cp_async", 80, "ca", 16)
    assert cg.info["ptx"] == "cp.async.cg.shared.global [dst], [src], 16"
    assert str(ca.src_bits) == str(ca.dst_bits) == "(1,128):(0,1)" and size(ca.thr_id) == 1
    sizes = [CPOP_ASYNC_CACHEALWAYS(t).info["bytes"] for t in (UInt32, UInt64, UInt128)]
    assert sizes == [4, 8, 16]


def test_cp_async_sizes_are_checked():
    with pytest.raises(MoyeError, match=r"cp.async.cg copies 16 bytes only, and UInt64 has 8"):
        CPOP_ASYNC_CACHEGLOBAL(UInt64)
    with pytest.raises(MoyeError, match=r"cp.async.ca copies 4, 8 or 16 bytes, and Float16 has 2"):
        CPOP_ASYNC_CACHEALWAYS(Float16)


def test_values_that_do_not_fill_atoms_are_refused():
    with pytest.raises(MoyeError, match="copies 2 values, not a multiple of the 4"):
        make_tiled_copy(CopyAtom(UniversalCopy(UInt128), Float32), Layout((32, 8)),
                        Layout((2, 1)))
    with pytest.raises(MoyeError, match="copies 4 values, not a multiple of the 8"):
        make_tiled_copy(CopyAtom(CPOP_ASYNC_CACHEGLOBAL(UInt128), Float16), Layout((32, 8)),
                        Layout((4, 1)))
    with pytest.raises(MoyeError, match="cannot copy Float64 values: its src is not a whole"):
        CopyAtom(CPOP_ASYNC_CACHEALWAYS(UInt32), Float64)      # 4 bytes of an 8-byte value
    with pytest.raises(MoyeError, match="not valid for dst values of Float64"):
        CopyAtom(LDSM_U32x2_N, Float64)
    with pytest.raises(MoyeError, match="copies 2 values, not a multiple of the 8"):
        make_tiled_copy(CopyAtom(LDSM_U32x4_N, UInt16), Layout((32, 1)), Layout((2, 1)))
    atom = CopyAtom(UniversalCopy(UInt128), Float32)
    a = MoYeArray(np.arange(6, dtype=np.float32), Layout((6, 1)))
    with pytest.raises(MoyeError, match="holds 6 values, not a multiple of the 4"):
        copyto(atom, MoYeArray.zeros(Float32, Layout((6, 1))), a)
