"""One op's catalogue record, and ``op()``, the one call that declares it (ops/table/).

A record says how an op is named, what judges it and how a fair kernel of it may err: its row of the
op table (standard, backward standard, level, roundings), its accumulation rule (bounds.accumulation),
its traits, its randomness and why it skips where no golden can judge it. ops/catalogue.py joins the
torch_npu references (ops.fused) to the records by name and validates them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from ..bounds import AccumulationRule
from ..common import float_format
from ..precision import OpRule, op_row
from .fused import FusedOp
from .randomness import Randomness

MATH_FAMILIES = ("matmul", "conv", "rnn")  # the float32 math-mode switches (common.math_modes.MathMode)
STATISTICS_FAMILIES = ("elementwise", "add_or_sub", "softmax", "log_softmax", "layer_norm", "rms_norm", "same_values",
                       "partition", "subset", "reduction", "nonnegative")  # checks/statistics/invariants.py


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
    # (skip reason, why) where a case of it has nothing a golden could compute
    unjudged: tuple[str, str] | None = None
    # the family of invariants a statistics dump can check of it (checks/statistics/invariants.py)
    statistics: str | None = None
    random: Randomness | None = None  # it draws random numbers, always or while its switches are on
    elementwise: bool = False  # sums nothing forward, though the error bound judges it (one rounding or a few)

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


def op(name: str, standard: str | None = None, *, backward: str | None = None, level: str = "L0", roundings: int = 0,
       limits: Mapping[str, Mapping[str, Any]] | None = None, accumulation: AccumulationRule | None = None,
       math: str | None = None, **traits: Any) -> OpRecord:
    """The record of op ``name``: its row of the op table (standard, backward, level, roundings and limits,
    checked as a user's rules file is), its accumulation rule, its float32 math-mode family (``math``) and
    its traits (OpRecord's other fields). A matrix algorithm is stable normwise."""
    if math is not None and math not in MATH_FAMILIES:
        raise ValueError(f"op {name!r}: math family {math!r} is unknown: use one of {', '.join(MATH_FAMILIES)}")
    statistics = traits.get("statistics")
    if statistics is not None and statistics not in STATISTICS_FAMILIES:
        raise ValueError(f"op {name!r}: statistics family {statistics!r} is unknown: use one of "
                         f"{', '.join(STATISTICS_FAMILIES)}")
    if traits.get("matrix_algorithm"):
        traits["normwise"] = True
    row = op_row(name, {"standard": standard, "backward": backward, "level": level, "roundings": roundings,
                        "limits": limits or {}})
    return OpRecord(name, row, accumulation, math_family=math, **traits)
