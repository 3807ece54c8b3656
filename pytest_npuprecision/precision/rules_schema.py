"""The schema of a rules file (--npu-precision-rules) and of an op case's ``limits:``.

The names it checks against (standards, levels, each standard's metrics) come from rules.py as a
Vocabulary, so that the tables stay the one source of them. Imported only when a file is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any, Dict, List, Optional, Union

from pydantic import BeforeValidator, Discriminator, Tag, create_model

from ..config import FloatDtype, LimitNumber, Name, Record, count, float_dtype_names, list_of, mapping, one_of


@dataclass(frozen=True)
class Vocabulary:
    """The names a rules file may use."""

    standards: tuple[str, ...]
    levels: tuple[str, ...]
    max_roundings: int
    metrics: tuple[tuple[str, tuple[str, ...]], ...]  # (standard, the metrics it judges)
    by_level: tuple[str, ...] = ()  # the standards whose limits are per op level, not per dtype
    case_standards: tuple[str, ...] = ()  # the standards an op case may name (none that needs a baseline)


class LimitPair(Record):
    what = "a number or {error: x, warning: y}"
    error: LimitNumber
    warning: Optional[LimitNumber] = None


def _limit_branch(value: Any) -> str:
    return "(pair)" if isinstance(value, dict) else "(number)"


Limit = Annotated[Union[Annotated[LimitNumber, Tag("(number)")], Annotated[LimitPair, Tag("(pair)")]],
                  Discriminator(_limit_branch)]


class DtypeConstants(Record):
    what = "a mapping of the dtype's constants (rtol, ulp_threshold, thousandth_rtol, benchmark_floor)"
    unknown = "is not a constant of a dtype (the small-value rule follows the dtype's range)"
    rtol: LimitNumber = None
    ulp_threshold: LimitNumber = None
    thousandth_rtol: LimitNumber = None
    benchmark_floor: LimitNumber = None


def _metric_limits(words: Vocabulary, standard: str) -> type[Record]:
    """{metric: limit} for the metrics one standard judges."""
    metrics = dict(words.metrics)[standard]
    model = create_model(f"{standard}_limits", __base__=Record, **{m: (Limit, None) for m in metrics})
    model.what = f"a mapping of {standard}'s metrics to limits"
    model.unknown = f"is not a metric of {standard}"
    return model


def _standard_table(words: Vocabulary, standard: str) -> type[Record]:
    """A standard's section: its metrics' limits, and tables of them by dtype (by level for benchmark)."""
    metrics = _metric_limits(words, standard)
    by_level = standard in words.by_level
    groups = words.levels if by_level else (*float_dtype_names(), "default")
    fields = {m: (Limit, None) for m in metrics.model_fields}
    fields.update({g: (metrics, None) for g in groups})
    model = create_model(f"{standard}_table", __base__=Record, **fields)
    model.what = f"a list of op names or a mapping of {standard}'s limits"
    by = "a level (L0, L1, L2)" if by_level else "a float dtype or default"
    model.keys_hint = f"a metric of {standard} ({', '.join(metrics.model_fields)}) or {by}"
    return model


def _section_branch(value: Any) -> str | None:
    return "(names)" if isinstance(value, list) else "(table)" if isinstance(value, dict) else None


def _section(words: Vocabulary, standard: str) -> Any:
    # A list of op names (a standard's ops) or limits (as in thresholds.yaml).
    return Annotated[Union[Annotated[List[Name], Tag("(names)")], Annotated[_standard_table(words, standard), Tag("(table)")]],
                     Discriminator(_section_branch, custom_error_type="expected",
                                   custom_error_message="expected a list of op names or a mapping of limits")]


@lru_cache(maxsize=4)
def _rules_models(words: Vocabulary) -> tuple[type[Record], type[Record]]:
    StandardName = Annotated[Any, BeforeValidator(one_of("a standard", words.standards))]
    LevelName = Annotated[Any, BeforeValidator(one_of("a level", words.levels))]
    Roundings = Annotated[Any, BeforeValidator(count(words.max_roundings))]
    op_limits = create_model("op_limits", __base__=Record,
                             **{s: (_metric_limits(words, s), None) for s in words.standards})
    op_limits.what = "a mapping of standards to {metric: limit}"
    op_entry = create_model("op_rule", __base__=Record, standard=(StandardName, None),
                            backward=(StandardName, None), level=(LevelName, None), roundings=(Roundings, None),
                            limits=(op_limits, None))
    op_entry.what = "a mapping of the op's rule (standard, backward, level, roundings, limits)"
    standards = create_model("standards", __base__=Record, **{s: (_section(words, s), None) for s in words.standards})
    standards.what = "a mapping of standards to op lists or limits"
    standards.keys_hint = ", ".join(words.standards)
    rules = create_model(
        "rules", __base__=Record,
        dtypes=(Optional[Annotated[Dict[FloatDtype, DtypeConstants], mapping("dtypes to their constants")]], None),
        standards=(Optional[standards], None),
        levels=(Optional[Annotated[Dict[LevelName, Annotated[List[Name], list_of("op names")]],
                                   mapping("levels to op lists")]], None),
        ops=(Optional[Annotated[Dict[Name, Optional[op_entry]], mapping("op names to their rules")]], None),
        backward_roundings=(Roundings, None),
        dtype_grid_golden=(Optional[Annotated[List[Name], list_of("op names")]], None))
    rules.what = "a mapping with dtypes, standards, levels, ops, backward_roundings or dtype_grid_golden"
    return rules, op_entry


def rules_file(words: Vocabulary) -> type[Record]:
    """--npu-precision-rules: the shape of thresholds.yaml plus op rows (standards, levels, ops), every section
    optional."""
    return _rules_models(words)[0]


@lru_cache(maxsize=4)
def case_limits(words: Vocabulary) -> type[Record]:
    """An op case's ``limits:``: {standard: {metric: limit}}, for the standards a case can have."""
    standards = words.case_standards
    model = create_model("case_limits", __base__=Record, **{s: (_metric_limits(words, s), None) for s in standards})
    model.what = "a mapping of standards to {metric: limit}"
    model.unknown, model.keys_hint = "is not a standard op cases use", f"one of {', '.join(standards)}"
    return model
