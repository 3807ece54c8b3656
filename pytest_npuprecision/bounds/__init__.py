"""What a fair kernel may err by: each op's reduction length and term norms (the accumulation rules; the
families' terms in terms/). Imports only ``common``."""

from __future__ import annotations

from ..common import lazy_exports

# What other layers use, by the module that defines it: loaded on first use.
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "accumulation_rule": ("AccumulationRule", "elementwise"),
    "op_arguments": ("argument",),
    "reduction_lengths": (
        "class_count", "classes_then_batch", "first_input", "fusion_attention_lengths", "grouped_matmul_length",
        "infer_attention_lengths", "loss_length",
    ),
    "terms": ("composite_terms", "dequantized_terms", "quantizer_terms", "sampling_terms"),
    "terms.dequantized_terms": ("dequantized_weight",),
    "terms.repeated_terms": ("term_repeats",),
})
