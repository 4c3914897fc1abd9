"""benchmarks/attention_ops.py, here on the CPU backend (wall clock, no peers)."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import attention_ops  # noqa: E402


def test_a_smoke_run_checks_and_times_forward_and_backward(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "attention.json"
    assert attention_ops.main(["--device", "cpu", "--hidden", "64", "--head-dims", "64",
                               "--seqlens", "80", "--batch-tokens", "80",
                               "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["device"] == "cpu" and len(data["rows"]) == 2          # causal and not
    for row in data["rows"]:
        assert (row["B"], row["H"], row["S"], row["d"]) == (1, 1, 80, 64)
        moye = row["moye"]
        assert moye["fwd_ms"] > 0 and moye["bwd_ms"] > 0
        assert moye["fwd_err"][1] < 2e-3 and all(e[1] < 2e-3 for e in moye["bwd_err"])
    text = capsys.readouterr().out
    assert "fwd: TFLOP/s" in text and "bwd: TFLOP/s" in text


@pytest.mark.parametrize("argv", [["--seqlens", "3000"], ["--head-dims", "100"],
                                  ["--dtype", "float32"]])
def test_bad_arguments_are_refused(argv):
    with pytest.raises(SystemExit):
        attention_ops.main(argv)
