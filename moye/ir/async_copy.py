"""cp.async (sm_80): one thread's asynchronous copy from global to shared memory.
The atoms are in `atom/arch/cp_async.py`, their lowering in `device/atoms.py`."""
from .instr import Instr, is_pointer


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


class CpAsyncCommit(Instr):
    """cp.async.commit_group: close this thread's group of pending cp.async."""
    op = "cp_async_commit"


class CpAsyncWait(Instr):
    """cp.async.wait_group n: wait until at most n committed groups are
    pending (n None: cp.async.wait_all, committed or not)."""
    op = "cp_async_wait"
    attributes = {"n": None}
