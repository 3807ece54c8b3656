"""Outputs unique only up to sign (singular vectors, eigenvectors, Q of QR) are aligned to the golden's
before judging: whichever signs a fair float32 kernel picked, it matches; a wrong value still does not."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from pytest_npuprecision.replay.runner import RunOutput
from pytest_npuprecision.replay.sign_alignment import aligned


def _outputs(actual, golden) -> list[RunOutput]:
    return [RunOutput(f"output.{i}", a, g) for i, (a, g) in enumerate(zip(actual, golden))]


def _svd_pair(flip: torch.Tensor):
    a = torch.randn(2, 6, 5, generator=torch.Generator().manual_seed(0))
    u, s, vh = torch.linalg.svd(a, full_matrices=False)
    golden = torch.linalg.svd(a.double(), full_matrices=False)
    return (u * flip, s, vh * flip.unsqueeze(-1)), golden


def test_singular_vectors_of_the_other_sign_are_flipped_to_the_goldens_with_their_rows_of_vh():
    flip = torch.tensor([-1.0, 1, 1, -1, 1])
    actual, golden = _svd_pair(flip)
    out = aligned(SimpleNamespace(base_name="svd", func=torch.linalg.svd), _outputs(actual, golden))
    for o in out:
        assert (o.actual.double() - o.golden).abs().max() < 1e-5, o.name


def test_a_wrong_vector_stays_wrong():
    actual, golden = _svd_pair(torch.ones(5))
    u = actual[0].clone()
    u[..., 0] *= 1.01
    out = aligned(SimpleNamespace(base_name="svd", func=torch.linalg.svd), _outputs((u, *actual[1:]), golden))
    assert (out[0].actual.double() - out[0].golden).abs().max() > 1e-3


def test_q_of_qr_and_eigenvectors_align_too_and_other_ops_are_left_alone():
    a = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
    q, r = torch.linalg.qr(a)
    out = aligned(SimpleNamespace(base_name="qr", func=torch.linalg.qr),
                  _outputs((-q, -r), torch.linalg.qr(a.double())))
    assert all((o.actual.double() - o.golden).abs().max() < 1e-5 for o in out)
    sym = a.T @ a
    w, v = torch.linalg.eigh(sym)
    out = aligned(SimpleNamespace(base_name="eigh", func=torch.linalg.eigh),
                  _outputs((w, -v), torch.linalg.eigh(sym.double())))
    assert (out[1].actual.double() - out[1].golden).abs().max() < 1e-4
    untouched = _outputs((-q,), (q.double(),))
    assert aligned(SimpleNamespace(base_name="matmul", func=torch.matmul), untouched) == untouched
