"""The CPU backend's asynchronous copies and warp-collective instructions,
on IR kernels built by hand, against NumPy references written here from
the PTX ISA's and CUDA's words: ldmatrix / stmatrix, every mma.sync op,
cp.async ordering, shfl, and the errors of partial warps."""
import zlib

import numpy as np
import pytest

from moye import types as T
from moye.atom.arch import mma_ops_list, sm70, sm75, sm80
from moye.atom.mma import mma_reference
from moye.backend.cpu import ptx_fragments as ptx
from moye.backend.cpu.interpreter import KernelRuntimeError, Pointer, run_kernel
from moye import ir
from moye.layout import size

I32 = T.Int32
REGISTER = {"b32": T.UInt32, "f32": T.Float32, "s32": T.Int32, "f64": T.Float64}
MMA_OPS = sm70.SM70_OPS + sm75.SM75_OPS + sm80.SM80_OPS


# -- a tiny IR builder -----------------------------------------------------------------------
class Builder:
    """Builds an ir.Kernel; each instruction gets its own line of 'kern.py'."""

    def __init__(self, name="k"):
        self.kernel = ir.Kernel(name, [], [], source_file="kern.py")
        self.body, self.line = self.kernel.body, 0

    def param(self, name, elem):
        v = ir.Value(ir.PtrType(elem, "global"), name)
        self.kernel.params.append(ir.Param(name, v.type, v))
        return v

    def array(self, elem, n, space):
        a = ir.Array(elem, n, space)
        self.kernel.arrays.append(a)
        return a

    def __call__(self, op, *args, type=None, text=None, **attrs):
        r = ir.Value(type) if type is not None else None
        self.line += 1
        self.body.append(ir.Instr(op, args, r, attrs, ir.Loc("kern.py", self.line, text or op)))
        return r

    def if_(self, cond, then):
        """If cond: then(builder)."""
        stmt = ir.If(cond, [], [])
        self.body.append(stmt)
        outer, self.body = self.body, stmt.then
        then(self)
        self.body = outer

    def tid(self):
        return self("special", type=I32, name="threadIdx.x")

    def gid(self, block):
        """The global thread id blockIdx.x * block + threadIdx.x."""
        bid = self("special", type=I32, name="blockIdx.x")
        return self("add", self("mul", bid, block, type=I32), self.tid(), type=I32)

    def ix(self, a, k, c=0):
        """a * k + c as an Int32 value."""
        return self("add", self("mul", a, k, type=I32), c, type=I32)


def run(b, grid, block, *args, race_check=False):
    params = {id(p.value): Pointer(a, np.zeros(1, np.int64), f"'{p.name}'")
              for p, a in zip(b.kernel.params, args)}
    run_kernel(b.kernel, (grid, 1, 1), (block, 1, 1), params, race_check=race_check)


def to_registers(b, words, g, arr, n):
    """arr[i] = words[g * n + i] for i < n."""
    for i in range(n):
        b("store", arr, i, b("load", words, b.ix(g, n, i), type=arr.elem))


def from_registers(b, words, g, arr, n):
    for i in range(n):
        b("store", words, b.ix(g, n, i), b("load", arr, i, type=arr.elem))


# -- ldmatrix / stmatrix ---------------------------------------------------------------------------
ROWS = 128          # 16-bit elements of shared memory per block: 8 * ROWS


def matrix_reference(smem, addrs, count, trans):
    """regs[lane, j] (uint32) of one warp, straight from the ISA's words: lane i
    gives row i % 8 of matrix i // 8; lane l's register j holds row l // 4,
    elements 2*(l % 4) and 2*(l % 4) + 1 of matrix j, the first in the low half."""
    regs = np.zeros((32, count), np.uint32)
    for j in range(count):
        m = np.stack([smem[addrs[8 * j + r]:addrs[8 * j + r] + 8] for r in range(8)])
        if trans:
            m = m.T
        for lane in range(32):
            lo, hi = m[lane // 4, 2 * (lane % 4)], m[lane // 4, 2 * (lane % 4) + 1]
            regs[lane, j] = int(lo) | int(hi) << 16
    return regs


def row_addresses(rng, n_warps, count):
    """Each warp's lanes give distinct random rows; lanes past 8*count give
    garbage, which the instruction must ignore."""
    addrs = np.full((n_warps, 32), -(1 << 20), np.int32)
    for w in range(n_warps):
        addrs[w, :8 * count] = 8 * rng.permutation(ROWS)[:8 * count]
    return addrs


def copy_in(b, src, smem, g, t, per_thread):
    """smem[t * per_thread + i] = src[g * per_thread + i]."""
    for i in range(per_thread):
        b("store", smem, b.ix(t, per_thread, i), b("load", src, b.ix(g, per_thread, i),
                                                    type=smem.elem))


@pytest.mark.parametrize("count", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix(count, trans):
    rng = np.random.default_rng(count + 10 * trans)
    grid, block = 2, 64                                  # 2 blocks of 2 warps
    data = rng.integers(0, 1 << 16, (grid, 8 * ROWS), dtype=np.uint16)
    addrs = row_addresses(rng, grid * block // 32, count)
    out = np.full((grid * block, count), 0xDEADBEEF, np.uint32)
    b = Builder()
    src, rows, dst = b.param("src", T.UInt16), b.param("rows", I32), b.param("out", T.UInt32)
    smem = b.array(T.UInt16, 8 * ROWS, "shared")
    regs = b.array(T.UInt32, count, "local")
    t, g = b.tid(), b.gid(block)
    copy_in(b, src, smem, g, t, 8 * ROWS // block)
    b("barrier")
    b("ldmatrix", regs, tuple(range(count)), smem, b("load", rows, g, type=I32), count=count,
      trans=trans)
    from_registers(b, dst, g, regs, count)
    run(b, grid, block, data.ravel(), addrs.ravel(), out.ravel())
    for w in range(grid * block // 32):
        want = matrix_reference(data[w // 2], addrs[w], count, trans)
        assert np.array_equal(out[32 * w:32 * w + 32], want), f"warp {w}"


def test_ldmatrix_into_a_recast_fragment():
    """The register list may be a pointer: a Float16 fragment seen as UInt32."""
    rng = np.random.default_rng(3)
    data = rng.integers(0, 1 << 16, 8 * ROWS, dtype=np.uint16)
    addrs = row_addresses(rng, 1, 4)
    out = np.zeros((32, 8), np.uint16)
    b = Builder()
    src, rows, dst = b.param("src", T.UInt16), b.param("rows", I32), b.param("out", T.Float16)
    smem = b.array(T.UInt16, 8 * ROWS, "shared")
    frag = b.array(T.Float16, 8, "local")
    t = b.tid()
    copy_in(b, src, smem, t, t, 8 * ROWS // 32)
    b("barrier")
    words = b("cast", b("addr", frag, type=ir.PtrType(T.Float16, "local")),
              type=ir.PtrType(T.UInt32, "local"), to=T.UInt32, ptr=True)
    b("ldmatrix", words, (3, 0, 2, 1), smem, b("load", rows, t, type=I32), count=4, trans=False)
    from_registers(b, dst, t, frag, 8)
    run(b, 1, 32, data, addrs.ravel(), out.view(np.float16).ravel())
    want = matrix_reference(data, addrs[0], 4, False)[:, [1, 3, 2, 0]]
    assert np.array_equal(out.view(np.uint32), want)


@pytest.mark.parametrize("count", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_stmatrix(count, trans):
    rng = np.random.default_rng(100 + count + 10 * trans)
    grid, block = 2, 64
    words = rng.integers(0, 1 << 32, (grid * block, count), dtype=np.uint32)
    # each warp writes 32 distinct rows of its block's half of shared memory
    addrs = np.concatenate([8 * rng.permutation(ROWS // 2)[:32] + 4 * ROWS * (w % 2)
                            for w in range(grid * block // 32)]).astype(np.int32)
    poison = rng.integers(0, 1 << 16, (grid, 8 * ROWS), dtype=np.uint16)
    out = np.zeros((grid, 8 * ROWS), np.uint16)
    b = Builder()
    src, rows, init, dst = (b.param("words", T.UInt32), b.param("rows", I32),
                            b.param("poison", T.UInt16), b.param("out", T.UInt16))
    smem = b.array(T.UInt16, 8 * ROWS, "shared")
    regs = b.array(T.UInt32, count, "local")
    t, g = b.tid(), b.gid(block)
    copy_in(b, init, smem, g, t, 8 * ROWS // block)
    to_registers(b, src, g, regs, count)
    b("barrier")
    b("stmatrix", smem, b("load", rows, g, type=I32), regs, tuple(range(count)), count=count,
      trans=trans)
    b("barrier")
    for i in range(8 * ROWS // block):
        b("store", dst, b.ix(g, 8 * ROWS // block, i),
          b("load", smem, b.ix(t, 8 * ROWS // block, i), type=T.UInt16))
    run(b, grid, block, words.ravel(), addrs, poison.ravel(), out.ravel())
    want = poison.copy()
    for w in range(grid * block // 32):
        lane_words = words[32 * w:32 * w + 32]
        for j in range(count):
            m = np.zeros((8, 8), np.uint16)
            for lane in range(32):
                m[lane // 4, 2 * (lane % 4)] = lane_words[lane, j] & 0xFFFF
                m[lane // 4, 2 * (lane % 4) + 1] = lane_words[lane, j] >> 16
            if trans:
                m = m.T
            for r in range(8):
                a = addrs[32 * w + 8 * j + r]
                want[w // 2, a:a + 8] = m[r]
    assert np.array_equal(out, want)


# -- mma.sync ---------------------------------------------------------------------------------
def random_values(rng, ptx_type, shape, edges=False):
    """Random values of a PTX type (tf32: float32 whose low 13 bits are not zero,
    which the instruction ignores)."""
    if ptx_type in ("f16", "bf16", "f32", "f64", "tf32"):
        v = rng.standard_normal(shape)
        if ptx_type == "tf32":
            v = (v.astype(np.float32).view(np.uint32) | np.uint32(0x1001)).view(np.float32)
        return v.astype(ptx.NUMPY[ptx_type] if ptx_type != "tf32" else np.float32)
    if ptx_type == "s32":
        v = rng.integers(-2**20, 2**20, shape)
        if edges:
            edge = rng.random(shape) < 0.3
            v[edge] = rng.choice([-2**31, -2**31 + 3, 2**31 - 5, 2**31 - 1], edge.sum())
        return v.astype(np.int32)
    lo, hi = {"s8": (-128, 128), "u8": (0, 256), "s4": (-8, 8), "u4": (0, 16),
              "b1": (0, 2)}[ptx_type]
    return rng.integers(lo, hi, shape).astype(np.int64)


def pack_words(values, ptx_type, reg):
    """(lanes, elements) values -> (lanes, registers) words of register type `reg`:
    element i in register i // (32 / bits), from the lowest bits up."""
    bits = ptx.BITS[ptx_type]
    if bits >= 8:
        np_t = np.float32 if ptx_type == "tf32" else ptx.NUMPY[ptx_type]
        raw = np.ascontiguousarray(values.astype(np_t)).view(np.uint8)
        return raw.view(REGISTER[reg].numpy)
    per = 32 // bits
    v = (values.astype(np.int64) & ((1 << bits) - 1)).reshape(len(values), -1, per)
    words = (v << (bits * np.arange(per))).sum(axis=2)
    return words.astype(np.uint32)


def unpack_words(words, ptx_type):
    return np.ascontiguousarray(words).view(ptx.NUMPY[ptx_type])


def mma_kernel(spelling, registers, block, in_place):
    """Each thread loads its A, B, C registers, the warps run one mma, D is stored."""
    b = Builder()
    w = {op: b.param(op, REGISTER[registers[op][1]]) for op in "dabc"}
    arr = {op: b.array(REGISTER[t], n, "local") for op, (n, t) in registers.items()}
    if in_place:
        arr["d"] = arr["c"]
    g = b.gid(block)
    for op in "abc":
        to_registers(b, w[op], g, arr[op], registers[op][0])
    regs = {op: tuple(range(n)) for op, (n, _) in registers.items()}
    b("mma", arr["d"], regs["d"], arr["a"], regs["a"], arr["b"], regs["b"], arr["c"], regs["c"],
      ptx=spelling)
    from_registers(b, w["d"], g, arr["d"], registers["d"][0])
    return b


def mma_reference_ptx(f, a, b, c):
    """D = A B + C from the ISA's words, in float64 / int64."""
    if f["bitop"]:
        a, b = a.astype(np.int64), b.astype(np.int64)
        op = np.bitwise_xor if f["bitop"] == "xor" else np.bitwise_and
        bits = op(a[..., :, :, None], b[..., None, :, :]).sum(axis=-2)
        return (bits + c + 2**31) % 2**32 - 2**31
    if f["dtype"] == "s32":
        acc = a.astype(np.int64) @ b.astype(np.int64) + c.astype(np.int64)
        return np.clip(acc, -2**31, 2**31 - 1) if f["satfinite"] else \
            (acc + 2**31) % 2**32 - 2**31
    if f["atype"] == "tf32":         # the tensor cores ignore the low 13 bits
        a, b = ((x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32) for x in (a, b))
    return a.astype(np.float64) @ b.astype(np.float64) + c.astype(np.float64)


def expect_equal(got, want, ptx_type, what):
    if ptx_type in ("f16", "f32", "f64"):
        eps = float(np.finfo(ptx.NUMPY[ptx_type]).eps)
        got, want = got.astype(np.float64), want.astype(np.float64)
        err = np.abs(got - want) / np.maximum(np.abs(want), 1.0)
        assert np.all(err <= eps), f"{what}: max relative error {err.max()} (eps {eps})"
    else:
        assert np.array_equal(got.astype(np.int64), want.astype(np.int64)), what


@pytest.mark.parametrize("op", MMA_OPS, ids=lambda op: op.name)
def test_mma(op):
    """Every mma.sync spelling on 4 warps of random data: registers packed by
    the ISA's fragment formulas, D against A @ B + C computed here."""
    spelling, registers = op.ptx, op.info["registers"]
    f = ptx.parse(spelling)
    m, n, k = f["shape"]
    rng = np.random.default_rng(zlib.crc32(spelling.encode()))
    grid, block = 2, 64
    warps = grid * block // 32
    pairs = (m, n, k) == (8, 8, 4) and f["atype"] == "f16"
    lanes = np.arange(32)
    group = (ptx.quad_pair(lanes) if pairs else 0 * lanes)[:, None]
    g = 4 if pairs else 1                  # m8n8k4 .f16: one product per quad pair
    mats = {"a": random_values(rng, f["atype"], (warps, g, m, k)),
            "b": random_values(rng, f["btype"], (warps, g, k, n)),
            "c": random_values(rng, f["ctype"], (warps, g, m, n), edges=True)}
    words = {}
    for w in "abc":
        rows, cols = ptx.fragment(spelling, w, lanes)
        held = mats[w][:, group, rows, cols].reshape(warps * 32, -1)
        words[w] = pack_words(held, f[f"{w}type"], registers[w][1])
        assert words[w].shape[1] == registers[w][0]
    d_words = np.full((warps * 32, registers["d"][0]), 0x7F, REGISTER[registers["d"][1]].numpy)
    in_place = registers["c"] == registers["d"] and zlib.crc32(op.name.encode()) % 2 == 0
    b = mma_kernel(spelling, registers, block, in_place)
    run(b, grid, block, d_words.ravel(), words["a"].ravel(), words["b"].ravel(),
        words["c"].ravel())
    rows, cols = ptx.fragment(spelling, "d", lanes)
    want = mma_reference_ptx(f, mats["a"], mats["b"], mats["c"])[:, group, rows, cols]
    want = want.reshape(warps * 32, -1)
    if f["dtype"] in ("f16", "f32"):
        want = want.astype(ptx.NUMPY[f["dtype"]])
    expect_equal(unpack_words(d_words, f["dtype"]), want, f["dtype"], op.name)


def test_mma_ops_list_is_covered():
    assert sorted(op.ptx for op in MMA_OPS) == sorted(mma_ops_list.values())


def _tile(op, which, values):
    """(32, V) lane values -> moye's (rows, cols) tile, through op's TV layouts."""
    m, n, k = op.shape_mnk
    lay, (r, c) = {"a": (op.a_layout, (m, k)), "b": (op.b_layout, (n, k)),
                   "c": (op.c_layout, (m, n))}[which]
    tile = np.zeros(r * c, values.dtype)
    for t in range(size(op.thr_id)):
        for v in range(size(lay, 1)):
            tile[lay(t, v)] = values[op.thr_id(t), v]
    return tile.reshape((r, c), order="F")


C_IS_D = [op for op in MMA_OPS if op.info["registers"]["c"] == op.info["registers"]["d"]]


@pytest.mark.parametrize("op", C_IS_D, ids=lambda op: op.name)
def test_mma_agrees_with_moye_layouts(op):
    """The CPU's mma (from the ISA) and moye's thread-value layouts agree: a
    warp's registers, placed by moye's layouts, multiply as mma_reference
    says (the GPU test of the same, on the CPU; mma.m8n8k4 .f32.f16.f16.f16
    is left out: its C and D layouts differ, and an MMAOp has one)."""
    registers, f = op.info["registers"], ptx.parse(op.ptx)
    rng = np.random.default_rng(zlib.crc32(op.name.encode()) + 1)
    nv = {w: size(getattr(op, f"{w}_layout"), 1) for w in "abc"}
    values = {w: random_values(rng, f[f"{w}type"], (32, nv[w])) for w in "abc"}
    words = {w: pack_words(values[w], f[f"{w}type"], registers[w][1]) for w in "abc"}
    d_words = np.zeros((32, registers["d"][0]), REGISTER[registers["d"][1]].numpy)
    run(mma_kernel(op.ptx, registers, 32, False), 1, 32, d_words.ravel(),
        words["a"].ravel(), words["b"].ravel(), words["c"].ravel())
    a, b, c = (_tile(op, w, values[w]) for w in "abc")
    got = _tile(op, "c", unpack_words(d_words, f["dtype"]))
    want = np.asarray(mma_reference(op, a, b, c))
    expect_equal(got, want, f["dtype"], op.name)


# -- cp.async -------------------------------------------------------------------------------------
F32 = T.Float32
REGION = 4 * 64                     # floats of one region of shared memory: 4 per thread


def snapshot(b, out, smem, g, t, k, regions):
    """out[k, region, g, :] = this thread's 4 floats of each region."""
    for r in range(regions):
        for i in range(4):
            v = b("load", smem, b.ix(t, 4, r * REGION + i), type=F32, text=f"read {k}")
            b("store", out, b.ix(g, 4, ((k * regions + r) * 128) * 4 + i), v)


def cp_async(b, smem, t, region, src, g, pred=None, src_index=None):
    args = (smem, b.ix(t, 4, region * REGION), src,
            src_index if src_index is not None else b.ix(g, 4, region * 128 * 4))
    b("cp_async", *args + ((pred,) if pred is not None else ()), bytes=16, cache="cg",
      text="cp_async")


def poison(b, smem, t, regions):
    for i in range(4 * regions):
        b("store", smem, b.ix(t, 4 * regions, i), -1.0)


def test_cp_async_lands_only_when_waited():
    """Groups retire as cp.async.wait_group n and wait_all say: before, the
    thread reads the stale shared memory."""
    rng = np.random.default_rng(5)
    grid, block, regions = 2, 64, 4
    src = rng.standard_normal((regions, 128, 4)).astype(np.float32)
    out = np.full((5, regions, 128, 4), np.nan, np.float32)
    b = Builder()
    s_, o_ = b.param("src", F32), b.param("out", F32)
    smem = b.array(F32, regions * REGION, "shared")
    t, g = b.tid(), b.gid(block)
    poison(b, smem, t, regions)
    for r in range(3):
        cp_async(b, smem, t, r, s_, g)
        b("cp_async_commit")
    snapshot(b, o_, smem, g, t, 0, regions)     # nothing waited for
    b("cp_async_wait", n=2)
    snapshot(b, o_, smem, g, t, 1, regions)     # group 0
    cp_async(b, smem, t, 3, s_, g)              # not committed
    b("cp_async_wait", n=1)
    snapshot(b, o_, smem, g, t, 2, regions)     # groups 0, 1
    b("cp_async_wait", n=0)
    snapshot(b, o_, smem, g, t, 3, regions)     # groups 0, 1, 2: not the open one
    b("cp_async_wait", n=None)
    snapshot(b, o_, smem, g, t, 4, regions)     # everything
    run(b, grid, block, src.ravel(), out.ravel())
    for k, landed in enumerate([0, 1, 2, 3, 4]):
        for r in range(regions):
            want = src[r] if r < landed else np.full((128, 4), -1, np.float32)
            assert np.array_equal(out[k, r], want), (k, r)


def test_cp_async_predicate_zero_fills_and_reads_nothing():
    rng = np.random.default_rng(6)
    src = rng.standard_normal((128, 4)).astype(np.float32)
    out = np.full((2, 1, 128, 4), np.nan, np.float32)
    b = Builder()
    s_, o_ = b.param("src", F32), b.param("out", F32)
    smem = b.array(F32, REGION, "shared")
    t, g = b.tid(), b.gid(64)
    poison(b, smem, t, 1)
    pred = b("ne", b("mod", g, 3, type=I32), 0, type=T.Bool)
    far = b("select", pred, b.ix(g, 4), 1 << 30, type=I32)     # the source of a false lane is
    cp_async(b, smem, t, 0, s_, g, pred=pred, src_index=far)   # out of bounds: not read
    b("cp_async_commit")
    snapshot(b, o_, smem, g, t, 0, 1)
    b("cp_async_wait", n=0)
    snapshot(b, o_, smem, g, t, 1, 1)
    run(b, 2, 64, src.ravel(), out.ravel())
    assert np.all(out[0] == -1)
    keep = (np.arange(128) % 3 != 0)[:, None]
    assert np.array_equal(out[1, 0], np.where(keep, src, 0))


def neighbour_kernel(wait, barrier):
    """Each thread copies 16 bytes to shared memory, then reads its neighbour's."""
    b = Builder()
    s_, o_ = b.param("src", F32), b.param("out", F32)
    smem = b.array(F32, REGION, "shared")
    t, g = b.tid(), b.gid(64)
    cp_async(b, smem, t, 0, s_, g)
    b("cp_async_commit")
    if wait:
        b("cp_async_wait", n=0)
    if barrier:
        b("barrier")
    nb = b("mod", b("add", t, 1, type=I32), 64, type=I32)
    for i in range(4):
        b("store", o_, b.ix(g, 4, i), b("load", smem, b.ix(nb, 4, i), type=F32, text="read"))
    return b


def test_cp_async_race_check():
    rng = np.random.default_rng(7)
    src = rng.standard_normal((128, 4)).astype(np.float32)
    out = np.full((128, 4), np.nan, np.float32)
    run(neighbour_kernel(True, True), 2, 64, src.ravel(), out.ravel(), race_check=True)
    assert np.array_equal(out, np.roll(src.reshape(2, 64, 4), -1, axis=1).reshape(128, 4))
    with pytest.raises(KernelRuntimeError, match=r"(?s)kern.py:\d+: read\n.*reads shared "
                       r"memory.*a cp.async by thread \(1, 0, 0\) at kern.py:\d+: cp_async "
                       r"has not finished"):
        run(neighbour_kernel(False, True), 2, 64, src.ravel(), out.ravel(), race_check=True)
    with pytest.raises(KernelRuntimeError, match=r"read-after-write.*kern.py:\d+: cp_async.*"
                       r"kern.py:\d+: read"):
        run(neighbour_kernel(True, False), 2, 64, src.ravel(), out.ravel(), race_check=True)
    out[...] = np.nan                      # without the check: stale (zero) shared memory
    run(neighbour_kernel(False, True), 2, 64, src.ravel(), out.ravel())
    assert np.all(out == 0)


def test_cp_async_bounds_and_alignment():
    src = np.zeros((128, 4), np.float32)
    b = Builder()
    s_ = b.param("src", F32)
    smem = b.array(F32, REGION, "shared")
    t, g = b.tid(), b.gid(64)
    bad = b("select", b("eq", g, 69, type=T.Bool), 4 * 128, b.ix(g, 4), type=I32)
    cp_async(b, smem, t, 0, s_, g, src_index=bad)
    with pytest.raises(KernelRuntimeError, match=r"(?s)kern.py:\d+: cp_async\n  out-of-bounds "
                       r"cp.async source of 'src' \(index 512, 16 bytes; the buffer has 512\) by "
                       r"thread \(5, 0, 0\) of block \(1, 0, 0\)"):
        run(b, 2, 64, src.ravel())
    b = Builder()
    s_ = b.param("src", F32)
    smem = b.array(F32, REGION, "shared")
    t, g = b.tid(), b.gid(64)
    b("cp_async", smem, b.ix(t, 2, 2), s_, b.ix(g, 4), bytes=16, cache="cg", text="cp_async")
    with pytest.raises(KernelRuntimeError, match=r"misaligned cp.async destination in shared "
                       r"array \(element 2, byte 8; a 16-byte copy"):
        run(b, 2, 64, src.ravel())


# -- shfl -----------------------------------------------------------------------------------------
def shfl_reference(x, arg, width, mode):
    """CUDA's __shfl_*_sync, per lane, from the programming guide's words."""
    out = x.copy()
    for w0 in range(0, len(x), 32):
        for lane in range(32):
            v, a = width[w0 + lane], int(arg[w0 + lane])
            seg = lane // v * v
            if mode == "idx":
                src = seg + a % v
            elif mode == "up":
                src = lane - a if lane - a >= seg else lane
            elif mode == "down":
                src = lane + a if lane + a < seg + v else lane
            else:                      # later groups are out of reach; earlier ones are not
                src = lane ^ a if (lane ^ a) < seg + v else lane
            out[w0 + lane] = x[w0 + src]
    return out


@pytest.mark.parametrize("mode", ["idx", "up", "down", "bfly"])
@pytest.mark.parametrize("width", [32, 16, 8, 1, "mixed"])
def test_shfl(mode, width):
    rng = np.random.default_rng(zlib.crc32(f"{mode}{width}".encode()))
    n = 128
    x = rng.integers(-2**31, 2**31, n).astype(np.int32)
    # any source lane for idx (taken modulo the width); deltas and masks below 32
    # (the hardware reads their low 5 bits only)
    arg = rng.integers(-100, 100, n) if mode == "idx" else rng.integers(0, 32, n)
    if mode == "bfly":
        arg = np.repeat(rng.integers(0, 32, n // 32), 32)          # one mask per warp
    arg = arg.astype(np.int32)
    widths = np.repeat(rng.choice([1, 2, 4, 8, 16, 32], n // 32), 32) if width == "mixed" \
        else np.full(n, width)
    out = np.zeros(n, np.int32)
    b = Builder()
    x_, a_, w_, o_ = (b.param("x", I32), b.param("arg", I32), b.param("width", I32),
                      b.param("out", I32))
    g = b.gid(64)
    v = b("shfl", b("load", x_, g, type=I32), b("load", a_, g, type=I32),
          b("load", w_, g, type=I32), type=I32, mode=mode)
    b("store", o_, g, v)
    run(b, 2, 64, x, arg, widths.astype(np.int32), out)
    assert np.array_equal(out, shfl_reference(x, arg, widths, mode))


def test_shfl_of_floats_with_constant_operands():
    x = np.random.default_rng(8).standard_normal(64).astype(np.float32)
    out = np.zeros(64, np.float32)
    b = Builder()
    x_, o_ = b.param("x", F32), b.param("out", F32)
    t = b.tid()
    b("store", o_, t, b("shfl", b("load", x_, t, type=F32), 3, 32, type=F32, mode="idx"))
    run(b, 1, 64, x, out)
    assert np.array_equal(out, np.repeat(x[[3, 35]], 32))


# -- warps ----------------------------------------------------------------------------------------
def collective_under(cond_of, block, op="shfl"):
    """A kernel running `op` under `if cond_of(builder, tid)`."""
    b = Builder()
    o_ = b.param("out", I32)
    smem = b.array(T.UInt16, 8 * ROWS, "shared")
    regs = b.array(T.UInt32, 1, "local")
    t = b.tid()

    def body(b):
        if op == "shfl":
            b("store", o_, t, b("shfl", t, 0, 32, type=I32, mode="idx", text="the shfl"))
        else:
            b("ldmatrix", regs, (0,), smem, b.ix(b("mod", t, 8, type=I32), 8), count=1,
              trans=False, text="the ldmatrix")
            b("store", o_, t, b("load", regs, 0, type=T.UInt32))
    if cond_of is None:
        body(b)
    else:
        b.if_(cond_of(b, t), body)
    return b


def test_partial_warps_are_refused():
    out = np.full(64, -1, np.int32)
    lt = lambda k: lambda b, t: b("lt", t, k, type=T.Bool)            # noqa: E731
    with pytest.raises(KernelRuntimeError, match=r"(?s)kern.py:\d+: the shfl\n  shfl needs all "
                       r"32 lanes of the warp, but in warp 1 of block \(0, 0, 0\) lanes 16-31 "
                       r"are inactive"):
        run(collective_under(lt(48), 64), 1, 64, out)
    with pytest.raises(KernelRuntimeError, match=r"kern.py:\d+: the ldmatrix\n  ldmatrix needs.*"
                       r"warp 0 of block \(0, 0, 0\) lanes 1, 3, 5.* are inactive"):
        even = lambda b, t: b("eq", b("mod", t, 2, type=I32), 0, type=T.Bool)   # noqa: E731
        run(collective_under(even, 64, "ldmatrix"), 1, 64, out)
    with pytest.raises(KernelRuntimeError, match=r"kern.py:\d+: the shfl\n  shfl needs every "
                       r"lane of the warp, but in warp 1 of block \(0, 0, 0\) lanes 8-15 are "
                       r"inactive"):
        run(collective_under(lt(40), 48), 1, 48, out)


def test_a_partial_last_warp_shuffles_among_its_lanes():
    """A block of 48 threads: the second warp's 16 lanes shuffle; lanes
    32-47 do not exist and count as exited, as for vote.sync."""
    out = np.full(48, -1, np.int32)
    run(collective_under(None, 48), 2, 48, out[:48])
    assert out.tolist() == [0] * 32 + [32] * 16


def test_whole_warps_may_branch():
    out = np.full(96, -1, np.int32)
    run(collective_under(lambda b, t: b("ge", t, 32, type=T.Bool), 96), 1, 96, out)
    assert np.array_equal(out, np.r_[np.full(32, -1), np.full(32, 32), np.full(32, 64)])
    out = np.full(64, -1, np.int32)
    run(collective_under(lambda b, t: b("lt", t, 32, type=T.Bool), 64, "ldmatrix"), 1, 64, out)
    assert np.array_equal(out, np.r_[np.zeros(32), np.full(32, -1)])


def test_ldmatrix_row_errors():
    b = Builder()
    smem = b.array(T.UInt16, 8 * ROWS, "shared")
    regs = b.array(T.UInt32, 1, "local")
    t = b.tid()
    b("ldmatrix", regs, (0,), smem, b.ix(t, 4), count=1, trans=False, text="the ldmatrix")
    with pytest.raises(KernelRuntimeError, match=r"kern.py:\d+: the ldmatrix\n  ldmatrix: lane 1 "
                       r"gives row address byte 8 of shared array \(element 4\), not 16-byte "
                       r"aligned"):
        run(b, 1, 32)
    b = Builder()
    smem = b.array(T.UInt16, 8 * ROWS, "shared")
    regs = b.array(T.UInt32, 2, "local")
    t = b.tid()
    # lanes 0-15 give rows of an .x2; lane 15's is past the end
    b("ldmatrix", regs, (0, 1), smem, b.ix(t, 72), count=2, trans=False, text="the ldmatrix")
    with pytest.raises(KernelRuntimeError, match=r"out-of-bounds ldmatrix of shared array "
                       r"\(index 1080, a 16-byte row; the buffer has 1024\) by thread "
                       r"\(15, 0, 0\)"):
        run(b, 1, 32)


def ldmatrix_after_cp_async(wait):
    """Each lane copies one 16-byte row to shared memory; the warp ldmatrix.x4's them."""
    b = Builder()
    src, dst = b.param("src", T.UInt16), b.param("out", T.UInt32)
    smem = b.array(T.UInt16, 8 * ROWS, "shared")
    regs = b.array(T.UInt32, 4, "local")
    t = b.tid()
    b("cp_async", smem, b.ix(t, 8), src, b.ix(t, 8), bytes=16, cache="ca", text="cp_async")
    b("cp_async_commit")
    if wait:
        b("cp_async_wait", n=0)
        b("barrier")
    b("ldmatrix", regs, (0, 1, 2, 3), smem, b.ix(t, 8), count=4, trans=True, text="the ldmatrix")
    from_registers(b, dst, t, regs, 4)
    return b


def test_ldmatrix_of_a_pending_cp_async():
    data = np.random.default_rng(9).integers(0, 1 << 16, 256, dtype=np.uint16)
    out = np.zeros((32, 4), np.uint32)
    run(ldmatrix_after_cp_async(True), 1, 32, data, out.ravel(), race_check=True)
    assert np.array_equal(out, matrix_reference(data, 8 * np.arange(32), 4, True))
    with pytest.raises(KernelRuntimeError, match=r"(?s)kern.py:\d+: the ldmatrix\n.*reads shared "
                       r"memory.*kern.py:\d+: cp_async has not finished"):
        run(ldmatrix_after_cp_async(False), 1, 32, data, out.ravel(), race_check=True)


def test_sub_byte_fragments_cannot_be_recast():
    """4-bit elements are one per byte on the CPU: seeing them as words would
    read the wrong bits, so it is refused."""
    b = Builder()
    frag = b.array(T.Int4, 8, "local")
    b("cast", b("addr", frag, type=ir.PtrType(T.Int4, "local")),
      type=ir.PtrType(T.UInt32, "local"), to=T.UInt32, ptr=True, text="recast")
    with pytest.raises(KernelRuntimeError, match=r"kern.py:\d+: recast\n.*stores Int4 elements "
                       "one per byte"):
        run(b, 1, 32)


def test_race_check_sees_bytes_through_recast_views():
    """The race check shadows shared memory byte by byte, whatever the view."""
    b = Builder()
    smem = b.array(F32, 32, "shared")
    t = b.tid()
    b("store", smem, t, 1.0, text="write")
    words = b("cast", b("addr", smem, type=ir.PtrType(F32, "shared")),
              type=ir.PtrType(T.UInt32, "shared"), to=T.UInt32, ptr=True)
    b("load", words, b("mod", b("add", t, 1, type=I32), 32, type=I32), type=T.UInt32,
      text="read")
    with pytest.raises(KernelRuntimeError, match=r"read-after-write\) on element 1 between thread "
                       r"\(1, 0, 0\) at kern.py:\d+: write and thread \(0, 0, 0\) at kern.py:\d+: "
                       "read"):
        run(b, 1, 32, race_check=True)
    b = Builder()
    smem = b.array(F32, 32, "shared")
    t = b.tid()
    b("store", smem, b("div", t, 2, type=I32), 1.0, text="write")     # two threads, one element
    with pytest.raises(KernelRuntimeError, match=r"write-after-write\) on element 0 between "
                       r"thread \(0, 0, 0\) at kern.py:\d+: write and thread \(1, 0, 0\)"):
        run(b, 1, 32, race_check=True)
