"""Pure-torch references for torch_npu's fused ops, keyed by the name after "NPU." in msprobe dumps.

Each reference is called exactly as the torch_npu op, runs on any device and dtype, computes in
float32 for half inputs and in the input's dtype otherwise (so a float64 call is a float64 golden),
and is differentiable through autograd.
"""

from __future__ import annotations

from typing import Mapping

from . import (activations, attention, grouped_matmul, losses, matmul, misc, moe, norms, optimizers, quantization,
               rotary, tensor_ops)
from .record import FusedOp, RandomFusedCall, UnjudgedFusedCall

FUSED_OPS: Mapping[str, FusedOp] = {
    op.name: op for module in (attention, norms, rotary, activations, matmul, grouped_matmul, misc, moe, quantization,
                               optimizers, tensor_ops, losses)
    for op in module.OPS
}


def fused_op(name: str) -> FusedOp | None:
    """The reference for ``name`` ("npu_rms_norm"), or None when there is none."""
    return FUSED_OPS.get(name)


# MindSpeed's own wrappers (msprobe's MindSpeed.<module>.<op>), by the name after "MindSpeed.": the
# reference each is called as. Its record is the torch_npu op's of the same last name.
MINDSPEED_OPS: Mapping[str, FusedOp] = {
    "gmm.npu_gmm": FUSED_OPS["npu_gmm"],
    "gmm.npu_gmm_v2": FUSED_OPS["npu_gmm_v2"],
    "fusion_attention_v2.npu_fusion_attention": attention.MINDSPEED_FUSION_ATTENTION,
}


__all__ = ["FUSED_OPS", "MINDSPEED_OPS", "FusedOp", "RandomFusedCall", "UnjudgedFusedCall", "fused_op"]
