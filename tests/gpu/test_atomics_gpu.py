"""moye.atomic_add on a GPU: a histogram over many blocks against torch's
bincount, exactly, and the old values a ticket counter hands out."""
import pytest

from ..kernel.kernels_for_tests import histogram, tickets

pytestmark = pytest.mark.gpu


def test_histogram(torch):
    n, bins = 1 << 20, 97
    keys = torch.randint(0, bins, (n,), device="cuda", dtype=torch.int32)
    counts = torch.randint(1, 50, (bins,), device="cuda", dtype=torch.int32)
    want = counts.long() + torch.bincount(keys.long(), minlength=bins)
    histogram[(n + 255) // 256, 256](counts, keys, n)
    torch.cuda.synchronize()
    assert torch.equal(counts.long(), want)


def test_tickets(torch):
    n = 100_000
    counter = torch.full((1,), 7, device="cuda", dtype=torch.int32)
    order = torch.full((n,), -1, device="cuda", dtype=torch.int32)
    tickets[(n + 255) // 256, 256](counter, order, n)
    torch.cuda.synchronize()
    assert int(counter[0]) == 7 + n
    assert torch.equal(order.sort().values.cpu(), torch.arange(7, 7 + n, dtype=torch.int32))
