"""The FA2-style attention examples (moye/examples/attention_simt.py and
attention_mma.py) against their hand-written CUDA twins (benchmarks/twins/)
and torch's scaled_dot_product_attention, in the same run: head dim 64,
(batch * heads, seqlen, 64) row-major, milliseconds and TFLOP/s.

    python benchmarks/attention.py [--json out.json] [--shapes BH,SEQLEN ...]

Every timed kernel is first checked: output poisoned with NaN, the largest
error against float64 relative to the largest value (1e-5 float32, 2e-3 fp16).
"""
import argparse
import ctypes
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernels import cuda_time, warm_up  # noqa: E402

SHAPES = [(64, 1024), (64, 4096), (16, 16384)]
TWINS = Path(__file__).resolve().parent / "twins"


def twin(name, smem):
    """A launcher of the twin `name`: fn(q, k, v, o)."""
    from moye.backend.cuda import driver, nvrtc
    m = nvrtc.compile_cuda((TWINS / f"{name}.cu").read_text(), [name], driver.device_arch())
    fn = driver.load_module(m.cubin).get_function(m.lowered_names[name])
    if smem > 48 * 1024:
        fn.set_max_dynamic_shared_memory(smem)
    threads = 256 if name == "attention_simt" else 128

    def launch(q, k, v, o):
        bh, seqlen, _ = q.shape
        driver.launch(fn, (seqlen // 64, bh), threads,
                      [(ctypes.c_uint64, t.data_ptr()) for t in (q, k, v, o)]
                      + [(ctypes.c_int32, seqlen),
                         (ctypes.c_float, math.log2(math.e) / 8)], shared_mem=smem)
    return launch


def main():
    import torch
    from moye.examples import attention_mma, attention_simt
    p = argparse.ArgumentParser()
    p.add_argument("--json")
    p.add_argument("--shapes", nargs="*", help="BH,SEQLEN")
    a = p.parse_args()
    shapes = [tuple(map(int, s.split(","))) for s in a.shapes] if a.shapes else SHAPES
    warm_up(torch)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    runs = {
        "simt": (torch.float32, 1e-5, attention_simt.launch,
                 twin("attention_simt", (3 * 64 * 65 + 64 * 64) * 4)),
        "mma": (torch.float16, 2e-3, attention_mma.launch, twin("attention_mma", 0)),
    }
    rows = []
    print(f"{'kernel':<6} {'BH':>4} {'seqlen':>6} {'moye ms':>9} {'twin ms':>9} {'twin/moye':>9} "
          f"{'sdpa ms':>9} {'moye TFLOP/s':>12}  on {torch.cuda.get_device_name()}")
    for bh, seqlen in shapes:
        for kind, (dtype, tol, moye_launch, twin_launch) in runs.items():
            q, k, v = (torch.randn(bh, seqlen, 64, device="cuda", dtype=dtype)
                       for _ in range(3))
            c = slice(0, 4)                 # the float64 reference on a few heads fits in memory
            ref = torch.softmax(q[c].double() @ k[c].double().transpose(1, 2) / 8, -1) \
                @ v[c].double()
            times = {}
            for who, fn in (("moye", moye_launch), ("twin", twin_launch),
                            ("sdpa", lambda q, k, v, o: o.copy_(sdpa(q[None], k[None],
                                                                     v[None])[0]))):
                o = torch.full_like(q, float("nan"))
                fn(q, k, v, o)
                torch.cuda.synchronize()
                err = float((o[c].double() - ref).abs().max() / ref.abs().max())
                if not err < tol:
                    raise SystemExit(f"{kind} {who} BH {bh} seqlen {seqlen}: error {err:.2e}")
                times[who] = cuda_time(torch, lambda: fn(q, k, v, o))
            tflops = 4 * bh * seqlen * seqlen * 64 / times["moye"] / 1e9
            print(f"{kind:<6} {bh:>4} {seqlen:>6} {times['moye']:>9.3f} {times['twin']:>9.3f} "
                  f"{times['twin'] / times['moye']:>9.2f} {times['sdpa']:>9.3f} {tflops:>12.1f}")
            rows.append({"kernel": kind, "bh": bh, "seqlen": seqlen, **times,
                         "device": torch.cuda.get_device_name()})
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
