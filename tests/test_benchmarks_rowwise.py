"""benchmarks/rowwise.py without a GPU: its byte counts, its arguments, its
check that refuses a wrong result, what it hands to torch.compile (traced
whole, right), and a tiny run on CPU tensors (torch eager and moye on the
CPU backend); plot_rowwise's grouping; row_registers' reading of ptxas and the
row kernels' spills on an H100."""
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import moye

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import plot_rowwise  # noqa: E402
import rowwise as rw  # noqa: E402


@pytest.mark.parametrize("op, direction, dtype, wdtype, expected", [
    # M = 4 rows of N = 8: 32 elements, 4-byte row statistics, 8-byte targets
    ("softmax", "fwd", "bfloat16", "bfloat16", 2 * 32 * 2),                    # x, y
    ("softmax", "bwd", "float32", "float32", 3 * 32 * 4),                      # y, dy, dx
    ("log_softmax", "bwd", "bfloat16", "bfloat16", 3 * 32 * 2),
    ("rms_norm", "fwd", "bfloat16", "bfloat16", 2 * 32 * 2 + 8 * 2 + 4 * 4),   # + w, rstd
    ("rms_norm", "bwd", "bfloat16", "bfloat16", 3 * 32 * 2 + 2 * 8 * 2 + 4 * 4),  # + w, dw
    ("layer_norm", "fwd", "bfloat16", "float32", 2 * 32 * 2 + 2 * 8 * 4 + 2 * 4 * 4),
    ("layer_norm", "bwd", "float32", "float32", 3 * 32 * 4 + 3 * 8 * 4 + 2 * 4 * 4),
    ("cross_entropy", "fwd", "bfloat16", "float32", 32 * 2 + 4 * 8 + 2 * 4 * 4),
    ("cross_entropy", "bwd", "float32", "float32", 2 * 32 * 4 + 4 * 8 + 2 * 4 * 4),
])
def test_traffic_counts_what_the_api_reads_and_writes(op, direction, dtype, wdtype, expected):
    assert rw.traffic(op, direction, 4, 8, dtype, wdtype) == expected


def test_default_case_moves_gibibytes():
    M = rw.rows_for(2 ** 28, 4096)
    assert M == 2 ** 16
    assert rw.traffic("softmax", "fwd", M, 4096, "float32") == 2 ** 31
    assert rw.rows_for(2 ** 28, 262_144) * 262_144 == 2 ** 28
    assert rw.rows_for(2 ** 26, 3000) == 2 ** 26 // 3000


def test_weight_dtype():
    assert rw.weight_dtype("rms_norm", "bfloat16") == "bfloat16"
    assert rw.weight_dtype("layer_norm", "bfloat16") == "float32"
    assert rw.weight_dtype("rms_norm", "bfloat16", "float32") == "float32"
    assert rw.weight_dtype("layer_norm", "bfloat16", "input") == "bfloat16"


def test_arguments_default_quick_and_explicit():
    a = rw.parse_args([])
    assert (a.ops, a.directions) == (list(rw.OPS), ["fwd", "bwd"])
    assert (a.ns, a.dtypes, a.elements, a.rounds) == (list(rw.NS), ["float32", "bfloat16"],
                                                       2 ** 28, 3)
    assert a.contenders == ["eager", "compile", "quack", "moye"]
    q = rw.parse_args(["--quick"])
    assert (q.ns, q.dtypes, q.elements, q.ops) == ([4096], ["bfloat16"], 2 ** 26, list(rw.OPS))
    e = rw.parse_args(["--quick", "--ns", "256", "2**18", "--elements", "2**27", "--ops",
                       "rms_norm", "--dtypes", "float32", "--contenders", "moye", "eager"])
    assert (e.ns, e.elements, e.ops, e.dtypes) == ([256, 2 ** 18], 2 ** 27, ["rms_norm"],
                                                   ["float32"])
    assert e.contenders == ["moye", "eager"]


@pytest.mark.parametrize("argv, message", [
    (["--elements", "2**25"], "outside 2**26..2**28"),
    (["--elements", "2**29"], "outside 2**26..2**28"),
    (["--elements", "many"], "not an integer"),
    (["--ns", "0"], "outside 1..262144"),
    (["--ns", "262145"], "outside 1..262144"),
    (["--ops", "gelu"], "invalid choice"),
    (["--dtypes", "float64"], "invalid choice"),
    (["--rounds", "0"], "at least 1"),
    (["--host-only", "--no-host"], "exclude each other"),
    (["--plan", "keep"], "'keep' is not KNOB=VALUE"),
    (["--plan", "max_cluster=2.5"], "'2.5' is not an integer"),
])
def test_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        rw.parse_args(argv)
    assert message in capsys.readouterr().err


def test_check_refuses_a_wrong_result():
    torch = pytest.importorskip("torch")
    ref = {"y": torch.rand(4, 8, dtype=torch.float64) + 0.5, "rstd": torch.rand(4).double()}
    good = {"y": ref["y"].float(), "rstd": ref["rstd"].float()}
    worst, errors = rw.check(torch, good, ref, rw.TOLERANCE["float32"])
    assert worst < 1 and set(errors) == {"y", "rstd"}
    off = dict(good, y=good["y"].clone())
    off["y"][3, 7] += 0.01                  # one element
    assert rw.check(torch, off, ref, rw.TOLERANCE["float32"])[0] > 1
    unwritten = dict(good, rstd=good["rstd"].clone())
    unwritten["rstd"][0] = float("nan")      # a poisoned element left as it was
    assert math.isinf(rw.check(torch, unwritten, ref, rw.TOLERANCE["float32"])[0])
    with pytest.raises(AssertionError, match="no y"):
        rw.check(torch, {"rstd": good["rstd"]}, ref, 1e-3)
    with pytest.raises(AssertionError, match="elements"):
        rw.check(torch, {"y": good["y"][:2]}, ref, 1e-3)


def test_scrub_poisons_outputs_but_never_an_input():
    torch = pytest.importorskip("torch")
    inp = {"x": torch.rand(4, 8), "target": torch.arange(4)}
    outputs = {"y": torch.rand(4, 8), "view_of_x": inp["x"][1:], "idx": torch.arange(4)}
    rw.scrub(torch, outputs, inp)
    assert torch.isnan(outputs["y"]).all()
    assert not torch.isnan(inp["x"]).any() and outputs["idx"].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("direction", rw.DIRECTIONS)
@pytest.mark.parametrize("op", rw.OPS)
def test_what_torch_compile_gets_traces_whole_and_matches_the_reference(op, direction,
                                                                         monkeypatch):
    torch = pytest.importorskip("torch")
    compile_ = torch.compile
    # dynamo's tracing with fullgraph=True, as on the GPU, without inductor's code generation
    monkeypatch.setattr(torch, "compile", lambda f, **kw: compile_(f, backend="eager", **kw))
    torch._dynamo.reset()
    inp = rw.make_inputs(torch, op, direction, 16, 300, "float32", "float32", "cpu")
    outputs = rw.compile_calls(torch, op, direction, inp)()
    worst, _ = rw.check(torch, outputs, rw.reference(torch, op, direction, inp),
                        rw.TOLERANCE["float32"])
    assert worst < 1


def test_a_tiny_run_on_cpu_tensors(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "rowwise.json"
    rw.main(["--device", "cpu", "--elements", "2048", "--ns", "256", "--ops", "softmax",
             "--dtypes", "float32", "--rounds", "1", "--no-host", "--json", str(out)])
    data = json.loads(out.read_text())
    assert [(r["direction"], r["M"], r["N"]) for r in data["rows"]] == [("fwd", 8, 256),
                                                                      ("bwd", 8, 256)]
    for r in data["rows"]:
        assert set(r["error"]) == {"eager", "moye"}, r["n/a"]
        assert r["GB/s"]["copy"] > 0 and r["GB/s"]["moye"] > 0
        assert r["n/a"]["quack"] == "not on the CPU"
    assert "| softmax | bwd | float32 | 256 | 8 |" in capsys.readouterr().out


def test_a_run_under_plan_options(tmp_path, capsys):
    """--plan runs moye's ops under those plan_options (here layer_norm
    keeping its weight and bias in shared memory, and its backward the
    dbias sums, its launches looping over staged row groups), checked
    against the reference as ever; the options are recorded and gone
    afterwards."""
    pytest.importorskip("torch")
    from moye.ops import rows
    out = tmp_path / "rowwise.json"
    rw.main(["--device", "cpu", "--elements", "4096", "--ns", "512", "--ops", "layer_norm",
             "--dtypes", "float32", "--rounds", "1", "--no-host", "--contenders", "moye", "eager",
             "--plan", "keep=sums", "staged=True", "max_threads=64", "--json", str(out)])
    data = json.loads(out.read_text())
    assert data["args"]["plan"] == [["keep", "sums"], ["staged", True], ["max_threads", 64]]
    for r in data["rows"]:
        assert set(r["error"]) == {"eager", "moye"}, r["n/a"]
    assert not rows._OPTIONS
    with pytest.raises(moye.MoyeTypeError, match="unknown knobs"):
        rw.main(["--device", "cpu", "--elements", "4096", "--ns", "512", "--ops", "softmax",
                 "--rounds", "1", "--no-host", "--plan", "kept=1"])


def test_host_only_measures_each_op_alone(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setattr(rw, "HOST_ROUNDS", 2)
    out = tmp_path / "host.json"
    rw.main(["--device", "cpu", "--host-only", "--ops", "softmax", "rms_norm",
             "--directions", "fwd", "--json", str(out)])
    data = json.loads(out.read_text())
    assert data["rows"] == []
    assert [(h["op"], h["direction"]) for h in data["host"]] == [("softmax", "fwd"),
                                                                ("rms_norm", "fwd")]
    assert all(h["moye_us"] > 0 and h["eager_us"] > 0 for h in data["host"])
    assert "median of 2 rounds" in capsys.readouterr().out


def test_merge_joins_runs_in_table_order(tmp_path, capsys):
    def run(name, rows, host=None):
        path = tmp_path / name
        path.write_text(json.dumps({"device": "H", "torch": "t", "quack": None, "seconds": 1.0,
                                    "rows": rows, **({"host": host} if host else {})}))
        return path

    def row(direction, dtype, N, moye):
        return {"op": "softmax", "direction": direction, "dtype": dtype, "N": N, "M": 2,
                "bytes": 8 * N, "GB/s": {"copy": 2.0, "moye": moye}}
    a = run("a.json", [row("bwd", "float32", 256, 1.0), row("fwd", "float32", 256, 1.0)],
            [{"op": "softmax", "direction": "fwd", "moye_us": 5.0, "eager_us": 4.0}])
    b = run("b.json", [row("fwd", "bfloat16", 256, 1.5), row("fwd", "float32", 256, 1.25)])
    out = tmp_path / "all.json"
    rw.main(["--merge", str(a), str(b), "--json", str(out)])
    merged = json.loads(out.read_text())
    assert [(r["direction"], r["dtype"], r["GB/s"]["moye"]) for r in merged["rows"]] == [
        ("fwd", "float32", 1.25), ("fwd", "bfloat16", 1.5), ("bwd", "float32", 1.0)]
    assert merged["host"][0]["moye_us"] == 5.0 and len(merged["runs"]) == 2
    printed = capsys.readouterr().out
    assert "| softmax | fwd | bfloat16 | 256 | 2 | 0 | 2 | 2 | n/a | n/a | n/a | 0.750 |" in printed
    assert "moye/copy >= 0.93: 0 of 3 rows; worst 0.500 (softmax bwd float32 N=256)" in printed
    other = tmp_path / "c.json"
    other.write_text(json.dumps({"device": "G", "rows": []}))
    with pytest.raises(SystemExit, match="ran on G"):
        rw.merge([a, other])


def test_compare_puts_runs_side_by_side(tmp_path, capsys):
    """--compare: moye/copy of each case in each run, columns by file stem,
    "-" for a case a run lacks, "n/a" where moye failed, the means over the
    cases every run has; runs of several devices refused."""
    def run(name, rows, device="H"):
        path = tmp_path / name
        path.write_text(json.dumps({"device": device, "rows": rows}))
        return path

    def row(N, moye, direction="fwd"):
        return {"op": "layer_norm", "direction": direction, "dtype": "bfloat16", "N": N,
                "M": 2, "bytes": 8 * N, "GB/s": {"copy": 4.0, "moye": moye}}
    here = run("here_1.json", [row(4096, 3.0), row(65536, 2.0), row(256, None, "bwd")])
    ref = run("ref_1.json", [row(65536, 3.6), row(4096, 4.0)])
    assert rw.main(["--compare", str(here), str(ref)]) is None
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "moye/copy on H"
    assert "| op | dir | dtype | N | here_1 | ref_1 |" in printed
    assert "| layer_norm | fwd | bfloat16 | 4096 | 0.750 | 1.000 |" in printed
    assert "| layer_norm | fwd | bfloat16 | 65536 | 0.500 | 0.900 |" in printed
    assert "| layer_norm | bwd | bfloat16 | 256 | n/a | - |" in printed
    assert printed[-1] == "| mean of 2 | | | | 0.625 | 0.950 |"
    with pytest.raises(SystemExit, match="several devices"):
        rw.compare([here, run("g.json", [], device="G")])


def test_plot_groups_rows_by_op_direction_and_dtype():
    rows = [{"op": "softmax", "direction": d, "dtype": "float32", "N": n,
             "GB/s": {"moye": n / 2, "copy": 3000.0}} for n in (4096, 256) for d in ("fwd", "bwd")]
    data, ops, columns = plot_rowwise.panels(rows)
    assert ops == ["softmax"] and columns == [("fwd", "float32"), ("bwd", "float32")]
    assert data["softmax", "fwd", "float32"]["moye"] == [(256, 128.0), (4096, 2048.0)]


def test_row_registers_reads_ptxas():
    """benchmarks/row_registers.py's ptxas(): registers and spills of one
    kernel, from NVRTC's log."""
    import row_registers
    from moye.ops import rms_norm_op, rows
    p = rows.plan("float32", 4096, "cuda")
    a, w, s = (np.ones((4, 4096), np.float32), np.ones(4096, np.float32),
               np.ones(4, np.float32))
    registers, spilled = row_registers.ptxas(rms_norm_op.rms_norm_backward_registers,
                                             (a, a, a, a, w, s, 1e-3, True, p.work, False,
                                              False), p.threads)
    assert 16 <= registers <= 255 and spilled == 0


# the kernels that spill at rowwise.py's row lengths on an H100 (ptxas): layer_norm's float32
# backward at 262,144 in the wide plan (16 blocks of 1,024 threads: 64 registers), whose
# dbias sums do not fit in shared memory beside its weight and ring (180 bytes, in its row
# loop); log_softmax's bfloat16 backward at 16,384 (4 bytes, stored once after the row's
# reductions: a block a row, no loop)
SPILLS = {("layer_norm", "bwd", "float32", 262144), ("log_softmax", "bwd", "bfloat16", 16384)}


@pytest.mark.parametrize("op", rw.OPS)
def test_row_kernels_spill_nothing_on_an_h100(op):
    """Every kernel each op launches at rowwise.py's row lengths (from 1,024),
    in bfloat16 and float32, as on an H100: no register spilled, but SPILLS;
    the plans' launches noted and compiled, none run, and the plans restored
    afterwards."""
    pytest.importorskip("torch")
    import row_registers
    from moye.ops import rows
    found = row_registers.survey(ops=(op,))
    assert row_registers.NS == (1024, 4096, 16384, 65536, 262144)
    assert len({row[:4] for row in found}) == 2 * 2 * 5          # every case launched
    spilling = {row[:4] for row in found if row[-1] > 0}
    assert spilling == {case for case in SPILLS if case[0] == op}, found
    assert rows.backend_of(np.ones(2)) == "cpu"                  # the stand-in is gone
    for *_, cluster, registers, _ in found:
        assert 1 <= cluster <= 16 and 16 <= registers <= 255


@pytest.mark.parametrize("keywords, match", [
    ({"ops": ("layernorm",)}, r"ops \['layernorm'\] are none of"),
    ({"directions": ("forward",)}, r"directions \['forward'\]"),
    ({"dtypes": ("float64",)}, r"dtypes \['float64'\]"),
    ({"ns": (0, 300000, 4.5, True)}, r"row lengths \[0, 300000, 4.5, True\]"),
])
def test_row_registers_refuses_unknown_cases(keywords, match):
    """survey() names what it cannot run, before planning anything."""
    import row_registers
    with pytest.raises(ValueError, match=match):
        row_registers.survey(**keywords)


def test_norm_backwards_of_narrow_chunks_spill_nothing_on_an_h100():
    """The norms' backwards at 131,071 (one element a chunk) and 262,140 (four)
    in bfloat16, as on an H100: no register spilled (rms_norm's took 432
    bytes at 131,071 before plan_fitting counted the chunks)."""
    pytest.importorskip("torch")
    import row_registers
    found = row_registers.survey(ops=("rms_norm", "layer_norm"), directions=("bwd",),
                                 dtypes=("bfloat16",), ns=(131071, 262140))
    assert len(found) == 4 and all(row[-1] == 0 for row in found), found
