"""The op catalogue: everything the harness knows about one op, in one frozen record.

Built once, on first use, by joining what each layer below contributes about an op: its standard,
level and roundings (the shipped op table, ``data/ops.yaml``, which a user's rules file overrides at
run time), how it accumulates (``bounds.accumulation``'s rules), its float64 reference where torch_npu
owns it (``ops.fused``), whether it draws random numbers (``ops.randomness``), and the traits this
module's own tables give (float32 math-mode family, plain sums, one rounding, goldens on the dtype's
grid). Its roundings are the op table's alone. It is
validated as it is built: a standard and a rule that contradict each other, or a reducing op with no
reduction, is a ``CatalogueError`` that names the op. Every other layer asks the catalogue
(:func:`op_record`); docs/generated/ops.md is printed from it (docs/generate.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

import torch

from ..bounds.accumulation import ACCUMULATION_RULES, MATRIX_ALGORITHMS
from ..bounds.accumulation_rule import AccumulationRule
from ..common.dtypes import float_format
from ..precision.rules import OpRule, Rules, parse_op_name
from ..precision.standards import STANDARDS
from .fused import FUSED_OPS, FusedOp
from .randomness import ALWAYS, RANDOMNESS, Randomness, folded_name, seeded_aten_ops

# The switch each family of float32 ops answers to (common.math_modes.MathMode): what cuBLAS, cuDNN
# and the NPU's cube unit compute. The fused ops built on them (attention) are in the matmul family.
MATH_FAMILIES: Mapping[str, frozenset[str]] = MappingProxyType({
    "matmul": frozenset({
        "matmul", "mm", "bmm", "addmm", "addbmm", "baddbmm", "linear", "bilinear", "einsum", "tensordot",
        "chain_matmul", "multi_dot", "scaled_dot_product_attention", "multi_head_attention_forward",
        "npu_linear", "npu_grouped_matmul", "npu_gmm", "npu_fusion_attention", "npu_fusion_attention_grad",
        "npu_sparse_flash_attention",
        "npu_prompt_flash_attention", "npu_incre_flash_attention", "npu_fused_infer_attention_score",
        "npu_fused_infer_attention_score_v2",
    }),
    "conv": frozenset({
        "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "convolution",
        "_convolution", "conv_tbc",
    }),
    "rnn": frozenset({"gru", "lstm", "rnn_tanh", "rnn_relu", "gru_cell", "lstm_cell", "rnn_tanh_cell",
                      "rnn_relu_cell"}),
})

# Ops whose output a fair kernel rounds once from a wider computation, with no rounded constant or
# factor shared by many elements: their rounding-dominated errors lean neither way (Accumulation.
# rounded_once). A norm's rounded rsqrt, a mean's 1/n or rad2deg's 180/pi lean fairly: not here.
ROUNDED_ONCE = frozenset({
    "matmul", "mm", "bmm", "linear", "conv1d", "conv2d", "conv3d",
    "add", "sub", "mul", "div", "truediv",
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal",
    "sin", "cos", "tanh", "sigmoid", "silu", "erf",
})

# Ops whose output is one sum of its terms, that fair kernels add in different orders and no other way
# (not a Winograd or FFT convolution; no shared factor, no function of the sum): a sequential sum is
# the fair order that errs most (Accumulation.plain_sum, Metrics.order_rmse).
PLAIN_SUMS = frozenset({
    "matmul", "mm", "bmm", "mv", "dot", "addmm", "addbmm", "baddbmm", "linear", "tensordot", "npu_linear",
    "npu_bmmV2", "sum", "nansum", "mean", "cumsum", "mse_loss",
})

# Ops that fair kernels compute in float32 for float16 and bfloat16 inputs and round once to that
# dtype. Their float32 steps (a rounded sum, an rsqrt, erf) move the exact result by a float32 ulp,
# 2^-13 of a half-precision one, so the output's one rounding still decides which way each element
# goes. Where rows share a factor that a kernel may round in the half type, each row leans its own
# way: the gate counts rows as its samples (Metrics.rounding_bias_noise). Under autocast some return
# float32 (softmax, layer_norm): Accumulation.rounded_once_in_half holds for half outputs only.
ROUNDED_ONCE_IN_HALF = frozenset({
    "gelu", "softmax", "log_softmax", "layer_norm", "rms_norm", "group_norm", "batch_norm",
    "scaled_dot_product_attention", "sum", "nansum", "mean", "prod",
})

# Ops whose fair kernel returns the exact result rounded once, as IEEE 754 asks of an add: it errs by
# half an ulp of the result however far the result cancels, so the inputs' conditioning there excuses
# none of its error (no second look). Only between tensors the result's dtype holds exactly, with no
# scaling alpha: a Python number, a wider operand or alpha * other is rounded first, and that rounding
# is what a cancelling result amplifies.
EXACTLY_ROUNDED = frozenset({"add", "sub"})

# Besides the matrix algorithms, ops stable only normwise: affine_grid's grid is a product of theta with
# a base grid. Their inputs move by u times the larger of the element and the tensor's RMS (the second look).
NORMWISE = frozenset({"affine_grid"})

# Ops that sum nothing forward, though the error-bound standard judges them: one correctly rounded step
# or a few (an add after cancellation, torch_npu's elementwise fused activations and rotations).
ELEMENTWISE = frozenset({
    "add", "sub", "rsub", "addcmul", "addcdiv", "lerp", "npu_swiglu", "npu_rotary_mul", "npu_apply_rotary_pos_emb",
    "npu_interleave_rope", "npu_mrope", "npu_geglu", "npu_gelu_mul", "npu_clipped_swiglu", "npu_gelu",
    "npu_quant_matmul",  # its integer product is exact: only dequantization rounds
    "npu_apply_adam", "npu_apply_adam_w",  # an update: each element its own few roundings
    "npu_anti_quant",  # (x + offset) * scale: two float32 roundings and the output cast
})

# What a statistics dump can check of an op on its own: the family of invariants its definition puts on its
# outputs' Max, Min, Mean and Norm given its inputs' (checks/statistics/invariants.py). Elementwise ops are
# those of one tensor (a number beside it is part of the function: x / 8.0).
STATISTICS: Mapping[str, frozenset[str]] = MappingProxyType({
    "elementwise": frozenset({
        "relu", "relu6", "gelu", "silu", "sigmoid", "tanh", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p",
        "sqrt", "rsqrt", "reciprocal", "sin", "cos", "erf", "erfc", "neg", "negative", "abs", "square", "softplus",
        "elu", "selu", "celu", "leaky_relu", "hardtanh", "hardsigmoid", "hardswish", "mish", "logsigmoid", "softsign",
        "tanhshrink", "sign", "floor", "ceil", "round", "trunc", "clamp", "clip", "pow", "mul", "div", "truediv",
        "npu_gelu",
    }),
    "add_or_sub": frozenset({"add", "sub", "rsub"}),
    "softmax": frozenset({"softmax"}),
    "log_softmax": frozenset({"log_softmax"}),
    "layer_norm": frozenset({"layer_norm"}),
    "rms_norm": frozenset({"rms_norm", "npu_rms_norm"}),
    "same_values": frozenset({
        "view", "reshape", "transpose", "permute", "contiguous", "clone", "flatten", "squeeze", "unsqueeze", "t",
        "detach", "view_as", "reshape_as", "movedim", "flip", "roll", "expand", "expand_as", "float", "half",
        "bfloat16", "double", "to", "type_as", "npu_format_cast",
    }),
    "partition": frozenset({"split", "chunk", "unbind", "tensor_split", "split_with_sizes", "cat", "concat",
                            "concatenate", "stack"}),
    "subset": frozenset({"getitem", "narrow", "select", "index_select", "embedding", "masked_select", "take"}),
    "reduction": frozenset({"mean", "sum"}),
    "nonnegative": frozenset({"cross_entropy", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"}),
})


# torch_npu ops whose call no single-op golden can judge: each case skips with this reason and why.
_PROCESS_GROUP = ("needs-process-group", "{} runs a collective inside the kernel: its result needs every rank's "
                  "inputs and a process group, which a single-op replay has not")
# Judged from a dump of every rank of their communicator, as collectives (checks/collectives/fused.py).
_FROM_EVERY_RANK = ("needs-process-group", "{} runs a collective inside the kernel: a dump case of it is judged from "
                    "every rank's entry (docs/collectives.md); alone it needs a process group")
UNJUDGED: Mapping[str, tuple[str, str]] = {
    **{name: (_FROM_EVERY_RANK[0], _FROM_EVERY_RANK[1].format(name)) for name in (
        "npu_mm_reduce_scatter_base", "npu_all_gather_base_mm", "npu_mm_all_reduce_base")},
    **{name: (_PROCESS_GROUP[0], _PROCESS_GROUP[1].format(name)) for name in ( "npu_alltoallv_gmm",
        "npu_gmm_alltoallv", "npu_moe_distribute_dispatch", "npu_moe_distribute_combine",
        "npu_moe_distribute_dispatch_v2", "npu_moe_distribute_combine_v2", "npu_moe_distribute_combine_add_rms_norm",
        "npu_grouped_matmul_finalize_routing_all_reduce", "npu_all_gather_quant_mm", "npu_all_to_all_matmul",
        "npu_all_to_all_quant_matmul", "npu_alltoallv_quant_gmm", "npu_matmul_all_to_all", "npu_quant_all_reduce",
        "npu_quant_gmm_alltoallv", "npu_quant_matmul_all_to_all", "npu_quant_mm_reduce_scatter",
        "npu_quant_reduce_scatter", "npu_moe_distribute_combine_setup", "npu_moe_distribute_combine_teardown",
        "npu_moe_distribute_dispatch_setup", "npu_moe_distribute_dispatch_teardown")},
    **{name: ("not-a-computation", f"{name} asks the kernel for its workspace size, a number no golden computes")
       for name in ("_npu_fused_infer_attention_score_get_max_workspace",
                    "npu_fused_infer_attention_score_get_max_workspace",
                    "atb._npu_multi_head_latent_attention_get_workspace", "atb._npu_paged_attention_v2_get_workspace")},
    **{name: ("not-a-computation", f"{name} manages the device (its memory, streams, limits or float status "
                                   f"register) rather than computing a result a golden could")
       for name in ("npu_alloc_float_status", "npu_get_float_status", "npu_clear_float_status", "erase_stream",
                    "get_device_limit", "get_stream_limit", "set_device_limit", "set_stream_limit",
                    "reset_stream_limit", "empty_with_format", "empty_with_swapped_memory", "npu_prefetch",
                    "save_npugraph_tensor", "copy_memory_")},
}


class CatalogueError(ValueError):
    """The built-in tables contradict each other about one op; the message names it and the fix."""


@dataclass(frozen=True)
class OpRecord:
    """One op: how it is named, what judges it and how a fair kernel of it may err."""

    name: str  # the bare name dumps and tables use after their prefix: "matmul", "npu_rms_norm"
    table: OpRule  # its row of the shipped op table: standard, backward standard, level, roundings
    accumulation: AccumulationRule | None = None  # how it accumulates; None: one rounding per element
    reference: FusedOp | None = None  # torch_npu's op: its float64 reference
    math_family: str | None = None  # "matmul", "conv" or "rnn": the float32 math mode it runs in
    plain_sum: bool = False
    rounded_once: bool = False
    rounded_once_in_half: bool = False
    exactly_rounded: bool = False
    dtype_grid_golden: bool = False  # defined on its dtype's grid: the golden runs in the input's dtype
    # a matrix algorithm (a factorization, a solve): backward stable normwise, its inputs moved as a whole
    matrix_algorithm: bool = False
    normwise: bool = False  # stable only normwise: a matrix algorithm, or one of NORMWISE
    # (skip reason, why) where a case of it has nothing a golden could compute (UNJUDGED)
    unjudged: tuple[str, str] | None = None
    statistics: str | None = None  # the family of invariants a statistics dump can check of it (STATISTICS)
    random: Randomness | None = None  # it draws random numbers, always or while its switches are on (RANDOMNESS)

    @property
    def standard(self) -> str | None:
        return self.table.standard

    @property
    def roundings(self) -> int:
        """Intermediate results a fair kernel rounds to the output dtype (one value, the table's)."""
        return self.table.roundings

    @property
    def reduces(self) -> bool:
        """Whether its forward bound needs a reduction length read from the call's inputs."""
        return self.accumulation is not None and self.accumulation.reduces

    @property
    def anchor(self) -> str:
        """Its row of the op catalogue's page, docs/generated/ops.md."""
        return f"docs/generated/ops.md#{self.name.lower()}"

    def is_rounded_once(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
        """One rounding, where the call's Python float arguments are exact in float32 (x * 0.1
        multiplies every element by one rounded 0.1)."""
        scalars = [v for v in (*args, *kwargs.values()) if isinstance(v, float)]
        return self.rounded_once and all(float(torch.tensor(v, dtype=torch.float32)) == v for v in scalars)

    def is_exactly_rounded(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
        """The exact result rounded once: between two float tensors the result's dtype holds, unscaled."""
        if not self.exactly_rounded or len(args) != 2 or set(kwargs) - {"alpha"} or kwargs.get("alpha", 1) != 1:
            return False
        if not all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in args):
            return False
        result = torch.result_type(*args)  # a 0-dim float32 tensor added to float16 ones is rounded to float16
        return all(t.dtype == result or t.dtype.itemsize < result.itemsize for t in args)

    def is_rounded_once_in_half(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
        """Computed wider and rounded once, on a half-precision input."""
        first = next((v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor) and v.is_floating_point()),
                     None)
        return self.rounded_once_in_half and first is not None and float_format(first.dtype).computed_wider


UNKNOWN = OpRecord("", OpRule())  # what the catalogue says of an op it does not hold: nothing


class Catalogue:
    """Every op's record by bare name, and lookups by the names dumps and users write."""

    def __init__(self, records: Mapping[str, OpRecord]):
        self.records = MappingProxyType(dict(records))
        self._by_reference = {id(r.reference.reference): r for r in records.values() if r.reference is not None}

    def __iter__(self):
        return iter(self.records.values())

    def __len__(self) -> int:
        return len(self.records)

    def get(self, name: str | None) -> OpRecord:
        """The record of bare name ``name`` (``ops.base_name`` of an API name), or UNKNOWN."""
        return self.records.get(name or "", UNKNOWN)

    def of_reference(self, fn: Callable[..., Any]) -> OpRecord | None:
        """The record whose float64 reference ``fn`` is (a torch_npu op's), or None."""
        return self._by_reference.get(id(fn))


def build(rules: Rules, accumulation: Mapping[str, AccumulationRule], fused: Mapping[str, FusedOp]) -> Catalogue:
    """The catalogue of every op the tables name, validated: raises CatalogueError naming the first op
    whose tables contradict each other."""
    names = set(accumulation) | set(fused) | set(rules.ops) | set(UNJUDGED) | set(RANDOMNESS) | ROUNDED_ONCE | PLAIN_SUMS \
        | ROUNDED_ONCE_IN_HALF | ELEMENTWISE | NORMWISE | rules.dtype_grid_golden | {n for family in MATH_FAMILIES.values() for n in family} \
        | {n for family in STATISTICS.values() for n in family}
    families = {name: family for family, members in MATH_FAMILIES.items() for name in members}
    invariants = {name: family for family, members in STATISTICS.items() for name in members}
    records = {}
    for name in sorted(names):
        record = OpRecord(
            name, rules.op_rule(parse_op_name(name)), accumulation.get(name), fused.get(name), families.get(name),
            plain_sum=name in PLAIN_SUMS, rounded_once=name in ROUNDED_ONCE,
            rounded_once_in_half=name in ROUNDED_ONCE_IN_HALF, exactly_rounded=name in EXACTLY_ROUNDED,
            dtype_grid_golden=name in rules.dtype_grid_golden, matrix_algorithm=name in MATRIX_ALGORITHMS,
            normwise=name in MATRIX_ALGORITHMS | NORMWISE, unjudged=UNJUDGED.get(name),
            statistics=invariants.get(name), random=RANDOMNESS.get(name))
        _validate(record, elementwise=name in ELEMENTWISE)
        records[name] = record
    return Catalogue(records)


def _validate(record: OpRecord, elementwise: bool) -> None:
    name, rule, standard = record.name, record.accumulation, record.standard
    judged_by = STANDARDS.get(standard)  # None where the op table names no standard
    one_rounding = judged_by is not None and judged_by.one_rounding
    grows = judged_by is not None and judged_by.scales_with_accumulation  # with the reduction
    if one_rounding and record.reduces:
        raise CatalogueError(f"op {name!r} is judged by {standard}, one rounding per element, yet its accumulation "
                             f"rule sums many terms: judge it by error_bound, or drop the rule")
    never_judged = record.random is not None and record.random.every_call  # each case of it skips as random-op
    if grows and rule is None and not elementwise and not never_judged:
        raise CatalogueError(f"op {name!r} is judged by {standard}, whose bound grows with the reduction, yet no "
                             f"accumulation rule says what it sums: give it a rule in bounds/accumulation.py, or "
                             f"list it in ops.catalogue.ELEMENTWISE if it sums nothing")
    if elementwise and record.reduces:
        raise CatalogueError(f"op {name!r} is listed as elementwise and has a reducing accumulation rule: keep one")
    if record.plain_sum and rule is None:
        raise CatalogueError(f"op {name!r} is a plain sum with no accumulation rule: the order check needs its terms")
    if record.reference is not None and standard is None:
        raise CatalogueError(f"torch_npu op {name!r} has a reference but no standard in the op table: list it in "
                             f"data/ops.yaml under the standard that judges it")


@lru_cache(maxsize=1)
def catalogue() -> Catalogue:
    """The built-in catalogue, built and validated once per process."""
    return build(Rules.default(), ACCUMULATION_RULES, FUSED_OPS)


def op_record(name: str | None) -> OpRecord:
    """The record of bare op name ``name`` (``ops.base_name("Tensor.add_")`` is "add"), or UNKNOWN."""
    return catalogue().get(name)


def random_reason(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
    """Why calling op ``name`` (as a dump spells it after its namespace: "bernoulli_") with these arguments
    gives a result no golden can redraw, or None where it does not: its record's randomness; else the
    installed torch's tag, for an op newer than the catalogue; else a name that says dropout."""
    randomness = op_record(folded_name(name)).random
    if randomness is not None and randomness.in_place_only and folded_name(name) == name:
        randomness = None
    if randomness is None and name in seeded_aten_ops():
        randomness = ALWAYS
    if randomness is None:
        return "its name says dropout" if "dropout" in name else None
    return randomness.reason(args, kwargs)


__all__ = ["Catalogue", "CatalogueError", "OpRecord", "UNKNOWN", "build", "catalogue", "op_record", "random_reason"]
