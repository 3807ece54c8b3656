"""Elementwise arithmetic and functions: one correctly rounded step (the absolute standard), a function
without cancellation on its dtype's ULP grid (ulp), or a few steps that may cancel (error_bound, elementwise)."""

from __future__ import annotations

from ...bounds import accumulation as acc
from ..records import op

RECORDS = (
    # An add or sub rounds alpha * other to the dtype before the sum.
    op("add", "error_bound", roundings=1, rounded_once=True, exactly_rounded=True, elementwise=True,
       statistics="add_or_sub"),
    op("sub", "error_bound", roundings=1, rounded_once=True, exactly_rounded=True, elementwise=True,
       statistics="add_or_sub"),
    # gelu rounds its 1 + erf(x / sqrt 2) factor to the dtype before the product.
    op("gelu", "error_bound", level="L2", roundings=2, accumulation=acc.GELU, rounded_once_in_half=True,
       statistics="elementwise"),

    op("addcdiv", "error_bound", elementwise=True),
    op("addcmul", "error_bound", elementwise=True),
    op("asinh", "ulp"),
    op("atan", "ulp"),
    op("celu", "ulp", statistics="elementwise"),
    op("cos", "ulp", rounded_once=True, statistics="elementwise"),
    op("cosh", "ulp"),
    op("div", "absolute", rounded_once=True, statistics="elementwise"),
    op("divide", "absolute"),
    op("elu", "ulp", statistics="elementwise"),
    op("erf", "ulp", rounded_once=True, statistics="elementwise"),
    op("erfc", "ulp", statistics="elementwise"),
    op("exp", "ulp", rounded_once=True, statistics="elementwise"),
    op("exp2", "ulp", rounded_once=True, statistics="elementwise"),
    op("expm1", "ulp", rounded_once=True, statistics="elementwise"),
    op("float_power", "ulp"),
    op("hardsigmoid", "ulp", statistics="elementwise"),
    op("hardswish", "ulp", statistics="elementwise"),
    op("hypot", "absolute"),
    op("leaky_relu", "absolute", statistics="elementwise"),
    op("lerp", "error_bound", elementwise=True),
    op("log", "ulp", rounded_once=True, statistics="elementwise"),
    op("log10", "ulp", rounded_once=True, statistics="elementwise"),
    op("log1p", "ulp", rounded_once=True, statistics="elementwise"),
    op("log2", "ulp", rounded_once=True, statistics="elementwise"),
    op("logsigmoid", "ulp", statistics="elementwise"),
    op("mish", "ulp", statistics="elementwise"),
    op("mul", "absolute", rounded_once=True, statistics="elementwise"),
    op("negative", statistics="elementwise"),
    op("pow", "ulp", statistics="elementwise"),
    op("prelu", "absolute"),
    op("reciprocal", "absolute", rounded_once=True, statistics="elementwise"),
    op("rsqrt", "ulp", rounded_once=True, statistics="elementwise"),
    op("rsub", elementwise=True, statistics="add_or_sub"),
    op("selu", "ulp", statistics="elementwise"),
    op("sigmoid", "ulp", rounded_once=True, statistics="elementwise"),
    op("silu", "ulp", rounded_once=True, statistics="elementwise"),
    op("sin", "ulp", rounded_once=True, statistics="elementwise"),
    op("sinh", "ulp"),
    op("softplus", "ulp", statistics="elementwise"),
    op("sqrt", "ulp", rounded_once=True, statistics="elementwise"),
    op("square", "absolute", statistics="elementwise"),
    op("tanh", "ulp", rounded_once=True, statistics="elementwise"),
    op("tanhshrink", statistics="elementwise"),
    op("true_divide", "absolute"),
    op("truediv", rounded_once=True, statistics="elementwise"),
    op("softsign", accumulation=acc.SOFTSIGN, statistics="elementwise"),
)
