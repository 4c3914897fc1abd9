"""Plot benchmarks/rowwise.py's JSON: GB/s against the row length N (log2
axis), one subplot per op (rows of the grid) and direction and dtype
(columns), moye beside torch eager, torch.compile, QuACK and the
device-to-device copy of the same bytes (the roof).

    python benchmarks/plot_rowwise.py [JSON ...] [-o PNG]

Several JSONs (runs split to fit the GPU machine's calls) are merged as
`rowwise.py --merge` does. JSON defaults to benchmarks/results/rowwise_h100.json,
PNG to benchmarks/results/rowwise_h100.png. A contender with no figure at some N
(n/a: not installed, no such op, wrong result) has a gap there. Needs
matplotlib (pip install .[bench]).
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rowwise import merge  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
# contender: (label, matplotlib style)
STYLE = {
    "moye": ("moye", dict(color="tab:red", marker="o", linewidth=2)),
    "eager": ("torch eager", dict(color="tab:blue", marker="s", linestyle="--")),
    "compile": ("torch.compile", dict(color="tab:green", marker="^", linestyle="--")),
    "quack": ("QuACK", dict(color="tab:purple", marker="D", linestyle="--")),
    "copy": ("device-to-device copy", dict(color="black", linestyle=":", marker="")),
}


def panels(rows):
    """({(op, direction, dtype): {contender: [(N, GB/s)] sorted by N}}, ops,
    [(direction, dtype)] in order of appearance."""
    data, ops, columns = {}, [], []
    for r in rows:
        key = (r["op"], r["direction"], r["dtype"])
        if r["op"] not in ops:
            ops.append(r["op"])
        if key[1:] not in columns:
            columns.append(key[1:])
        for who, gbs in r["GB/s"].items():
            data.setdefault(key, {}).setdefault(who, []).append((r["N"], gbs))
    for lines in data.values():
        for points in lines.values():
            points.sort()
    return data, ops, columns


def plot(results, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data, ops, columns = panels(results["rows"])
    fig, axes = plt.subplots(len(ops), len(columns), squeeze=False, sharex=True,
                             figsize=(4 * len(columns), 2.8 * len(ops)))
    for i, op in enumerate(ops):
        for j, (direction, dtype) in enumerate(columns):
            ax = axes[i][j]
            for who, (label, style) in STYLE.items():
                points = data.get((op, direction, dtype), {}).get(who)
                if points:
                    ax.plot([n for n, _ in points], [g for _, g in points], label=label,
                            markersize=4, **style)
            ax.set_xscale("log", base=2)
            ax.set_ylim(bottom=0)
            ax.grid(True, alpha=0.3)
            ax.set_title(f"{op} {direction}, {dtype}", fontsize=9)
            if j == 0:
                ax.set_ylabel("GB/s (read + written)")
            if i == len(ops) - 1:
                ax.set_xlabel("row length N")
    handles = {}
    for ax in axes.flat:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    fig.legend(handles.values(), handles.keys(), loc="upper center", ncol=len(handles),
               fontsize=9, bbox_to_anchor=(0.5, 1.0))
    fig.suptitle(f"row-wise ops on {results['device']} (torch {results.get('torch', '?')}, "
                 f"QuACK {results.get('quack')})", y=1.03, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120, bbox_inches="tight")
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", nargs="*", default=[str(RESULTS / "rowwise_h100.json")])
    parser.add_argument("-o", "--output", default=str(RESULTS / "rowwise_h100.png"))
    args = parser.parse_args(argv)
    results = merge(args.json)
    if not results.get("rows"):
        raise SystemExit(f"plot_rowwise: {args.json} has no rows to plot")
    plot(results, args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
