"""Thread-block clusters (sm_90). A block's rank in its cluster (`cta`) is an
Int32, x fastest; a multicast mask is a UInt16 with bit r for the block of
rank r. The device library's side is `device/cluster.py`. Each class's C++
and CPU rules follow it (`lowering.py` states their contract); the CPU
semantics, from the PTX ISA, are `backend/cpu/cluster.py`."""
from .. import types as T
from .hopper import memory_asm_with, tensor_map
from .instr import Instr, is_integer, is_pointer
from .lowering import lowering


class ClusterSpecial(Instr):
    """A cluster special register, defined at the top like `special`:
    clusterid.{x,y,z} (the cluster in the grid), nclusterid.* (clusters in
    the grid), cluster_ctaid.* (the block in its cluster), cluster_nctaid.*
    (blocks per cluster), cluster_ctarank, cluster_nctarank."""
    op = "cluster_special"
    attributes = {"name": None}
    pure = True
    arch = "sm_90"

    def result_type(self):
        return T.Int32


@lowering("cuda", ClusterSpecial)
def _emit_cluster_special(w, s, ind, decl):
    raw = w.name(s.result) + "_u"
    w.emit(ind, f"uint32_t {raw};")
    w.emit(ind, f'asm("mov.u32 %0, %%{s.name};" : "=r"({raw}));')
    w.emit(ind, f"{decl}static_cast<int>({raw});")


@lowering("cpu", ClusterSpecial)
def _run_cluster_special(b, s, mask):
    b.set_result(s, b.cluster.special(s, mask), mask)


class ClusterArrive(Instr):
    """barrier.cluster.arrive.release.aligned (relaxed: .relaxed instead of
    .release, orders no memory)."""
    op = "cluster_arrive"
    attributes = {"relaxed": False}
    arch = "sm_90"


@lowering("cuda", ClusterArrive)
def _emit_cluster_arrive(w, s, ind, decl):
    w.memory_asm(ind, f"barrier.cluster.arrive.{'relaxed' if s.relaxed else 'release'}.aligned")


@lowering("cpu", ClusterArrive)
def _run_cluster_arrive(b, s, mask):
    b.cluster.arrive(s, mask)


class ClusterWait(Instr):
    """barrier.cluster.wait.acquire.aligned: every thread of the cluster has arrived."""
    op = "cluster_wait"
    arch = "sm_90"


@lowering("cuda", ClusterWait)
def _emit_cluster_wait(w, s, ind, decl):
    w.memory_asm(ind, "barrier.cluster.wait.acquire.aligned")


@lowering("cpu", ClusterWait)
def _run_cluster_wait(b, s, mask):
    b.cluster.wait(s, mask)


class MbarrierArriveCluster(Instr):
    """mapa.shared::cluster, then mbarrier.arrive.shared::cluster (release, CTA
    scope): one arrival, per executing thread, on the mbarrier at bar's offset
    in the cluster's block of rank cta."""
    op = "mbarrier_arrive_cluster"
    operands = ("bar", "bar_idx", "cta")
    arch = "sm_90"


@lowering("cuda", MbarrierArriveCluster)
def _emit_mbarrier_arrive_cluster(w, s, ind, decl):
    w.emit(ind, 'asm volatile("{ .reg .b32 remote; mapa.shared::cluster.u32 remote, %0, %1; '
                'mbarrier.arrive.shared::cluster.b64 _, [remote]; }\\n" :: '
                f'"r"({w.smem_addr(s.bar, s.bar_idx)}), "r"({w.operand(s.cta)}) : "memory");')


@lowering("cpu", MbarrierArriveCluster)
def _run_mbarrier_arrive_cluster(b, s, mask):
    b.cluster.remote_arrive(s, mask)


class TmaLoadMulticast(Instr):
    """tma_load with .multicast::cluster: the box lands at dst's offset in each
    block of the mask and completes `bytes` on the mbarrier at bar's offset in
    each (PTX advises sm_90a for performance; sm_90 assembles it)."""
    op = "tma_load_multicast"
    operands = ("dst", "dst_idx", "bar", "bar_idx", "tmap", "mask", "*coords")
    attributes = {"rank": 1, "bytes": 0}
    arch = "sm_90"


@lowering("cuda", TmaLoadMulticast)
def _emit_tma_load_multicast(w, s, ind, decl):
    r = s.rank
    text = (f"cp.async.bulk.tensor.{r}d.shared::cluster.global.mbarrier::complete_tx::bytes"
            f".multicast::cluster [%0], [%1, {w.brace(4, r)}], [%2], %3")
    memory_asm_with(w, ind, text, [("r", w.smem_addr(s.dst, s.dst_idx)),
                                   ("l", tensor_map(w, s.tmap)),
                                   ("r", w.smem_addr(s.bar, s.bar_idx)),
                                   ("h", f"static_cast<uint16_t>({w.operand(s.mask)})")]
                    + [("r", w.operand(c)) for c in s.coords])


@lowering("cpu", TmaLoadMulticast)
def _run_tma_load_multicast(b, s, mask):
    b.cluster.multicast_load(s, mask)


# -- distributed shared memory: another block's shared memory -------------------------------

def _dsmem_check(s):
    if not is_pointer(s.ptr):
        return f"the base {s.ptr!r} is not a pointer or an array"
    if not is_integer(s.index):
        return f"the index {s.index!r} is not an integer"
    if not is_integer(s.cta):
        return f"the block rank {s.cta!r} is not an integer"
    return None


class DsmemLoad(Instr):
    """`ptr[index]` (one `elem`) in the shared memory of the cluster's block of
    rank `cta`, at the offset it has in this block's: mapa.shared::cluster.u32
    then ld.shared::cluster (CUDA: cluster.map_shared_rank)."""
    op = "dsmem_load"
    operands = ("ptr", "index", "cta")
    attributes = {"elem": None}
    arch = "sm_90"

    def result_type(self):
        return self.elem

    check = _dsmem_check


class DsmemStore(Instr):
    """`ptr[index] = value` (one `elem`) in the shared memory of the cluster's
    block of rank `cta`: mapa.shared::cluster.u32 then st.shared::cluster."""
    op = "dsmem_store"
    operands = ("ptr", "index", "cta", "value")
    attributes = {"elem": None}
    arch = "sm_90"

    check = _dsmem_check


# an element as the bits PTX moves: (ld/st type, asm constraint, C++ register type, the
# C++ of bits -> element, the C++ of element -> bits); {} is the operand
_DSMEM_BITS = {
    8: ("u8", "r", "uint32_t"), 16: ("b16", "h", "unsigned short"),
    32: ("b32", "r", "uint32_t"), 64: ("b64", "l", "unsigned long long")}
_FROM_BITS = {"Float32": "__uint_as_float({})", "TFloat32": "__uint_as_float({})",
              "Float64": "__longlong_as_double(static_cast<long long>({}))",
              "Float16": "__ushort_as_half({})", "BFloat16": "__ushort_as_bfloat16({})",
              "Bool": "({} != 0u)"}
_TO_BITS = {"Float32": "__float_as_uint({})", "TFloat32": "__float_as_uint({})",
            "Float64": "static_cast<unsigned long long>(__double_as_longlong({}))",
            "Float16": "__half_as_ushort({})", "BFloat16": "__bfloat16_as_ushort({})"}


def _dsmem_bits(elem):
    try:
        return _DSMEM_BITS[elem.bits]
    except KeyError:
        raise NotImplementedError(f"no distributed shared memory access of {elem}") from None


def _mapa(w, s, ind):
    """Declare the shared::cluster address of the access; return its name."""
    remote = w.name(s.result) + "_dsmem" if s.result is not None else "dsmem_addr"
    w.emit(ind, f"uint32_t {remote};")
    # not volatile: mapa is pure, so the compiler may share it between accesses
    w.emit(ind, f'asm("mapa.shared::cluster.u32 %0, %1, %2;\\n" : "=r"({remote}) : '
                f'"r"({w.smem_addr(s.ptr, s.index)}), "r"(static_cast<uint32_t>('
                f'{w.operand(s.cta)})));')
    return remote


@lowering("cuda", DsmemLoad)
def _emit_dsmem_load(w, s, ind, decl):
    ptx, con, reg = _dsmem_bits(s.elem)
    remote = _mapa(w, s, ind)
    bits = w.name(s.result) + "_bits"
    w.emit(ind, f"{reg} {bits};")
    w.emit(ind, f'asm volatile("ld.shared::cluster.{ptx} %0, [%1];\\n" : "={con}"({bits}) : '
                f'"r"({remote}) : "memory");')
    convert = _FROM_BITS.get(s.elem.name, "static_cast<" + w.ctype(s.elem) + ">({})")
    w.emit(ind, f"{decl}{convert.format(bits)};")


@lowering("cuda", DsmemStore)
def _emit_dsmem_store(w, s, ind, decl):
    ptx, con, reg = _dsmem_bits(s.elem)
    w.emit(ind, "{")
    inner = ind + "    "
    remote = _mapa(w, s, inner)
    convert = _TO_BITS.get(s.elem.name, "{}")
    value = convert.format(w.arg(s.value, s.elem))
    w.emit(inner, f'asm volatile("st.shared::cluster.{ptx} [%0], %1;\\n" :: "r"({remote}), '
                  f'"{con}"(static_cast<{reg}>({value})) : "memory");')
    w.emit(ind, "}")


class DsmemStoreAsync(Instr):
    """st.async: `ptr[index] = value` (one 32- or 64-bit `elem`) in the shared
    memory of the cluster's block of rank `cta`, completing its bytes on
    the mbarrier at (bar, bar_idx)'s offset in that block (mapa, then
    st.async.shared::cluster.mbarrier::complete_tx::bytes): the waiter on
    that mbarrier sees the value once the phase completes, with no fence."""
    op = "dsmem_store_async"
    operands = ("ptr", "index", "cta", "value", "bar", "bar_idx")
    attributes = {"elem": None}
    arch = "sm_90"

    check = _dsmem_check


@lowering("cuda", DsmemStoreAsync)
def _emit_dsmem_store_async(w, s, ind, decl):
    ptx, con, reg = _dsmem_bits(s.elem)
    convert = _TO_BITS.get(s.elem.name, "{}")
    value = convert.format(w.arg(s.value, s.elem))
    w.emit(ind, 'asm volatile("{ .reg .b32 ra, rb; mapa.shared::cluster.u32 ra, %0, %2; '
                'mapa.shared::cluster.u32 rb, %1, %2; '
                f'st.async.shared::cluster.mbarrier::complete_tx::bytes.{ptx} [ra], %3, [rb]; }}\\n" '
                f':: "r"({w.smem_addr(s.ptr, s.index)}), "r"({w.smem_addr(s.bar, s.bar_idx)}), '
                f'"r"(static_cast<uint32_t>({w.operand(s.cta)})), '
                f'"{con}"(static_cast<{reg}>({value})) : "memory");')


@lowering("cpu", DsmemStoreAsync)
def _run_dsmem_store_async(b, s, mask):
    b.cluster.store_async(s, mask)


@lowering("cpu", DsmemLoad)
def _run_dsmem_load(b, s, mask):
    b.cluster.peer_access(s, mask)


@lowering("cpu", DsmemStore)
def _run_dsmem_store(b, s, mask):
    b.cluster.peer_access(s, mask)
