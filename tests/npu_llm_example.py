"""The defects planted in the recorded results of the example dump examples/dumps/npu_llm_defects_tensor
(written by examples/make_npu_llm_dump.py). Shared by tests/end_to_end/test_npu_llm_example.py, which checks
that dump alone, and tests/checks/test_dump_pairs.py, which pairs it with its fair twin npu_llm_tensor."""

PLANTED = {  # the defective recorded results, and where they show
    "NPU.npu_swiglu.0.forward",  # one NaN
    "NPU.npu_fusion_attention.0.forward",  # scores and P @ V summed in bfloat16
    "NPU.npu_rotary_mul.0.forward", "NPU.npu_rotary_mul.1.forward",  # the rotated half's sign flipped
    "NPU.npu_linear.0.forward",  # float16 saturated at 65504 where the exact result overflows
}
