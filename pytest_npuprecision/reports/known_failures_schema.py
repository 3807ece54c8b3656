"""The schema of a known-failures file (--npu-precision-known-failures), imported only when one is read."""

from __future__ import annotations

from typing import Annotated, Any, Dict, List

from pydantic import BeforeValidator

from ..config import Number, Record, Text, list_of, mapping, one_of
from .summary import ACCEPTABLE


class AcceptedCheckEntry(Record):
    what = "a mapping with metric, value and limit"
    metric: Text
    value: Number
    limit: Number


class KnownFailureEntry(Record):
    what = "a mapping with reason, status, accepted and outputs"
    reason: Text
    status: Annotated[Any, BeforeValidator(one_of("a status a known failure has", ACCEPTABLE))]
    accepted: Text
    outputs: Annotated[Dict[Text, Annotated[List[AcceptedCheckEntry], list_of("failing checks")]],
                       mapping("outputs to their failing checks")] = {}
    message: Text = ""


# case id -> the failure accepted for it.
KnownFailuresFile = Annotated[Dict[Text, KnownFailureEntry], mapping("case ids to accepted failures")]
