"""What the harness knows of each op and which callable an API name means: the op catalogue (one record per op,
written in ``table/``), msprobe names resolved to torch functions, the allow-list that keeps a dump from reaching
anything but tensor operators, torch's namesakes, custom ops registered by users, and pure-torch references for
torch_npu's fused ops (``fused``). Imports ``bounds``, ``precision`` and ``common``."""

from __future__ import annotations

from ..common import lazy_exports

# What other layers use, by the module that defines it: loaded on first use.
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "allowlist": ("unsafe_argument",),
    "catalogue": ("golden_on_dtype_grid", "judged_like", "op_record", "op_rule", "random_reason"),
    "namesakes": ("NoSingleNamesake", "SAME_FUNCTION", "unknown_keywords"),
    "registry": ("CustomOp", "entry_point_errors", "name_of", "register_op", "registered_op", "unregister_op"),
    "resolution": (
        "ResolvedOp", "choose_namesake", "is_inplace", "op_segment", "operator_name", "reference_like", "resolve",
    ),
})
