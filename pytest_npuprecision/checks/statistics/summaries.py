"""What a statistics dump holds of one call: each tensor's Max, Min, Mean and Norm (and msprobe's checksum), its
inputs and its outputs by name, and how far a fair computation of each statistic may sit from the exact one."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...common import float_format
from ...dump import CaseEntries, TensorSpec, output_specs

STATISTICS = ("Max", "Min", "Mean", "Norm")
_FLOAT32_U = 2.0**-24


@dataclass(frozen=True)
class Summary:
    """One tensor as the dump describes it. Statistics are None where the dump has none (integers: Mean, Norm)."""

    name: str  # "input_args[0]", "output.0", "grad_outputs.0"
    dtype: torch.dtype
    shape: tuple[int, ...]
    max: float | None
    min: float | None
    mean: float | None
    norm: float | None
    checksum: str | None = None

    @classmethod
    def of(cls, spec: TensorSpec, name: str) -> "Summary":
        def number(value):
            return None if value is None or isinstance(value, bool) else float(value)

        return cls(name, spec.dtype, tuple(spec.shape), number(spec.max), number(spec.min), number(spec.mean),
                   number(spec.norm), spec.checksum)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def floating(self) -> bool:
        return self.dtype.is_floating_point

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    def value(self, statistic: str) -> float | None:
        return getattr(self, statistic.lower())

    @property
    def finite(self) -> bool:
        return all(v is None or math.isfinite(v) for v in (self.max, self.min, self.mean, self.norm))

    @property
    def rms(self) -> float:
        """The root mean square of its elements, from its Norm (its largest magnitude where there is no Norm)."""
        if self.norm is not None and self.numel:
            return abs(self.norm) / math.sqrt(self.numel)
        return max(abs(self.max or 0.0), abs(self.min or 0.0))

    @property
    def unit_roundoff(self) -> float:
        return float_format(self.dtype).unit_roundoff if self.floating else 0.0

    def slack(self, statistic: str) -> float:
        """How far a fair computation of ``statistic`` of this very tensor may lie from its exact value.

        Max and Min are elements, exact. msprobe computes Mean and Norm on the device in the tensor's dtype: a
        bfloat16 tensor's Mean is rounded to bfloat16: one rounding of a float32 sum, two where a kernel rounds
        an intermediate (one is too few: the fair msprobe-written bfloat16 pairs of the tests then part). A value
        off the dtype's grid was computed wider (capture computes half types' in float32),
        and errs only by its float32 sum: log2(n) roundings of the summed magnitudes.
        """
        if statistic in ("Max", "Min") or not self.floating:
            return 0.0
        value = self.value(statistic)
        if value is None:
            return 0.0
        scale = self.rms if statistic == "Mean" else abs(value)
        summed = 2 * max(math.log2(max(self.numel, 2)), 1.0) * _FLOAT32_U * scale
        rounded = 2 * self.unit_roundoff * abs(value) if _on_grid(value, self.dtype) else 2 * _FLOAT32_U * abs(value)
        return rounded + summed


def _on_grid(value: float, dtype: torch.dtype) -> bool:
    """Whether ``value`` is a number of ``dtype`` (a statistic rounded to it): a float32 sum lands on a bfloat16
    number by chance once in 2^16."""
    if dtype not in (torch.float16, torch.bfloat16):
        return True
    return float(torch.tensor(value, dtype=torch.float64).to(dtype)) == value


@dataclass(frozen=True)
class CallSummaries:
    """One case's tensors: what went in (a backward case: its forward's inputs and the gradients into its
    outputs) and what came out (a backward case: the gradients of its inputs), each named as the reports name it."""

    inputs: tuple[Summary, ...]
    outputs: tuple[Summary, ...]

    def input(self, name: str) -> Summary | None:
        return next((s for s in self.inputs if s.name == name), None)

    def output(self, name: str) -> Summary | None:
        return next((s for s in self.outputs if s.name == name), None)


def call_summaries(entries: CaseEntries, backward: bool) -> CallSummaries:
    """The case's summaries, decoded from its entries (raises DescriptorError for a malformed one)."""
    inputs = [Summary.of(spec, spec.where) for spec in entries.call.specs()]
    if backward:
        inputs += [Summary.of(spec, f"grad_outputs.{i}") for i, spec in enumerate(entries.grads) if spec is not None]
    outputs = [Summary.of(spec, name) for name, spec in output_specs(entries, backward)]
    return CallSummaries(tuple(inputs), tuple(outputs))


def what_was_recorded(entries: CaseEntries, backward: bool) -> tuple[bool, bool]:
    """(whether the dump saved a file of any output this case compares, whether they have statistics or checksums
    to judge: msprobe's xor summary and fp8 tensors have neither). Raises DescriptorError."""
    specs = [spec for _, spec in output_specs(entries, backward)]
    return (any(spec.data_name is not None for spec in specs),
            any(spec.max is not None or spec.checksum is not None for spec in specs))
