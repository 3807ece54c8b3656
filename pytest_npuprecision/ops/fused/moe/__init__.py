"""torch_npu's MoE ops: gating (which experts each token goes to), routing (copying tokens to their
experts and back) and the older token permute / unpermute pair."""

from __future__ import annotations

from . import gating, permute, routing

OPS = (*permute.OPS, *gating.OPS, *routing.OPS)
