"""The schemas of the configuration files, on one validation library (pydantic v2).

Each model says what a file may hold; config_files.validate turns a mismatch into
``FILE: key.path: problem``. The rules model only checks (rules.py builds its tables from the data);
the known-failures model's records are what known_failures.py reads.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Dict, List, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, StrictStr

StandardName = Literal["binary", "absolute", "ulp", "thousandth", "error_bound", "benchmark"]
Level = Literal["L0", "L1", "L2"]


def _finite_non_negative(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError("expected a finite number >= 0")
    return float(value)


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("expected a number")
    return float(value)


def _section(value: Any) -> Any:
    if not isinstance(value, (list, dict)):
        raise ValueError("expected a list of op names or a mapping of limits")
    return value


Number = Annotated[Any, AfterValidator(_finite_non_negative)]
Count = Annotated[StrictInt, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LimitPair(_Strict):
    error: Number
    warning: Optional[Number] = None


Limit = Union[Number, LimitPair]
MetricLimits = Dict[StrictStr, Limit]


class DtypeEntry(_Strict):
    small_value: Optional[Number] = None
    small_value_atol: Optional[Number] = None
    rtol: Optional[Number] = None
    ulp_threshold: Optional[Number] = None
    thousandth_rtol: Optional[Number] = None
    benchmark_floor: Optional[Number] = None


class OpEntry(_Strict):
    standard: Optional[StandardName] = None
    backward: Optional[StandardName] = None
    level: Optional[Level] = None
    roundings: Optional[Count] = None
    limits: Optional[Dict[StandardName, MetricLimits]] = None


# A standard's section: a list of op names (as in ops.yaml) or limits, flat or by dtype or level.
StandardSection = Annotated[Union[List[StrictStr], Dict[StrictStr, Union[Limit, MetricLimits]]],
                            BeforeValidator(_section)]


class RulesFile(_Strict):
    """--npu-precision-rules: the shape of thresholds.yaml and ops.yaml, every section optional."""

    dtypes: Optional[Dict[StrictStr, DtypeEntry]] = None
    standards: Optional[Dict[StandardName, StandardSection]] = None
    levels: Optional[Dict[Level, List[StrictStr]]] = None
    ops: Optional[Dict[StrictStr, Optional[OpEntry]]] = None
    backward_roundings: Optional[Count] = None


class AcceptedCheckEntry(_Strict):
    metric: StrictStr
    value: Annotated[Any, AfterValidator(_number)]
    limit: Annotated[Any, AfterValidator(_number)]


class KnownFailureEntry(_Strict):
    reason: StrictStr
    status: Literal["error", "warning", "input-error"]
    accepted: StrictStr
    outputs: Dict[StrictStr, List[AcceptedCheckEntry]] = {}
    message: StrictStr = ""


# --npu-precision-known-failures: case id -> the failure accepted for it.
KnownFailuresFile = Dict[StrictStr, KnownFailureEntry]
