"""The failure message of an op case: the (shrunk) inputs, each failing output's verdict, how to rerun.

A stable, line-oriented format; tests/opcases/test_op_cases.py pins it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..checks import baseline_label
from ..precision import Status, render_message
from ..reports import STRICT_WARNINGS_NOTE
from .run import case_seed
from .search import OpCaseSettings, Outcome
from .spec import Call, dtype_name

SHOWN_ELEMENTS = 24  # tensors up to this size are printed in full


def _number(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def _values(values: Any) -> str:
    if isinstance(values, list):
        return "[" + ", ".join(_values(v) for v in values) + "]"
    return _number(values)


def describe_value(value: Any) -> str:
    """'float16 tensor (1, 2) = [[0.0, 12.0]]'; larger tensors give their range instead of values."""
    if not isinstance(value, torch.Tensor):
        return repr(value)
    t = value.detach().cpu()
    head = f"{dtype_name(t.dtype)} tensor {tuple(t.shape)}"
    if t.numel() <= SHOWN_ELEMENTS:
        return f"{head} = {_values(t.tolist())}"
    finite = t[torch.isfinite(t)] if t.is_floating_point() else t
    span = f"values in [{_number(finite.min().item())}, {_number(finite.max().item())}]" if finite.numel() else "no finite values"
    special = ""
    if t.is_floating_point():
        counts = {"nan": int(torch.isnan(t).sum()), "inf": int(torch.isinf(t).sum())}
        special = "".join(f", {n} {k}" for k, n in counts.items() if n)
    return f"{head}, {span}{special}"


def describe_call(call: Call) -> list[str]:
    lines = [f"  input {i}: {describe_value(v)}" for i, v in enumerate(call.args)]
    lines += [f"  kwarg {k}: {describe_value(v)}" for k, v in call.kwargs.items()]
    return lines


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def render_outcome(outcome: Outcome, settings: OpCaseSettings, op_name: str, reference_label: str) -> str:
    """The message of a failing outcome (a usage problem is its own one-line message)."""
    if outcome.problem is not None and outcome.call is None:
        return outcome.problem
    case, dtype = outcome.case, dtype_name(outcome.dtype)
    if outcome.problem is not None:
        head = [f"{op_name} [{dtype}]: {outcome.problem}", "  the inputs that showed it:"]
    elif case.fixed:
        origin = f", found by {case.found_by}" if case.found_by else ""
        judged = f" (judged by {case.settings_from})" if case.settings_from else ""
        head = [f"{op_name} [{dtype}]: the fixed inputs of {case.source} fail{origin}{judged}:"]
    else:
        shrunk = outcome.examples - outcome.searched
        how = f"then shrank it in {shrunk} more" if shrunk else "not shrunk"
        if outcome.shrink_stopped:
            how += f" ({outcome.shrink_stopped}: the smallest failing example found so far)"
        margin = "" if outcome.result is None else (
            f"; worst margin seen {outcome.worst_seen:.3g}x the limit, this example {outcome.result.severity:.3g}x")
        examples = f"{outcome.searched} example{'s' if outcome.searched != 1 else ''}"
        head = [f"{op_name} [{dtype}]: Hypothesis searched {examples} (profile {settings.profile.name}) to find a "
                f"failing one, {how}{margin}:"]
    lines = head + describe_call(outcome.call)
    result = outcome.result
    if result is not None and result.problem is not None:
        lines.append(f"the op failed: {result.problem}")
    if result is not None:
        lines += [f"{out.name}: {render_message(out.verdict)}" for out in result.failures]
        if any(out.verdict.status is Status.WARNING for out in result.failures):
            lines.append(STRICT_WARNINGS_NOTE)
    lines += [f"note: {note}" for note in outcome.notes]
    seed = f", output gradients from seed {case_seed(case)}" if case.backward else ""
    baseline = "" if settings.baseline is None else f", baseline {baseline_label(settings.baseline)}"
    golden = f"{reference_label} on {settings.golden.name}"
    lines.append(f"device {settings.device.name} vs golden: {golden}{baseline}{seed}")
    if outcome.regression is not None:
        where = _relative(outcome.regression, settings.root)
        lines.append(f"regression case written: {where} (rerun it alone: pytest {where})")
    return "\n".join(lines)
