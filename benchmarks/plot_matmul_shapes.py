"""Plot benchmarks/matmul_shapes.py's JSON: moye's speed over cuBLAS's against
M (log2 axis), one subplot per (N, K), a line per dtype and layout, with the
targets 1.0 and 0.9 drawn; below, the fused rows' moye over torch unfused
(target 1.1).

    python benchmarks/plot_matmul_shapes.py [JSON ...] [-o PNG]

Several JSONs (runs split to fit the GPU machine's calls) are merged as
`matmul_shapes.py --merge` does. JSON defaults to
benchmarks/results/matmul_shapes_h100.json, PNG to
benchmarks/results/matmul_shapes_h100.png. A row without a ratio (moye wrong
or raising) leaves a gap. Needs matplotlib (pip install .[bench]).
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from matmul_shapes import KINDS, TARGETS, geomean, is_cube, merge, ratio  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
COLOR = {"float16": "tab:blue", "bfloat16": "tab:red"}
LINE = {"nn": dict(linestyle="-", marker="o"), "nt": dict(linestyle="--", marker="s")}
# the kind's ratio, its label and the lines drawn across its panels
AXIS = {"plain": ("moye / cuBLAS", (TARGETS["geomean"], TARGETS["floor"])),
        "fused": ("moye fused / torch unfused", (1.0, TARGETS["fused"]))}


def series(rows):
    """({kind: {(N, K): {(dtype, layout): [(M, ratio)] sorted by M}}}, the
    (N, K) pairs in order of appearance); rows without a ratio are left out."""
    data, nks = {}, []
    for r in rows:
        q = ratio(r)
        if q is None:
            continue
        nk = (r["N"], r["K"])
        if nk not in nks:
            nks.append(nk)
        data.setdefault(r["kind"], {}).setdefault(nk, {}).setdefault(
            (r["dtype"], r["layout"]), []).append((r["M"], q))
    for panels in data.values():
        for lines in panels.values():
            for points in lines.values():
                points.sort()
    return data, nks


def plot(results, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data, nks = series(results["rows"])
    kinds = [k for k in KINDS if k in data]
    ms = sorted({m for panels in data.values() for lines in panels.values()
                 for points in lines.values() for m, _ in points})
    fig, axes = plt.subplots(len(kinds), len(nks), squeeze=False, sharex=True, sharey="row",
                             figsize=(3.2 * len(nks), 3.0 * len(kinds)))
    for i, kind in enumerate(kinds):
        label, marks = AXIS[kind]
        for j, nk in enumerate(nks):
            ax = axes[i][j]
            for (dtype, layout), points in sorted(data[kind].get(nk, {}).items()):
                ax.plot([m for m, _ in points], [q for _, q in points], label=f"{dtype} {layout}",
                        color=COLOR.get(dtype, "black"), markersize=4, **LINE.get(layout, {}))
            for y in marks:
                ax.axhline(y, color="gray", linewidth=1, linestyle=":")
            ax.set_xscale("log", base=2)
            ax.set_xticks(ms, [str(m) for m in ms], fontsize=7, rotation=60)
            ax.minorticks_off()
            ax.grid(True, alpha=0.3)
            ax.set_title(f"N = {nk[0]}, K = {nk[1]}", fontsize=9)
            if j == 0:
                ax.set_ylabel(label)
            if i == len(kinds) - 1:
                ax.set_xlabel("M")
    handles = {}
    for ax in axes.flat:
        for h, name in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(name, h)
    fig.legend(handles.values(), handles.keys(), loc="upper center", ncol=len(handles),
               fontsize=9, bbox_to_anchor=(0.5, 1.0))
    plain = [ratio(r) for r in results["rows"]
             if r["kind"] == "plain" and not is_cube(r) and ratio(r) is not None]
    mean = f", geomean moye/cuBLAS {geomean(plain):.3f}" if plain else ""
    fig.suptitle(f"moye.ops.matmul / linear against cuBLAS on {results['device']} "
                 f"(torch {results.get('torch', '?')}{mean})", y=1.04, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120, bbox_inches="tight")
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", nargs="*", default=[str(RESULTS / "matmul_shapes_h100.json")])
    parser.add_argument("-o", "--output", default=str(RESULTS / "matmul_shapes_h100.png"))
    args = parser.parse_args(argv)
    results = merge(args.json)
    if not results.get("rows"):
        raise SystemExit(f"plot_matmul_shapes: {args.json} has no rows to plot")
    plot(results, args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
