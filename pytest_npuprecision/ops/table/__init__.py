"""The built-in op table: one record per op (ops.records.op), by family. A user's rules file
(--npu-precision-rules) goes over each record's row of standards, level and roundings at run time.

Adding an op is one record in its family's module; a torch_npu op's float64 reference is a ``FusedOp``
in ops/fused/, joined to its record by name. ops/catalogue.py validates every record as it builds.
"""

from __future__ import annotations

from . import elementwise, exact, linear_algebra, losses, normalization, random_draws, reductions, sampling, torch_npu
from ..records import OpRecord

FAMILIES = (exact, elementwise, linear_algebra, reductions, normalization, losses, sampling, random_draws, torch_npu)


def builtin() -> tuple[OpRecord, ...]:
    """Every family's records, in the families' order."""
    return tuple(record for family in FAMILIES for record in family.RECORDS)


__all__ = ["FAMILIES", "builtin"]
