"""Plot benchmarks/matmuls.py's JSON: TFLOP/s against problem size, each moye
kernel (solid) beside its cuBLAS peer (dashed), log scale.

    python benchmarks/plot_matmuls.py [JSON] [-o PNG]

JSON defaults to benchmarks/results/matmuls_h100.json, PNG to
benchmarks/results/matmuls_h100.png. Shapes go along the x axis in order of
2MNK (several shapes here share a flop count, so each gets its own place).
Where two kernels share a cuBLAS peer (the SIMT kernels on the same tensors;
the TF32 kernels on differently laid out ones), the peer's line is the faster
of its measurements at each shape. Needs matplotlib (pip install .[bench]).
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from matmuls import shape_label  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
FAMILY_COLOR = {"float32": "tab:blue", "tf32": "tab:orange", "float16": "tab:green",
                "bfloat16": "tab:red"}
MARKERS = "osD^v"


def series(rows):
    """(shapes in 2MNK order, {kernel: {shape: TFLOP/s}}, {peer: {shape: TFLOP/s}},
    {kernel: dtype}, {kernel: peer})."""
    shapes = sorted({(r["M"], r["N"], r["K"]) for r in rows},
                    key=lambda s: (s[0] * s[1] * s[2], not s[0] == s[1] == s[2], s))
    kernels, peers, dtype, peer_of = {}, {}, {}, {}
    for r in rows:
        s = (r["M"], r["N"], r["K"])
        kernels.setdefault(r["kernel"], {})[s] = r["moye_tflops"]
        best = peers.setdefault(r["cublas"], {})
        best[s] = max(best.get(s, 0.0), r["cublas_tflops"])
        dtype[r["kernel"]], peer_of[r["kernel"]] = r["dtype"], r["cublas"]
    return shapes, kernels, peers, dtype, peer_of


def plot(data, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    shapes, kernels, peers, dtype, peer_of = series(data["rows"])
    x = {s: i for i, s in enumerate(shapes)}
    fig, ax = plt.subplots(figsize=(10, 6))
    in_family = {}
    for name, points in kernels.items():
        color = FAMILY_COLOR.get(dtype[name], "tab:gray")
        marker = MARKERS[in_family.get(color, 0) % len(MARKERS)]
        in_family[color] = in_family.get(color, 0) + 1
        s = [s for s in shapes if s in points]
        ax.plot([x[v] for v in s], [points[v] for v in s], color=color, marker=marker,
                label=f"moye {name} ({dtype[name]})")
    for peer, points in peers.items():
        families = {dtype[k] for k in kernels if peer_of[k] == peer}
        color = FAMILY_COLOR.get(min(families), "tab:gray")
        s = [s for s in shapes if s in points]
        ax.plot([x[v] for v in s], [points[v] for v in s], color=color, linestyle="--",
                marker="x", label=peer)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([f"{shape_label(*s)}\n{2 * s[0] * s[1] * s[2] / 1e12:.2f} TFLOP"
                        for s in shapes], fontsize=8)
    ax.set_xlabel("M x N x K (2MNK flop)")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_ylabel("TFLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"moye matmuls against cuBLAS, C = A B^T, on {data['device']}")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=150)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", nargs="?", default=str(RESULTS / "matmuls_h100.json"))
    parser.add_argument("-o", "--output", default=str(RESULTS / "matmuls_h100.png"))
    args = parser.parse_args(argv)
    data = json.loads(Path(args.json).read_text())
    if not data.get("rows"):
        raise SystemExit(f"plot_matmuls: {args.json} has no rows to plot")
    plot(data, args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
