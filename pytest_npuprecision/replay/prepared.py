"""One call made ready to replay: the value a dump case, check_call and the runner pass from stage to stage.

A dump case prepares it from its entries (checks/prepared_case.py), check_call from its arguments;
:func:`replay.runner.replay` runs it on the device under test, the golden and a baseline, and judging
reads the float32 policy it carries. What could stop a dump case before it runs (an op this torch
lacks, random draws, the memory budget, a recorded baseline of other inputs) is settled while it is
prepared, so it holds none of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Mapping, Sequence

import torch

from ..common import DEFAULT_POLICY
from ..dump import RecordedResults
from ..ops import ResolvedOp


@dataclass(frozen=True)
class PreparedCall:
    """The resolved op, its arguments on the device it runs on, and every choice its replay follows."""

    op: ResolvedOp
    args: Sequence[Any]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    backward: bool = False  # also differentiate the inputs ``requires_grad`` names
    # The gradients flowing into the outputs; None: drawn from ``seed``.
    grad_outputs: Sequence[torch.Tensor | None] | None = None
    # Inputs to differentiate besides tensors that already require grad: positions (3), keyword names
    # ('weight') or paths ("input_args[0][1]").
    requires_grad: Collection[int | str] = ()
    seed: int = 0  # seeds each side's random ops, and the output gradients where none are given
    autocast: torch.dtype | None = None  # the device side (and a live baseline) run under autocast to it
    golden_dtype: torch.dtype | None = torch.float64  # None: the golden runs on the inputs' dtype grid
    reference: Callable[..., Any] | None = None  # what the golden calls instead of the op; None: op.reference
    recorded: RecordedResults | None = None  # the device's results as a dump recorded them: nothing runs there
    float32: str = DEFAULT_POLICY  # how float32 results the device computed in TF32 or HF32 are judged
