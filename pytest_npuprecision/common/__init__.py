"""What every layer shares: floating-point formats and math modes, the torch versions we support, memory
sizes and dump text as people read them, and the warning categories. Imports nothing else of the package."""

from __future__ import annotations

from .exports import lazy_exports

# What other layers use, by the module that defines it: loaded on first use.
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "dtypes": ("FloatFormat", "float_format", "parse_dtype", "quantized_grid"),
    "math_modes": (
        "DEFAULT_POLICY", "Float32Modes", "IEEE", "MathMode", "POLICIES", "declared_modes", "describe_modes",
        "half_products", "hf32", "tf32",
    ),
    "memory_sizes": ("format_size", "parse_size"),
    "shown_text": ("folder_name", "quoted_key", "shown_key"),
    "torch_compat": (
        "LATER_FLOAT_DTYPES", "TENSOR_METHOD_PREFIXES", "UnsupportedEnvironment", "aminmax", "check_environment",
        "default_device", "fp32_precision", "is_compiling", "load_tensors", "missing_kernel", "newer_op", "nextafter",
        "overridable_functions", "rms_norm_eps", "testing_overrides",
    ),
    "warning_types": ("CaptureGapWarning", "JudgedDtypeWarning"),
})
__all__ = sorted([*__all__, "lazy_exports"])  # bound above: every package's __init__ calls it
