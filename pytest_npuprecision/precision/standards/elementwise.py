"""The standards of one rounding per element: a relative tolerance, and units in the last place."""

from __future__ import annotations

import math

from ...common import float_format
from ..element_bound import small_value_rule
from ..metrics import Limit
from .base import Standard, check


class AbsoluteThreshold(Standard):
    """Every normal element within rtol, every subnormal one within rtol of the smallest normal number
    (element_bound.small_value_rule): the verdict does not depend on the data's scale."""

    name, worst = "absolute", "rel"
    metrics = ("rel_err_ratio", "small_value_err_ratio")
    one_rounding = True

    def checks(self, m, limits, baseline, floor):
        return [
            check("rel_err_ratio", m.rel_err_ratio, limits["rel_err_ratio"]),
            check("small_value_err_ratio", m.small_value_err_ratio, limits["small_value_err_ratio"]),
        ]

    def mismatched(self, m):
        if not m.finite:
            return None
        count = round(m.rel_err_ratio * m.normal_count) + round(m.small_value_err_ratio * m.small_count)
        return count, m.finite, "past their relative (or near-zero absolute) tolerance"

    def allowed(self, element, m, params, limits, dtype, roundings):
        g = abs(element.golden)
        small_value, small_value_atol = small_value_rule(float_format(dtype) if dtype.is_floating_point else None,
                                                         params.rtol, roundings)
        return params.rtol * g if g >= small_value else small_value_atol


class Ulp(Standard):
    """Errors in units in the last place of the output dtype (subnormal spacing below the normals)."""

    name, worst = "ulp", "ulp"
    metrics = ("max_ulp_err", "mean_ulp_err", "ulp_over_ratio")
    one_rounding = True

    def checks(self, m, limits, baseline, floor):
        return [
            check("max_ulp_err", m.max_ulp_err, limits["max_ulp_err"]),
            check("mean_ulp_err", m.mean_ulp_err, limits["mean_ulp_err"]),
            check("ulp_over_ratio", m.ulp_over_ratio, at_least_one(limits["ulp_over_ratio"], m.finite)),
        ]

    def mismatched(self, m):
        return None if not m.finite else (round(m.ulp_over_ratio * m.finite), m.finite, "past the ulp threshold")

    def allowed(self, element, m, params, limits, dtype, roundings):
        if "max_ulp_err" not in limits or not dtype.is_floating_point:
            return None
        fmt = float_format(dtype)
        exponent = math.frexp(max(abs(element.golden), math.ldexp(1.0, fmt.min_exponent)))[1] - 1
        return limits["max_ulp_err"].error * math.ldexp(1.0, exponent - fmt.mantissa_bits)


def at_least_one(share: Limit, count: int) -> Limit:
    """A share limit that lets one element of ``count`` through: below 1/share elements a share means
    nothing (one element of 16 is 6 %), and a maximum such as max_ulp_err still bounds that element."""
    if count <= 0:
        return share
    floor = 1.0 / count
    return Limit(max(share.error, floor), None if share.warning is None else max(share.warning, floor))
