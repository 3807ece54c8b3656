"""The schema of a recorded baseline file (--npu-precision-baseline FILE), imported only when one is read."""

from __future__ import annotations

from typing import Annotated, Any, Dict, List

from pydantic import BeforeValidator, model_validator
from pydantic_core import PydanticCustomError

from ..config import Record, Text, count, expected, list_of, mapping
from ..precision import Metrics


def _metrics(value: Any) -> Metrics:
    if not isinstance(value, dict):
        raise expected("a mapping of metrics")
    try:
        return Metrics.from_dict(value)
    except (TypeError, ValueError) as exc:
        raise PydanticCustomError("problem", "{problem}", {"problem": str(exc).removeprefix("metrics ")}) from None


class RecordedOutputEntry(Record):
    what = "a mapping with dtype, shape and metrics"
    dtype: Text
    shape: Annotated[List[Annotated[Any, BeforeValidator(count(2**63 - 1))]], list_of("sizes")]
    metrics: Annotated[Any, BeforeValidator(_metrics)]

    @model_validator(mode="after")
    def _agrees(self) -> "RecordedOutputEntry":
        # judge() would refuse the metrics later, as a harness error: refuse the file now instead
        if (self.metrics.dtype, tuple(self.metrics.shape)) != (self.dtype, tuple(self.shape)):
            raise PydanticCustomError("problem", "is {ours} but its metrics are {theirs}",
                                      {"ours": f"{self.dtype}{list(self.shape)}",
                                       "theirs": f"{self.metrics.dtype}{list(self.metrics.shape)}"})
        return self


class FingerprintEntry(Record):
    what = "a mapping with digest and inputs"
    digest: Text
    inputs: Annotated[Dict[Text, Text], mapping("input paths to their fingerprints")] = {}


class RecordedCaseEntry(Record):
    what = "a mapping with fingerprint and outputs"
    fingerprint: FingerprintEntry
    outputs: Annotated[Dict[Text, RecordedOutputEntry], mapping("output names to their metrics")]


class RecordedFile(Record):
    """What a file written by --npu-precision-record holds (format and version are checked first)."""

    what = "a mapping with format, version, device, golden and cases"
    format: Text
    version: Any
    device: Annotated[Dict[Text, Any], mapping("the recording device's facts")]
    golden: Text = "?"
    cases: Annotated[Dict[Text, RecordedCaseEntry], mapping("case ids to their recorded outputs")]
