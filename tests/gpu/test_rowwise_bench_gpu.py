"""benchmarks/rowwise.py on a GPU, small: softmax forward and backward at
one row length, torch eager and moye (QuACK and torch.compile are left to
the benchmark's own runs), every result checked, every figure there."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import rowwise as rw  # noqa: E402

pytestmark = pytest.mark.gpu


def test_softmax_rows_checked_and_timed(torch, tmp_path):
    out = tmp_path / "rowwise.json"
    results = rw.main(["--ops", "softmax", "--dtypes", "bfloat16", "--ns", "1024",
                       "--elements", "2**26", "--rounds", "1", "--contenders", "eager", "moye",
                       "--json", str(out)])
    assert out.exists() and len(results["rows"]) == 2
    for row in results["rows"]:
        assert set(row["error"]) == {"eager", "moye"}, row["n/a"]
        assert all(err < rw.TOLERANCE["bfloat16"] for e in row["error"].values()
                   for err in e.values())
        assert set(row["GB/s"]) == {"copy", "eager", "moye"}
        assert row["GB/s"]["copy"] > 100
    assert {(h["op"], h["direction"]) for h in results["host"]} == {("softmax", "fwd"),
                                                                   ("softmax", "bwd")}
    assert all(h["moye_us"] > 0 for h in results["host"])
