"""What became of one dump case: its verdicts as a plain record, or why it was skipped or could not run.

checks/case_run.py makes them for a replayed call, checks/collectives/run.py for a collective; the plugin
turns them into a pass, a skip or a failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..dump import DumpCase, InputFingerprint
from ..precision import ErrorProfile, Status, Verdict


class CaseSkipped(Exception):
    """The case cannot be run here; the message says why (one of the documented reasons)."""

    def __init__(self, reason: str, message: str):
        self.reason = reason
        super().__init__(message)


class CaseInputError(Exception):
    """The dump itself is unusable for this case: the message names the file and the API."""


@dataclass(frozen=True)
class OutputVerdict:
    name: str  # "output.0", "grad.input_args[0]"
    verdict: Verdict
    profile: ErrorProfile | None = None  # the error distribution, for outputs that do not pass


@dataclass(frozen=True)
class CaseResult:
    case: DumpCase
    status: Status
    outputs: tuple[OutputVerdict, ...]
    notes: tuple[str, ...]
    seconds: float  # the whole case: inputs, every run, metrics
    op_seconds: float  # the op itself on device, golden and live baseline
    fingerprint: InputFingerprint | None = None
    # "none", "live", "recorded", "missing" from the recorded file; with a baseline dump "dump" (its
    # partner entry judged) or "unpaired" (judged on its own: the notes say why).
    baseline: str = "none"
    guesses: tuple[str, ...] = ()  # what the verdict rests on beyond the dump: rebuilt arguments, inferred autocast
    dtype_differences: tuple[str, ...] = ()  # outputs judged in another dtype than the dump recorded
    # The device's float32 math mode for the op ("ieee", "tf32", "hf32"), where the op is a matmul, conv
    # or rnn with a float32 result; None elsewhere.
    float32_mode: str | None = None
    error_data: dict[str, Any] | None = None  # where its tensors were saved, or why not (failing cases only)
    partner: CaseResult | None = None  # its partner in a baseline dump, judged on its own
    # With a baseline dump: each output's checks by which the device errs worse than the baseline dump
    # beyond the benchmark's limits ("output.0: max_scaled_err_ratio = 31 > limit 5"): where the dumps part.
    parted: tuple[str, ...] = ()
    # Why a case has no partner in a baseline dump: "absent" (no such entry there), "no-such-dump" (none of
    # its step and rank), "arguments-differ" (shapes or dtypes), "partner-not-judged" (the partner skips).
    unpaired: str = ""
