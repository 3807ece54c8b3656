"""Interpolation and grid sampling: a few taps per output, moved by the roundings of their coordinates."""

from __future__ import annotations

from ...bounds import accumulation as acc
from ..records import op

RECORDS = (
    # A separable kernel interpolates one dim at a time and may round each pass to the dtype, as torch's half-
    # precision bicubic does (0.3 u of the taps where the result cancels them).
    op("interpolate", "error_bound", roundings=1, accumulation=acc.INTERPOLATE),
    op("upsample", roundings=1, accumulation=acc.INTERPOLATE),
    op("upsample_bilinear", roundings=1, accumulation=acc.UPSAMPLE_BILINEAR),
    op("upsample_nearest", roundings=1, accumulation=acc.UPSAMPLE_NEAREST),

    op("affine_grid", normwise=True),
    op("grid_sample", accumulation=acc.GRID_SAMPLER),
    op("grid_sampler", accumulation=acc.GRID_SAMPLER),
    op("grid_sampler_2d", accumulation=acc.GRID_SAMPLER),
    op("grid_sampler_3d", accumulation=acc.GRID_SAMPLER),
)
