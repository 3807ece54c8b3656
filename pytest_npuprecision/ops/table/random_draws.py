"""Ops whose result no golden can redraw: random draws (always, or while their switches are on) and
uninitialized memory. Besides these, every op torch tags ``nondeterministic_seeded`` is random
(ops.randomness.SEEDED_ATEN_OPS), with no record needed."""

from __future__ import annotations

from .. import randomness as random
from ..records import op

RECORDS = (
    op("alpha_dropout", random=random.DROPOUT),
    op("dropout", "binary", random=random.DROPOUT),
    op("dropout1d", random=random.DROPOUT),
    op("dropout2d", random=random.DROPOUT),
    op("dropout3d", random=random.DROPOUT),
    op("empty", random=random.UNINITIALIZED),
    op("empty_like", random=random.UNINITIALIZED),
    op("empty_strided", random=random.UNINITIALIZED),
    op("feature_alpha_dropout", random=random.DROPOUT),
    op("feature_dropout", random=random.DROPOUT),
    op("fractional_max_pool2d", random=random.FRACTIONAL),
    op("fractional_max_pool2d_with_indices", random=random.FRACTIONAL),
    op("fractional_max_pool3d", random=random.FRACTIONAL),
    op("fractional_max_pool3d_with_indices", random=random.FRACTIONAL),
    op("gumbel_softmax", random=random.ALWAYS),
    op("native_dropout", random=random.DROPOUT),
    op("new_empty", random=random.UNINITIALIZED),
    op("new_empty_strided", random=random.UNINITIALIZED),
    op("resize", random=random.GROWN),
    op("resize_as", random=random.GROWN),
    op("rrelu", random=random.switched(random.Switch(("training",), 3, False, False))),
)
