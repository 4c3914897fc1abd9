"""cp.async (sm_80): one thread's asynchronous copy from global to shared memory.
The atoms are in `atom/arch/cp_async.py`, their lowering in `device/atoms.py`;
each class's C++ and CPU rules follow it (`lowering.py` states their contract;
the CPU semantics, pending groups per thread, are `backend/cpu/async_copy.py`)."""
from .instr import Instr, is_pointer
from .lowering import lowering


class CpAsync(Instr):
    """cp.async.{cache}.shared.global: one thread copies `bytes` (4, 8, 16)
    from global src[src_idx] to shared dst[dst_idx], asynchronously; cache is
    "ca" or "cg". With pred (Bool) false the destination is zero-filled and
    the source not read."""
    op = "cp_async"
    operands = ("dst", "dst_idx", "src", "src_idx", "pred?")
    attributes = {"bytes": 16, "cache": "ca"}

    def check(self):
        if not is_pointer(self.dst) or not is_pointer(self.src):
            return "dst and src must be pointers or arrays"
        return None


@lowering("cuda", CpAsync)
def _emit_cp_async(w, s, ind, decl):
    # "memory": the copy writes shared memory, so NVCC must not move this
    # thread's earlier reads of the destination after it (a ring whose
    # places a thread reads back, then refills: row_kernels.load_group)
    dst = w.smem_addr(s.dst, s.dst_idx)
    src = f"&{w.operand(s.src)}[{w.operand(s.src_idx)}]"
    n, cache = s.bytes, s.cache
    if s.pred is not None:
        w.emit(ind, f'asm volatile("cp.async.{cache}.shared.global [%0], [%1], {n}, %2;\\n" '
                    f':: "r"({dst}), "l"({src}), "r"({w.operand(s.pred)} ? {n} : 0) : "memory");')
    else:
        w.emit(ind, f'asm volatile("cp.async.{cache}.shared.global [%0], [%1], {n};\\n" '
                    f':: "r"({dst}), "l"({src}) : "memory");')


@lowering("cpu", CpAsync)
def _run_cp_async(b, s, mask):
    b.copies.issue(s, mask)


class CpAsyncCommit(Instr):
    """cp.async.commit_group: close this thread's group of pending cp.async."""
    op = "cp_async_commit"


@lowering("cuda", CpAsyncCommit)
def _emit_commit(w, s, ind, decl):
    w.emit(ind, 'asm volatile("cp.async.commit_group;\\n" ::);')


@lowering("cpu", CpAsyncCommit)
def _run_commit(b, s, mask):
    b.copies.commit(mask)


class CpAsyncWait(Instr):
    """cp.async.wait_group n: wait until at most n committed groups are
    pending (n None: cp.async.wait_all, committed or not)."""
    op = "cp_async_wait"
    attributes = {"n": None}


@lowering("cuda", CpAsyncWait)
def _emit_wait(w, s, ind, decl):
    if s.n is None:
        w.memory_asm(ind, "cp.async.wait_all")
    else:
        w.memory_asm(ind, f"cp.async.wait_group {int(s.n)}")


@lowering("cpu", CpAsyncWait)
def _run_wait(b, s, mask):
    b.copies.wait(s, mask)
