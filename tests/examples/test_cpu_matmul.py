"""Seed 002's CPU matmul example, at sizes small enough for the test suite."""
import numpy as np
import pytest

from moye.examples import cpu_matmul
from moye.layout import Layout


@pytest.mark.parametrize("order", ["F", "C"])
def test_matmul_accumulates_A_times_B_transposed(order):
    gen = np.random.default_rng(0)
    M, N, K = 16, 12, 8
    A = np.asarray(gen.uniform(1, 2, (M, K)), order=order)
    B = np.asarray(gen.uniform(1, 2, (N, K)), order=order)
    C0 = np.asarray(gen.uniform(1, 2, (M, N)), order=order)     # C += A B^T: random start
    C = C0.copy(order=order)
    assert cpu_matmul.matmul(A, B, C) is C
    assert np.allclose(C, C0 + A @ B.T, rtol=1e-14, atol=0)


def test_matmul_with_another_thread_layout():
    gen = np.random.default_rng(1)
    A, B = gen.uniform(1, 2, (8, 4)), gen.uniform(1, 2, (6, 4))
    C = np.full((8, 6), 0.0)
    cpu_matmul.matmul(A, B, C, thr_layout=Layout((2, 3), (3, 1)))
    assert np.allclose(C, A @ B.T, rtol=1e-14, atol=0)


def test_main_checks_against_numpy(capsys):
    err = cpu_matmul.main(M=32, N=16, K=8, seed=3)
    out = capsys.readouterr().out
    assert err < 1e-12
    assert "M=32 N=16 K=8, 16 threads" in out and "matches NumPy: True" in out
