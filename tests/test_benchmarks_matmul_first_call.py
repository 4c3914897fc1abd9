"""benchmarks/matmul_first_call.py: two fresh processes over one cache folder,
here on the CPU backend (which takes the heuristic's config: no tuning files)."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import matmul_first_call as first_call  # noqa: E402


def test_two_processes_report_their_first_calls(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "first.json"
    assert first_call.main(["--device", "cpu", "--shape", "16", "24", "40", "--json",
                            str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["shape"] == [16, 24, 40] and [r["process"] for r in data["runs"]] == \
        ["first", "second"]
    for r in data["runs"]:
        assert r["first_s"] > 0 and r["second_s"] > 0 and r["process_s"] >= r["first_s"]
        assert r["configs"] == [] and r["tuning_files"] == []      # the CPU backend tunes not
        assert r["max_abs_error"] < 0.5                            # bfloat16 of sums of 40
    printed = capsys.readouterr().out
    assert printed.count("process: first call") == 2


def test_a_failing_child_fails_the_run(capsys):
    assert first_call.main(["--device", "cpu", "--shape", "0", "-1", "2"]) == 1
