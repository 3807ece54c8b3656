"""Losses: a mean (or sum) of per-element terms that may cancel."""

from __future__ import annotations

from ...bounds import accumulation as acc
from ..records import op

RECORDS = (
    # cross_entropy rounds its log-probabilities to the dtype.
    op("cross_entropy", "error_bound", level="L2", roundings=2, accumulation=acc.CROSS_ENTROPY,
       statistics="nonnegative"),
    # The two distances (a sum and a square root each), their difference with the margin and the mean each
    # round to the dtype.
    op("triplet_margin_loss", roundings=4, accumulation=acc.loss("triplet_margin_loss", per_sample_features=True)),
    op("triplet_margin_with_distance_loss", roundings=4, accumulation=acc.loss("triplet_margin_with_distance_loss",
       per_sample_features=True)),
    # Losses torch composes op by op in the dtype: each element's loss is rounded (BCE's max + log(exp(-max) +
    # exp(-x - max)), multilabel's two logsigmoids) before the mean, an error of about u of the result
    # (float16 BCE with logits: 1.2 u; bfloat16 multilabel: 1.3 u).
    op("binary_cross_entropy_with_logits", "error_bound", roundings=2,
       accumulation=acc.loss("binary_cross_entropy_with_logits")),
    op("multilabel_soft_margin_loss", roundings=2, accumulation=acc.loss("multilabel_soft_margin_loss",
       per_sample_features=True)),
    # kl_div likewise: exp(t) (t - x), or xlogy(t, t) - t x, each step rounded before the mean (float32 with
    # log_target, a mean of two: 1.3 bounds of a plain bound).
    op("kl_div", "error_bound", roundings=2, accumulation=acc.loss("kl_div")),

    op("binary_cross_entropy", "error_bound", accumulation=acc.loss("binary_cross_entropy")),
    op("cosine_embedding_loss", accumulation=acc.loss("cosine_embedding_loss", per_sample_features=True)),
    op("ctc_loss", accumulation=acc.loss("ctc_loss")),
    op("gaussian_nll_loss", accumulation=acc.loss("gaussian_nll_loss")),
    op("hinge_embedding_loss", accumulation=acc.loss("hinge_embedding_loss")),
    op("huber_loss", accumulation=acc.loss("huber_loss"), statistics="nonnegative"),
    op("l1_loss", "error_bound", accumulation=acc.loss("l1_loss"), statistics="nonnegative"),
    op("margin_ranking_loss", accumulation=acc.loss("margin_ranking_loss")),
    op("mse_loss", "error_bound", accumulation=acc.MSE_LOSS, plain_sum=True, statistics="nonnegative"),
    op("multi_margin_loss", accumulation=acc.loss("multi_margin_loss", per_sample_features=True)),
    op("multilabel_margin_loss", accumulation=acc.loss("multilabel_margin_loss", per_sample_features=True)),
    op("nll_loss", "error_bound", accumulation=acc.NLL_LOSS),
    op("poisson_nll_loss", accumulation=acc.loss("poisson_nll_loss")),
    op("smooth_l1_loss", "error_bound", accumulation=acc.loss("smooth_l1_loss"), statistics="nonnegative"),
    op("soft_margin_loss", accumulation=acc.loss("soft_margin_loss")),
)
