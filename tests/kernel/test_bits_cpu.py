"""moye.popc, clz, ffs and brev: every element of every integer type
against Python's integers, on numbers while tracing, in a warp's stream
compaction (ballot then popc), their C++ and NVRTC, and bad arguments."""
import numpy as np
import pytest

import moye

rng = np.random.default_rng(31)
FNS = ("popc", "clz", "ffs", "brev")


def reference(fn, value, bits):
    """fn of `value`'s `bits` bits, as Python integers."""
    u = int(value) % 2 ** bits
    if fn == "popc":
        return bin(u).count("1")
    if fn == "clz":
        return bits - u.bit_length()
    if fn == "ffs":
        return (u & -u).bit_length()
    return int(f"{u:0{bits}b}"[::-1], 2)


def samples(dtype):
    """Random values of `dtype` and its edges: 0, 1, -1, the least and the
    greatest, single high bits."""
    info = np.iinfo(dtype)
    edges = [0, 1, info.max, info.min, info.max // 2 + 1]
    if info.min < 0:
        edges.append(-1)
    raw = rng.integers(info.min, info.max, 59, dtype=dtype, endpoint=True)
    return np.concatenate([np.array(edges, dtype), raw])


@moye.kernel
def bits_kernel(pc, lz, fs, br, x):
    t = moye.thread_idx.x
    pc[t] = moye.popc(x[t])
    lz[t] = moye.clz(x[t])
    fs[t] = moye.ffs(x[t])
    br[t] = moye.brev(x[t])


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint64, np.int16, np.uint8])
def test_every_element_of_every_integer_type(dtype):
    """Narrower integers are widened to 32 bits as C does (a signed one's
    sign extended); brev keeps the (widened) type."""
    x = samples(dtype)
    bits = 64 if np.dtype(dtype).itemsize == 8 else 32
    wide = np.dtype(dtype) if bits == 64 or np.dtype(dtype).itemsize == 4 else np.dtype(np.int32)
    outs = [np.full(x.size, -7, np.int32) for _ in range(3)] + [np.zeros(x.size, wide)]
    bits_kernel[1, x.size](*outs, x)
    for fn, out in zip(FNS, outs):
        want = [reference(fn, v, bits) for v in x]
        got = [int(v) % 2 ** bits for v in out] if fn == "brev" else out.tolist()
        assert got == want, fn


@pytest.mark.parametrize("fn, value, want", [
    ("popc", 0b1011, 3), ("popc", -1, 32), ("popc", 2 ** 40 + 1, 2), ("popc", 0, 0),
    ("clz", 1, 31), ("clz", 0, 32), ("clz", -1, 0), ("clz", 2 ** 33, 30),
    ("ffs", 8, 4), ("ffs", 0, 0), ("ffs", -2 ** 31, 32), ("ffs", 2 ** 40, 41),
    ("brev", 1, 2 ** 31), ("brev", 2 ** 31, 1), ("brev", 2 ** 32, 2 ** 31),
])
def test_numbers_give_python_values(fn, value, want):
    """On a number (here and while tracing): its 32 bits, or 64 where it
    needs them."""
    assert getattr(moye, fn)(value) == want


@moye.kernel
def compact_kernel(out, count, x, limit):
    """Each warp keeps its values below `limit` in order: a lane's place is
    the count of kept lanes below it (ballot, then popc), the warp's base
    one atomic add by its lane 0."""
    t = moye.thread_idx.x
    lane = moye.lane_idx()
    keep = x[t] < limit
    votes = moye.ballot(keep)
    below = moye.popc(votes & ((1 << lane) - 1))
    base = 0
    if lane == 0:
        base = moye.atomic_add(count, 0, moye.popc(votes))
    base = moye.shfl_sync(base, 0)
    if keep:
        out[base + below] = x[t]


def test_a_warp_compacts_its_values_in_order():
    """Each warp's kept values lie together in `out`, in lane order (the
    warps' runs in the order of their atomic adds), and nothing else."""
    x = rng.standard_normal(96).astype(np.float32)
    out = np.full(96, np.nan, np.float32)
    count = np.zeros(1, np.int32)
    compact_kernel[1, 96](out, count, x, 0.25)
    kept = x < 0.25
    assert count[0] == kept.sum()
    for w in range(3):
        mine = x[32 * w: 32 * w + 32][kept[32 * w: 32 * w + 32]]
        start = int(np.nonzero(out == mine[0])[0][0])
        assert np.array_equal(out[start: start + mine.size], mine), w
    assert np.array_equal(np.sort(out[:count[0]]), np.sort(x[kept]))
    assert np.isnan(out[count[0]:]).all()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_cuda_source_and_nvrtc(arch):
    from moye.backend.cuda import nvrtc
    for dtype, suffix in ((np.int32, ""), (np.uint64, "ll")):
        x = np.zeros(32, dtype)
        br = np.zeros(32, dtype)
        source = bits_kernel.cuda_source(*(np.zeros(32, np.int32) for _ in range(3)), br, x,
                                         block=32)
        for fn in FNS:
            assert f"__{fn}{suffix}((" in source, (fn, source)
        module = nvrtc.compile_cuda(source, ["moye_bits_kernel"], arch)
        assert module.cubin[:4] == b"\x7fELF"


@moye.kernel
def float_bits_kernel(out, x):
    out[0] = moye.popc(x[0])


@pytest.mark.parametrize("fn, value, match", [
    ("popc", 1.5, r"popc: x must be an integer, got float 1\.5"),
    ("clz", True, r"clz: x must be an integer, got bool True"),
    ("ffs", 2 ** 64, r"ffs: 18446744073709551616 has more than 64 bits"),
    ("brev", -2 ** 63 - 1, r"brev: -9223372036854775809 has more than 64 bits"),
])
def test_bad_numbers(fn, value, match):
    with pytest.raises(moye.MoyeTypeError, match=match):
        getattr(moye, fn)(value)


def test_a_float_in_a_kernel_names_the_line():
    with pytest.raises(moye.MoyeError, match=r"test_bits_cpu\.py:\d+: out\[0\] = moye\.popc\(x\[0\]"
                       r"\)[\s\S]*popc: x must be an integer, got Float32"):
        float_bits_kernel[1, 1](np.zeros(1, np.int32), np.zeros(1, np.float32))
