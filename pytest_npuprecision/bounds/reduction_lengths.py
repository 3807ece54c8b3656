"""The reduction length K of each op family, read from the op's own (golden-side) arguments: the terms
each output sums, which scale the error bound. An entry errs on the side of a larger K where exactness
would need the op's internals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from .terms import composite_terms, sampling_terms, softmax_terms
from .accumulation_rule import AccumulationRule
from .op_arguments import argument


def first_input(args, kwargs) -> torch.Tensor:
    return argument(args, kwargs, 0, "input", "self")


def reduced(x: torch.Tensor, dim: Any) -> int:
    """How many elements a reduction over ``dim`` sums (all of them for None, [] or a legacy bool)."""
    if x.dim() == 0:
        return 1
    if dim is None or isinstance(dim, bool) or (isinstance(dim, (list, tuple)) and not dim):
        return max(x.numel(), 1)
    dims = dim if isinstance(dim, (list, tuple)) else (dim,)
    return math.prod(x.shape[d] for d in dims)


def softmax_length(args, kwargs) -> int:
    x = first_input(args, kwargs)
    return x.shape[softmax_terms.softmax_dim(x, argument(args, kwargs, 1, "dim"))] if x.dim() else 1


def contracted(args, kwargs) -> int:
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


def recurrent(args, kwargs) -> int:
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


def multi_head_attention(args, kwargs) -> int:
    """multi_head_attention_forward: three projections of E terms each (the query's or key's, the
    value's, the output's), each head's scores of E / heads terms, and the softmax and weighted sum
    over S keys: 3 E + 2 S + E / heads terms, their errors added as a random walk."""
    embed = argument(args, kwargs, 0, "query").shape[-1]
    keys = argument(args, kwargs, 1, "key").shape[0]
    heads = max(int(argument(args, kwargs, 4, "num_heads")), 1)
    return 3 * embed + 2 * keys + embed // heads


def over_last_dim(args, kwargs) -> bool:
    """softmax normalizes runs of consecutive elements only over the last dim."""
    x = first_input(args, kwargs)
    return x.dim() <= 1 or softmax_terms.softmax_dim(x, argument(args, kwargs, 1, "dim")) % x.dim() == x.dim() - 1


def class_count(x: torch.Tensor) -> int:
    return x.shape[1] if x.dim() >= 2 else max(x.numel(), 1)


def loss_length(reduction_index: int, per_sample: Callable[[torch.Tensor], int],
                 total: Callable[[torch.Tensor], int]):
    """A loss sums ``per_sample`` terms for each sample, and ``total`` unless reduction is 'none'."""
    def length(args, kwargs) -> int:
        x = first_input(args, kwargs)
        reduction = argument(args, kwargs, reduction_index, "reduction", default="mean")
        return per_sample(x) if reduction == "none" else max(total(x), 1)
    return length


def classes_then_batch(x: torch.Tensor) -> int:
    classes = class_count(x)
    return classes + x.numel() // max(classes, 1)


def group_norm_length(args, kwargs) -> int:
    x = first_input(args, kwargs)
    return x.numel() // max(x.shape[0] * argument(args, kwargs, 1, "num_groups"), 1)


def batch_norm_length(args, kwargs) -> int:  # in eval mode it only applies the running statistics
    x = first_input(args, kwargs)
    training = argument(args, kwargs, 5, "training", default=False)
    return x.numel() // max(class_count(x), 1) if training else 1


def cumsum_length(args, kwargs) -> int:  # the last element sums the whole dim; earlier ones fewer
    x = first_input(args, kwargs)
    return x.shape[argument(args, kwargs, 1, "dim")] if x.dim() else 1


def trapezoid(cumulative: bool) -> AccumulationRule:
    """trapezoid, trapz and cumulative_trapezoid: the intervals along dim, and their terms' norms."""
    def length(args, kwargs) -> int:
        y = argument(args, kwargs, 0, "y")
        return max(y.shape[kwargs.get("dim", -1)] - 1, 1) if y.dim() else 1
    return AccumulationRule(length, term_norm=lambda a, k: composite_terms.trapezoid_terms(a, k, cumulative),
                            arguments=("y", "x"))


@dataclass(frozen=True)
class Interpolation:
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
        x, call = first_input(args, kwargs), self.call(args, kwargs)
        windows = [-(-size // out) + bool(size % out) for size, out in zip(x.shape[2:], resized(x, call))]
        if call["mode"] == "area":
            return math.prod(windows)
        taps = sampling_terms.TAPS.get(call["mode"], 4)
        if call.get("antialias"):  # downsampling widens the support by the ratio
            return math.prod(taps * w for w in windows)
        return taps ** len(windows)

    def terms(self, args, kwargs) -> torch.Tensor:
        """The linear and cubic modes: the L2 norm of the taps (bounds/terms/sampling_terms.py); the others
        sqrt(sum w x^2), at least the L2 norm of the terms w x where 0 <= w <= 1."""
        x, call = first_input(args, kwargs), self.call(args, kwargs)
        taps = sampling_terms.interpolate_taps_norm(args, kwargs, call, resized(x, call))
        if taps is not None:
            return taps
        norm = torch.nn.functional.interpolate(x.detach().double().square(), **call).abs().sqrt()
        return norm / math.sqrt(self.length(args, kwargs)) if call["mode"] == "area" else norm

    def sensitivity(self, args, kwargs) -> torch.Tensor:
        """How far the result moves with its source points' rounding (bounds/terms/sampling_terms.py)."""
        call = self.call(args, kwargs)
        moved = sampling_terms.interpolate_sensitivity(args, kwargs, call, resized(first_input(args, kwargs), call))
        return torch.zeros((), dtype=torch.float64) if moved is None else moved

    def rule(self) -> AccumulationRule:
        # Its one rounding between passes is its record's (ops/table/sampling.py, interpolate).
        return AccumulationRule(self.length, squared=True, term_norm=self.terms,
                                sensitivity=self.sensitivity)


def resized(x: torch.Tensor, call: Mapping[str, Any]) -> tuple[int, ...]:
    """The spatial output size of an interpolate call, from ``size`` or ``scale_factor``."""
    spatial = x.shape[2:]
    size, scale = call.get("size"), call.get("scale_factor")
    if size is not None:
        return tuple(size) if isinstance(size, (list, tuple)) else (int(size),) * len(spatial)
    scales = tuple(scale) if isinstance(scale, (list, tuple)) else (scale or 1.0,) * len(spatial)
    return tuple(max(int(math.floor(n * s)), 1) for n, s in zip(spatial, scales))


class CrossEntropy:
    """What a fair cross_entropy kernel rounds, where cancellation makes it outgrow the result.

    Each sample's loss is logsumexp(x) - x[target]: two terms of about |x| that cancel when the
    prediction is confident (logits [2, 0] give 2.127 - 2 = 0.127). Its gradient softmax(x) - y
    cancels the same way (0.982 - 1). So the error follows |logsumexp| + max |x| forward and p + y
    backward, not the result. Ignored targets add nothing; class weights scale the others.
    """

    def __init__(self, args, kwargs):
        self.x = first_input(args, kwargs).detach().double()
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


SEQUENCE_DIM = {"BSH": 1, "BSND": 1, "SBH": 0, "BNSD": 2}


def longest_sequence(cumulative: Any, tensor: torch.Tensor) -> int:
    """TND packs sequences along T: the longest one, from cumulative ends (all of T if unreadable)."""
    ends = cumulative.tolist() if isinstance(cumulative, torch.Tensor) else list(cumulative or [])
    lengths = [b - a for a, b in zip([0] + ends, ends) if b >= a]
    return max(lengths, default=tensor.shape[0])


def fusion_attention_lengths(args, kwargs, head_num_index: int = 3) -> tuple[int, int, int]:
    """(query length, key length, head dim) of a fusion attention call in any input_layout.

    head_num and input_layout follow each other: at 3 and 4 in the forward, at 4 and 5 in the grad op
    (dy is at 3).
    """
    query, key = argument(args, kwargs, 0, "query"), argument(args, kwargs, 1, "key")
    head_num = int(argument(args, kwargs, head_num_index, "head_num"))
    layout = argument(args, kwargs, head_num_index + 1, "input_layout")
    if layout == "TND":
        return (longest_sequence(kwargs.get("actual_seq_qlen"), query),
                longest_sequence(kwargs.get("actual_seq_kvlen"), key), query.shape[-1])
    head_dim = query.shape[-1] // head_num if layout in ("BSH", "SBH") else query.shape[-1]
    return query.shape[SEQUENCE_DIM[layout]], key.shape[SEQUENCE_DIM[layout]], head_dim


def infer_attention_lengths(heads_name: str, kv_name: str, args, kwargs) -> tuple[int, int]:
    """(key length, head dim) of an inference attention call: the longest batch's keys, the shared
    prefix in front of them, and the rope part of the head dim (MLA). ``heads_name`` names its keyword
    of query heads, ``kv_name`` that of its key lengths (incre flash attention's actual_seq_lengths).

    A paged cache holds each batch's keys in blocks: its lengths are the per-batch key lengths (all
    the table's blocks when unreadable). TND and NTD pack sequences: the longest, from cumulative ends.
    """
    query, key = argument(args, kwargs, 0, "query"), argument(args, kwargs, 1, "key")
    layout = str(kwargs.get("input_layout", "BSH")).split("_")[0]
    head_dim = query.shape[-1] // int(kwargs.get(heads_name, 1)) if layout == "BSH" else query.shape[-1]
    rope = kwargs.get("query_rope")
    if rope is not None:
        head_dim += rope.shape[-1] * head_dim // query.shape[-1]  # the same share of H (BSH) or its D
    lengths, table = kwargs.get(kv_name), kwargs.get("block_table")
    if table is not None:
        values = lengths.tolist() if isinstance(lengths, torch.Tensor) else list(lengths or [])
        block = key.shape[1] if key.dim() == 3 else key.shape[-2]
        key_length = max((int(v) for v in values), default=table.shape[-1] * block)
    elif layout in ("TND", "NTD"):
        key_length = longest_sequence(lengths, key if layout == "TND" else key.transpose(0, 1))
    else:
        key_length = key.shape[SEQUENCE_DIM[layout]]
    prefix = kwargs.get("key_shared_prefix")
    if prefix is not None:
        key_length += prefix.shape[SEQUENCE_DIM[layout]]
    return key_length, head_dim


def grouped_matmul_length(args, kwargs) -> int:  # K of the first x; k-axis groups sum over a part of it
    x = argument(args, kwargs, 0, "x")
    return (x if isinstance(x, torch.Tensor) else x[0]).shape[-1]


def batched_contraction(args, kwargs) -> int:
    """addbmm(input, batch1, batch2): each output sums every batch's products, b·k terms."""
    batch1 = argument(args, kwargs, 1, "batch1")
    return batch1.shape[0] * batch1.shape[-1]


def einsum_length(args, kwargs) -> int:
    """einsum(equation, *operands): each output sums the product over its contracted letters, those of
    the inputs the output lacks (with no '->', those written more than once); '...' is never summed."""
    equation = argument(args, kwargs, 0, "equation").replace(" ", "")
    operands = args[1:] if len(args) > 1 else ()
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    inputs, arrow, output = equation.partition("->")
    terms = inputs.split(",")
    letters = [letter for term in terms for letter in term.replace("...", "") if letter.isalpha()]
    kept = set(output) if arrow else {letter for letter in letters if letters.count(letter) == 1}
    sizes: dict[str, int] = {}
    for term, operand in zip(terms, operands):
        head, dots, tail = term.partition("...")
        named = list(zip(head, operand.shape)) + (list(zip(tail, operand.shape[operand.dim() - len(tail):]))
                                                   if dots else [])
        for letter, size in named:
            sizes[letter] = max(sizes.get(letter, 1), size)
    return math.prod(sizes[letter] for letter in set(letters) - kept if letter in sizes)


def chained_length(args, kwargs) -> int:
    """chain_matmul(*matrices): the inner dims of each product in the chain, their errors added."""
    matrices = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args
    return sum(m.shape[-1] for m in matrices[:-1]) or 1


def bilinear_length(args, kwargs) -> int:
    """bilinear(input1, input2, weight, bias): x1ᵀ W x2 sums in1·in2 products per output."""
    weight = argument(args, kwargs, 2, "weight")
    return weight.shape[1] * weight.shape[2]


def pooling_window(dims: int, adaptive: bool):
    """avg_pool{1,2,3}d's kernel, or the largest window an adaptive_avg_pool{1,2,3}d of that output size
    averages (ceil(in / out), one more where out does not divide in)."""
    def length(args, kwargs) -> int:
        x = first_input(args, kwargs)
        size = argument(args, kwargs, 1, "output_size" if adaptive else "kernel_size")
        sizes = [size] * dims if isinstance(size, int) else list(size)
        if not adaptive:
            return math.prod(sizes)
        spatial = x.shape[x.dim() - dims:]
        return math.prod(-(-i // (o or i)) + (1 if o and i % o else 0) for i, o in zip(spatial, sizes))
    return length


def product_terms(cumulative: bool):
    """prod and cumprod round each partial product relative to itself: |the product|, exact in float64,
    is each output's scale (a sum's term norm would be the values', not the product's)."""
    def terms(args, kwargs) -> torch.Tensor:
        x = first_input(args, kwargs).detach().double()
        dim = argument(args, kwargs, 1, "dim")
        if cumulative:
            return x.cumprod(dim).abs()
        return (x.prod() if dim is None else x.prod(dim, keepdim=bool(argument(args, kwargs, 2, "keepdim")))).abs()
    return terms
