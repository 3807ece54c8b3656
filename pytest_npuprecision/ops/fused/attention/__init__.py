"""torch_npu's fused attention and MindSpeed's wrapper of it: the reference (fusion), its layouts (BSH,
SBH, BSND, BNSD, TND) and its masks and sparse modes; the inference ops built on them (inference); sparse attention over
indexed keys (sparse), and the lightning indexer that picks those keys (indexer)."""

from . import indexer, inference, sparse
from .fusion import OPS as FUSION_OPS
from .fusion import (
    MINDSPEED_FUSION_ATTENTION, mindspeed_fusion_attention, npu_fusion_attention, npu_fusion_attention_grad,
    query_block_rows,
)

OPS = FUSION_OPS + inference.OPS + sparse.OPS + indexer.OPS

__all__ = ["MINDSPEED_FUSION_ATTENTION", "OPS", "mindspeed_fusion_attention", "npu_fusion_attention",
           "npu_fusion_attention_grad", "query_block_rows"]
