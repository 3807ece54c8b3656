"""Softmax and the norms: a row's sum or statistics, and the one factor that scales it."""

from __future__ import annotations

from ...bounds import accumulation as acc
from ..records import op

RECORDS = (
    # log_softmax rounds max + log(sum(exp)) before subtracting it (torch's half-precision kernel: an output
    # near 0 of a row of wide scores errs by u * |max|).
    op("log_softmax", "error_bound", roundings=1, accumulation=acc.softmax("log_softmax"), rounded_once_in_half=True,
       statistics="log_softmax"),
    # Norms scale a whole row by one factor (rsqrt of the mean square or the variance), which a fair fused
    # kernel may round to the output dtype: a common relative error of u over the row.
    op("group_norm", "error_bound", roundings=1, accumulation=acc.centring("group_norm"), rounded_once_in_half=True),
    op("layer_norm", "error_bound", level="L2", roundings=1, accumulation=acc.centring("layer_norm"),
       rounded_once_in_half=True, statistics="layer_norm"),
    op("rms_norm", "error_bound", roundings=1, accumulation=acc.RMS_NORM, rounded_once_in_half=True,
       statistics="rms_norm"),
    # batch_norm and instance_norm may round their statistics to the dtype (torch's half-precision CPU
    # batch_norm does: a shift per channel of u times its mean).
    op("batch_norm", "error_bound", roundings=1, accumulation=acc.centring("batch_norm"), rounded_once_in_half=True),
    op("instance_norm", "error_bound", roundings=1, accumulation=acc.centring("instance_norm")),
    # Each slice is scaled by one factor, maxnorm / its norm, rounded once.
    op("renorm", roundings=1),
    # x / (k + alpha * mean(x^2 over the window))^beta: the squares, their window mean, k + alpha * mean and
    # its power each round to the dtype before the division.
    op("local_response_norm", roundings=3),

    op("native_batch_norm", accumulation=acc.NATIVE_BATCH_NORM),
    op("native_group_norm", accumulation=acc.NATIVE_GROUP_NORM),
    op("native_layer_norm", accumulation=acc.NATIVE_LAYER_NORM),
    op("normalize", accumulation=acc.NORMALIZE),
    op("softmax", "error_bound", accumulation=acc.softmax("softmax"), rounded_once_in_half=True, statistics="softmax"),
    op("softmin", accumulation=acc.softmax("softmin")),
)
