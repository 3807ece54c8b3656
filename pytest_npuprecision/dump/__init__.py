"""Reading msprobe dumps: where they are, each entry's place in dump.json, the case records, argument decoding,
tensors made to fit statistics and what the device recorded. Imports only ``common``; never runs an op."""

from __future__ import annotations

from ..common import lazy_exports

# What other layers use, by the module that defines it: loaded on first use.
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "arguments": ("CallInputs", "materialize"),
    "autocast": ("dtype_differences", "inferred_autocast", "recorded_dtypes"),
    "descriptors": (
        "CaseEntries", "DecodedCall", "DescriptorError", "DumpDataError", "MalformedDescriptor", "TensorSpec",
        "decode_call", "decode_value", "iter_specs",
    ),
    "dump_cases": ("DumpCase", "DumpFile", "load_dump", "recorded_nonfinite", "without_cyclic_gc"),
    "entries": ("EntryUnreadable",),
    "fingerprints": ("InputFingerprint", "fingerprint", "update_with_tensor"),
    "locations": ("DumpSource", "dump_location", "find_dumps", "holds_tensor_files", "is_dump_part"),
    "recorded": (
        "NothingRecorded", "RecordedResults", "forward_output_shapes", "forward_output_tensors", "leaf_gradients",
        "output_specs", "positional_gradients", "recorded_results",
    ),
    "tensor_files": ("load_tensor",),
})
