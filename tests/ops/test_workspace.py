"""moye.ops.workspace: split-K's scratch and tickets, kept per (device,
stream) between calls on CUDA, new each call elsewhere. The CUDA path's
bookkeeping (workspace.kept) runs here on CPU tensors, with torch's
stream and capture queries replaced."""
import numpy as np
import pytest

from moye.ops import workspace

torch = pytest.importorskip("torch")


def test_numpy_and_cpu_tensors_get_new_arrays():
    like = np.zeros(3, np.float16)
    s1, s2 = workspace.scratch(like, 5), workspace.scratch(like, 5)
    assert s1.shape == (5,) and s1.dtype == np.float32 and not np.shares_memory(s1, s2)
    t = workspace.tickets(like, 4)
    assert t.dtype == np.int32 and t.tolist() == [0, 0, 0, 0]
    c = workspace.tickets(torch.ones(2), 3)
    assert c.dtype == torch.int32 and c.tolist() == [0, 0, 0]
    assert workspace.scratch(torch.ones(2), 2).dtype == torch.float32


@pytest.fixture
def streams(monkeypatch):
    """torch's current stream and capture state, set by the test."""
    state = {"stream": 7, "capturing": False}
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: state["stream"],
                        raising=False)
    monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing",
                        lambda: state["capturing"], raising=False)
    monkeypatch.setattr(workspace, "_KEPT", {})
    monkeypatch.setattr(workspace, "_VIEWS", {})
    return state


def test_one_stream_shares_a_buffer_grown_as_needed(streams):
    a = workspace.kept("cpu", 6, "int32", True)
    assert a.tolist() == [0] * 6 and a.dtype == torch.int32
    assert workspace.kept("cpu", 6, "int32", True) is a             # the same view again
    b = workspace.kept("cpu", 4, "int32", True)
    assert b.data_ptr() == a.data_ptr() and b.shape == (4,)
    c = workspace.kept("cpu", 9, "int32", True)                      # past 6: grown to 12
    assert c.data_ptr() != a.data_ptr() and c.tolist() == [0] * 9
    assert workspace._KEPT["cpu", 7, "int32", True].numel() == 12
    assert workspace.kept("cpu", 4, "int32", True).data_ptr() == c.data_ptr()
    s = workspace.kept("cpu", 4, "float32", False)      # another kind: a buffer of its own
    assert s.dtype == torch.float32 and s.data_ptr() != c.data_ptr()


def test_two_streams_and_captures_share_nothing(streams):
    first = workspace.kept("cpu", 8, "float32", False)
    streams["stream"] = 9
    other = workspace.kept("cpu", 8, "float32", False)
    assert other.data_ptr() != first.data_ptr()
    streams["capturing"] = True
    captured = [workspace.kept("cpu", 8, "int32", True) for _ in range(2)]
    assert captured[0].data_ptr() != captured[1].data_ptr()
    assert all(t.tolist() == [0] * 8 for t in captured)
    assert ("cpu", 9, "int32", True) not in workspace._KEPT      # nothing kept under capture
    streams["capturing"], streams["stream"] = False, 7
    assert workspace.kept("cpu", 8, "float32", False) is first


def test_the_views_kept_are_bounded(streams, monkeypatch):
    monkeypatch.setattr(workspace, "VIEWS_LIMIT", 3)
    for n in range(1, 8):
        workspace.kept("cpu", n, "float32", False)
    assert len(workspace._VIEWS) <= 3
    assert workspace.kept("cpu", 7, "float32", False).shape == (7,)
