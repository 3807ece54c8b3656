"""Sums, means, products and statistics over a dim, pooling windows, distances and the trapezoidal rule."""

from __future__ import annotations

from ...bounds import accumulation as acc
from ..records import op

RECORDS = (
    # The trapezoidal rule rounds each spacing, each pair's sum and each product to the dtype before summing
    # them (torch composes it of diff, add, mul and sum).
    op("cumulative_trapezoid", roundings=3, accumulation=acc.CUMULATIVE_TRAPEZOID),
    op("trapezoid", roundings=3, accumulation=acc.TRAPEZOID),
    op("trapz", roundings=3, accumulation=acc.TRAPEZOID),
    # cov rounds the centred values (x - mean) once before summing their products.
    op("cov", roundings=1, accumulation=acc.COV),

    op("adaptive_avg_pool1d", accumulation=acc.window_mean(1, adaptive=True)),
    op("adaptive_avg_pool2d", "error_bound", accumulation=acc.window_mean(2, adaptive=True)),
    op("adaptive_avg_pool3d", accumulation=acc.window_mean(3, adaptive=True)),
    op("avg_pool1d", accumulation=acc.window_mean(1, adaptive=False)),
    op("avg_pool2d", "error_bound", accumulation=acc.window_mean(2, adaptive=False)),
    op("avg_pool3d", accumulation=acc.window_mean(3, adaptive=False)),
    op("cdist", accumulation=acc.CDIST),
    op("cosine_similarity", accumulation=acc.COSINE_SIMILARITY),
    op("cumprod", "error_bound", accumulation=acc.CUMPROD),
    op("cumsum", "error_bound", accumulation=acc.CUMSUM, plain_sum=True),
    op("logsumexp", "error_bound", accumulation=acc.LOGSUMEXP),
    op("mean", "error_bound", accumulation=acc.MEAN, plain_sum=True, rounded_once_in_half=True, statistics="reduction"),
    op("nansum", "error_bound", accumulation=acc.SUM, plain_sum=True, rounded_once_in_half=True),
    op("norm", "error_bound", accumulation=acc.VECTOR_NORM),
    op("pairwise_distance", accumulation=acc.PAIRWISE_DISTANCE),
    op("prod", "error_bound", accumulation=acc.PROD, rounded_once_in_half=True),
    op("scatter_add", level="L1"),
    op("std", "error_bound", accumulation=acc.statistic("std")),
    op("std_mean", "error_bound", accumulation=acc.statistic("std_mean")),
    op("sum", "error_bound", level="L2", accumulation=acc.SUM, plain_sum=True, rounded_once_in_half=True,
       statistics="reduction"),
    op("var", "error_bound", accumulation=acc.statistic("var")),
    op("var_mean", "error_bound", accumulation=acc.statistic("var_mean")),
    op("vector_norm", accumulation=acc.VECTOR_NORM),
)
