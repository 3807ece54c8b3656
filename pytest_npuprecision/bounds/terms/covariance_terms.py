"""What a fair torch.cov rounds: its term norms, forward and backward.

cov centres each variable (a row) on its weighted mean, sums the products of the centred values over
the observations (the columns), and divides by a normalization nf = w_sum - correction * sum(w *
aweights) / w_sum (w_sum - correction without aweights). Two steps cancel:

- the centring, as a normalization's does (norm_terms.py): the mean, a sum of the |x| it averages,
  errs by u * mean |x| and moves every centred value by that, however small x - mean is. The
  products' terms carry those magnitudes: per output, the L2 norm over the observations of
  w (|xc_i| + m_i)(|xc_j| + m_j) / |nf|, xc = x - mean and m = mean |x| (weighted).
- the normalization, where the correction nearly uses up the weights: its rounding moves every output
  by u * nf_size / |nf| of itself, nf_size the normalization's own terms (w_sum + |correction| *
  sum(w * aweights) / w_sum).

Without these a 2x2 cov over 3 observations erred 1.2 to 2 times a one-rounding bound in every element.
Every function reads the op's own arguments in float64 and returns term norms shaped as what they scale.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..op_arguments import argument


@dataclass(frozen=True)
class _Cov:
    """One cov call: the rows' magnitudes before centring, the weights and the normalization."""

    size: torch.Tensor  # [variables, observations]: |x - mean| + the weighted mean of |x|
    w: torch.Tensor  # [observations]: fweights * aweights (ones without either)
    fw: torch.Tensor  # [observations]: the frequency weights (ones without)
    aw: torch.Tensor | None
    w_sum: float
    nf: float  # |the normalization| (its smallest positive value where it vanishes)
    nf_size: float  # the normalization's terms, before it cancels
    correction: float
    result: torch.Tensor  # [variables, variables]: cov itself, in float64

    @property
    def condition(self) -> float:
        """How far the normalization's rounding moves the result, in units of u times the result."""
        return self.nf_size / self.nf


def _read(args, kwargs) -> _Cov:
    x = argument(args, kwargs, 0, "input").detach().double()
    rows = x.reshape(1, -1) if x.dim() < 2 else x
    observations = rows.shape[1]
    fweights, aweights = kwargs.get("fweights"), kwargs.get("aweights")
    correction = float(kwargs.get("correction", 1))
    fw = fweights.detach().double() if fweights is not None else torch.ones(observations, dtype=torch.float64)
    aw = aweights.detach().double() if aweights is not None else None
    w = fw if aw is None else fw * aw
    w_sum = float(w.sum())
    if aw is not None and correction != 0:
        share = float((w * aw).sum()) / w_sum
        nf, nf_size = w_sum - correction * share, w_sum + abs(correction) * share
    else:
        nf, nf_size = w_sum - correction, w_sum + abs(correction)
    tiny = torch.finfo(torch.float64).tiny
    weigh = 1 / max(abs(w_sum), tiny)
    centred = rows - (rows * w).sum(1, keepdim=True) * weigh
    size = centred.abs() + (rows.abs() * w.abs()).sum(1, keepdim=True) * weigh
    result = torch.cov(rows, correction=int(correction), fweights=fweights, aweights=aw).reshape(rows.shape[0], -1)
    return _Cov(size, w, fw, aw, w_sum, max(abs(nf), tiny), nf_size, correction, result)


def forward_terms(args, kwargs) -> torch.Tensor:
    """Per output: the L2 norm of w (|xc_i| + m_i)(|xc_j| + m_j) / nf over the observations, and the
    normalization's share, |cov| nf_size / nf."""
    c = _read(args, kwargs)
    weighted = c.size * c.w.abs()
    products = torch.einsum("ik,jk->ijk", weighted, c.size)
    terms = products.square().sum(-1).sqrt() / c.nf + c.result.abs() * c.condition
    return terms.reshape(c.result.squeeze().shape)


def gradient_terms(args, kwargs, cotangent: torch.Tensor) -> dict[str, torch.Tensor]:
    """Term norms of the input's and the aweights' gradients, by argument name.

    cov_ij sums w_k xc_ik xc_jk / nf for the centred xc: the input's gradient sums (g + g^T) w xc / nf
    over the other variables, plus the mean's path (w / w_sum times that sum over the observations),
    which cancels to zero exactly and so errs with its terms' magnitudes. The aweights' gradient sums g
    times fw xc_i xc_j / nf and cov times the normalization's derivative, over every output (and the
    mean's path). Both divide by the normalization, so both scale with its condition.
    """
    c = _read(args, kwargs)
    x = argument(args, kwargs, 0, "input")
    g = cotangent.detach().double().abs().reshape(c.result.shape)
    both = g + g.T
    weighted = c.size * c.w.abs()
    through = both @ weighted  # [variables, observations]
    mean_path = c.w.abs() / abs(c.w_sum) * through.sum(1, keepdim=True)
    found = {"input": ((through + mean_path) / c.nf * c.condition).reshape(x.shape)}
    if c.aw is not None:
        products = torch.einsum("ij,ik,jk->k", g, c.size, c.size)
        mean_path = torch.einsum("ij,ik,j->k", both, c.size, weighted.sum(1)) / abs(c.w_sum)
        moved = c.fw.abs()  # d nf / d aweights_k, term by term
        if c.correction != 0:
            moved = moved * (1 + abs(c.correction) * (2 * c.aw.abs() + float((c.w * c.aw).abs().sum()) / abs(c.w_sum))
                             / abs(c.w_sum))
        normalization = (g * c.result.abs()).sum() * moved
        found["aweights"] = (c.fw.abs() * (products + mean_path) / c.nf + normalization / c.nf) * c.condition
    return found
