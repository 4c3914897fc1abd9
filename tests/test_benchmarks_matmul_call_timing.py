"""benchmarks/matmul_call_timing.py, here on the CPU backend (wall clock)."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import matmul_call_timing as call_timing  # noqa: E402


def test_each_shape_is_timed_both_ways(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "timing.json"
    assert call_timing.main(["--device", "cpu", "--shapes", "3,24,40", "--dtypes", "float16",
                             "--calls", "2", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    row, = data["rows"]
    assert (row["dtype"], row["M"], row["N"], row["K"]) == ("float16", 3, 24, 40)
    assert row["config"] == []                          # the CPU backend tunes nothing
    for how in ("loop_us", "call_us"):
        assert row[how]["moye"] > 0 and row[how]["torch"] > 0
    assert "float16 3x24x40" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--shapes", "1,2"], ["--shapes", "0,4,4"], ["--calls", "0"],
                                  ["--shapes", "a,b,c"]])
def test_bad_arguments_are_refused(argv):
    with pytest.raises(SystemExit):
        call_timing.main(argv)
