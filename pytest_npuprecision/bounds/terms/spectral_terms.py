"""What a fair SVD (or symmetric eigendecomposition) errs by: its values with the matrix's norm, its
vectors with the gaps.

A backward-stable SVD (LAPACK's, cuSOLVER's) is exact for A + E with ||E|| about p·u·||A||. So every
singular value moves by up to ||E|| (Weyl), however small it is, and the j-th singular vector turns by
about ||E|| / gap_j, gap_j its distance to the nearest other singular value (and to 0 where the
matrix is not square, for the vectors of the larger side), spread over the vector's elements. The
term norms below carry those magnitudes; the rule's length m·n gives p (bounds/accumulation.py).
Vectors the SVD does not determine (a singular value repeated to float64's precision, the columns a
full U or V adds beyond the k singular values) get the matrix's norm over float64's unit roundoff:
nothing there is judged. A symmetric matrix's eigenvalues and eigenvectors (eigh) move alike, with
||A|| = max |lambda| and the gaps between eigenvalues. The pseudo-inverse moves by up to
PINV_GROWTH·kappa·||A+|| per unit of relative backward error (Wedin), kappa = sigma_1 / sigma_r over
the singular values it keeps.
"""

from __future__ import annotations

from typing import Any

import torch

from ..op_arguments import argument

_EPS = torch.finfo(torch.float64).eps
# Wedin's bound on ||A+ - B+|| / ||A+|| for a perturbation that keeps the rank: (1 + sqrt 5) / 2 times
# kappa times the relative perturbation, in the spectral norm; rounded up to 2.
PINV_GROWTH = 2.0


def _spectrum(args, kwargs) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """(singular values [..., k], the largest [..., 1], m, n) of the call's matrix, in float64."""
    a = argument(args, kwargs, 0, "input", "A")
    s = torch.linalg.svdvals(a.detach().double())
    return s, s[..., :1], a.shape[-2], a.shape[-1]


def _gaps(values: torch.Tensor) -> torch.Tensor:
    """Each value's distance to the nearest other one along the last dim."""
    distance = (values.unsqueeze(-1) - values.unsqueeze(-2)).abs()
    distance.diagonal(dim1=-2, dim2=-1).fill_(torch.inf)
    return distance.amin(-1)


def _turns_over(gap: torch.Tensor, top: torch.Tensor) -> torch.Tensor:
    """top / gap: how far each vector turns per unit of relative backward error; 1 / eps where the gap
    is within float64's precision of top, a vector no SVD or eigh determines."""
    return torch.where(gap > top * _EPS, top / gap.clamp(min=torch.finfo(torch.float64).tiny), 1 / _EPS)


def singular_values(args, kwargs) -> torch.Tensor:
    """svdvals' output (and svd's S): each moves with the matrix's norm, sigma_1."""
    s, top, _, _ = _spectrum(args, kwargs)
    return top.expand(s.shape)


def _turns(args, kwargs, size: int) -> tuple[torch.Tensor, int, int]:
    """Per vector of a factor with ``size`` of them, sigma_1 / gap_j: how far it turns per unit of
    relative backward error; the undetermined ones (beyond k, or at a repeated value) 1 / eps."""
    s, top, m, n = _spectrum(args, kwargs)
    gap = _gaps(s)
    if m != n:  # the larger side's vectors also turn into the complement, at a distance sigma_j
        gap = torch.minimum(gap, s)
    turns = _turns_over(gap, top)
    extra = turns.new_full((*turns.shape[:-1], max(size - turns.shape[-1], 0)), 1 / _EPS)
    return torch.cat([turns, extra], -1)[..., :size], m, n


def factor_terms(args: Any, kwargs: Any, name: str, shape: torch.Size) -> torch.Tensor | None:
    """svd's (torch.svd's or torch.linalg.svd's) outputs: U by column, S, then V by column or Vh by row,
    each vector's turn spread over its elements. A square V and Vh, which the two functions shape
    alike, get the larger of their row's and their column's at each element."""
    if name == "output.1":
        return singular_values(args, kwargs)
    if name not in ("output.0", "output.2") or len(shape) < 2:
        return None
    rows, columns = shape[-2], shape[-1]
    if name == "output.0":
        turns, m, _ = _turns(args, kwargs, columns)
        return (turns / m ** 0.5).unsqueeze(-2)
    turns, _, n = _turns(args, kwargs, max(rows, columns))
    right = turns / n ** 0.5
    if rows == columns:
        return torch.maximum(right.unsqueeze(-1), right.unsqueeze(-2))
    return right[..., :rows].unsqueeze(-1) if columns == n else right[..., :columns].unsqueeze(-2)


def _eigen(args, kwargs) -> torch.Tensor:
    a = argument(args, kwargs, 0, "input", "A")
    return torch.linalg.eigvalsh(a.detach().double())


def eigenvalues(args, kwargs) -> torch.Tensor:
    """eigvalsh's output (and eigh's values): each moves with ||A||, the largest |lambda|."""
    values = _eigen(args, kwargs)
    return values.abs().amax(-1, keepdim=True).expand(values.shape)


def eigen_terms(args: Any, kwargs: Any, name: str, shape: torch.Size) -> torch.Tensor | None:
    """eigh's outputs: the values, then the vectors by column, each turning by ||A|| / gap_j over
    its n elements (1 / eps where a value repeats)."""
    if name == "output.0":
        return eigenvalues(args, kwargs)
    if name != "output.1":
        return None
    values = _eigen(args, kwargs)
    turns = _turns_over(_gaps(values), values.abs().amax(-1, keepdim=True))
    return (turns / values.shape[-1] ** 0.5).unsqueeze(-2)


def pseudo_inverse(args: Any, kwargs: Any) -> torch.Tensor:
    """pinv's term norm, one per matrix ([..., 1, 1]): PINV_GROWTH·kappa·||A+||_F spread over its
    entries, keeping the singular values above pinv's default cutoff (max(m, n)·eps of the dtype)."""
    a = argument(args, kwargs, 0, "input", "A")
    s, top, m, n = _spectrum(args, kwargs)
    kept = s > max(m, n) * torch.finfo(a.dtype).eps * top
    smallest = torch.where(kept, s, torch.inf).amin(-1, keepdim=True)
    frobenius = torch.where(kept, s, torch.inf).reciprocal().square().sum(-1, keepdim=True).sqrt()
    return (PINV_GROWTH * top / smallest * frobenius / (m * n) ** 0.5).unsqueeze(-1)
