"""What tells a fair kernel's noise from a shared bias: values that repeat in the golden, a shift shared
by a whole output, and the statistics of each row's error (its residual, balance and lean).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..common import FloatFormat
from .element_bound import (
    ONE_ROUNDING_RMS, ROUNDING_DOMINATED, ROUNDING_RMS, TERM_ROUNDINGS, error_bound, flat_term_norm,
    order_widening,
)
from .metrics import Accumulation, Repetition

_ROW_CHUNK = 1 << 18  # rows walked at a time, as measuring.py walks elements


REPETITION_SAMPLE = 4096
ALIKE_BITS = 12  # golden values that agree to 12 significant bits count as alike
NATURAL_COLLISIONS = 1.5  # a continuous spread sampled at 12 bits collides now and then: not repetition
# Odd multipliers that mix a row's keys into one: distinct rows collide with a chance near 2^-64.
# One per ROW_PROBES, as signed int64.
_ROW_MIX = (-7046029254386353131, 7146057691288625177, 1983613069789375825, -8796714831421723037)


def repetition_of(flat_g, device, work) -> Repetition | None:
    """How often the nonzero values of a strided sample of the golden recur; None where they mostly
    differ. Alike values come from alike computations (a row repeated down a batch, a constant, a
    half-precision input's few hundred values), whose errors repeat rather than average out."""
    step = max(1, flat_g.numel() // REPETITION_SAMPLE)
    sample = flat_g[::step][:REPETITION_SAMPLE].to(device=device, dtype=work)
    return _alike(sample[torch.isfinite(sample) & (sample != 0)])  # zeros are mostly exact, not repeated work


def alike_rows(flat_g, length: int, device, work) -> Repetition | None:
    """How often the golden's rows of ``length`` recur, told apart by ROW_PROBES evenly spaced values."""
    probes = torch.arange(ROW_PROBES, device=flat_g.device) * length // ROW_PROBES
    prints = flat_g.reshape(-1, length)[:, probes].to(device=device, dtype=work)
    return _alike(torch.where(torch.isfinite(prints), prints, 0))


def _alike(values: torch.Tensor) -> Repetition | None:
    """How often the values (or rows of values) recur, to ALIKE_BITS; None where they mostly differ."""
    if not values.numel():
        return None
    mantissa, exponent = torch.frexp(values)
    key = torch.round(mantissa * 2.0**ALIKE_BITS).to(torch.int64) + exponent.to(torch.int64) * 2**16
    if key.dim() > 1:  # a row's keys mixed into one (wrapping int64): torch.unique(dim=0) is 40x slower
        key = (key * torch.tensor(_ROW_MIX[: key.shape[1]], device=key.device)).sum(-1)
    distinct = int(torch.unique(key).shape[0])
    repetition = Repetition(values.shape[0] / distinct, distinct)
    return repetition if repetition.factor >= NATURAL_COLLISIONS else None


def shared_shift(flat_a, flat_g, length: int, fmt: FloatFormat, work) -> torch.Tensor | None:
    """Per element, how far its row's rounded factor moves it: the row's common relative error (the
    least-squares fit of actual = (1 + c) golden), clamped to the output dtype's unit roundoff, times
    the golden. None where the output does not split into rows of ``length``."""
    numel = flat_a.numel()
    if length <= 1 or numel % length:
        return None
    a = flat_a.to(work).reshape(-1, length)
    g = flat_g.to(device=a.device, dtype=work).reshape(-1, length)
    finite = torch.isfinite(a) & torch.isfinite(g)
    a, g = torch.where(finite, a, 0), torch.where(finite, g, 0)
    weight = (g * g).sum(-1, keepdim=True)
    common = torch.where(weight > 0, ((a - g) * g).sum(-1, keepdim=True) / weight.clamp(min=torch.finfo(work).tiny), 0)
    return (common.clamp(-fmt.unit_roundoff, fmt.unit_roundoff) * g).reshape(-1)


# The elementwise steps of a fair normalization around its shared factor (the function of the
# element, the multiplication by the factor), each up to u of the element's scale.
RESIDUAL_ROUNDINGS = 2


def rounding_bound(abs_g, term, moved, fmt: FloatFormat, acc: Accumulation, golden_rms: float, work):
    """Each element's bound as the rounding gate reads it where rows share a factor: what a fair kernel
    errs per element alone. The row's common error (its rounded sum, mean or rsqrt) leans the whole
    row one way, and the gate counts rows as its samples for that; left in, its sqrt(K) share hides
    the output's one rounding wherever values sit far from their mean."""
    return error_bound(abs_g, term, moved, fmt, RESIDUAL_ROUNDINGS * fmt.accumulator.unit_roundoff, golden_rms,
                       work, roundings=acc.roundings)


@dataclass(frozen=True)
class _Rows:
    residual: float
    max_residual: float
    order_ratio: float | None  # RowSums.ratio, where the rows' statistic has a fair-order ceiling
    order_lean: float  # the mean lean, over the full bound, that its terms vanishing in a fair order explain
    balance_noise: float
    lean_noise: float | None


def row_statistics(flat_a, flat_g, shape, term_norm, sensitivity, fmt: FloatFormat, acc: Accumulation,
                    golden_rms: float, alike_rows: Repetition | None, work) -> _Rows:
    """Over rows that share a rounded factor, in one pass: the mean residual ratio, the standard
    error of the error balance and, where the output is one rounding, of the rounding lean.

    The residual is the mean error over the elementwise bound once each row's common error is taken out;
    its maximum is the largest such ratio.

    A fair normalization errs along a row in two ways: through its shared statistics (a rounded sum,
    a rounded rsqrt), which the bound allows for with sqrt(K)·u_acc and which move every element of
    the row together, as an offset (times the weight) and a scale (around the bias); and per element,
    by a few roundings. The least-squares offset and scale of each row's error are taken out, so
    what is left is the per-element part, judged against the bound without the sqrt(K) share:
    noise of tens of ulp shows at any K, where under the full bound it hides past K of about 1000.

    The balance's standard error is the spread of the rows' own balances over sqrt(rows): a fair
    float32 softmax's row leans to its factor's side (+-0.5 from row to row), a kernel that
    truncates leans the same way in every row; the first is noise, the second a bias. One row says
    nothing of which it is: 1/3 (the balance is never judged). The rounding lean's standard error is
    the cluster-robust one, rows as the clusters, of the share that rounding_bias takes.
    """
    device = flat_a.device
    rows = flat_a.numel() // acc.length
    balances = torch.empty(rows, dtype=work, device=device)
    rows_per_chunk = max(1, _ROW_CHUNK // acc.length)
    offset = flat_term_norm(acc.shared_offset, shape, device, work)
    origin = flat_term_norm(acc.shared_origin, shape, device, work)
    residual_scale = (acc.roundings + RESIDUAL_ROUNDINGS) * fmt.unit_roundoff
    once = acc.one_rounding(fmt)
    leans = torch.zeros(rows, 3, dtype=work, device=device)  # per row: rounding elements, up, larger
    total, count, worst, leaning = 0.0, 0, 0.0, 0.0
    sums = RowSums(fmt, acc.roundings + RESIDUAL_ROUNDINGS, acc.repeats) \
        if acc.row_sum is not None and fmt.accumulator.unit_roundoff == fmt.unit_roundoff else None
    offset_size = flat_term_norm(acc.row_offset_size, shape, device, work)
    for start in range(0, flat_a.numel(), rows_per_chunk * acc.length):
        part = slice(start, start + rows_per_chunk * acc.length)
        a = flat_a[part].to(work).reshape(-1, acc.length)
        g = flat_g[part].to(device=device, dtype=work).reshape(-1, acc.length)
        finite = torch.isfinite(a) & torch.isfinite(g)
        error = torch.where(finite, a - g, 0)
        p = torch.ones_like(g) if offset is None else offset[part].reshape(g.shape)
        q = g if origin is None else g - origin[part].reshape(g.shape)
        p, q = torch.where(finite, p, 0), torch.where(finite, q, 0)
        term = None if term_norm is None else term_norm[part].reshape(g.shape)
        moved = None if sensitivity is None else sensitivity[part].reshape(g.shape)
        abs_g = torch.where(finite, g.abs(), 0)
        bound = error_bound(abs_g, term, moved, fmt, residual_scale, golden_rms, work, roundings=acc.roundings)
        fit, fit_noise = _fit_two(error, p, q, torch.where(finite, bound, 0))
        if sums is not None:
            lean = sums.add(acc.row_sum, error, g, p, q, finite,
                            None if offset_size is None else offset_size[part].reshape(g.shape))
            if bool(lean.any()):  # most rows lose no term whole: no full bound to compute for them
                full = error_bound(abs_g, term, moved, fmt, acc.per_scale(fmt), golden_rms, work,
                                   acc.input_share(fmt), acc.roundings)
                leaning += float(torch.where(finite, lean / full, 0).sum())
        ratios = torch.where(finite, (error - fit).abs(), 0) / (bound + fit_noise)
        total += float(ratios.sum())
        worst = max(worst, float(ratios.max()))
        count += int(finite.sum())
        # signs against the golden as the dtype holds it, as error_balance counts them
        g_round = flat_g[part].to(flat_a.dtype).to(device=device, dtype=work).reshape(g.shape)
        signed = torch.isfinite(a) & torch.isfinite(g_round)
        signs = torch.where(signed, torch.sign(a - g_round), 0)
        first = start // acc.length
        balances[first:first + a.shape[0]] = signs.sum(-1) / signed.sum(-1).clamp(min=1)
        if once:  # the elements GoldenChunk.rounding picks, counted per row
            dominated = rounding_bound(abs_g, term, moved, fmt, acc, golden_rms, work) <= \
                ROUNDING_DOMINATED * fmt.unit_roundoff * abs_g
            dominated &= signed
            growth = torch.where(abs_g > 0, torch.sign(a.abs() - g_round.abs()), 0)
            leans[first:first + a.shape[0]] = torch.stack(
                [dominated.sum(-1), (signs * dominated).sum(-1), (growth * dominated).sum(-1)], -1).to(work)
    residual = total / count if count else 0.0
    independent = rows if alike_rows is None else alike_rows.independent(rows)
    order = None if sums is None else sums.ratio(independent)
    return _Rows(residual, worst, order, leaning / count if count else 0.0,
                 float(balances.std() / math.sqrt(rows)) if rows >= 2 else 1 / 3,
                 _clustered_noise(leans, alike_rows) if once else None)


# Rows whose terms' relative spread is under this many u per term are not judged (RowSums.add).
ALIKE_TERMS = 4
# What the factor itself rounds after its sum: an eps added, a square root, a reciprocal or division.
FACTOR_ROUNDINGS = 3


class RowSums:
    """The rows' common errors against the most a fair order of each row's sum errs (issue 37).

    A normalization's row statistic is a sum: softmax's probabilities (its sum scales the row),
    log_softmax's (its log offsets the row), rms_norm's squared normalized values (its mean square
    scales the row through the rsqrt, by half its relative error), a centring norm's values and their
    squares (its mean offsets the row; its variance scales it).

    Summed one term at a time in the output's own format (float32, float64), the fair order that errs
    most, a sum's error is a bridge's (element_bound.order_rmse): ROUNDING_RMS·u·sqrt(K·(S²/3 + t²/6)
    + TERM_ROUNDINGS·t²), S the sum and t its terms' L2 norm, widened by chance as order_rmse is; a
    term under u of the sum may vanish whole in it, so their total adds; and the factor's own
    roundings add FACTOR_ROUNDINGS of ONE_ROUNDING_RMS·u each (of u·|logsumexp| where the statistic
    offsets the row: log_softmax rounds what it subtracts). The fitted common error also carries the
    elements' own roundings (``per_element`` of them, u·|g| each), as a least-squares coefficient
    does: a share that only rows of a few elements notice. A sum kept in a narrower accumulator errs
    several times all that. Rows of alike terms are left out: there a sequential sum errs 89 u over
    4096 terms of a near-constant softmax, where the bridge says 17. Terms that repeat one value exactly
    (a few distinct scores) err alike along each value's run: the bridge counts K·repeats additions.

    A centring norm may take its variance in one pass, E[x²] - mean², which errs with the values'
    distance r from their mean, in units of their spread: the sum of x² errs with (1 + r²) of the
    variance, the mean's own error enters twice r times. Its offset and its scale are judged apart,
    each against its own ceiling, and the worse decides: at r = 50 the scale's ceiling is 2500 times
    the offset's, and would hide a mean summed too narrowly.
    """

    def __init__(self, fmt: FloatFormat, per_element: int, repeats: float = 1.0):
        self.u = fmt.unit_roundoff
        self.per_element = per_element
        self.repeats = repeats  # Accumulation.repeats: runs of one term err alike, K·repeats roundings
        self.parts: dict[str, list[float]] = {}  # per coefficient: common², chance², vanished², rows

    def add(self, kind: str, error, g, p, q, finite, offset_size=None) -> torch.Tensor:
        """Tallies the rows' common errors and ceilings; returns, per element, how far the terms that
        vanish whole in a fair order may move it, all one way (a sum of many terms far under its
        largest loses them: a sequential float32 softmax over wide scores leans 10 u in every row)."""
        g = torch.where(finite, g, 0)  # log_softmax's -inf, where the input has one
        if kind == "centred":  # the values' offset from zero in spreads; unknown, taken as centred
            r = torch.zeros(g.shape[0], dtype=g.dtype, device=g.device) if offset_size is None \
                else torch.where(finite, offset_size, 0).sum(-1) / finite.sum(-1).clamp(min=1)
            return self._centred(error, g, p, q, _normalized(p, q, finite), finite, r)
        if kind == "probabilities":
            terms, regressor, half = g.clamp(min=0), q, 1.0
        elif kind == "log_probabilities":
            terms, regressor, half = torch.exp(g), p, 1.0
        else:  # squares of the normalized values
            terms, regressor, half = _normalized(p, q, finite).square(), q, 0.5
        total, sequential, vanished, usable = self._sum(terms, finite)
        # the factor's roundings: relative ones, or for an offset, u of what it subtracts
        size = 1.0 if offset_size is None else torch.where(finite, offset_size, 0).amax(-1).clamp(min=1)
        common, carried = _coefficient(regressor, error, g)
        relative = sequential / total.square().clamp(min=torch.finfo(g.dtype).tiny)
        variance = half**2 * relative \
            + ONE_ROUNDING_RMS**2 * (FACTOR_ROUNDINGS * size**2 + self.per_element * carried)
        self._tally("factor", common, variance, vanished * half, usable)
        return (vanished * half)[:, None] * regressor.abs()

    def _centred(self, error, g, p, q, normalized, finite, r) -> torch.Tensor:
        """A centring norm: the mean's error offsets the row (along the weight p), the variance's scales
        it (along q), as a one-pass variance of values r spreads from zero errs, in spread units."""
        count = finite.sum(-1).clamp(min=1).to(g.dtype)
        values = torch.where(finite, normalized + r[:, None], 0)  # x / spread
        _, mean_sum, _, _ = self._sum(values, finite)
        squares, square_sum, vanished, usable = self._sum(values.square(), finite)
        mean = mean_sum / count.square()  # (mean's error / spread)², per u²
        mean_square = square_sum / count.square()  # (E[x²]'s error / spread²)², per u²
        variance = (mean_square.sqrt() + 2 * r.abs() * mean.sqrt()).square() \
            + ONE_ROUNDING_RMS**2 * FACTOR_ROUNDINGS * (1 + r.square()).square()
        offset, offset_carried = _coefficient(p, error, g)
        scale, scale_carried = _coefficient(q, error, g)
        # A kernel may fold the norm into x·a + (bias - mean·a), a = weight / spread: that shift's
        # roundings move a whole channel or row by u of |bias| + |mean·a|, as the fitted offset reads them.
        shift = (p.abs() * ((g - q).abs() + r[:, None].abs() * p.abs())).sum(-1) \
            / p.square().sum(-1).clamp(min=torch.finfo(g.dtype).tiny)
        self._tally("offset", offset, mean + ONE_ROUNDING_RMS**2 * (FACTOR_ROUNDINGS * shift.square()
                                                                    + self.per_element * offset_carried),
                    torch.zeros_like(r), usable)
        lost = vanished * squares / count / 2  # through the rsqrt, relative to the variance
        self._tally("scale", scale, variance / 4 + ONE_ROUNDING_RMS**2 * self.per_element * scale_carried, lost,
                    usable)
        return lost[:, None] * q.abs()

    def _sum(self, terms, finite):
        """Per row: the terms' sum, its sequential error's variance per u² (the bridge), the total of
        the terms that vanish whole in it, relative to it, and whether the terms differ enough to judge."""
        terms = torch.where(finite & torch.isfinite(terms), terms, 0)
        total = terms.sum(-1)
        length, square = finite.sum(-1).to(terms.dtype), terms.square().sum(-1)
        sequential = ROUNDING_RMS**2 * (length * self.repeats * (total.square() / 3 + square / 6)
                                        + TERM_ROUNDINGS * square)
        size = total.abs().clamp(min=torch.finfo(terms.dtype).tiny)
        relative = terms.abs() / size[:, None]
        # Terms alike to within the sum's own spacing (2u of it, K terms in) round alike in every
        # addition: their errors add up rather than average out, and only the worst case (u·K) holds.
        variation = torch.sqrt((length * square / size.square() - 1).clamp(min=0))  # std over mean
        usable = (total != 0) & (variation >= ALIKE_TERMS * self.u * length)
        vanished = torch.where(relative < self.u, relative, 0).sum(-1)  # each rounded away whole
        return total, sequential, vanished, usable

    def _tally(self, part: str, common, variance, vanished, usable) -> None:
        sums = self.parts.setdefault(part, [0.0, 0.0, 0.0, 0])
        sums[0] += float(torch.where(usable, common, 0).square().sum())
        sums[1] += float(torch.where(usable, variance, 0).sum()) * self.u**2
        sums[2] += float(torch.where(usable, vanished, 0).square().sum())
        sums[3] += int(usable.sum())

    def ratio(self, independent: float) -> float | None:
        """RMS common error over RMS ceiling, the worst coefficient's; None with no row to judge."""
        ratios = []
        for common, chance, vanished, rows in self.parts.values():
            if rows:
                ceiling = order_widening(independent) * math.sqrt(chance / rows) + math.sqrt(vanished / rows)
                ratios.append(math.sqrt(common / rows) / ceiling if ceiling > 0 else math.inf)
        return max(ratios, default=None)


def _normalized(p, q, finite):
    """A norm's (x - mean) / spread per element: its output less the bias, over the weight."""
    ok = finite & (p != 0)
    return torch.where(ok, q / torch.where(ok, p, 1), 0)


def _coefficient(regressor, error, g):
    """Per row, the least-squares coefficient of ``regressor`` alone in the error, and the variance
    per (ONE_ROUNDING_RMS·u)² it carries from the elements' own roundings, u·|g| each."""
    weight = regressor.square().sum(-1)
    tiny = torch.finfo(g.dtype).tiny
    common = (regressor * error).sum(-1) / weight.clamp(min=tiny)
    carried = (regressor * g).square().sum(-1) / weight.square().clamp(min=tiny)
    return common, carried


# Fewer rows than this estimate their own spread too poorly for a 6-sigma gate: four rows whose
# rounded factors happen to lean alike look like one truncating kernel.
LEAN_ROWS = 16
ROW_PROBES = 4  # values of each row's golden, evenly spaced, that tell alike rows (near-uniform softmax) apart


def _clustered_noise(leans: torch.Tensor, repetition: Repetition | None) -> float:
    """The larger standard error of the two shares of rounding_bias (up, larger), rows as clusters:
    sqrt(sum over rows of (row's sum - share * row's count)^2) / total count, widened where rows
    repeat alike (whose goldens agree at ROW_PROBES places: they count once). Too few independent
    rows: 1/3, which no lean exceeds by 6 sigma."""
    counts = leans[:, 0]
    total = float(counts.sum())
    rows = int((counts > 0).sum())
    independent = rows if repetition is None else repetition.independent(rows)
    if total == 0 or independent < LEAN_ROWS:
        return 1 / 3
    worst = 0.0
    for sums in (leans[:, 1], leans[:, 2]):
        share = float(sums.sum()) / total
        worst = max(worst, math.sqrt(float(((sums - share * counts) ** 2).sum())) / total)
    return worst * math.sqrt(rows / independent)


def _fit_two(e: torch.Tensor, p: torch.Tensor, q: torch.Tensor,
             spread: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per element, the least-squares alpha·p + c·q closest to e in its row (one of p, q alone where the
    two are parallel within rounding), and how far that fit strays by chance where each element errs up
    to ``spread`` on its own, independently: the standard error of the fitted value (the sandwich
    A⁻¹BA⁻¹, A = XᵀX, B = Xᵀ·diag(spread²)·X, X = [p, q]).

    The fit estimates a row's common offset and scale from the very errors it is taken from: where a few
    elements' bounds are far smaller than the row's typical one (a layer norm whose eps dominates its
    variance, outputs near zero where the bias is), the noise of the others' roundings reaches them
    through the fit, up to 20 of their own bounds in a correctly rounded float32 row."""
    spp, spq, sqq = (p * p).sum(-1, keepdim=True), (p * q).sum(-1, keepdim=True), (q * q).sum(-1, keepdim=True)
    spe, sqe = (p * e).sum(-1, keepdim=True), (q * e).sum(-1, keepdim=True)
    weight = spread.square()
    bpp, bpq, bqq = (weight * p * p).sum(-1, keepdim=True), (weight * p * q).sum(-1, keepdim=True), \
        (weight * q * q).sum(-1, keepdim=True)
    det = spp * sqq - spq * spq
    tiny = torch.finfo(e.dtype).tiny
    solvable = det > 1e-9 * spp * sqq
    inverse = 1 / det.clamp(min=tiny)
    alpha = torch.where(solvable, (sqq * spe - spq * sqe) * inverse, 0)
    c = torch.where(solvable, (spp * sqe - spq * spe) * inverse, 0)
    # the fitted value's coefficients on the row's errors: x_j·A⁻¹·Xᵀ, its variance x_j·A⁻¹BA⁻¹·x_jᵀ
    a_p, a_q = (sqq * p - spq * q) * inverse, (spp * q - spq * p) * inverse  # A⁻¹·x_j
    variance = torch.where(solvable, a_p * a_p * bpp + 2 * a_p * a_q * bpq + a_q * a_q * bqq, 0)
    # parallel or one of them zero: the larger one alone
    alone_q = ~solvable & (sqq >= spp)
    alone_p = ~solvable & ~alone_q
    c = torch.where(alone_q, sqe / sqq.clamp(min=tiny), c)
    alpha = torch.where(alone_p, spe / spp.clamp(min=tiny), alpha)
    variance = torch.where(alone_q, q * q * bqq / sqq.square().clamp(min=tiny), variance)
    variance = torch.where(alone_p, p * p * bpp / spp.square().clamp(min=tiny), variance)
    return alpha * p + c * q, variance.clamp(min=0).sqrt()
