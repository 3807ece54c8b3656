"""The schemas of the configuration files, on one validation library (pydantic v2).

Each model says what a file may hold; config_files.validate turns a mismatch into
``FILE: key.path: problem``. Leaf checks raise one of three error kinds that the formatter
knows: ``expected`` (the wrong kind of value), ``unknown_name`` (a name outside a fixed list) and
``unknown_key`` (a mapping key the model lacks). The rules model only checks (rules.py builds its
tables from the data); the known-failures and baseline models' records are what their modules read.

Imported only by the functions that load a file, so that importing the plugin never imports pydantic.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Annotated, Any, Callable, ClassVar, Dict, List, Optional, Union

import torch
from pydantic import (BaseModel, BeforeValidator, ConfigDict, Discriminator, Tag, create_model,
                      model_validator)
from pydantic_core import PydanticCustomError

from .dtypes import parse_dtype
from .known_failures import STATUSES
from .metrics import Metrics
from .rules import LEVELS, MAX_ROUNDINGS, STANDARD_NAMES, metric_names
from .torch_compat import LATER_FLOAT_DTYPES

# The branches of a tagged union appear in pydantic's error locations; the formatter drops them.
BRANCH_TAGS = frozenset({"(number)", "(pair)", "(names)", "(table)", "(limit)"})


def expected(what: str) -> PydanticCustomError:
    """The value is of the wrong kind; the formatter appends ``, got VALUE``."""
    return PydanticCustomError("expected", "expected {what}", {"what": what})


def _unknown_name(what: str, choices: tuple[str, ...] | str) -> PydanticCustomError:
    shown = choices if isinstance(choices, str) else ", ".join(choices)
    return PydanticCustomError("unknown_name", "is not {what}: use {choices}", {"what": what, "choices": shown})


def _float(value: Any) -> float | None:
    """The value as a float, or None when it is no number (bools, strings, ints past float's range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def _limit_number(value: Any) -> float:
    number = _float(value)
    if number is None or not math.isfinite(number) or number < 0:
        raise expected("a finite number >= 0")
    return number


def _any_number(value: Any) -> float:
    """A number recorded by a run: NaN and inf are values a metric can take."""
    number = _float(value)
    if number is None:
        raise expected("a number")
    return number


def _count(most: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
            raise expected(f"a whole number from 0 to {most}")
        return value
    return check


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise expected("a string")
    return value


def _name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise expected("a name")
    return value


def _one_of(what: str, choices: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in choices:
            raise _unknown_name(what, choices)
        return value
    return check


def _mapping(what: str) -> BeforeValidator:
    def check(value: Any) -> Any:
        if not isinstance(value, dict):
            raise expected(f"a mapping of {what}")
        return value
    return BeforeValidator(check)


def _list(what: str) -> BeforeValidator:
    def check(value: Any) -> Any:
        if not isinstance(value, list):
            raise expected(f"a list of {what}")
        return value
    return BeforeValidator(check)


@lru_cache(maxsize=None)
def _float_dtype_names() -> tuple[str, ...]:
    """This torch's float dtypes, and those of later torches: a table's row for a dtype this torch
    lacks loads, and is never used."""
    names = {str(v).removeprefix("torch.") for v in vars(torch).values() if isinstance(v, torch.dtype)}
    return tuple(sorted({n for n in names if getattr(torch, n).is_floating_point} | set(LATER_FLOAT_DTYPES)))


def _float_dtype(value: Any) -> str:
    if isinstance(value, str) and value in _float_dtype_names():
        return value
    try:
        canonical = str(parse_dtype(value)).removeprefix("torch.")
    except (TypeError, ValueError) as exc:
        hint = str(exc).rsplit(": ", 1)[-1]
        raise _unknown_name("a float dtype", hint.removeprefix("use ")) from None
    raise _unknown_name("a float dtype's name", canonical)


Text = Annotated[Any, BeforeValidator(_text)]
Name = Annotated[Any, BeforeValidator(_name)]
Number = Annotated[Any, BeforeValidator(_any_number)]
LimitNumber = Annotated[Any, BeforeValidator(_limit_number)]
Roundings = Annotated[Any, BeforeValidator(_count(MAX_ROUNDINGS))]
StandardName = Annotated[Any, BeforeValidator(_one_of("a standard", STANDARD_NAMES))]
LevelName = Annotated[Any, BeforeValidator(_one_of("a level", LEVELS))]
FloatDtype = Annotated[Any, BeforeValidator(_float_dtype)]


class Record(BaseModel):
    """A mapping with known keys: anything else is refused with the keys it may have.

    Fields default to None for "not given"; a null written in the file is checked like any other
    value (and refused), since the code that reads the data treats a given key as a value.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    what: ClassVar[str] = "a mapping"
    keys_hint: ClassVar[str] = ""  # what an unknown key should be instead: the field names by default
    unknown: ClassVar[str] = "is unknown"

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise expected(cls.what)
        for key in value:
            if key not in cls.model_fields:
                raise PydanticCustomError("unknown_key", "{unknown}: use {allowed}",
                                          {"key": str(key), "unknown": cls.unknown,
                                           "allowed": cls.keys_hint or ", ".join(cls.model_fields)})
        return value


# ---------------------------------------------------------------- the rules file (--npu-precision-rules)


class LimitPair(Record):
    what = "a number or {error: x, warning: y}"
    error: LimitNumber
    warning: Optional[LimitNumber] = None


def _limit_branch(value: Any) -> str:
    return "(pair)" if isinstance(value, dict) else "(number)"


Limit = Annotated[Union[Annotated[LimitNumber, Tag("(number)")], Annotated[LimitPair, Tag("(pair)")]],
                  Discriminator(_limit_branch)]


class DtypeConstants(Record):
    what = ("a mapping of the dtype's constants (small_value, small_value_atol, rtol, ulp_threshold, "
            "thousandth_rtol, benchmark_floor)")
    small_value: LimitNumber = None
    small_value_atol: LimitNumber = None
    rtol: LimitNumber = None
    ulp_threshold: LimitNumber = None
    thousandth_rtol: LimitNumber = None
    benchmark_floor: LimitNumber = None


def _metric_limits(standard: str) -> type[Record]:
    """{metric: limit} for the metrics one standard judges."""
    metrics = metric_names()[standard]
    model = create_model(f"{standard}_limits", __base__=Record, **{m: (Limit, None) for m in metrics})
    model.what = f"a mapping of {standard}'s metrics to limits"
    model.unknown = f"is not a metric of {standard}"
    return model


def _standard_table(standard: str) -> type[Record]:
    """A standard's section: its metrics' limits, and tables of them by dtype (by level for benchmark)."""
    metrics = _metric_limits(standard)
    groups = LEVELS if standard == "benchmark" else (*_float_dtype_names(), "default")
    fields = {m: (Limit, None) for m in metrics.model_fields}
    fields.update({g: (metrics, None) for g in groups})
    model = create_model(f"{standard}_table", __base__=Record, **fields)
    model.what = f"a list of op names or a mapping of {standard}'s limits"
    by = "a level (L0, L1, L2)" if standard == "benchmark" else "a float dtype or default"
    model.keys_hint = f"a metric of {standard} ({', '.join(metrics.model_fields)}) or {by}"
    return model


def _section_branch(value: Any) -> str | None:
    return "(names)" if isinstance(value, list) else "(table)" if isinstance(value, dict) else None


def _section(standard: str) -> Any:
    # A list of op names (as in ops.yaml) or limits (as in thresholds.yaml).
    return Annotated[Union[Annotated[List[Name], Tag("(names)")], Annotated[_standard_table(standard), Tag("(table)")]],
                     Discriminator(_section_branch, custom_error_type="expected",
                                   custom_error_message="expected a list of op names or a mapping of limits")]


@lru_cache(maxsize=1)
def _rules_models() -> tuple[type[Record], type[Record]]:
    op_limits = create_model("op_limits", __base__=Record,
                             **{s: (_metric_limits(s), None) for s in STANDARD_NAMES})
    op_limits.what = "a mapping of standards to {metric: limit}"
    op_entry = create_model("op_rule", __base__=Record, standard=(StandardName, None),
                            backward=(StandardName, None), level=(LevelName, None), roundings=(Roundings, None),
                            limits=(op_limits, None))
    op_entry.what = "a mapping of the op's rule (standard, backward, level, roundings, limits)"
    standards = create_model("standards", __base__=Record, **{s: (_section(s), None) for s in STANDARD_NAMES})
    standards.what = "a mapping of standards to op lists or limits"
    standards.keys_hint = ", ".join(STANDARD_NAMES)
    rules = create_model(
        "rules", __base__=Record,
        dtypes=(Optional[Annotated[Dict[FloatDtype, DtypeConstants], _mapping("dtypes to their constants")]], None),
        standards=(Optional[standards], None),
        levels=(Optional[Annotated[Dict[LevelName, Annotated[List[Name], _list("op names")]],
                                   _mapping("levels to op lists")]], None),
        ops=(Optional[Annotated[Dict[Name, Optional[op_entry]], _mapping("op names to their rules")]], None),
        backward_roundings=(Roundings, None),
        dtype_grid_golden=(Optional[Annotated[List[Name], _list("op names")]], None))
    rules.what = "a mapping with dtypes, standards, levels, ops, backward_roundings or dtype_grid_golden"
    return rules, op_entry


def rules_file() -> type[Record]:
    """--npu-precision-rules: the shape of thresholds.yaml and ops.yaml, every section optional."""
    return _rules_models()[0]


@lru_cache(maxsize=1)
def case_limits() -> type[Record]:
    """An op case's ``limits:``: {standard: {metric: limit}}, for the standards a case can have."""
    standards = [s for s in STANDARD_NAMES if s != "benchmark"]
    model = create_model("case_limits", __base__=Record, **{s: (_metric_limits(s), None) for s in standards})
    model.what = "a mapping of standards to {metric: limit}"
    model.unknown, model.keys_hint = "is not a standard op cases use", f"one of {', '.join(standards)}"
    return model


# ---------------------------------------------------------------- known failures (--npu-precision-known-failures)


class AcceptedCheckEntry(Record):
    what = "a mapping with metric, value and limit"
    metric: Text
    value: Number
    limit: Number


class KnownFailureEntry(Record):
    what = "a mapping with reason, status, accepted and outputs"
    reason: Text
    status: Annotated[Any, BeforeValidator(_one_of("a status a known failure has", STATUSES))]
    accepted: Text
    outputs: Annotated[Dict[Text, Annotated[List[AcceptedCheckEntry], _list("failing checks")]],
                       _mapping("outputs to their failing checks")] = {}
    message: Text = ""


# case id -> the failure accepted for it.
KnownFailuresFile = Annotated[Dict[Text, KnownFailureEntry], _mapping("case ids to accepted failures")]


# ---------------------------------------------------------------- recorded baselines (--npu-precision-baseline)


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
    shape: Annotated[List[Annotated[Any, BeforeValidator(_count(2**63 - 1))]], _list("sizes")]
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
    inputs: Annotated[Dict[Text, Text], _mapping("input paths to their fingerprints")] = {}


class RecordedCaseEntry(Record):
    what = "a mapping with fingerprint and outputs"
    fingerprint: FingerprintEntry
    outputs: Annotated[Dict[Text, RecordedOutputEntry], _mapping("output names to their metrics")]


class RecordedFile(Record):
    """What a file written by --npu-precision-record holds (format and version are checked first)."""

    what = "a mapping with format, version, device, golden and cases"
    format: Text
    version: Any
    device: Annotated[Dict[Text, Any], _mapping("the recording device's facts")]
    golden: Text = "?"
    cases: Annotated[Dict[Text, RecordedCaseEntry], _mapping("case ids to their recorded outputs")]
