"""benchmarks/matmul_kernel_times.py, here on the CPU backend (wall clock,
gemm_skinny's candidates alone)."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import matmul_kernel_times as kernel_times  # noqa: E402

torch = pytest.importorskip("torch")


def test_every_candidate_is_checked_and_timed(tmp_path, capsys):
    from moye.ops import gemm_skinny
    out = tmp_path / "times.json"
    assert kernel_times.main(["--device", "cpu", "--shapes", "2,40,136", "--dtypes", "float16",
                              "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["device"] == "cpu" and [r["layout"] for r in data["rows"]] == ["nt", "nn"]
    for row, major in zip(data["rows"], ("K", "MN")):
        timed = row["kernels"]["gemm_skinny"]
        assert sorted(tuple(c["config"]) for c in timed) == \
            sorted(gemm_skinny.candidates(2, 40, 136, major=major))
        assert all(c["us"] > 0 for c in timed)
        assert [c["us"] for c in timed] == sorted(c["us"] for c in timed)
        assert list(row["kernels"]) == ["gemm_skinny"] and "cublas_us" not in row
    printed = capsys.readouterr().out
    assert "nt float16 2x40x136: gemm_skinny [" in printed and "nn float16" in printed


def test_a_wrong_result_stops_the_run(monkeypatch):
    """A config whose launches leave the output unwritten (NaN) is refused
    before it is timed."""
    from moye.ops import matmul_op
    monkeypatch.setattr(matmul_op, "_launches", lambda *args: [])
    with pytest.raises(AssertionError, match="elements off the bound"):
        kernel_times.main(["--device", "cpu", "--shapes", "1,16,64", "--layouts", "nt",
                           "--dtypes", "bfloat16"])


@pytest.mark.parametrize("argv", [["--shapes", "1,2"], ["--shapes", "0,4,4"], ["--reps", "0"],
                                  ["--top", "0"], ["--shapes", "a,b,c"], ["--layouts", "tt"],
                                  ["--dtypes", "float32"]])
def test_bad_arguments_are_refused(argv):
    with pytest.raises(SystemExit):
        kernel_times.main(argv)
