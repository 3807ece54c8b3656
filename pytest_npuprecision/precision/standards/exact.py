"""The standards under which each element is right or wrong: bit-exact outputs, and a quantizer's grid values."""

from __future__ import annotations

from ...common import quantized_grid
from .base import Standard, Subject, check


class Quantized(Standard):
    """A quantizer's integer or float8 output (the op table's quantized ops), against the exact value before
    its rounding: each element the nearest value of its format's grid (the integers, or the float8 values),
    or either neighbour where that value lies within its compute slack of a half-way point (half-way values
    may round either way). Its wider float outputs (a scale) fall to the error bound."""

    name, worst = "quantized", "abs"
    metrics = ("quantized_mismatch",)
    discrete = True

    def applies(self, subject: Subject) -> bool:
        return subject.table_standard == self.name and quantized_grid(subject.dtype)

    def checks(self, m, limits, baseline, floor):
        return [check("quantized_mismatch", m.quantized_over, limits["quantized_mismatch"])]

    def mismatched(self, m):
        return m.quantized_over, m.numel, "not their exact value rounded to a nearest value of their grid"


class Binary(Standard):
    """Integer, bool and index outputs, and ops that must be bit-exact: no element may differ."""

    name, worst = "binary", "binary"
    metrics = ("binary_mismatch",)
    exact = discrete = True

    def applies(self, subject: Subject) -> bool:
        return not subject.dtype.is_floating_point or subject.table_standard == self.name

    def checks(self, m, limits, baseline, floor):
        return [check("binary_mismatch", m.binary_mismatch, limits["binary_mismatch"])]

    def mismatched(self, m):
        return m.binary_mismatch, m.numel, "not bit-equal to the golden"

    def allowed(self, element, m, params, limits, dtype, roundings):
        return 0.0
