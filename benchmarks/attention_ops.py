"""moye.ops.attention, forward and backward, against torch's SDPA backends
(cuDNN and FLASH, FlashAttention-2) and flash-attn-4 where it imports, on the
same tensors in one run, through the public calls (host time included):
issue 20's shapes (hidden size 2048, batch x seqlen = 16k, head dims 64, 128
and 256; causal and not), milliseconds, TFLOP/s and moye's ratios.

    python benchmarks/attention_ops.py [--json out.json] [--dtype float16]
        [--head-dims 64 128 256] [--seqlens 1024 4096 16384] [--no-backward]
        [--device cpu --hidden 64 --head-dims 64 --seqlens 80 --batch-tokens 160]
                                                          (a smoke run on the CPU backend)

Every output is first checked against a float32 reference on the first
batch and two heads (o, and dq, dk, dv for the backward): the largest error
and the relative Frobenius error are printed; a moye result off 2e-2
relative (Frobenius) stops the run.
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HIDDEN = 2048
TOKENS = 16384
TOLERANCE = 2e-2
WARM_SECONDS = 0.3      # of calls before each timing: a kernel's first timing follows its
                        # compile, seconds in which the GPU idled and its clocks fell


def flops(B, H, S, d, causal, backward):
    """The forward's 4 B H S^2 d (half of it causal); the backward's 2.5 times that."""
    f = 4 * B * H * S * S * d / (2 if causal else 1)
    return 2.5 * f if backward else f


def reference(torch, q, k, v, causal, do):
    """o and (dq, dk, dv) in float32 on q[:1, :2] (SDPA's math backend)."""
    q, k, v, do = (t[:1, :2].float().detach().requires_grad_() for t in (q, k, v, do))
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    o.backward(do.detach())
    return o.detach(), (q.grad, k.grad, v.grad)


def errors(torch, got, want):
    """(largest error, relative Frobenius error) of `got` against `want`."""
    diff = got[:1, :2].float() - want
    return float(diff.abs().max()), float(diff.norm() / want.norm())


def peers(torch):
    """name -> fn(q, k, v, causal) giving o, for the peers that run here."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sdpa = torch.nn.functional.scaled_dot_product_attention
    out = {}
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("flash2", SDPBackend.FLASH_ATTENTION)):
        def fn(q, k, v, causal, backend=backend):
            with sdpa_kernel(backend):
                return sdpa(q, k, v, is_causal=causal)
        out[name] = fn
    try:
        from flash_attn.cute.interface import flash_attn_func

        def fa4(q, k, v, causal):
            o = flash_attn_func(*(t.transpose(1, 2) for t in (q, k, v)), causal=causal)
            return (o[0] if isinstance(o, tuple) else o).transpose(1, 2)
        out["fa4"] = fa4
    except Exception:       # noqa: BLE001 - not installed, or not for this GPU
        pass
    return out


def timed(torch, fn, device):
    """Milliseconds a call of fn(): CUDA events (benchmarks/kernels.py) after
    WARM_SECONDS of calls, or the wall clock."""
    if device == "cuda":
        from kernels import cuda_time
        end = time.perf_counter() + WARM_SECONDS   # the clocks up again after a compile
        while time.perf_counter() < end:
            fn()
            torch.cuda.synchronize()
        return cuda_time(torch, fn, iters=20, warmup=3)
    fn()
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def run_row(torch, ops, fns, B, H, S, d, causal, dtype, device, backward):
    """One shape: each runner's forward (and backward) milliseconds and errors."""
    g = torch.Generator(device=device).manual_seed(S * d + causal)
    q, k, v, do = (torch.randn(B, H, S, d, device=device, dtype=dtype, generator=g)
                   for _ in range(4))
    ref_o, ref_grads = reference(torch, q, k, v, causal, do)
    row = {"B": B, "H": H, "S": S, "d": d, "causal": causal, "dtype": str(dtype)[6:]}
    for name, fn in {"moye": lambda q, k, v, c: ops.attention(q, k, v, causal=c), **fns}.items():
        try:
            o = fn(q, k, v, causal)
        except Exception as e:      # noqa: BLE001 - a peer that does not take this shape
            if name == "moye":
                raise
            row[name] = {"error": f"{type(e).__name__}: {e}"[:200]}
            continue
        entry = {"fwd_ms": timed(torch, lambda: fn(q, k, v, causal), device),
                 "fwd_err": errors(torch, o, ref_o)}
        if backward:
            qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
            o = fn(qg, kg, vg, causal)
            grads = torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True)
            entry["bwd_err"] = [errors(torch, a, b) for a, b in zip(grads, ref_grads)]
            entry["bwd_ms"] = timed(torch, lambda: torch.autograd.grad(
                o, (qg, kg, vg), do, retain_graph=True), device)
        row[name] = entry
    worst = max([row["moye"]["fwd_err"][1]] + [e[1] for e in row["moye"].get("bwd_err", [])])
    if not worst <= TOLERANCE:
        raise SystemExit(f"moye off the float32 reference at {row}: relative error {worst:.3e}")
    return row


def report(rows, names, backward):
    for what in ("fwd", "bwd") if backward else ("fwd",):
        print(f"\n{what}: TFLOP/s (moye / peer)")
        print("| d | seqlen | causal | moye | " + " | ".join(names) + " |")
        print("| ---: | ---: | --- | ---: | " + " | ".join("---:" for _ in names) + " |")
        for r in rows:
            f = flops(r["B"], r["H"], r["S"], r["d"], r["causal"], what == "bwd") / 1e9
            ours = r["moye"][f"{what}_ms"]
            cells = []
            for n in names:
                ms = r.get(n, {}).get(f"{what}_ms")
                cells.append("n/a" if ms is None else f"{f / ms:.1f} ({ms / ours:.2f}x)")
            print(f"| {r['d']} | {r['S']} | {r['causal']} | {f / ours:.1f} | "
                  + " | ".join(cells) + " |")
        errs = [r["moye"][f"{what}_err"] for r in rows]
        flat = [e for x in errs for e in (x if what == "bwd" else [x])]
        print(f"moye {what} against float32: largest error {max(e[0] for e in flat):.3e}, "
              f"relative Frobenius {max(e[1] for e in flat):.3e}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json")
    p.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    p.add_argument("--head-dims", nargs="+", type=int, default=[64, 128, 256])
    p.add_argument("--seqlens", nargs="+", type=int, default=[1024, 4096, 16384])
    p.add_argument("--batch-tokens", type=int, default=TOKENS, help="batch x seqlen")
    p.add_argument("--hidden", type=int, default=HIDDEN, help="heads x head dim")
    p.add_argument("--no-backward", action="store_true")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    a = p.parse_args(argv)
    if any(s < 1 or a.batch_tokens % s for s in a.seqlens):
        p.error(f"each seqlen must divide --batch-tokens {a.batch_tokens}")
    if any(d < 1 or a.hidden % d for d in a.head_dims):
        p.error(f"each head dim must divide the hidden size {a.hidden}")
    import torch

    from moye import ops
    fns = peers(torch) if a.device == "cuda" else {}
    dtype = getattr(torch, a.dtype)
    rows = []
    for d in a.head_dims:
        for S in a.seqlens:
            for causal in (False, True):
                rows.append(run_row(torch, ops, fns, a.batch_tokens // S, a.hidden // d, S, d,
                                    causal, dtype, a.device, not a.no_backward))
                print(json.dumps(rows[-1]), flush=True)
    device = torch.cuda.get_device_name() if a.device == "cuda" else "cpu"
    print(f"\nmoye.ops.attention on {device}, {a.dtype}")
    report(rows, list(fns), not a.no_backward)
    if a.json:
        Path(a.json).write_text(json.dumps({"device": device, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
