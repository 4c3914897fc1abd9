"""benchmarks/matmul_shapes.py without a GPU: its arguments and shape plan,
the iterations per figure, the check that refuses a wrong moye result (and
keeps a loose torch one), the ratios, geometric means, tables and target
lines, --merge, and a tiny run on CPU tensors (moye on the CPU backend);
plot_matmul_shapes' grouping."""
import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import matmul_shapes as ms  # noqa: E402
import plot_matmul_shapes  # noqa: E402


def row(layout, dtype, M, N, K, kind="plain", **times):
    """A result row with these milliseconds, TFLOP/s as the script figures them."""
    flop = 2 * M * N * K
    return {"layout": layout, "dtype": dtype, "M": M, "N": N, "K": K, "kind": kind,
            "flop": flop, "ms": times, "TFLOP/s": {w: flop / t / 1e9 for w, t in times.items()},
            "error": {}, "over": {}, "n/a": {}}


def test_arguments_default_quick_and_explicit():
    a = ms.parse_args([])
    assert (a.dtypes, a.layouts, a.ms, a.nks) == (["float16", "bfloat16"], ["nn", "nt"],
                                                  list(ms.MS), list(ms.NKS))
    assert (a.fused, a.fused_ms, a.activation, a.cube, a.rounds) == (True, list(ms.MS),
                                                                     "gelu_tanh", True, 3)
    q = ms.parse_args(["--quick"])
    assert (q.dtypes, q.ms, q.nks, q.fused_ms) == (["bfloat16"], [1, 128, 4096],
                                                   [(4096, 4096), (8192, 8192)], [1, 128, 4096])
    e = ms.parse_args(["--quick", "--ms", "16", "1", "--nks", "4096,14336", "28672x8192",
                       "--layouts", "nt", "--no-fused", "--no-cube", "--activation", "silu",
                       "--dtypes", "float16", "--rounds", "5"])
    assert (e.ms, e.nks, e.layouts, e.fused, e.cube) == ([16, 1], [(4096, 14336), (28672, 8192)],
                                                         ["nt"], False, False)
    assert (e.activation, e.dtypes, e.rounds) == ("silu", ["float16"], 5)
    assert ms.parse_args(["--ms", "1", "4096", "--fused-ms", "4096"]).fused_ms == [4096]
    cpu = ms.parse_args(["--device", "cpu", "--ms", "3", "--nks", "40,64"])
    assert (cpu.ms, cpu.nks) == ([3], [(40, 64)])


@pytest.mark.parametrize("argv, message", [
    (["--host-only", "--no-host"], "exclude each other"),
    (["--ms", "8"], "M = 8 is not one of 1, 16, 64, 128, 256, 1024, 4096, 16384"),
    (["--ms", "many"], "invalid int value"),
    (["--nks", "4096"], "expected N,K"),
    (["--nks", "4096,0"], "expected N,K"),
    (["--nks", "1024,1024"], "1024,1024 is not one of 4096,4096 14336,4096"),
    (["--ms", "1", "16", "--fused-ms", "128"], "M = 128 is not among --ms"),
    (["--rounds", "0"], "at least 1"),
    (["--dtypes", "float32"], "invalid choice"),
    (["--layouts", "tn"], "invalid choice"),
    (["--activation", "tanh"], "invalid choice"),
    (["--device", "cpu", "--ms", "0"], "M = 0 is not one of"),
])
def test_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        ms.parse_args(argv)
    assert message in capsys.readouterr().err


def test_the_plan_covers_the_issue_shapes_and_the_cube():
    shapes = ms.plan(ms.parse_args([]))
    assert len(shapes) == 2 * (8 * 6 + 1)
    assert shapes[0] == ("float16", 1, 4096, 4096, ("plain", "fused"))
    assert shapes[48] == ("float16", 8192, 8192, 8192, ("plain",))
    assert shapes[-2] == ("bfloat16", 16384, 8192, 28672, ("plain", "fused"))
    issue = {(d, m, n, k) for d, m, n, k, _ in shapes if (m, n, k) != ms.CUBE}
    assert len(issue) == 96
    assert sum(len(kinds) * 2 for *_, kinds in shapes) == 96 * 2 * 2 + 2 * 2   # rows: x layouts
    few = ms.plan(ms.parse_args(["--dtypes", "bfloat16", "--ms", "1", "128", "--nks", "4096,4096",
                                 "--fused-ms", "128", "--no-cube"]))
    assert few == [("bfloat16", 1, 4096, 4096, ("plain",)),
                   ("bfloat16", 128, 4096, 4096, ("plain", "fused"))]
    assert ms.plan(ms.parse_args(["--quick", "--no-fused"]))[-1] == ("bfloat16", *ms.CUBE,
                                                                      ("plain",))
    assert ms.plan(ms.parse_args(["--host-only"])) == []


def test_iterations_aim_at_25_ms_a_figure():
    assert ms.iterations(16384, 4096, 4096) == 27             # 0.916 ms at 600 TFLOP/s
    assert ms.iterations(4096, 4096, 4096) == 109
    assert ms.iterations(16384, 28672, 8192) == 5             # 12.8 ms: at least 5
    assert ms.iterations(1, 4096, 4096) == 200                # 11 us on bandwidth: at most 200
    assert ms.iterations(1, 28672, 8192) == 159               # 157 us reading the weight


def test_geomean_and_ratio():
    assert ms.geomean([1, 4]) == 2.0 and ms.geomean([2, 0.5]) == 1.0
    assert ms.geomean(x for x in [2, 8]) == 4.0 and ms.geomean([]) is None
    plain = row("nn", "bfloat16", 1, 4096, 4096, moye=0.5, cublas=0.375)
    assert ms.ratio(plain) == 0.75
    fused = row("nt", "float16", 1, 4096, 4096, "fused", moye=0.25, torch=0.625, addmm=0.375)
    assert (ms.ratio(fused), ms.ratio(fused, "addmm")) == (2.5, 1.5)
    assert ms.ratio(row("nn", "float16", 1, 4096, 4096, cublas=0.04)) is None


def test_table_and_targets():
    rows = [row("nn", "bfloat16", 1, 4096, 4096, moye=0.05, cublas=0.04),
            row("nn", "bfloat16", 16, 4096, 4096, moye=0.01, cublas=0.02),
            row("nt", "bfloat16", 1, 4096, 4096, moye=0.04, cublas=0.05),
            row("nt", "bfloat16", 16, 4096, 4096, cublas=0.05),
            row("nn", "bfloat16", 8192, 8192, 8192, moye=2.0, cublas=2.0),
            row("nn", "float16", 128, 4096, 4096, "fused", moye=0.05, torch=0.06, addmm=0.04),
            row("nt", "float16", 128, 4096, 4096, "fused", moye=0.05, torch=0.05, addmm=0.05)]
    rows[-1]["over"] = {"moye": 0, "torch": 3}
    plain = ms.table(rows, "plain").splitlines()
    assert plain[0] == ("| layout | dtype | M | N | K | moye TFLOP/s | cuBLAS TFLOP/s | "
                        "moye/cuBLAS |")
    assert plain[2] == "| nn | bfloat16 | 1 | 4096 | 4096 | 0.6711 | 0.8389 | 0.800 |"
    assert plain[5] == "| nt | bfloat16 | 16 | 4096 | 4096 | n/a | 10.74 | n/a |"
    assert len(plain) == 2 + 5
    fused = ms.table(rows, "fused").splitlines()
    assert fused[2] == "| nn | float16 | 128 | 4096 | 4096 | 85.9 | 71.58 | 107.4 | 1.200 | 0.800 |"
    assert len(fused) == 2 + 2
    assert ms.targets(rows) + ms.off_bound(rows) == [
        "plain rows without a ratio: 1 (first: nt bfloat16 16x4096x4096)",
        "moye/cuBLAS geomean (target >= 1.0): nn 1.265 (2 rows), nt 1.250 (1 rows), "
        "all 1.260 (3 rows)",
        "moye/cuBLAS below 0.9: 1 of 3 rows; worst 0.800 (nn bfloat16 1x4096x4096)",
        "fused moye/torch unfused (target >= 1.1): geomean 1.095; >= 1.1: 1 of 2 rows; "
        "worst 1.000 (nt float16 128x4096x4096)",
        "8192^3 moye/cuBLAS (target >= 1.0): nn bfloat16 1.000",
        "torch results off the bound (timed all the same): torch in 1 rows"]


def test_merge_replaces_rows_and_sorts_them(tmp_path, capsys):
    def run(name, rows, device="H", host=None):
        path = tmp_path / name
        path.write_text(json.dumps({"device": device, "torch": "t", "activation": "gelu_tanh",
                                    "seconds": 1.0, "rows": rows,
                                    **({"host": host} if host else {})}))
        return path

    host = [{"call": "matmul", "shape": [8, 1024, 1024], "dtype": "float16", "calls": 1000,
             "moye_us": 12.5, "torch_us": 9.0, "moye_per_call_us": 20.5, "torch_per_call_us": 19.0}]
    a = run("a.json", [row("nn", "bfloat16", 1, 4096, 4096, moye=0.05, cublas=0.04),
                       row("nn", "bfloat16", 1, 4096, 4096, "fused", moye=0.05, torch=0.06,
                           addmm=0.04)], host=host)
    b = run("b.json", [row("nn", "bfloat16", 1, 4096, 4096, moye=0.04, cublas=0.04),
                       row("nn", "float16", 16, 14336, 4096, moye=0.1, cublas=0.1),
                       row("nn", "float16", 1, 14336, 4096, moye=0.1, cublas=0.1)])
    out = tmp_path / "all.json"
    ms.main(["--merge", str(a), str(b), "--json", str(out)])
    merged = json.loads(out.read_text())
    assert [(r["kind"], r["dtype"], r["M"], r["N"], r["ms"]["moye"]) for r in merged["rows"]] == [
        ("plain", "float16", 1, 14336, 0.1), ("plain", "float16", 16, 14336, 0.1),
        ("plain", "bfloat16", 1, 4096, 0.04), ("fused", "bfloat16", 1, 4096, 0.05)]
    assert merged["host"] == host and [r["file"] for r in merged["runs"]] == [str(a), str(b)]
    assert "seconds" not in merged
    printed = capsys.readouterr().out
    assert "| nn | bfloat16 | 1 | 4096 | 4096 | 0.8389 | 0.8389 | 1.000 |" in printed
    assert "host time per call, 8x1024x1024 float16, 1000 calls, median of 3 rounds" in printed
    assert "| matmul | 12.5 | 9.0 | 20.5 | 19.0 |" in printed
    assert "| matmul | 12.5 | 9.0 |" in printed
    with pytest.raises(SystemExit, match="ran on G"):
        ms.merge([a, run("c.json", [], device="G")])


def test_excess_measures_every_element():
    torch = pytest.importorskip("torch")
    prod = torch.arange(12, dtype=torch.float64).reshape(4, 3) - 5
    scale = torch.full((4, 3), 100.0, dtype=torch.float64)
    eps = ms.EPS["bfloat16"]
    bound = eps * prod.abs() + 1e-5 * scale + 1e-6
    y = prod.to(torch.bfloat16)
    assert ms.excess(torch, y, prod, scale, eps) == (0.0, 0)
    off = prod.clone()
    off[3, 2] += 2 * float(bound[3, 2])
    for chunk in (3, 2 ** 25):                               # one row a block, one block
        worst, over = ms.excess(torch, off, prod, scale, eps, chunk=chunk)
        assert over == 1 and worst == pytest.approx(2.0)
    off[0, 0] = math.nan
    assert ms.excess(torch, off, prod, scale, eps, chunk=3) == (math.inf, 2)
    shifted = ms.excess(torch, prod + 1, prod, scale, eps, lambda rows, p: p + 1)
    assert shifted == (0.0, 0)
    with pytest.raises(AssertionError, match="shape"):
        ms.excess(torch, y[:2], prod, scale, eps)


def test_check_row_refuses_a_wrong_moye_and_keeps_a_loose_torch():
    torch = pytest.importorskip("torch")
    prod = torch.ones(2, 3, dtype=torch.float64)
    right = prod.to(torch.bfloat16)

    def measure(y, who):
        return ms.excess(torch, y, prod, prod, ms.EPS["bfloat16"])

    def check(into, moye):
        r = {"M": 2, "N": 3, "dtype": "bfloat16", "error": {}, "over": {}, "n/a": {}}
        ms.check_row(torch, r, {"moye": moye, "cublas": lambda: right * 2}, into, measure, "cpu")
        return r

    good = check(lambda out: out.copy_(right), lambda: right.clone())
    assert good["n/a"] == {} and good["over"] == {"moye out=": 0, "moye": 0, "cublas": 6}
    assert good["moye_bits_equal_out"] is True and not ms.failed(good)
    unwritten = check(lambda out: None, lambda: right.clone())
    assert unwritten["n/a"]["moye out="] == "WRONG: 6 of 6 elements off the bound, worst infx it"
    assert unwritten["n/a"]["moye"].startswith("not timed") and ms.failed(unwritten)

    def boom():
        raise ValueError("boom")
    raising = check(lambda out: out.copy_(right), boom)
    assert raising["n/a"] == {"moye": "raised ValueError: boom"} and ms.failed(raising)


def test_a_tiny_run_on_cpu_tensors(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "mm.json"
    ms.main(["--device", "cpu", "--dtypes", "bfloat16", "--ms", "3", "--nks", "40,64",
             "--no-cube", "--rounds", "1", "--no-host", "--json", str(out)])
    data = json.loads(out.read_text())
    assert [(r["layout"], r["kind"]) for r in data["rows"]] == [
        ("nn", "plain"), ("nn", "fused"), ("nt", "plain"), ("nt", "fused")]
    for r in data["rows"]:
        assert r["n/a"] == {} and r["over"]["moye"] == r["over"]["moye out="] == 0
        assert set(r["ms"]) == set(ms.CONTENDERS[r["kind"]]) and r["moye_bits_equal_out"]
        assert all(v > 0 for v in r["TFLOP/s"].values())
    printed = capsys.readouterr().out
    assert "| nt | bfloat16 | 3 | 40 | 64 |" in printed and "fused: bias + gelu_tanh" in printed


def test_host_only_measures_each_call(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setattr(ms, "HOST_SHAPE", (4, 32, 64))
    monkeypatch.setattr(ms, "HOST_ROUNDS", 2)
    out = tmp_path / "host.json"
    ms.main(["--device", "cpu", "--host-only", "--activation", "relu", "--json", str(out)])
    data = json.loads(out.read_text())
    assert data["rows"] == []
    assert [h["call"] for h in data["host"]] == ["matmul", "linear", "matmul + bias + relu"]
    assert all(h[f"{who}{way}"] > 0 and h["calls"] == 3 for h in data["host"]
               for who in ("moye", "torch") for way in ("_us", "_per_call_us"))
    assert "4x32x64 float16, 3 calls, median of 2 rounds" in \
        capsys.readouterr().out


def test_plot_groups_ratios_by_kind_and_shape():
    rows = [row("nn", "bfloat16", m, 4096, 14336, moye=1.0, cublas=c)
            for m, c in ((16, 2.0), (1, 0.5))]
    rows += [row("nt", "float16", 1, 8192, 8192, "fused", moye=1.0, torch=1.25, addmm=0.9),
             row("nt", "float16", 4, 8192, 8192, cublas=1.0)]             # no moye: no point
    data, nks = plot_matmul_shapes.series(rows)
    assert nks == [(4096, 14336), (8192, 8192)]
    assert data == {"plain": {(4096, 14336): {("bfloat16", "nn"): [(1, 0.5), (16, 2.0)]}},
                    "fused": {(8192, 8192): {("float16", "nt"): [(1, 1.25)]}}}


def test_plot_draws_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "mm.png"
    plot_matmul_shapes.plot({"device": "H", "rows": [
        row("nn", "bfloat16", m, 4096, 4096, moye=1.0, cublas=1.1) for m in (1, 16)]}, png)
    assert png.stat().st_size > 0


@pytest.mark.parametrize("first_ms, rounds, expected", [
    ((0.05, 0.09), 3, 7),          # every call under 0.1 ms: 7 rounds in all
    ((0.05, 0.2), 3, 3),           # one contender's over: --rounds
    ((0.05, 0.09), 9, 9)])         # more asked than 7
def test_short_rows_get_more_rounds(first_ms, rounds, expected):
    """rounds_for times one round itself, then says how many more."""
    fns = {"moye": 0, "cublas": 1}
    times = {who: [] for who in fns}
    more = ms.rounds_for(rounds, times, lambda fn, iters: first_ms[fn], fns, 5)
    assert times == {"moye": [first_ms[0]], "cublas": [first_ms[1]]}
    assert more + 1 == expected
