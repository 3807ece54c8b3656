"""torch_npu's fused attention and MindSpeed's wrapper of it: the reference (fusion), its layouts (BSH,
SBH, BSND, BNSD, TND) and its masks and sparse modes."""

from .fusion import (
    MINDSPEED_FUSION_ATTENTION, OPS, mindspeed_fusion_attention, npu_fusion_attention, npu_fusion_attention_grad,
    query_block_rows,
)

__all__ = ["MINDSPEED_FUSION_ATTENTION", "OPS", "mindspeed_fusion_attention", "npu_fusion_attention",
           "npu_fusion_attention_grad", "query_block_rows"]
