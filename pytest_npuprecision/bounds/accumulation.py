"""The accumulation rules ops share: the reduction length K of their outputs and how to get term norms.

Which op follows which rule is its catalogue record's (ops/table/); an op's own rule, where no other op
shares it, is written in its record. The lengths come from reduction_lengths.py, the rule's fields from
accumulation_rule.py; replay/runner.py runs the ops. The error-bound standard scales its limit with K.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import replace
from typing import Any, Callable, Sequence

import torch

from .terms import (
    attention_terms, composite_terms, covariance_terms, norm_terms, sampling_terms, softmax_terms, spectral_terms,
)
from .accumulation_rule import AccumulationRule, elementwise
from .op_arguments import argument
from .reduction_lengths import (
    CrossEntropy, Interpolation, batch_norm_length, batched_contraction, bilinear_length, chained_length, class_count,
    classes_then_batch, contracted, cumsum_length, einsum_length, first_input, group_norm_length, loss_length,
    multi_head_attention, over_last_dim, pooling_window, product_terms, recurrent, reduced, softmax_length, trapezoid,
)


def centring(op: str) -> AccumulationRule:
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


def native(op: str, order: Callable[[Sequence[Any]], Sequence[Any]],
            arguments: tuple[str, ...]) -> AccumulationRule:
    """torch.native_batch_norm, native_group_norm and native_layer_norm: the norm's rule, its arguments
    read in the order ``order`` puts them back to, and term norms for the saved mean and invstd they also return.
    Without it their sums over the statistics were judged as one rounding each."""
    rule = centring(op)
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
NATIVE_BATCH_NORM = native("batch_norm", lambda a: (a[0], a[3], a[4], a[1], a[2], *a[5:]) if len(a) >= 5 else a,
                           ("input", "weight", "bias", "running_mean", "running_var"))
NATIVE_GROUP_NORM = native("group_norm", lambda a: (a[0], a[6], a[1], a[2], a[7]) if len(a) >= 8 else a,
                           ("input", "weight", "bias"))
NATIVE_LAYER_NORM = native("layer_norm", lambda a: a, ("input", "normalized_shape", "weight", "bias"))


def _normalized_shape(args, kwargs) -> tuple[int, ...]:
    shape = argument(args, kwargs, 1, "normalized_shape")
    return (shape,) if isinstance(shape, int) else tuple(shape)


MATMUL = AccumulationRule(lambda a, k: first_input(a, k).shape[-1], squared=True)
CONVOLUTION = AccumulationRule(lambda a, k: argument(a, k, 1, "weight")[0].numel(), added=(2, "bias"), squared=True)
# A transposed convolution's weight is (in, out / groups, *kernel): each output sums at most
# in / groups channels over the whole kernel.
TRANSPOSED_CONVOLUTION = AccumulationRule(
    lambda a, k: argument(a, k, 1, "weight")[:, 0].numel() // max(int(argument(a, k, 6, "groups", default=1)), 1),
    added=(2, "bias"), squared=True)


def _any_convolution(args, kwargs) -> int:
    """torch.convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    a convolution's or a transposed one's length, as its flag says."""
    if argument(args, kwargs, 6, "transposed", default=False):
        groups = max(int(argument(args, kwargs, 8, "groups", default=1)), 1)
        return argument(args, kwargs, 1, "weight")[:, 0].numel() // groups
    return argument(args, kwargs, 1, "weight")[0].numel()


SUM = AccumulationRule(lambda a, k: reduced(first_input(a, k), argument(a, k, 1, "dim")), squared=True)
_STAT = AccumulationRule(lambda a, k: reduced(first_input(a, k), argument(a, k, 1, "dim")))


def statistic(op: str) -> AccumulationRule:
    """var and std; var_mean and std_mean also return the mean, which errs with the values it averages."""
    return AccumulationRule(_STAT.length, term_norm=lambda a, k: norm_terms.statistic_terms(op, a, k),
                            grad_term_norms=lambda a, k, g: norm_terms.statistic_gradient_terms(op, a, k, g),
                            output_norms=(lambda a, k, name, shape: norm_terms.statistic_mean_terms(a, k)
                                          if name == "output.1" else None) if op.endswith("_mean") else None)


def _observations(x: torch.Tensor) -> int:
    """torch.cov's observations: the columns of a matrix, the elements of a vector."""
    return x.shape[1] if x.dim() >= 2 else max(x.numel(), 1)


VECTOR_NORM = AccumulationRule(lambda a, k: reduced(first_input(a, k), argument(a, k, 2, "dim")))


def softmax(op: str) -> AccumulationRule:
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


NORMALIZED = AccumulationRule(lambda a, k: math.prod(argument(a, k, 1, "normalized_shape")), shared=True)


def loss(name: str, per_sample_features: bool = False) -> AccumulationRule:
    """A loss is a mean (or sum) of terms that may cancel: its length is every term it adds up, found
    by the position of ``reduction`` in the functional's own signature. The distance and multi-class
    losses (``per_sample_features``) sum each sample's features before the batch."""
    position = list(inspect.signature(getattr(torch.nn.functional, name)).parameters).index("reduction")
    per_sample = (lambda x: x.shape[-1] if x.dim() else 1) if per_sample_features else (lambda x: 1)
    return AccumulationRule(loss_length(position, per_sample=per_sample, total=lambda x: x.numel()))


# A matrix algorithm (a factorization, a solve, an inverse, a matrix function): each result depends on
# every entry of its matrices, through sums as long as a row, and a fair one errs by about u times its
# size times the result's norm (backward stable normwise), so the length is the matrix's entries: sqrt
# of it is its size for a square matrix.
def _matrix_entries(args, kwargs) -> int:
    x = argument(args, kwargs, 0, "input", "self", "A")
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return 1
    return x.shape[-1] * x.shape[-2] if x.dim() >= 2 else x.numel()


MATRIX_ALGORITHM = AccumulationRule(_matrix_entries)
# The SVD's factors move with the matrix's norm and its gaps (bounds/terms/spectral_terms.py).
SVD = AccumulationRule(_matrix_entries, output_norms=spectral_terms.factor_terms)
SVDVALS = AccumulationRule(_matrix_entries, term_norm=spectral_terms.singular_values)
EIGH = AccumulationRule(_matrix_entries, output_norms=spectral_terms.eigen_terms)
EIGVALSH = AccumulationRule(_matrix_entries, term_norm=spectral_terms.eigenvalues)
PSEUDO_INVERSE = AccumulationRule(_matrix_entries, term_norm=spectral_terms.pseudo_inverse)

ADDBMM = AccumulationRule(batched_contraction, added=(0, "input"), squared=True)
EINSUM = AccumulationRule(einsum_length, squared=True)
CHAIN_MATMUL = AccumulationRule(chained_length, squared=True)
BILINEAR = AccumulationRule(bilinear_length, added=(3, "bias"), squared=True)
ADDMM = AccumulationRule(lambda a, k: argument(a, k, 1, "mat1").shape[-1], added=(0, "input"), squared=True)
BADDBMM = AccumulationRule(lambda a, k: argument(a, k, 1, "batch1").shape[-1], added=(0, "input"), squared=True)
LINEAR = AccumulationRule(lambda a, k: argument(a, k, 1, "weight").shape[-1], added=(2, "bias"), squared=True)
TENSORDOT = AccumulationRule(lambda a, k: contracted(a, k), squared=True)
ANY_CONVOLUTION = AccumulationRule(_any_convolution, added=(2, "bias"), squared=True)
# Each partial product rounds relative to itself: |the product| is every output's scale.
PROD = AccumulationRule(SUM.length, term_norm=product_terms(cumulative=False))
CUMPROD = AccumulationRule(cumsum_length, term_norm=product_terms(cumulative=True), correlated=True)
MEAN = AccumulationRule(SUM.length, squared=True, mean=True)
CUMSUM = AccumulationRule(cumsum_length, squared=True, correlated=True)
TRAPEZOID = trapezoid(cumulative=False)
CUMULATIVE_TRAPEZOID = trapezoid(cumulative=True)


def window_mean(dims: int, adaptive: bool) -> AccumulationRule:
    """Average pooling: linear in the input, each output a mean of its window."""
    return AccumulationRule(pooling_window(dims, adaptive=adaptive), squared=True, mean=True)


# grid_sample and its aten spellings: one rounding of each sample, moved by the rounded coordinates.
GRID_SAMPLER = AccumulationRule(elementwise, sensitivity=sampling_terms.grid_sample_sensitivity,
                                grad_term_norms=sampling_terms.grid_sample_input_terms, arguments=("input", "grid"),
                                coordinates=sampling_terms.GRID_PATHS)
INTERPOLATE = Interpolation().rule()
UPSAMPLE_BILINEAR = Interpolation("bilinear", align_corners=True).rule()
UPSAMPLE_NEAREST = Interpolation("nearest").rule()
# Distances and similarities sum over one dim of their inputs: the feature dim.
COSINE_SIMILARITY = AccumulationRule(lambda a, k: reduced(argument(a, k, 0, "x1"), argument(a, k, 2, "dim", default=1)),
                                     grad_term_norms=composite_terms.cosine_similarity_gradient_terms,
                                     arguments=("x1", "x2", "dim", "eps"))
PAIRWISE_DISTANCE = AccumulationRule(lambda a, k: first_input(a, k).shape[-1] if first_input(a, k).dim() else 1)
CDIST = AccumulationRule(lambda a, k: first_input(a, k).shape[-1])
RECURRENT = AccumulationRule(recurrent)
MULTI_HEAD_ATTENTION = AccumulationRule(multi_head_attention)
# A sum over the observations of centred products, over a normalization that may cancel
# (bounds/terms/covariance_terms.py): one rounding of the centred values, whose terms carry the mean's.
COV = AccumulationRule(lambda a, k: _observations(first_input(a, k)),
                       term_norm=covariance_terms.forward_terms, grad_term_norms=covariance_terms.gradient_terms)
LOGSUMEXP = AccumulationRule(_STAT.length, grad_term_norms=softmax_terms.logsumexp_gradient_terms)
# its mean square sums positive squares: no centring, whose variance a fair kernel may take in one
# pass (E[x^2] - mean^2) and so err with the values' distance from their mean
RMS_NORM = replace(NORMALIZED, row_sum="squares")
# Composed of several ops (bounds/terms/composite_terms.py): gelu's 1 + erf cancels forward, and its gradient's
# two halves near x = -0.75; softsign's and normalize's gradients add paths through each use of x,
# which cancel.
GELU = AccumulationRule(elementwise, sensitivity=composite_terms.gelu_terms,
                        grad_sensitivities=composite_terms.gelu_gradient_terms)
SOFTSIGN = AccumulationRule(elementwise, grad_term_norms=composite_terms.softsign_gradient_terms)
NORMALIZE = AccumulationRule(lambda a, k: reduced(first_input(a, k), argument(a, k, 2, "dim", default=1)),
                             grad_term_norms=composite_terms.normalize_gradient_terms)
# Two sums in a chain, whose lengths add as attention's do: the log-sum-exp over the classes, then
# the mean over the batch (not their product: no sum runs over every logit at once).
CROSS_ENTROPY = AccumulationRule(loss_length(6, per_sample=class_count, total=classes_then_batch),
                                 term_norm=lambda a, k: CrossEntropy(a, k).forward(),
                                 grad_term_norms=lambda a, k, g: {"input": CrossEntropy(a, k).input_grad(g)})
NLL_LOSS = AccumulationRule(loss_length(6, per_sample=lambda x: 1, total=lambda x: x.numel() // class_count(x)))
MSE_LOSS = AccumulationRule(loss_length(4, per_sample=lambda x: 1, total=lambda x: x.numel()),
                            term_norm=composite_terms.mse_loss_terms)
# Scores sum over the head dim, the weighted values over the key length; backward also over queries.
SCALED_DOT_PRODUCT_ATTENTION = AccumulationRule(
    lambda a, k: argument(a, k, 1, "key").shape[-2] + argument(a, k, 0, "query").shape[-1],
    backward_length=lambda a, k: (argument(a, k, 0, "query").shape[-2] + argument(a, k, 1, "key").shape[-2]
                                  + argument(a, k, 0, "query").shape[-1]),
    grad_term_norms=attention_terms.gradient_terms,
    sensitivity=attention_terms.forward_sensitivity, grad_sensitivities=attention_terms.gradient_sensitivities,
    arguments=("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale"))
# The weight's gradient adds one row per looked-up index; a row may be hit by every index.
EMBEDDING = AccumulationRule(lambda a, k: 1, backward_length=lambda a, k: max(first_input(a, k).numel(), 1))
