"""A large 2-D matmul's golden and its terms' norms are made block by block: the same numbers as the
whole float64 call, without the float64 copies of both operands beside the result."""

import pytest
import torch

from pytest_npuprecision.backends import Backend
from pytest_npuprecision.ops.resolution import resolve
from pytest_npuprecision.replay import sides
from pytest_npuprecision.replay.error_bounds import accumulation_for
from pytest_npuprecision.replay.runner import run_call
from pytest_npuprecision.replay.sides import blocked_matmul, golden_for

# Blocks may sum an element's 24 terms in another order than the whole call: float64 roundoff apart.
ROUNDOFF = dict(rtol=1e-13, atol=1e-12)


def operands(m=40, k=24, n=56, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=gen).to(dtype), torch.randn(k, n, generator=gen).to(dtype)


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(sides, "BLOCK_BYTES", 7 * 24 * 8)  # 7 rows or columns of float64 at a time
    return 7


@pytest.mark.parametrize("api", ["Torch.matmul", "Torch.mm", "Tensor.matmul"])
@pytest.mark.parametrize("square", [False, True])
def test_blocks_give_the_whole_calls_numbers(small_blocks, api, square):
    a, b = operands()
    side = golden_for(Backend("cpu"), torch.float64, seed=0)
    got = blocked_matmul(resolve(api), (a, b), {}, side, square=square)
    a64, b64 = a.double(), b.double()
    expected = (a64 * a64) @ (b64 * b64) if square else a64 @ b64
    assert got.dtype == torch.float64 and got.shape == (40, 56)
    torch.testing.assert_close(got, expected, **ROUNDOFF)
    assert torch.equal(a, operands()[0]) and torch.equal(b, operands()[1])  # the caller's tensors are untouched


@pytest.mark.parametrize("api, args, kwargs", [
    ("Torch.matmul", operands(m=2, n=2), {}),  # small: made whole
    ("Torch.bmm", (torch.randn(2, 40, 24), torch.randn(2, 24, 56)), {}),  # batched
    ("Torch.matmul", (torch.randn(3, 40, 24), torch.randn(24, 56)), {}),
    ("Torch.mm", operands(), {"out": None}),  # keywords
    ("Torch.add", operands(k=24, n=24), {}),  # not a matmul
    ("Torch.matmul", (torch.randn(40, 24), torch.randn(23, 56)), {}),  # shapes that do not multiply
    ("Torch.matmul", (torch.randn(40, 24), torch.randint(0, 3, (24, 56))), {}),  # an integer operand
])
def test_other_calls_are_made_whole(small_blocks, api, args, kwargs):
    side = golden_for(Backend("cpu"), torch.float64, seed=0)
    assert blocked_matmul(resolve(api), args, kwargs, side) is None


def test_a_large_matmuls_golden_and_term_norms_are_unchanged(small_blocks, monkeypatch):
    a, b = operands()
    blocked = run_call(resolve("Torch.matmul"), (a, b), device="cpu")
    calls = []
    monkeypatch.setattr(sides, "blocked_matmul", lambda *args, **kwargs: calls.append(args) or None)
    monkeypatch.setattr("pytest_npuprecision.replay.error_bounds.blocked_matmul", lambda *args, **kwargs: None)
    whole = run_call(resolve("Torch.matmul"), (a, b), device="cpu")
    assert calls  # the whole run went past the blocks
    (out_blocked,), (out_whole,) = blocked.outputs, whole.outputs
    torch.testing.assert_close(out_blocked.golden, out_whole.golden, **ROUNDOFF)
    torch.testing.assert_close(out_blocked.accumulation.term_norm, out_whole.accumulation.term_norm,
                               **ROUNDOFF)
    assert out_blocked.accumulation.length == out_whole.accumulation.length == 24
    assert blocked.notes == whole.notes


def test_term_norms_of_a_large_matmul(small_blocks):
    a, b = operands()
    acc = accumulation_for(resolve("Torch.matmul"), (a, b))
    torch.testing.assert_close(acc.term_norm, ((a.double() ** 2) @ (b.double() ** 2)).sqrt(), **ROUNDOFF)
