"""How much each op accumulates: the reduction length K of its outputs and how to get term norms.

Pure data: the lengths come from reduction_lengths.py, the rule's fields from accumulation_rule.py;
replay/runner.py runs the ops. The error-bound standard scales its limit with K.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

import torch

from ..common.dtypes import float_format
from .terms import (
    attention_terms, composite_terms, covariance_terms, dequantized_terms, norm_terms, quantizer_terms, sampling_terms,
    softmax_terms, spectral_terms,
)
from .accumulation_rule import AccumulationRule, elementwise
from .op_arguments import argument
from .reduction_lengths import (
    CrossEntropy, Interpolation, batch_norm_length, batched_contraction, bilinear_length, chained_length, class_count,
    INFER_ATTENTION_NAMES, classes_then_batch, contracted, cumsum_length, einsum_length, first_input,
    fusion_attention_lengths, infer_attention_lengths,
    group_norm_length, grouped_matmul_length, loss_length, multi_head_attention, over_last_dim, pooling_window,
    product_terms, recurrent, reduced, softmax_length, trapezoid,
)


def _centring(op: str) -> AccumulationRule:
    """batch_norm and its kin: the length of their statistics, and term norms for their cancellation."""
    length = {"batch_norm": batch_norm_length, "group_norm": group_norm_length,
              "layer_norm": lambda a, k: math.prod(_normalized_shape(a, k)),
              "instance_norm": lambda a, k: math.prod(first_input(a, k).shape[2:])}[op]
    return AccumulationRule(length, term_norm=lambda a, k: norm_terms.forward_terms(op, a, k),
                            grad_term_norms=lambda a, k, g: norm_terms.gradient_terms(op, a, k, g),
                            arguments=norm_terms.ARGUMENTS[op], shared=True, correlated=True,
                            shared_dim=1 if op == "batch_norm" else None,
                            shared_affine=lambda a, k: norm_terms.affine(op, a, k), row_sum="centred",
                            row_offset_size=lambda a, k: norm_terms.offset_over_spread(op, a, k))


def _native(op: str, order: Callable[[Sequence[Any]], Sequence[Any]],
            arguments: tuple[str, ...]) -> AccumulationRule:
    """torch.native_batch_norm, native_group_norm and native_layer_norm: the norm's rule, its arguments
    read in the order ``order`` puts them back to, and term norms for the saved mean and invstd they also return.
    Without it their sums over the statistics were judged as one rounding each."""
    rule = _centring(op)
    return replace(rule, length=lambda a, k: rule.length(order(a), k),
                   term_norm=lambda a, k: rule.term_norm(order(a), k),
                   grad_term_norms=lambda a, k, g: rule.grad_term_norms(order(a), k, g),
                   shared_affine=lambda a, k: rule.shared_affine(order(a), k),
                   row_offset_size=lambda a, k: rule.row_offset_size(order(a), k),
                   output_norms=lambda a, k, name, shape: _saved_statistic(op, name, order(a), k),
                   arguments=arguments)


def _saved_statistic(op: str, name: str, args, kwargs) -> torch.Tensor | None:
    """A native norm's saved mean (output.1) and invstd (output.2), each with the terms it sums."""
    if name == "output.1":
        return norm_terms.mean_terms(op, args, kwargs)
    return norm_terms.invstd_terms(op, args, kwargs) if name == "output.2" else None


# native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps);
# native_group_norm(input, weight, bias, N, C, HxW, group, eps); native_layer_norm as layer_norm.
_NATIVE_NORMS = {
    "native_batch_norm": _native(
        "batch_norm", lambda a: (a[0], a[3], a[4], a[1], a[2], *a[5:]) if len(a) >= 5 else a,
        ("input", "weight", "bias", "running_mean", "running_var")),
    "native_group_norm": _native(
        "group_norm", lambda a: (a[0], a[6], a[1], a[2], a[7]) if len(a) >= 8 else a, ("input", "weight", "bias")),
    "native_layer_norm": _native("layer_norm", lambda a: a, ("input", "normalized_shape", "weight", "bias")),
}


def _normalized_shape(args, kwargs) -> tuple[int, ...]:
    shape = argument(args, kwargs, 1, "normalized_shape")
    return (shape,) if isinstance(shape, int) else tuple(shape)


_MATMUL = AccumulationRule(lambda a, k: first_input(a, k).shape[-1], squared=True)
_CONV = AccumulationRule(lambda a, k: argument(a, k, 1, "weight")[0].numel(), added=(2, "bias"), squared=True)
# A transposed convolution's weight is (in, out / groups, *kernel): each output sums at most
# in / groups channels over the whole kernel.
_CONV_TRANSPOSE = AccumulationRule(
    lambda a, k: argument(a, k, 1, "weight")[:, 0].numel() // max(int(argument(a, k, 6, "groups", default=1)), 1),
    added=(2, "bias"), squared=True)


def _any_convolution(args, kwargs) -> int:
    """torch.convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    a convolution's or a transposed one's length, as its flag says."""
    if argument(args, kwargs, 6, "transposed", default=False):
        groups = max(int(argument(args, kwargs, 8, "groups", default=1)), 1)
        return argument(args, kwargs, 1, "weight")[:, 0].numel() // groups
    return argument(args, kwargs, 1, "weight")[0].numel()


_SUM = AccumulationRule(lambda a, k: reduced(first_input(a, k), argument(a, k, 1, "dim")), squared=True)
_STAT = AccumulationRule(lambda a, k: reduced(first_input(a, k), argument(a, k, 1, "dim")))
def _statistic(op: str) -> AccumulationRule:
    """var and std; var_mean and std_mean also return the mean, which errs with the values it averages."""
    return AccumulationRule(_STAT.length, term_norm=lambda a, k: norm_terms.statistic_terms(op, a, k),
                            grad_term_norms=lambda a, k, g: norm_terms.statistic_gradient_terms(op, a, k, g),
                            output_norms=(lambda a, k, name, shape: norm_terms.statistic_mean_terms(a, k)
                                          if name == "output.1" else None) if op.endswith("_mean") else None)


def _observations(x: torch.Tensor) -> int:
    """torch.cov's observations: the columns of a matrix, the elements of a vector."""
    return x.shape[1] if x.dim() >= 2 else max(x.numel(), 1)


_NORM = AccumulationRule(lambda a, k: reduced(first_input(a, k), argument(a, k, 2, "dim")))
def _softmax(op: str) -> AccumulationRule:
    """softmax and log_softmax: the row's length, and term norms for exp's conditioning (bounds/terms/softmax_terms.py)."""
    if op == "log_softmax":  # one rounded log-sum-exp subtracted: a row-common offset
        forward, affine = None, None
    else:  # one rounded sum divided: a row-common scale, and no offset
        forward, affine = (lambda a, k: softmax_terms.forward_terms(op, a, k)), (lambda a, k: (torch.zeros(()), None))
    return AccumulationRule(softmax_length, term_norm=forward,
                            grad_term_norms=lambda a, k, g: softmax_terms.gradient_terms(op, a, k, g),
                            shared=over_last_dim, shared_affine=affine,
                            row_sum="log_probabilities" if op == "log_softmax" else "probabilities",
                            row_offset_size=softmax_terms.log_sum_exp_size if op == "log_softmax" else None)


_NORMALIZED = AccumulationRule(lambda a, k: math.prod(argument(a, k, 1, "normalized_shape")), shared=True)

# The distance and multi-class losses sum each sample's features before the batch.
_PER_SAMPLE_FEATURES = frozenset({"triplet_margin_loss", "triplet_margin_with_distance_loss", "cosine_embedding_loss",
                                  "multilabel_margin_loss", "multilabel_soft_margin_loss", "multi_margin_loss"})
_LOSSES = ("binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "l1_loss", "smooth_l1_loss",
           "huber_loss", "soft_margin_loss", "hinge_embedding_loss", "margin_ranking_loss", "poisson_nll_loss",
           "gaussian_nll_loss", "ctc_loss", *_PER_SAMPLE_FEATURES)


def _loss(name: str) -> AccumulationRule:
    """A loss is a mean (or sum) of terms that may cancel: its length is every term it adds up, found
    by the position of ``reduction`` in the functional's own signature."""
    position = list(inspect.signature(getattr(torch.nn.functional, name)).parameters).index("reduction")
    per_sample = (lambda x: x.shape[-1] if x.dim() else 1) if name in _PER_SAMPLE_FEATURES else (lambda x: 1)
    return AccumulationRule(loss_length(position, per_sample=per_sample, total=lambda x: x.numel()))


# Matrix algorithms (factorizations, solves, inverses, matrix functions) as msprobe names them: each
# result depends on every entry of its matrices, through sums as long as a row, and a fair one errs
# by about u times its size times the result's norm (backward stable normwise), so the length is the
# matrix's entries: sqrt of it is its size for a square matrix.
MATRIX_ALGORITHMS = frozenset({
    "cholesky", "cholesky_ex", "cholesky_inverse", "cholesky_solve", "cond", "det", "eig", "eigh", "eigvals",
    "eigvalsh", "geqrf", "householder_product", "inv", "inv_ex", "inverse", "logdet", "lstsq", "lu", "lu_factor",
    "lu_factor_ex", "lu_solve", "matrix_exp", "matrix_norm", "matrix_power", "matrix_rank", "multi_dot", "ormqr",
    "pca_lowrank", "pinv", "pinverse", "qr", "slogdet", "solve", "solve_ex", "solve_triangular", "svd", "svd_lowrank",
    "svdvals", "tensorinv", "tensorsolve", "triangular_solve", "ldl_factor", "ldl_factor_ex", "ldl_solve",
})


def _matrix_entries(args, kwargs) -> int:
    x = argument(args, kwargs, 0, "input", "self", "A")
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return 1
    return x.shape[-1] * x.shape[-2] if x.dim() >= 2 else x.numel()


_MATRIX_ALGORITHM = AccumulationRule(_matrix_entries)
# The SVD's factors move with the matrix's norm and its gaps (bounds/terms/spectral_terms.py).
_SVD = AccumulationRule(_matrix_entries, output_norms=spectral_terms.factor_terms)

ACCUMULATION_RULES: dict[str, AccumulationRule] = {
    **{name: _MATRIX_ALGORITHM for name in MATRIX_ALGORITHMS},
    "svd": _SVD, "svdvals": AccumulationRule(_matrix_entries, term_norm=spectral_terms.singular_values),
    "eigh": AccumulationRule(_matrix_entries, output_norms=spectral_terms.eigen_terms),
    "eigvalsh": AccumulationRule(_matrix_entries, term_norm=spectral_terms.eigenvalues),
    **{name: AccumulationRule(_matrix_entries, term_norm=spectral_terms.pseudo_inverse)
       for name in ("pinv", "pinverse")},
    **{name: _loss(name) for name in _LOSSES},
    "matmul": _MATMUL, "mm": _MATMUL, "bmm": _MATMUL, "mv": _MATMUL, "dot": _MATMUL,
    "addbmm": AccumulationRule(batched_contraction, added=(0, "input"), squared=True),
    "einsum": AccumulationRule(einsum_length, squared=True),
    "chain_matmul": AccumulationRule(chained_length, squared=True),
    "bilinear": AccumulationRule(bilinear_length, added=(3, "bias"), squared=True),
    "addmm": AccumulationRule(lambda a, k: argument(a, k, 1, "mat1").shape[-1], added=(0, "input"), squared=True),
    "baddbmm": AccumulationRule(lambda a, k: argument(a, k, 1, "batch1").shape[-1], added=(0, "input"),
                                squared=True),
    "linear": AccumulationRule(lambda a, k: argument(a, k, 1, "weight").shape[-1], added=(2, "bias"),
                               squared=True),
    "conv1d": _CONV, "conv2d": _CONV, "conv3d": _CONV,
    **{name: AccumulationRule(_any_convolution, added=(2, "bias"), squared=True)
       for name in ("convolution", "_convolution")},
    "conv_transpose1d": _CONV_TRANSPOSE, "conv_transpose2d": _CONV_TRANSPOSE, "conv_transpose3d": _CONV_TRANSPOSE,
    "sum": _SUM, "nansum": _SUM,
    # Each partial product rounds relative to itself: |the product| is every output's scale.
    "prod": AccumulationRule(_SUM.length, term_norm=product_terms(cumulative=False)),
    "cumprod": AccumulationRule(cumsum_length, term_norm=product_terms(cumulative=True), correlated=True),
    # Window means: linear in the input, each output a mean of its window.
    **{f"{kind}avg_pool{d}d": AccumulationRule(pooling_window(d, adaptive=bool(kind)), squared=True, mean=True)
       for kind in ("", "adaptive_") for d in (1, 2, 3)},
    "mean": AccumulationRule(_SUM.length, squared=True, mean=True),
    "cumsum": AccumulationRule(cumsum_length, squared=True, correlated=True),
    "trapezoid": trapezoid(cumulative=False), "trapz": trapezoid(cumulative=False),
    "cumulative_trapezoid": trapezoid(cumulative=True),
    "norm": _NORM, "vector_norm": _NORM,
    # Distances and similarities sum over one dim of their inputs: the feature dim.
    **{name: AccumulationRule(elementwise, sensitivity=sampling_terms.grid_sample_sensitivity,
                              grad_term_norms=sampling_terms.grid_sample_input_terms, arguments=("input", "grid"))
       for name in sampling_terms.SAMPLERS},
    "interpolate": Interpolation().rule(), "upsample": Interpolation().rule(),
    "upsample_bilinear": Interpolation("bilinear", align_corners=True).rule(),
    "upsample_nearest": Interpolation("nearest").rule(),
    "cosine_similarity": AccumulationRule(lambda a, k: reduced(argument(a, k, 0, "x1"),
                                                                argument(a, k, 2, "dim", default=1)),
                                         grad_term_norms=composite_terms.cosine_similarity_gradient_terms,
                                         arguments=("x1", "x2", "dim", "eps")),
    "pairwise_distance": AccumulationRule(lambda a, k: first_input(a, k).shape[-1] if first_input(a, k).dim() else 1),
    "cdist": AccumulationRule(lambda a, k: first_input(a, k).shape[-1]),
    "tensordot": AccumulationRule(lambda a, k: contracted(a, k), squared=True),
    **{name: AccumulationRule(recurrent) for name in ("gru", "lstm", "rnn_tanh", "rnn_relu")},
    "multi_head_attention_forward": AccumulationRule(multi_head_attention),
    **{op: _statistic(op) for op in ("var", "std", "var_mean", "std_mean")},
    # A sum over the observations of centred products, over a normalization that may cancel
    # (bounds/terms/covariance_terms.py): one rounding of the centred values, whose terms carry the mean's.
    "cov": AccumulationRule(lambda a, k: _observations(first_input(a, k)),
                            term_norm=covariance_terms.forward_terms, grad_term_norms=covariance_terms.gradient_terms),
    "logsumexp": AccumulationRule(_STAT.length, grad_term_norms=softmax_terms.logsumexp_gradient_terms),
    "softmax": _softmax("softmax"), "softmin": _softmax("softmin"), "log_softmax": _softmax("log_softmax"),
    # its mean square sums positive squares: no centring, whose variance a fair kernel may take in one
    # pass (E[x^2] - mean^2) and so err with the values' distance from their mean
    "rms_norm": replace(_NORMALIZED, row_sum="squares"),
    # Composed of several ops (bounds/terms/composite_terms.py): gelu's 1 + erf cancels forward, and its gradient's
    # two halves near x = -0.75; softsign's and normalize's gradients add paths through each use of x,
    # which cancel.
    "gelu": AccumulationRule(elementwise, sensitivity=composite_terms.gelu_terms,
                             grad_sensitivities=composite_terms.gelu_gradient_terms),
    "npu_gelu": AccumulationRule(elementwise, sensitivity=composite_terms.gelu_terms,
                                 grad_sensitivities=composite_terms.gelu_gradient_terms),
    "npu_gelu_mul": AccumulationRule(elementwise, sensitivity=composite_terms.gelu_mul_terms),
    "softsign": AccumulationRule(elementwise, grad_term_norms=composite_terms.softsign_gradient_terms),
    "normalize": AccumulationRule(lambda a, k: reduced(first_input(a, k), argument(a, k, 2, "dim", default=1)),
                                  grad_term_norms=composite_terms.normalize_gradient_terms),
    "npu_rms_norm": AccumulationRule(lambda a, k: argument(a, k, 1, "gamma").numel(), shared=True),
    "layer_norm": _centring("layer_norm"), "group_norm": _centring("group_norm"),
    "batch_norm": _centring("batch_norm"), "instance_norm": _centring("instance_norm"),
    **_NATIVE_NORMS,
    # Two sums in a chain, whose lengths add as attention's do: the log-sum-exp over the classes, then
    # the mean over the batch (not their product: no sum runs over every logit at once).
    "cross_entropy": AccumulationRule(loss_length(6, per_sample=class_count, total=classes_then_batch),
                                      term_norm=lambda a, k: CrossEntropy(a, k).forward(),
                                      grad_term_norms=lambda a, k, g: {"input": CrossEntropy(a, k).input_grad(g)}),
    "nll_loss": AccumulationRule(loss_length(6, per_sample=lambda x: 1,
                                              total=lambda x: x.numel() // class_count(x))),
    "mse_loss": AccumulationRule(loss_length(4, per_sample=lambda x: 1, total=lambda x: x.numel()),
                                 term_norm=composite_terms.mse_loss_terms),
    # Scores sum over the head dim, the weighted values over the key length; backward also over queries.
    "scaled_dot_product_attention": AccumulationRule(
        lambda a, k: argument(a, k, 1, "key").shape[-2] + argument(a, k, 0, "query").shape[-1],
        backward_length=lambda a, k: (argument(a, k, 0, "query").shape[-2] + argument(a, k, 1, "key").shape[-2]
                                      + argument(a, k, 0, "query").shape[-1]),
        grad_term_norms=attention_terms.gradient_terms,
        sensitivity=attention_terms.forward_sensitivity, grad_sensitivities=attention_terms.gradient_sensitivities,
        arguments=("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")),
    # The weight's gradient adds one row per looked-up index; a row may be hit by every index.
    "embedding": AccumulationRule(lambda a, k: 1, backward_length=lambda a, k: max(first_input(a, k).numel(), 1)),
    # torch_npu's fused ops (pytest_npuprecision.ops.fused), named as after "NPU." in msprobe dumps.
    "npu_add_rms_norm": AccumulationRule(lambda a, k: argument(a, k, 2, "gamma").numel(), shared=True),
    # dx sums over the normalised elements, dgamma over the rows: two chains, their lengths added.
    "npu_rms_norm_backward": AccumulationRule(
        lambda a, k: argument(a, k, 2, "gamma").numel() + argument(a, k, 1, "self").numel()
        // max(argument(a, k, 2, "gamma").numel(), 1), arguments=("dy", "self", "gamma", "rstd")),
    # c_kv is an rms norm over gamma's elements; k_rope and the cache copies round once or not at all.
    "npu_kv_rmsnorm_rope_cache": AccumulationRule(lambda a, k: argument(a, k, 1, "gamma").numel(),
                                                  arguments=("kv", "gamma", "cos", "sin", "index", "k_cache",
                                                             "ckv_cache")),
    # Scores over the head dims (the rope part's added), weighted values over the selected keys.
    "npu_sparse_flash_attention": AccumulationRule(
        lambda a, k: argument(a, k, 3, "sparse_indices").shape[-1] + argument(a, k, 0, "query").shape[-1]
        + (0 if k.get("query_rope") is None else k["query_rope"].shape[-1])),
    "npu_layer_norm_eval": _NORMALIZED,
    "npu_group_norm_silu": AccumulationRule(
        lambda a, k: first_input(a, k).numel() // max(first_input(a, k).shape[0] * int(argument(a, k, 3, "group")), 1)),
    "npu_group_norm_swish": AccumulationRule(
        lambda a, k: first_input(a, k).numel() // max(first_input(a, k).shape[0] * int(argument(a, k, 1, "num_groups")),
                                                      1)),
    # As cross_entropy: the log-sum-exp over the classes, then the mean over the batch unless reduction is 'none'.
    "npu_cross_entropy_loss": AccumulationRule(loss_length(3, per_sample=class_count, total=classes_then_batch)),
    "npu_softmax_cross_entropy_with_logits": AccumulationRule(lambda a, k: 2 * class_count(first_input(a, k))),
    "npu_scaled_masked_softmax": AccumulationRule(lambda a, k: argument(a, k, 0, "x").shape[-1], shared=True),
    "npu_moe_gating_top_k_softmax": AccumulationRule(lambda a, k: argument(a, k, 0, "x").shape[-1], shared=True),
    # Softmax sums the experts (sigmoid nothing); sigmoid's weights are then renormalised over the k chosen.
    "npu_moe_gating_top_k": AccumulationRule(
        lambda a, k: (argument(a, k, 0, "x").shape[-1] if int(argument(a, k, 9, "norm_type", default=0)) == 0 else 1)
        + int(argument(a, k, 1, "k"))),
    "npu_linear": AccumulationRule(lambda a, k: argument(a, k, 1, "weight").shape[-1], added=(2, "bias"), squared=True),
    "npu_bmmV2": _MATMUL,
    # A batched matmul over K, the input's dim perm_x1[2] (linear in both: squared inputs give the term norms).
    "npu_transpose_batchmatmul": AccumulationRule(
        lambda a, k: argument(a, k, 0, "input").shape[(list(k.get("perm_x1") or [0, 1, 2]))[2]], squared=True,
        arguments=("input", "weight")),
    # x times an int8 weight dequantized on the fly: K terms, their norms through the dequantized weight.
    "npu_weight_quant_batchmatmul": AccumulationRule(
        lambda a, k: argument(a, k, 0, "x").shape[-1], added=(6, "bias"), term_norm=dequantized_terms.weight_quant_terms,
        arguments=("x", "weight", "antiquant_scale", "antiquant_offset", "quant_scale", "quant_offset", "bias")),
    # A per-token asymmetric quantizer's float offset, 127 - row max / scale, cancels its two terms.
    "npu_dynamic_quant_asymmetric": AccumulationRule(elementwise, output_norms=quantizer_terms.asymmetric_offset_terms,
                                                     arguments=("x",)),
    # Each group is a matmul over K (or over its share of K when K is grouped).
    "npu_grouped_matmul": AccumulationRule(grouped_matmul_length),
    "npu_gmm": AccumulationRule(grouped_matmul_length),
    "npu_gmm_v2": AccumulationRule(grouped_matmul_length),
    # Each token sums its topK expert outputs, each times its probability: linear in both.
    "npu_moe_token_unpermute": AccumulationRule(
        lambda a, k: 1 if argument(a, k, 2, "probs") is None else argument(a, k, 2, "probs").shape[-1], squared=True,
        arguments=("permuted_tokens", "sorted_indices", "probs")),
    # Each token sums its K expert outputs (plus each expert's bias) times its scales, then skip1 and skip2.
    "npu_moe_finalize_routing": AccumulationRule(
        lambda a, k: (argument(a, k, 4, "scales").shape[-1] if argument(a, k, 4, "scales") is not None
                      else int(argument(a, k, 8, "k", default=1))) + 2, squared=True,
        arguments=("expanded_permuted_rows", "skip1", "skip2", "bias", "scales", "expanded_src_to_dst_row",
                   "export_for_source_row")),
    # As scaled_dot_product_attention: scores over D, weighted values over the keys (the longest
    # sequence for TND); backward also over the queries. The grad op's outputs are that backward.
    "npu_fusion_attention": AccumulationRule(
        lambda a, k: sum(fusion_attention_lengths(a, k)[1:]),
        backward_length=lambda a, k: sum(fusion_attention_lengths(a, k))),
    "npu_fusion_attention_grad": AccumulationRule(lambda a, k: sum(fusion_attention_lengths(a, k, head_num_index=4))),
    # Inference attention (forward only): scores over the head dim, weighted values over the keys.
    **{name: AccumulationRule(lambda a, k, name=name: sum(infer_attention_lengths(name, a, k)))
       for name in INFER_ATTENTION_NAMES},
}
