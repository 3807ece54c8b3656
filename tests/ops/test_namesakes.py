"""msprobe's Torch.<name> for torch.linalg functions: each name resolves to the function msprobe hooked."""

from __future__ import annotations

import pytest
import torch

from pytest_npuprecision.ops import namesakes
from pytest_npuprecision.ops.namesakes import NoSingleNamesake
from pytest_npuprecision.ops.resolution import choose_namesake, resolve

LINALG = torch.linalg


@pytest.mark.parametrize("name, expected", [
    # only torch.linalg's is hooked under this name, whatever torch itself has
    ("inv", LINALG.inv), ("pinv", LINALG.pinv), ("vector_norm", LINALG.vector_norm),
    ("matrix_norm", LINALG.matrix_norm), ("multi_dot", LINALG.multi_dot), ("vecdot", LINALG.vecdot),
    ("cholesky_ex", LINALG.cholesky_ex), ("svdvals", LINALG.svdvals), ("householder_product", LINALG.householder_product),
    ("cond", LINALG.cond),  # never the control-flow torch.cond
    ("lu", LINALG.lu),  # msprobe does not hook torch.lu
    # torch's are removed stubs that only raise
    ("solve", LINALG.solve), ("lstsq", LINALG.lstsq), ("matrix_rank", LINALG.matrix_rank),
    # the same computation under both names: torch's
    ("det", torch.det), ("slogdet", torch.slogdet), ("matrix_exp", torch.matrix_exp), ("matmul", torch.matmul),
    # not a linalg name at all
    ("add", torch.add), ("cholesky", torch.cholesky),
])
def test_a_name_of_one_function_resolves_to_it(name, expected):
    op = resolve(f"Torch.{name}")
    assert op.unsupported is None
    assert op.func is expected and op.namesakes == ()


def test_msprobes_table_is_consistent():
    assert namesakes.ALSO_TORCH <= namesakes.LINALG and namesakes.REMOVED_FROM_TORCH <= namesakes.ALSO_TORCH
    assert all(hasattr(torch.linalg, name) for name in namesakes.LINALG)
    for name in namesakes.LINALG:  # every hooked linalg name resolves: nothing skips as unsupported
        assert resolve(f"Torch.{name}").unsupported is None, name


A = torch.randn(4, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
SQUARE = torch.randn(3, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
OTHER = torch.randn(3, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
X = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
T3 = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64)


@pytest.mark.parametrize("name, args, kwargs, shapes, recorded, expected", [
    ("svd", (A,), {"full_matrices": False}, None, None, LINALG.svd),
    ("svd", (A,), {"some": False}, None, None, torch.svd),
    ("svd", (A, True), {"compute_uv": True}, None, None, torch.svd),
    ("svd", (A,), {}, ((4, 3), (3,), (3, 3)), None, torch.svd),  # reduced U: torch.svd's default
    ("svd", (A,), {}, ((4, 4), (3,), (3, 3)), None, LINALG.svd),  # full U: torch.linalg.svd's
    ("qr", (A, "complete"), {}, None, None, LINALG.qr),  # torch.qr's some= is no mode string
    ("qr", (A,), {"mode": "r"}, None, None, LINALG.qr),
    ("qr", (A, False), {}, None, None, torch.qr),
    ("diagonal", (T3, 1), {}, None, None, torch.diagonal),  # linalg.diagonal's offset is keyword-only
    ("norm", (A,), {"ord": 2}, None, None, LINALG.norm),
    ("norm", (A,), {"p": 2}, None, None, torch.norm),
    ("norm", (A,), {}, ((),), None, LINALG.norm),  # both the Frobenius norm here: they agree
    ("norm", (A, 2), {}, ((),), lambda: (torch.linalg.norm(A, 2),), LINALG.norm),  # spectral, as recorded
    ("norm", (A, 2), {}, ((),), lambda: (torch.norm(A, 2),), torch.norm),  # entrywise, as recorded
    ("cross", (torch.ones(4, 3), torch.ones(4, 3) * 2), {}, ((4, 3),), None, LINALG.cross),  # the same dim: agree
    ("cross", (SQUARE, OTHER), {}, ((3, 3),), lambda: (torch.cross(SQUARE, OTHER, dim=0),), torch.cross),
    ("cross", (SQUARE, OTHER), {}, ((3, 3),), lambda: (torch.linalg.cross(SQUARE, OTHER),), LINALG.cross),
    ("vander", (X,), {"increasing": True}, None, None, torch.vander),
    ("vander", (X,), {"N": 3}, ((4, 3),), lambda: (torch.linalg.vander(X, N=3),), LINALG.vander),
    ("vander", (X,), {"N": 3}, ((4, 3),), lambda: (torch.vander(X, N=3),), torch.vander),
])
def test_the_recorded_call_decides_between_namesakes(name, args, kwargs, shapes, recorded, expected):
    op = resolve(f"Torch.{name}")
    assert {func for _, func in op.namesakes} == {getattr(torch, name), getattr(torch.linalg, name)}
    chosen = choose_namesake(op, args, kwargs, shapes, recorded or tuple)
    assert chosen.func is expected and chosen.namesakes == ()
    assert chosen.base_name == name


@pytest.mark.parametrize("name, args, kwargs, shapes, why", [
    ("svd", (A,), {"driver": None, "some": True}, None, "fit neither"),
    ("svd", (SQUARE,), {}, ((3, 3), (3,), (3, 3)), "do not tell which"),  # V or Vh: only values would say
    ("cross", (SQUARE, OTHER), {}, ((3, 3),), "do not tell which"),
    ("diagonal", (T3,), {}, None, "do not tell which"),
])
def test_a_call_that_does_not_say_which_is_never_run_as_the_other(name, args, kwargs, shapes, why):
    with pytest.raises(NoSingleNamesake, match=why) as raised:
        choose_namesake(resolve(f"Torch.{name}"), args, kwargs, shapes, tuple)
    assert f"torch.linalg.{name} or torch.{name}" in str(raised.value)


def test_signatures_come_from_torch_and_keep_keyword_only_arguments():
    assert namesakes.binds(torch.linalg.svd, (A,), {"full_matrices": False, "driver": None})
    assert not namesakes.binds(torch.linalg.svd, (A,), {"some": True})
    assert not namesakes.binds(torch.linalg.diagonal, (T3, 1), {})
    assert namesakes.binds(torch.diagonal, (T3, 1), {})
    assert not namesakes.binds(torch.vander, (X,), {"M": 2})


def test_check_call_takes_the_namesake_its_arguments_name():
    from pytest_npuprecision.checks.one_call import check_call

    verdict = check_call("Torch.svd", A.float(), full_matrices=False)  # torch.svd has no full_matrices
    assert verdict.status.value == "pass"
    assert check_call(torch.svd, A.float(), some=True).status.value == "pass"  # the function given
    with pytest.raises(ValueError, match="pass the function itself"):
        check_call("Torch.diagonal", T3.float())


def test_a_loss_named_after_huber_is_no_torch_hub():
    assert resolve("Functional.huber_loss").func is torch.nn.functional.huber_loss
    assert resolve("Torch.hub_load").unsupported is not None
