"""How much each op accumulates: the reduction length K of its outputs and how to get term norms.

Pure data and small readers of an op's own arguments; replay/runner.py runs the ops. The error-bound
standard scales its limit with K, so an entry errs on the side of a larger K where exactness
would need the op's internals.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from ..common.dtypes import float_format
from . import attention_terms, composite_terms, norm_terms, sampling_terms, softmax_terms
from .op_arguments import argument


def _input(args, kwargs) -> torch.Tensor:
    return argument(args, kwargs, 0, "input", "self")


def _reduced(x: torch.Tensor, dim: Any) -> int:
    """How many elements a reduction over ``dim`` sums (all of them for None, [] or a legacy bool)."""
    if x.dim() == 0:
        return 1
    if dim is None or isinstance(dim, bool) or (isinstance(dim, (list, tuple)) and not dim):
        return max(x.numel(), 1)
    dims = dim if isinstance(dim, (list, tuple)) else (dim,)
    return math.prod(x.shape[d] for d in dims)


def _softmax_length(args, kwargs) -> int:
    x = _input(args, kwargs)
    return x.shape[softmax_terms.softmax_dim(x, argument(args, kwargs, 1, "dim"))] if x.dim() else 1


def _contracted(args, kwargs) -> int:
    """How many products each element of tensordot(a, b, dims) sums: the contracted dims, the larger
    of a's and b's in each pair (a dim of 1 broadcasts against the other: a 1x1 a sums b's 2x2)."""
    a, b = argument(args, kwargs, 0, "a"), argument(args, kwargs, 1, "b")
    dims = argument(args, kwargs, 2, "dims", default=2)
    if isinstance(dims, int):
        pairs = list(zip(range(a.dim() - dims, a.dim()), range(dims))) if dims else []
    else:
        first, second = (dims[0], dims[1]) if isinstance(dims, (list, tuple)) and len(dims) == 2 else ((), ())
        pairs = list(zip(*(([d] if isinstance(d, int) else d) for d in (first, second))))
    return math.prod(max(a.shape[i], b.shape[j]) for i, j in pairs) if pairs else 1


def _recurrent(args, kwargs) -> int:
    """torch.gru / lstm / rnn_tanh / rnn_relu (padded or packed): each output ends T steps, and each
    step sums the layer's input and its previous hidden state through the weights; the recurrence
    carries every step's error on, as a random walk where it contracts: T (input + hidden) terms."""
    packed = isinstance(args[1], torch.Tensor) and args[1].dim() == 1 and not args[1].is_floating_point()
    x, hx = args[0], args[2] if packed else args[1]
    hidden = (hx[0] if isinstance(hx, (list, tuple)) else hx).shape[-1]
    bidirectional, batch_first = (args[8], False) if packed else (args[7], args[8])
    if packed:
        steps = args[1].numel()
    else:
        steps = x.shape[1 if batch_first and x.dim() == 3 else 0]
    features = max(x.shape[-1], hidden * (2 if bidirectional else 1))  # a deeper layer reads both directions
    return max(steps, 1) * (features + hidden)


def _multi_head_attention(args, kwargs) -> int:
    """multi_head_attention_forward: three projections of E terms each (the query's or key's, the
    value's, the output's), each head's scores of E / heads terms, and the softmax and weighted sum
    over S keys: 3 E + 2 S + E / heads terms, their errors added as a random walk."""
    embed = argument(args, kwargs, 0, "query").shape[-1]
    keys = argument(args, kwargs, 1, "key").shape[0]
    heads = max(int(argument(args, kwargs, 4, "num_heads")), 1)
    return 3 * embed + 2 * keys + embed // heads


def _over_last_dim(args, kwargs) -> bool:
    """softmax normalizes runs of consecutive elements only over the last dim."""
    x = _input(args, kwargs)
    return x.dim() <= 1 or softmax_terms.softmax_dim(x, argument(args, kwargs, 1, "dim")) % x.dim() == x.dim() - 1


def _class_count(x: torch.Tensor) -> int:
    return x.shape[1] if x.dim() >= 2 else max(x.numel(), 1)


def _loss_length(reduction_index: int, per_sample: Callable[[torch.Tensor], int],
                 total: Callable[[torch.Tensor], int]):
    """A loss sums ``per_sample`` terms for each sample, and ``total`` unless reduction is 'none'."""
    def length(args, kwargs) -> int:
        x = _input(args, kwargs)
        reduction = argument(args, kwargs, reduction_index, "reduction", default="mean")
        return per_sample(x) if reduction == "none" else max(total(x), 1)
    return length


def _classes_then_batch(x: torch.Tensor) -> int:
    classes = _class_count(x)
    return classes + x.numel() // max(classes, 1)


def _group_norm_length(args, kwargs) -> int:
    x = _input(args, kwargs)
    return x.numel() // max(x.shape[0] * argument(args, kwargs, 1, "num_groups"), 1)


def _batch_norm_length(args, kwargs) -> int:  # in eval mode it only applies the running statistics
    x = _input(args, kwargs)
    training = argument(args, kwargs, 5, "training", default=False)
    return x.numel() // max(_class_count(x), 1) if training else 1


def _cumsum_length(args, kwargs) -> int:  # the last element sums the whole dim; earlier ones fewer
    x = _input(args, kwargs)
    return x.shape[argument(args, kwargs, 1, "dim")] if x.dim() else 1


def _trapezoid(cumulative: bool) -> AccumulationRule:
    """trapezoid, trapz and cumulative_trapezoid: the intervals along dim, and their terms' norms."""
    def length(args, kwargs) -> int:
        y = argument(args, kwargs, 0, "y")
        return max(y.shape[kwargs.get("dim", -1)] - 1, 1) if y.dim() else 1
    return AccumulationRule(length, term_norm=lambda a, k: composite_terms.trapezoid_terms(a, k, cumulative),
                            arguments=("y", "x"))


@dataclass(frozen=True)
class _Interpolation:
    """interpolate and the upsample functionals: each output is a weighted sum of the taps around its
    source point, with weights that sum to 1 (area: a mean over an adaptive window). ``mode`` and
    ``align_corners`` are fixed by upsample_bilinear and upsample_nearest; the others take them as
    interpolate does, at the same positions."""

    mode: str | None = None
    align_corners: bool | None = None

    def call(self, args, kwargs) -> dict[str, Any]:
        """The call's arguments by interpolate's names."""
        names = ("size", "scale_factor") if self.mode else \
            ("size", "scale_factor", "mode", "align_corners", "recompute_scale_factor", "antialias")
        found = {name: argument(args, kwargs, i + 1, name) for i, name in enumerate(names)}
        if self.mode:
            found.update(mode=self.mode, align_corners=self.align_corners)
        found["mode"] = found.get("mode") or "nearest"
        return {k: v for k, v in found.items() if v is not None}

    def length(self, args, kwargs) -> int:
        x, call = _input(args, kwargs), self.call(args, kwargs)
        windows = [-(-size // out) + bool(size % out) for size, out in zip(x.shape[2:], _resized(x, call))]
        if call["mode"] == "area":
            return math.prod(windows)
        taps = sampling_terms.TAPS.get(call["mode"], 4)
        if call.get("antialias"):  # downsampling widens the support by the ratio
            return math.prod(taps * w for w in windows)
        return taps ** len(windows)

    def terms(self, args, kwargs) -> torch.Tensor:
        """The linear and cubic modes: the L2 norm of the taps (bounds/sampling_terms.py); the others
        sqrt(sum w x^2), at least the L2 norm of the terms w x where 0 <= w <= 1."""
        x, call = _input(args, kwargs), self.call(args, kwargs)
        taps = sampling_terms.interpolate_taps_norm(args, kwargs, call, _resized(x, call))
        if taps is not None:
            return taps
        norm = torch.nn.functional.interpolate(x.detach().double().square(), **call).abs().sqrt()
        return norm / math.sqrt(self.length(args, kwargs)) if call["mode"] == "area" else norm

    def sensitivity(self, args, kwargs) -> torch.Tensor:
        """How far the result moves with its source points' rounding (bounds/sampling_terms.py)."""
        call = self.call(args, kwargs)
        moved = sampling_terms.interpolate_sensitivity(args, kwargs, call, _resized(_input(args, kwargs), call))
        return torch.zeros((), dtype=torch.float64) if moved is None else moved

    def rule(self) -> AccumulationRule:
        # A separable kernel interpolates one dim at a time and may round each pass to the dtype, as
        # torch's half-precision bicubic does (0.3 u of the taps where the result cancels them).
        return AccumulationRule(self.length, squared=True, term_norm=self.terms, roundings=1,
                                sensitivity=self.sensitivity)


def _resized(x: torch.Tensor, call: Mapping[str, Any]) -> tuple[int, ...]:
    """The spatial output size of an interpolate call, from ``size`` or ``scale_factor``."""
    spatial = x.shape[2:]
    size, scale = call.get("size"), call.get("scale_factor")
    if size is not None:
        return tuple(size) if isinstance(size, (list, tuple)) else (int(size),) * len(spatial)
    scales = tuple(scale) if isinstance(scale, (list, tuple)) else (scale or 1.0,) * len(spatial)
    return tuple(max(int(math.floor(n * s)), 1) for n, s in zip(spatial, scales))


class _CrossEntropy:
    """What a fair cross_entropy kernel rounds, where cancellation makes it outgrow the result.

    Each sample's loss is logsumexp(x) - x[target]: two terms of about |x| that cancel when the
    prediction is confident (logits [2, 0] give 2.127 - 2 = 0.127). Its gradient softmax(x) - y
    cancels the same way (0.982 - 1). So the error follows |logsumexp| + max |x| forward and p + y
    backward, not the result. Ignored targets add nothing; class weights scale the others.
    """

    def __init__(self, args, kwargs):
        self.x = _input(args, kwargs).detach().double()
        self.target = argument(args, kwargs, 1, "target")
        self.reduction = argument(args, kwargs, 6, "reduction", default="mean")
        self.smoothing = float(argument(args, kwargs, 7, "label_smoothing", default=0.0) or 0.0)
        self.class_dim = 1 if self.x.dim() > 1 else 0
        self.share = torch.ones_like(self.x.sum(self.class_dim))  # each sample's weight in the reduction
        if self.indices:
            weight = argument(args, kwargs, 2, "weight")
            valid = (self.target != argument(args, kwargs, 4, "ignore_index", default=-100)).to(self.x.device)
            self.share = valid.double() if weight is None else \
                torch.where(valid, weight.detach().double().to(self.x.device)[self.target.clamp(min=0)], 0.0)

    @property
    def indices(self) -> bool:
        return isinstance(self.target, torch.Tensor) and not self.target.is_floating_point()

    def _scaled(self, per_sample: torch.Tensor) -> torch.Tensor:
        """Per-sample magnitudes through the reduction: each sample's terms weigh share / total."""
        if self.reduction == "mean":
            return per_sample * self.share / self.share.sum().clamp(min=1.0)
        return per_sample * self.share

    def forward(self) -> torch.Tensor:
        terms = self._scaled(self.x.logsumexp(self.class_dim).abs() + self.x.abs().amax(self.class_dim))
        return terms if self.reduction == "none" else terms.square().sum().sqrt()

    def input_grad(self, cotangent: torch.Tensor) -> torch.Tensor:
        probabilities = self.x.softmax(self.class_dim)
        if self.indices:
            y = torch.nn.functional.one_hot(self.target.clamp(min=0).to(self.x.device), self.x.shape[self.class_dim])
            y = y.movedim(-1, self.class_dim).double()
        else:
            y = self.target.detach().double().abs().to(self.x.device)
        y = (1 - self.smoothing) * y + self.smoothing / self.x.shape[self.class_dim]
        g = cotangent.detach().double().abs().to(self.x.device)
        return (probabilities + y) * self._scaled(g).unsqueeze(self.class_dim)


_SEQUENCE_DIM = {"BSH": 1, "BSND": 1, "SBH": 0, "BNSD": 2}


def _longest_sequence(cumulative: Any, tensor: torch.Tensor) -> int:
    """TND packs sequences along T: the longest one, from cumulative ends (all of T if unreadable)."""
    ends = cumulative.tolist() if isinstance(cumulative, torch.Tensor) else list(cumulative or [])
    lengths = [b - a for a, b in zip([0] + ends, ends) if b >= a]
    return max(lengths, default=tensor.shape[0])


def _fusion_attention_lengths(args, kwargs, head_num_index: int = 3) -> tuple[int, int, int]:
    """(query length, key length, head dim) of a fusion attention call in any input_layout.

    head_num and input_layout follow each other: at 3 and 4 in the forward, at 4 and 5 in the grad op
    (dy is at 3).
    """
    query, key = argument(args, kwargs, 0, "query"), argument(args, kwargs, 1, "key")
    head_num = int(argument(args, kwargs, head_num_index, "head_num"))
    layout = argument(args, kwargs, head_num_index + 1, "input_layout")
    if layout == "TND":
        return (_longest_sequence(kwargs.get("actual_seq_qlen"), query),
                _longest_sequence(kwargs.get("actual_seq_kvlen"), key), query.shape[-1])
    head_dim = query.shape[-1] // head_num if layout in ("BSH", "SBH") else query.shape[-1]
    return query.shape[_SEQUENCE_DIM[layout]], key.shape[_SEQUENCE_DIM[layout]], head_dim


def _grouped_matmul_length(args, kwargs) -> int:  # K of the first x; k-axis groups sum over a part of it
    x = argument(args, kwargs, 0, "x")
    return (x if isinstance(x, torch.Tensor) else x[0]).shape[-1]


def elementwise(args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    """The length of an op that sums nothing forward (its rule bounds a composite or a gradient)."""
    return 1


@dataclass(frozen=True)
class AccumulationRule:
    """How one op accumulates. ``length`` reads the op's own (golden-side) arguments."""

    length: Callable[[Sequence[Any], Mapping[str, Any]], int]  # terms per sum, bias not counted
    added: tuple[int, str] | None = None  # (position, keyword) of a bias added to every sum
    squared: bool = False  # linear in each input: term norms come from the op on squared inputs
    mean: bool = False  # divides its sum by the length, so the terms are x_i / K
    roundings: int = 0  # intermediate results a fair kernel rounds to the output dtype
    backward_length: Callable[[Sequence[Any], Mapping[str, Any]], int] | None = None
    # per output element, the L2 norm of the intermediates a fair kernel rounds, where they outgrow the
    # result; and the same for input gradients given the output's gradient, by argument name
    term_norm: Callable[[Sequence[Any], Mapping[str, Any]], torch.Tensor] | None = None
    grad_term_norms: Callable[[Sequence[Any], Mapping[str, Any], torch.Tensor], Mapping[str, torch.Tensor]] | None = None
    # per output element, and per input gradient by argument name: Accumulation.sensitivity
    sensitivity: Callable[[Sequence[Any], Mapping[str, Any]], torch.Tensor] | None = None
    grad_sensitivities: Callable[[Sequence[Any], Mapping[str, Any], torch.Tensor], Mapping[str, torch.Tensor]] | None = None
    arguments: tuple[str, ...] = ("input",)  # positional argument names, to find a gradient's argument
    # scales each run of `length` consecutive outputs by one rounded factor (Accumulation.shared), for
    # these arguments: softmax over its last dim, not over another
    shared: bool | Callable[[Sequence[Any], Mapping[str, Any]], bool] = False
    # with a shared factor, (weight, bias) broadcastable to the output: Accumulation.shared_offset and
    # shared_origin (a norm's affine parameters, through which its row-common errors reach the output)
    shared_affine: Callable[[Sequence[Any], Mapping[str, Any]], tuple[Any, Any]] | None = None
    # each sum's outputs err together without sharing a factor (Accumulation.correlated): a prefix
    # sum's run, a batch norm's channel (its rounded mean and rsqrt); implied by ``shared``
    correlated: bool = False

    @property
    def reduces(self) -> bool:
        """Whether its forward bound needs a reduction length from the call's inputs."""
        return self.length is not elementwise

    def argument(self, path: str) -> str | None:
        """'input_args[3]' or "input_kwargs['weight']" -> 'weight'; None for a nested or unknown path."""
        if path.startswith("input_kwargs['") and path.endswith("']"):
            return path[len("input_kwargs['"):-2]
        index = path.removeprefix("input_args[").removesuffix("]")
        if path.startswith("input_args[") and index.isdigit() and int(index) < len(self.arguments):
            return self.arguments[int(index)]
        return None


def _centring(op: str) -> AccumulationRule:
    """batch_norm and its kin: the length of their statistics, and term norms for their cancellation."""
    length = {"batch_norm": _batch_norm_length, "group_norm": _group_norm_length,
              "layer_norm": lambda a, k: math.prod(_normalized_shape(a, k)),
              "instance_norm": lambda a, k: math.prod(_input(a, k).shape[2:])}[op]
    return AccumulationRule(length, term_norm=lambda a, k: norm_terms.forward_terms(op, a, k),
                            grad_term_norms=lambda a, k, g: norm_terms.gradient_terms(op, a, k, g),
                            arguments=norm_terms.ARGUMENTS[op], shared=op != "batch_norm", correlated=True,
                            shared_affine=lambda a, k: norm_terms.affine(op, a, k))


def _normalized_shape(args, kwargs) -> tuple[int, ...]:
    shape = argument(args, kwargs, 1, "normalized_shape")
    return (shape,) if isinstance(shape, int) else tuple(shape)


_MATMUL = AccumulationRule(lambda a, k: _input(a, k).shape[-1], squared=True)
_CONV = AccumulationRule(lambda a, k: argument(a, k, 1, "weight")[0].numel(), added=(2, "bias"), squared=True)
# A transposed convolution's weight is (in, out / groups, *kernel): each output sums at most
# in / groups channels over the whole kernel.
_CONV_TRANSPOSE = AccumulationRule(
    lambda a, k: argument(a, k, 1, "weight")[:, 0].numel() // max(int(argument(a, k, 6, "groups", default=1)), 1),
    added=(2, "bias"), squared=True)
_SUM = AccumulationRule(lambda a, k: _reduced(_input(a, k), argument(a, k, 1, "dim")), squared=True)
_STAT = AccumulationRule(lambda a, k: _reduced(_input(a, k), argument(a, k, 1, "dim")))
def _statistic(op: str) -> AccumulationRule:
    return AccumulationRule(_STAT.length,
                            grad_term_norms=lambda a, k, g: norm_terms.statistic_gradient_terms(op, a, k, g))


_NORM = AccumulationRule(lambda a, k: _reduced(_input(a, k), argument(a, k, 2, "dim")))
def _softmax(op: str) -> AccumulationRule:
    """softmax and log_softmax: the row's length, and term norms for exp's conditioning (bounds/softmax_terms.py)."""
    if op == "log_softmax":  # one rounded log-sum-exp subtracted: a row-common offset
        forward, affine = None, None
    else:  # one rounded sum divided: a row-common scale, and no offset
        forward, affine = (lambda a, k: softmax_terms.forward_terms(op, a, k)), (lambda a, k: (torch.zeros(()), None))
    return AccumulationRule(_softmax_length, term_norm=forward,
                            grad_term_norms=lambda a, k, g: softmax_terms.gradient_terms(op, a, k, g),
                            shared=_over_last_dim, shared_affine=affine)


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
    return AccumulationRule(_loss_length(position, per_sample=per_sample, total=lambda x: x.numel()))


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

ACCUMULATION_RULES: dict[str, AccumulationRule] = {
    **{name: _MATRIX_ALGORITHM for name in MATRIX_ALGORITHMS},
    **{name: _loss(name) for name in _LOSSES},
    "matmul": _MATMUL, "mm": _MATMUL, "bmm": _MATMUL, "mv": _MATMUL, "dot": _MATMUL,
    "addmm": AccumulationRule(lambda a, k: argument(a, k, 1, "mat1").shape[-1], added=(0, "input"), squared=True),
    "baddbmm": AccumulationRule(lambda a, k: argument(a, k, 1, "batch1").shape[-1], added=(0, "input"),
                                squared=True),
    "linear": AccumulationRule(lambda a, k: argument(a, k, 1, "weight").shape[-1], added=(2, "bias"),
                               squared=True),
    "conv1d": _CONV, "conv2d": _CONV, "conv3d": _CONV,
    "conv_transpose1d": _CONV_TRANSPOSE, "conv_transpose2d": _CONV_TRANSPOSE, "conv_transpose3d": _CONV_TRANSPOSE,
    "sum": _SUM,
    "mean": AccumulationRule(_SUM.length, squared=True, mean=True),
    "cumsum": AccumulationRule(_cumsum_length, squared=True, correlated=True),
    "trapezoid": _trapezoid(cumulative=False), "trapz": _trapezoid(cumulative=False),
    "cumulative_trapezoid": _trapezoid(cumulative=True),
    "norm": _NORM, "vector_norm": _NORM,
    # Distances and similarities sum over one dim of their inputs: the feature dim.
    **{name: AccumulationRule(elementwise, sensitivity=sampling_terms.grid_sample_sensitivity,
                              grad_term_norms=sampling_terms.grid_sample_input_terms, arguments=("input", "grid"))
       for name in sampling_terms.SAMPLERS},
    "interpolate": _Interpolation().rule(), "upsample": _Interpolation().rule(),
    "upsample_bilinear": _Interpolation("bilinear", align_corners=True).rule(),
    "upsample_nearest": _Interpolation("nearest").rule(),
    "cosine_similarity": AccumulationRule(lambda a, k: _reduced(argument(a, k, 0, "x1"),
                                                                argument(a, k, 2, "dim", default=1)),
                                         grad_term_norms=composite_terms.cosine_similarity_gradient_terms,
                                         arguments=("x1", "x2", "dim", "eps")),
    "pairwise_distance": AccumulationRule(lambda a, k: _input(a, k).shape[-1] if _input(a, k).dim() else 1),
    "cdist": AccumulationRule(lambda a, k: _input(a, k).shape[-1]),
    "tensordot": AccumulationRule(lambda a, k: _contracted(a, k), squared=True),
    **{name: AccumulationRule(_recurrent) for name in ("gru", "lstm", "rnn_tanh", "rnn_relu")},
    "multi_head_attention_forward": AccumulationRule(_multi_head_attention),
    "var": _statistic("var"), "std": _statistic("std"),
    "logsumexp": AccumulationRule(_STAT.length, grad_term_norms=softmax_terms.logsumexp_gradient_terms),
    "softmax": _softmax("softmax"), "softmin": _softmax("softmin"), "log_softmax": _softmax("log_softmax"),
    "rms_norm": _NORMALIZED,
    # Composed of several ops (bounds/composite_terms.py): gelu's 1 + erf cancels forward, and its gradient's
    # two halves near x = -0.75; softsign's and normalize's gradients add paths through each use of x,
    # which cancel.
    "gelu": AccumulationRule(elementwise, sensitivity=composite_terms.gelu_terms,
                             grad_sensitivities=composite_terms.gelu_gradient_terms),
    "softsign": AccumulationRule(elementwise, grad_term_norms=composite_terms.softsign_gradient_terms),
    "normalize": AccumulationRule(lambda a, k: _reduced(_input(a, k), argument(a, k, 2, "dim", default=1)),
                                  grad_term_norms=composite_terms.normalize_gradient_terms),
    "npu_rms_norm": AccumulationRule(lambda a, k: argument(a, k, 1, "gamma").numel(), shared=True),
    "layer_norm": _centring("layer_norm"), "group_norm": _centring("group_norm"),
    "batch_norm": _centring("batch_norm"), "instance_norm": _centring("instance_norm"),
    # Two sums in a chain, whose lengths add as attention's do: the log-sum-exp over the classes, then
    # the mean over the batch (not their product: no sum runs over every logit at once).
    "cross_entropy": AccumulationRule(_loss_length(6, per_sample=_class_count, total=_classes_then_batch),
                                      term_norm=lambda a, k: _CrossEntropy(a, k).forward(),
                                      grad_term_norms=lambda a, k, g: {"input": _CrossEntropy(a, k).input_grad(g)}),
    "nll_loss": AccumulationRule(_loss_length(6, per_sample=lambda x: 1,
                                              total=lambda x: x.numel() // _class_count(x))),
    "mse_loss": AccumulationRule(_loss_length(4, per_sample=lambda x: 1, total=lambda x: x.numel())),
    # Scores sum over the head dim, the weighted values over the key length; backward also over queries.
    "scaled_dot_product_attention": AccumulationRule(
        lambda a, k: argument(a, k, 1, "key").shape[-2] + argument(a, k, 0, "query").shape[-1],
        roundings=1,  # the probabilities are rounded to the input dtype before multiplying by V
        backward_length=lambda a, k: (argument(a, k, 0, "query").shape[-2] + argument(a, k, 1, "key").shape[-2]
                                      + argument(a, k, 0, "query").shape[-1]),
        grad_term_norms=attention_terms.gradient_terms,
        sensitivity=attention_terms.forward_sensitivity, grad_sensitivities=attention_terms.gradient_sensitivities,
        arguments=("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")),
    # The weight's gradient adds one row per looked-up index; a row may be hit by every index.
    "embedding": AccumulationRule(lambda a, k: 1, backward_length=lambda a, k: max(_input(a, k).numel(), 1)),
    # torch_npu's fused ops (pytest_npuprecision.ops.fused), named as after "NPU." in msprobe dumps.
    "npu_add_rms_norm": AccumulationRule(lambda a, k: argument(a, k, 2, "gamma").numel(), shared=True),
    "npu_layer_norm_eval": _NORMALIZED,
    "npu_group_norm_silu": AccumulationRule(
        lambda a, k: _input(a, k).numel() // max(_input(a, k).shape[0] * int(argument(a, k, 3, "group")), 1)),
    "npu_scaled_masked_softmax": AccumulationRule(lambda a, k: argument(a, k, 0, "x").shape[-1], shared=True),
    "npu_moe_gating_top_k_softmax": AccumulationRule(lambda a, k: argument(a, k, 0, "x").shape[-1], shared=True),
    "npu_linear": AccumulationRule(lambda a, k: argument(a, k, 1, "weight").shape[-1], added=(2, "bias"), squared=True),
    "npu_bmmV2": _MATMUL,
    # Each group is a matmul over K (or over its share of K when K is grouped).
    "npu_grouped_matmul": AccumulationRule(_grouped_matmul_length),
    "npu_gmm": AccumulationRule(_grouped_matmul_length),
    "npu_gmm_v2": AccumulationRule(_grouped_matmul_length),
    # As scaled_dot_product_attention: scores over D, weighted values over the keys (the longest
    # sequence for TND); backward also over the queries. The grad op's outputs are that backward.
    "npu_fusion_attention": AccumulationRule(
        lambda a, k: sum(_fusion_attention_lengths(a, k)[1:]), roundings=1,
        backward_length=lambda a, k: sum(_fusion_attention_lengths(a, k))),
    "npu_fusion_attention_grad": AccumulationRule(lambda a, k: sum(_fusion_attention_lengths(a, k, head_num_index=4)),
                                                  roundings=1),
}


# Ops whose output a fair kernel rounds once from a wider computation, with no rounded constant or
# factor shared by many elements: their rounding-dominated errors lean neither way (Accumulation.
# rounded_once). A norm's rounded rsqrt, a mean's 1/n or rad2deg's 180/pi lean fairly: not here.
ROUNDED_ONCE = frozenset({
    "matmul", "mm", "bmm", "linear", "conv1d", "conv2d", "conv3d",
    "add", "sub", "mul", "div", "truediv",
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal",
    "sin", "cos", "tanh", "sigmoid", "silu", "erf",
})


# Ops that fair kernels compute in float32 for float16 and bfloat16 inputs and round once to that
# dtype. Their float32 steps (a rounded sum, an rsqrt, erf) move the exact result by a float32 ulp,
# 2^-13 of a half-precision one, so the output's one rounding still decides which way each element
# goes. Where rows share a factor that a kernel may round in the half type, each row leans its own
# way: the gate counts rows as its samples (Metrics.rounding_bias_noise). Under autocast some return
# float32 (softmax, layer_norm): Accumulation.rounded_once_in_half holds for half outputs only.
ROUNDED_ONCE_IN_HALF = frozenset({
    "gelu", "softmax", "log_softmax", "layer_norm", "rms_norm", "group_norm", "batch_norm",
    "scaled_dot_product_attention", "sum", "mean",
})


def rounded_once(op: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether op(*args, **kwargs) is one rounding: an op of ROUNDED_ONCE whose Python float arguments a
    float32 kernel holds exactly (x * 0.1 multiplies every element by one rounded 0.1)."""
    scalars = [v for v in (*args, *kwargs.values()) if isinstance(v, float)]
    return op in ROUNDED_ONCE and all(float(torch.tensor(v, dtype=torch.float32)) == v for v in scalars)


# Ops whose fair kernel returns the exact result rounded once, as IEEE 754 asks of an add: it errs by
# half an ulp of the result however far the result cancels, so the inputs' conditioning there excuses
# none of its error (no second look). Only between tensors the result's dtype holds exactly, with no
# scaling alpha: a Python number, a wider operand or alpha * other is rounded first, and that rounding
# is what a cancelling result amplifies.
EXACTLY_ROUNDED = frozenset({"add", "sub"})


def exactly_rounded(op: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether op(*args, **kwargs) is an op of EXACTLY_ROUNDED between two float tensors, unscaled."""
    if op not in EXACTLY_ROUNDED or len(args) != 2 or set(kwargs) - {"alpha"} or kwargs.get("alpha", 1) != 1:
        return False
    if not all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in args):
        return False
    result = torch.result_type(*args)  # a 0-dim float32 tensor added to float16 ones is rounded to float16
    return all(t.dtype == result or t.dtype.itemsize < result.itemsize for t in args)


def rounded_once_in_half(op: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether op(*args, **kwargs) is an op of ROUNDED_ONCE_IN_HALF on a half-precision input."""
    first = next((v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor) and v.is_floating_point()),
                 None)
    return op in ROUNDED_ONCE_IN_HALF and first is not None and float_format(first.dtype).computed_wider
