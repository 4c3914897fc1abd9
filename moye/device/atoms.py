"""Copy and MMA atoms inside kernels: each atom of a thread's partition
becomes its real instruction (cp.async, ldmatrix, stmatrix, mma.sync).

A partition's mode 0 holds the values of one or more atoms (a multiple of
the atom's value count); the other modes repeat the atom. For each repeat
the values must sit where the instruction wants them: contiguous and
aligned in memory for cp.async and ldmatrix's row, packed into whole
registers (two f16 in a b32, ...) in register fragments.
"""
from .. import types as T
from ..array import copyto, make_fragment_like
from ..compiler.control import if_
from ..compiler.memory import (PointerEngine, copy_elements, index_operand, lowers_atoms,
                               register_allocate)
from ..compiler.tracer import KernelError, Sym, coerce, divisor_of, current
from ..layout import size
from ..tiled.predicated import atom_slice
from .fragments import (REGISTER_TYPES, atom_instances, gemm_extents, is_run, register_list,
                        register_lists)
from .wgmma import wgmma_atom


# -- copies ----------------------------------------------------------------------------
def copy_atom(atom, dst, src):
    """Emit `atom`'s instruction for every atom in the partitions dst, src."""
    kind = atom.op.kind
    if kind == "universal":
        return _universal(atom, dst, src)
    if kind == "cp_async":
        return _cp_async(atom, dst, src)
    if kind in ("ldsm", "stsm"):
        return _matrix(atom, dst, src, kind)
    raise KernelError(f"copyto: {atom.op} has no kernel emission")


def _universal(atom, dst, src):
    """A plain copy: one vector load and store of the op's width per atom
    when both sides allow it, else the widest vectors the layouts allow."""
    n = atom.num_val_src
    vectorizable = n > 1 and atom.op.bits in (16, 32, 64, 128) and \
        dst.engine.dtype.bits == src.engine.dtype.bits
    if vectorizable:
        d_inst = atom_instances(dst, n, "copyto")
        s_inst = atom_instances(src, n, "copyto")
        nbytes = atom.op.bits // 8
        ok = len(d_inst) == len(s_inst) and all(
            is_run(r) and _aligned(e, f, nbytes)
            for inst, e in ((d_inst, dst.engine), (s_inst, src.engine)) for r, f in inst)
        if ok:
            d0, s0 = _at_base(dst.engine), _at_base(src.engine)
            for (_, df), (_, sf) in zip(d_inst, s_inst):
                d0.store(df, s0.load(sf, n), n)
            return
    if hasattr(dst.layout, "outer") or hasattr(src.layout, "outer"):
        for i in range(size(dst.layout)):
            dst.engine.store(dst.layout(i), src.engine.load(src.layout(i)))
        return
    copy_elements(dst.engine, dst.layout, src.engine, src.layout)


def _at_base(e):
    """The engine with its offset folded away (atom offsets include it)."""
    return PointerEngine(e.base, e.dtype, e.space, 0, e.align)


def _aligned(engine, first, nbytes):
    return engine.align % nbytes == 0 and \
        divisor_of(first) % (nbytes * 8 // engine.dtype.bits) == 0


def _contiguous(engine, rel, first, nbytes, what, side):
    if not is_run(rel):
        raise KernelError(f"{what}: the {side} values of one atom are not contiguous in memory "
                          f"(offsets {rel}); the instruction moves {nbytes} contiguous bytes")
    elems = nbytes * 8 // engine.dtype.bits
    if engine.align % nbytes or divisor_of(first) % elems:
        raise KernelError(f"{what}: the {side} address is not provably aligned to {nbytes} "
                          f"bytes (offset {first!r} elements of {engine.dtype})")


def _cp_async(atom, dst, src, pred=None):
    what = f"copyto({atom.op})"
    if src.engine.space != "global" or dst.engine.space != "shared":
        raise KernelError(f"{what}: cp.async copies global to shared memory, got "
                          f"{src.engine.space} to {dst.engine.space}")
    n = atom.num_val_src
    nbytes = atom.op.info["bytes"]
    s_inst, d_inst = atom_instances(src, n, what), atom_instances(dst, n, what)
    if len(s_inst) != len(d_inst):
        raise KernelError(f"{what}: src {src.layout} and dst {dst.layout} hold different "
                          "numbers of atoms")
    for i, ((srel, sfirst), (drel, dfirst)) in enumerate(zip(s_inst, d_inst)):
        _contiguous(src.engine, srel, sfirst, nbytes, what, "source")
        _contiguous(dst.engine, drel, dfirst, nbytes, what, "destination")
        args = (dst.engine.base, index_operand(dfirst), src.engine.base, index_operand(sfirst))
        if pred is not None:
            p = pred[i] if isinstance(pred, list) else pred
            if p is False or (isinstance(p, int) and not isinstance(p, Sym) and not p):
                p = False
            if p is not True:
                args += (coerce(p, T.Bool) if isinstance(p, Sym) else bool(p),)
        current().instr("cp_async", args, bytes=nbytes, cache=atom.op.info["cache_op"])


def _matrix(atom, dst, src, kind):
    op = atom.op
    what = f"copyto({op})"
    count, trans = op.info["count"], op.info["transpose"]
    mem, regs = (src, dst) if kind == "ldsm" else (dst, src)
    if mem.engine.space != "shared":
        raise KernelError(f"{what}: the matrix side must be shared memory, got "
                          f"{mem.engine.space}")
    # Without .trans each lane's 32-bit words move whole, so 8- and 32-bit elements
    # (int8, tf32) pass through as CuTe's and MoYe's U32 atoms use them; .trans
    # moves 16-bit halves.
    bits = (16,) if trans else (8, 16, 32)
    if mem.engine.dtype.bits not in bits or regs.engine.dtype.bits != mem.engine.dtype.bits:
        moves = "16-bit elements (.trans)" if trans else "8-, 16- or 32-bit elements"
        raise KernelError(f"{what}: ldmatrix/stmatrix move {moves}, the same size on both "
                          f"sides; got {mem.engine.dtype} and {regs.engine.dtype}")
    n_mem = atom.num_val_src if kind == "ldsm" else atom.num_val_dst
    n_reg = atom.num_val_dst if kind == "ldsm" else atom.num_val_src
    m_inst, r_inst = atom_instances(mem, n_mem, what), atom_instances(regs, n_reg, what)
    if len(m_inst) != len(r_inst):
        raise KernelError(f"{what}: src {src.layout} and dst {dst.layout} hold different "
                          "numbers of atoms")
    for (mrel, mfirst), (rrel, rfirst) in zip(m_inst, r_inst):
        _contiguous(mem.engine, mrel, mfirst, 16, what, "shared-memory row")
        base, words = register_list(regs.engine, rrel, rfirst, T.UInt32, what)
        if len(words) != count:
            raise KernelError(f"{what}: {len(words)} registers per atom, expected {count}")
        if kind == "ldsm":
            current().instr("ldmatrix", (base, words, mem.engine.base, index_operand(mfirst)),
                            count=count, trans=trans)
        else:
            current().instr("stmatrix", (mem.engine.base, index_operand(mfirst), base, words),
                            count=count, trans=trans)


def copy_if_atom(atom, pred, dst, src):
    """copy_if in a kernel: `pred` holds one value per index of the modes after
    the first (moye.tiled.predicated). cp.async takes its zero-filling form;
    every other copy runs under an `if` per predicate that is not static."""
    if atom.op.kind == "cp_async":
        per = len(atom_instances(dst, atom.num_val_dst, f"copy_if({atom.op})")) // len(pred)
        return _cp_async(atom, dst, src, [p for p in pred for _ in range(per)])
    for r, p in enumerate(pred):
        d, s = atom_slice(dst, r), atom_slice(src, r)
        if not isinstance(p, Sym):
            if p:
                copy_atom(atom, d, s)
            continue
        branch = if_(p, (), ())
        branch.then()
        copy_atom(atom, d, s)
        branch.then_done(())
        branch.result()


# -- MMA ---------------------------------------------------------------------------------
def mma_atom(atom, d, a, b, c):
    """D = A * B^T + C over (V, M, K) x (V, N, K) -> (V, M, N) register
    fragments, one mma.sync per (m, n, k); k outermost, n serpentine."""
    op = atom.op
    if op.info.get("kind") == "wgmma":
        return wgmma_atom(atom, d, a, b, c)
    regs = op.info["registers"]
    what = f"gemm({op})"
    M, N, K = gemm_extents(what, d, a, b, c, "make_fragment_C")
    a, b, c = _in_registers(a), _in_registers(b), _in_registers(c)
    c_after = op.info.get("c_after", False)
    lists = {}
    if c_after:         # the instruction gets a zero C; C is added to D after it
        count, rtype = regs["c"]
        zero = register_allocate(REGISTER_TYPES[rtype], count)
        for i in range(count):
            zero.store(i, 0)
        lists["c"] = ({j: (zero.base, tuple(range(count))) for j in range(M * N)}, M)
    for name, arr in (("a", a), ("b", b), ("c", c), ("d", d)):
        if name in lists:
            continue
        lists[name] = (register_lists(arr, *regs[name], what, name.upper()), size(arr, 1))
    b_ = current()
    for k in range(K):
        for m in range(M):
            for nn in range(N):
                n = nn if m % 2 == 0 else N - 1 - nn
                da, dw = lists["d"][0][m + M * n]
                aa, aw = lists["a"][0][m + M * k]
                ba, bw = lists["b"][0][n + N * k]
                ca, cw = lists["c"][0][m + M * n] if k == 0 else (da, dw)
                b_.instr("mma", (da, dw, aa, aw, ba, bw, ca, cw), ptx=op.ptx)
                if c_after and k == 0:
                    for v in range(size(d, 0)):
                        d[v, m, n] = d[v, m, n] + c[v, m, n]


def _in_registers(arr):
    """`arr` itself if in registers, else a register copy of it."""
    if arr.engine.space == "local":
        return arr
    frag = make_fragment_like(arr)
    copyto(frag, arr)
    return frag


lowers_atoms(copy_atom, copy_if_atom, mma_atom)
