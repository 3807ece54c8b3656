"""The threshold table and a user's op rows: loading, user overrides, and lookups.

The threshold table is YAML data shipped in ``data/``; each op's built-in row (standard, level,
roundings) is its catalogue record's (ops/table/), and a user's rows, from YAML or Python mappings
layered with :meth:`Rules.merged`, go over it (ops.catalogue.op_rule joins the two). Nothing here
computes a metric or decides a verdict: the standards a table may name, and how each keys its limits,
are the registry's (precision/standards).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import torch
import yaml

from .metrics import Limit, MetricParams
from .standards import STANDARDS

LEVELS = ("L0", "L1", "L2")
MAX_ROUNDINGS = 64  # intermediate roundings: a fair kernel makes a handful; more is no precision standard

# Dunder spellings that msprobe records for Tensor operators, folded to the function they call.
_DUNDERS = {
    "add": "add", "sub": "sub", "mul": "mul", "truediv": "div", "div": "div", "floordiv": "floor_divide",
    "matmul": "matmul", "pow": "pow", "mod": "remainder", "neg": "neg", "abs": "abs", "pos": "positive",
    "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor", "invert": "bitwise_not",
    "lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift", "eq": "eq", "ne": "ne",
    "lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "getitem": "getitem", "setitem": "setitem",
}
# aten and torch_npu spellings of ops the table knows under their public name.
_ALIASES = {
    "native_layer_norm": "layer_norm", "native_group_norm": "group_norm",
    "native_batch_norm": "batch_norm", "_softmax": "softmax", "_log_softmax": "log_softmax",
    "_scaled_dot_product_flash_attention": "scaled_dot_product_attention",
    "_scaled_dot_product_efficient_attention": "scaled_dot_product_attention",
    "gelu_backward": "gelu", "rsub": "sub",
}
_API_KEY = re.compile(r"^(?P<api>.+?)\.(?P<index>\d+)\.(?P<direction>forward|backward)$")
_PREFIXES = ("Functional", "Tensor", "Torch", "Aten", "NPU", "VF", "Distributed", "MindSpeed")


@dataclass(frozen=True)
class OpName:
    """An op name as a user or msprobe wrote it, and the bare name the tables use."""

    qualified: str  # "Functional.gelu"
    bare: str  # "gelu"
    direction: str = "forward"


def parse_op_name(name: str) -> OpName:
    """'Tensor.__iadd__.3.backward' -> OpName('Tensor.__iadd__', 'add', 'backward')."""
    text = name.strip()
    direction = "forward"
    match = _API_KEY.match(text)
    if match:
        text, direction = match["api"], match["direction"]
    prefix, _, rest = text.partition(".")
    if prefix in _PREFIXES and rest:
        if prefix == "Aten":
            rest = rest.split(".")[0]  # drop the overload: Aten.add.Tensor -> add
        bare = rest
    else:
        bare = text
    return OpName(qualified=text, bare=_fold(bare.rsplit(".", 1)[-1]), direction=direction)


def _fold(name: str) -> str:
    if name.startswith("__") and name.endswith("__"):
        core = name[2:-2]
        if core in _DUNDERS:
            return _DUNDERS[core]
        if core[:1] in ("i", "r") and core[1:] in _DUNDERS:  # __iadd__, __radd__
            return _DUNDERS[core[1:]]
        return core
    if name.endswith("_") and not name.endswith("__") and len(name) > 1:
        name = name[:-1]  # in-place variant
    return _ALIASES.get(name, name)


@dataclass(frozen=True)
class OpRule:
    standard: str | None = None
    backward: str | None = None
    level: str = "L0"
    roundings: int = 0  # intermediate roundings to the output dtype a fair kernel makes
    limits: Mapping[str, Mapping[str, Limit]] = field(default_factory=dict)  # standard -> metric

    def standard_of(self, op: OpName | None) -> str | None:
        """The standard this row names for op's output: its backward one for a gradient."""
        return self.backward if op is not None and op.direction == "backward" else self.standard

    def overridden_by(self, new: "OpRule | None") -> "OpRule":
        """This row with what ``new`` sets on top: its standards, level, roundings and limits."""
        if new is None:
            return self
        limits = {k: dict(v) for k, v in self.limits.items()}
        for standard, metrics in new.limits.items():
            limits.setdefault(standard, {}).update(metrics)
        return OpRule(standard=new.standard or self.standard, backward=new.backward or self.backward,
                      level=new.level if new.level != "L0" else self.level, roundings=new.roundings or self.roundings,
                      limits=limits)


@dataclass(frozen=True)
class Rules:
    """The merged tables: per-dtype metric constants, standard limits, and a user's per-op rows, which go
    over each op's built-in row (its catalogue record's: ops.catalogue.op_rule reads both)."""

    dtypes: Mapping[str, MetricParams]
    benchmark_floors: Mapping[str, float]
    limits: Mapping[str, Mapping[str, Any]]  # standard -> raw limit table (per dtype or per level)
    ops: Mapping[str, OpRule]  # a user's rows by op name ("gelu" or "Functional.gelu"); none shipped
    backward_roundings: int = 0  # intermediate roundings every backward case may make
    dtype_grid_golden: frozenset[str] = frozenset()  # a user's ops whose golden runs in the input's dtype

    @classmethod
    def default(cls) -> "Rules":
        return _default_rules()

    @classmethod
    def from_mapping(cls, thresholds: Mapping) -> "Rules":
        """The thresholds table, with no op row of a user's (:meth:`merged` adds them)."""
        return cls(
            dtypes=MappingProxyType({k: _params(k, v) for k, v in thresholds["dtypes"].items()}),
            benchmark_floors=MappingProxyType(
                {k: float(v["benchmark_floor"]) for k, v in thresholds["dtypes"].items()}
            ),
            limits=MappingProxyType(dict(thresholds["standards"])),
            ops=MappingProxyType({}),
            backward_roundings=_roundings(thresholds.get("backward_roundings", 0), "backward_roundings"),
        )

    def merged(self, overrides: Mapping[str, Any] | str | Path) -> "Rules":
        """These rules with a user's overrides on top (a mapping, or a YAML file path).

        The override file has the shape of the shipped thresholds table (``dtypes:`` and ``standards:``
        as in thresholds.yaml), plus op rows: ``standards:`` lists of op names, ``levels:`` and ``ops:``
        (docs/standards.md, "Overriding the tables"). A file is checked by schemas.rules_file first;
        every error names it.
        """
        if isinstance(overrides, (str, Path)):
            path = Path(overrides)
            try:
                return self._merged(_load_yaml(path))
            except ValueError as exc:
                message = str(exc)
                raise ValueError(message if message.startswith(f"{path}: ") else f"{path}: {message}") from None
        return self._merged(overrides)

    def _merged(self, data: Mapping[str, Any]) -> "Rules":
        unknown = set(data) - {"dtypes", "standards", "levels", "ops", "backward_roundings", "dtype_grid_golden"}
        if unknown:
            raise ValueError(
                f"override keys {sorted(unknown)} are unknown: use dtypes, standards, levels, ops, backward_roundings "
                f"or dtype_grid_golden"
            )
        dtypes = dict(self.dtypes)
        floors = dict(self.benchmark_floors)
        for name, values in (data.get("dtypes") or {}).items():
            base = {**_params_dict(self.dtypes.get(name)), "benchmark_floor": floors.get(name, 0.0)}
            base.update(values)
            dtypes[name] = _params(name, base)
            floors[name] = float(base["benchmark_floor"])
        limits = dict(self.limits)
        standards_section = data.get("standards") or {}
        for name, value in standards_section.items():
            _check_standard(name, "override")
            if isinstance(value, Mapping):
                limits[name] = _deep_merge(limits.get(name, {}), value)
        ops = dict(self.ops)
        lists = {k: v for k, v in standards_section.items() if not isinstance(v, Mapping)}
        for name, rule in _op_rules({"standards": lists, "levels": data.get("levels") or {},
                                     "ops": data.get("ops") or {}}).items():
            ops[name] = rule if name not in ops else ops[name].overridden_by(rule)
        backward = data.get("backward_roundings", self.backward_roundings)
        return Rules(MappingProxyType(dtypes), MappingProxyType(floors), MappingProxyType(limits),
                     MappingProxyType(ops), _roundings(backward, "backward_roundings"),
                     self.dtype_grid_golden | frozenset(data.get("dtype_grid_golden") or ()))

    def with_op(self, name: str, *, standard: str | None = None, backward: str | None = None,
                level: str | None = None, roundings: int | None = None,
                limits: Mapping[str, Mapping[str, Any]] | None = None) -> "Rules":
        """These rules with one op's rule set from Python."""
        entry = {k: v for k, v in dict(standard=standard, backward=backward, level=level,
                                       roundings=roundings, limits=limits).items() if v is not None}
        return self.merged({"ops": {name: entry}})

    def with_row(self, name: str, row: OpRule, *, standard: str | None = None,
                 limits: Mapping[str, Mapping[str, Any]] | None = None, roundings: int | None = None) -> "Rules":
        """These rules with op ``name`` judged by ``row`` (a built-in twin's, for a custom op's ``like``:
        ops.catalogue.judged_like), then by the given standard, limits and roundings."""
        merged = {kind: dict(metrics) for kind, metrics in row.limits.items()}
        for kind, metrics in (limits or {}).items():
            merged.setdefault(kind, {}).update(metrics)
        entry = {"standard": standard or row.standard, "backward": row.backward, "level": row.level,
                 "limits": merged, "roundings": row.roundings if roundings is None else roundings}
        return self.merged({"ops": {name: {k: v for k, v in entry.items() if v is not None}}})

    # Lookups -------------------------------------------------------------------------------
    def params(self, dtype: torch.dtype) -> MetricParams:
        name = str(dtype).removeprefix("torch.")
        return self.dtypes.get(name) or self.dtypes["float32"]

    def benchmark_floor(self, dtype: torch.dtype) -> float:
        return self.benchmark_floors.get(str(dtype).removeprefix("torch."), self.benchmark_floors["float32"])

    def roundings(self, op: OpName | None, row: OpRule) -> int:
        """Intermediate roundings to the output dtype that a fair implementation of op makes, its row says."""
        return max(row.roundings, self.backward_roundings) if op is not None and op.direction == "backward" \
            else row.roundings

    def override(self, op: OpName | None) -> OpRule | None:
        """The user's row for op (its qualified name's, else its bare name's), or None."""
        if op is None:
            return None
        return self.ops.get(op.qualified) or self.ops.get(op.bare)

    def limits_for(self, standard: str, dtype: torch.dtype, rule: OpRule) -> dict[str, Limit]:
        """The standard's limits for one output: its flat limits, under them those of the output's
        dtype (or ``default``), or of the op's level where the standard keys them by level (the
        benchmark), then the op's own."""
        table = self.limits.get(standard, {})
        merged = {metric: value for metric, value in table.items() if not is_limit_table(value)}
        judged_by = STANDARDS.get(standard)
        if judged_by is not None and judged_by.limits_by_level:
            merged.update(table.get(rule.level, table.get("L0", {})))
        else:
            merged.update(table.get("default", {}))
            merged.update(table.get(str(dtype).removeprefix("torch."), {}))
        merged = {metric: _limit(value, f"{standard}.{metric}") for metric, value in merged.items()}
        merged.update(rule.limits.get(standard, {}))
        return merged


def is_limit_table(value: Any) -> bool:
    """A {metric: limit} table (per dtype or level), not one limit written as {error: x, warning: y}."""
    return isinstance(value, Mapping) and not {"error", "warning"} & set(value)


def metric_names() -> Mapping[str, tuple[str, ...]]:
    """The metrics each standard judges, as it names them (the keys of its limits table), sorted."""
    return MappingProxyType({s.name: tuple(sorted(s.metrics)) for s in STANDARDS.listed})


def _check_standard(name: str, where: str) -> None:
    if name not in STANDARDS.names:
        raise ValueError(f"standard {name!r} in {where} is unknown: use one of {', '.join(STANDARDS.names)}")


def _limit(value: Any, where: str) -> Limit:
    if isinstance(value, Limit):
        return value
    if isinstance(value, Mapping):
        return Limit(float(value["error"]), None if value.get("warning") is None else float(value["warning"]))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Limit(float(value))
    raise ValueError(f"limit {where} = {value!r} is not a number: write a number or {{error: x, warning: y}}")


def _params_dict(params: MetricParams | None) -> dict:
    return {} if params is None else dict(params.__dict__)


def _params(name: str, values: Mapping) -> MetricParams:
    keys = ("rtol", "ulp_threshold", "thousandth_rtol")
    unknown = sorted(set(values) - {*keys, "benchmark_floor"})
    if unknown:  # small_value and small_value_atol follow the dtype's range now (element_bound.small_value_rule)
        raise ValueError(f"dtypes.{name}: {', '.join(unknown)} is not a constant of a dtype: use "
                         f"{', '.join(keys)} or benchmark_floor")
    missing = [k for k in keys if k not in values]
    if missing:
        raise ValueError(f"dtypes.{name}: lacks {', '.join(missing)}: give every constant of a dtype the shipped "
                         f"table does not have")
    return MetricParams(**{k: float(values[k]) for k in keys})


def _op_rules(ops: Mapping) -> dict[str, OpRule]:
    rules: dict[str, dict] = {}
    for standard, names in (ops.get("standards") or {}).items():
        _check_standard(standard, "the op table")
        for name in names:
            rules.setdefault(name, {})["standard"] = standard
    for level, names in (ops.get("levels") or {}).items():
        if level not in LEVELS:
            raise ValueError(f"level {level!r} in the op table is unknown: use one of {', '.join(LEVELS)}")
        for name in names:
            rules.setdefault(name, {})["level"] = level
    for name, entry in (ops.get("ops") or {}).items():
        rules.setdefault(name, {}).update(entry or {})
    return {name: op_row(name, entry) for name, entry in rules.items()}


def op_row(name: str, entry: Mapping) -> OpRule:
    """One op's row from its entry (standard, backward, level, roundings, limits), checked: errors name the op."""
    unknown = set(entry) - {"standard", "backward", "level", "roundings", "limits"}
    if unknown:
        raise ValueError(
            f"op {name!r} has unknown keys {sorted(unknown)}: use standard, backward, level, roundings or limits"
        )
    for key in ("standard", "backward"):
        if entry.get(key) is not None:
            _check_standard(entry[key], f"op {name!r}")
    level = entry.get("level", "L0")
    if level not in LEVELS:
        raise ValueError(f"op {name!r} has level {level!r}: use one of {', '.join(LEVELS)}")
    limits = {}
    for standard, metrics in (entry.get("limits") or {}).items():
        _check_standard(standard, f"op {name!r} limits")
        limits[standard] = {m: _limit(v, f"{name}.{standard}.{m}") for m, v in metrics.items()}
    roundings = _roundings(entry.get("roundings", 0), f"op {name!r} roundings")
    return OpRule(entry.get("standard"), entry.get("backward"), level, roundings, limits)


def _roundings(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_ROUNDINGS:
        raise ValueError(f"{where} = {value!r} is not a count: use a whole number from 0 to {MAX_ROUNDINGS}")
    return value


def _deep_merge(base: Mapping, extra: Mapping) -> dict:
    out = dict(base)
    for key, value in extra.items():
        if is_limit_table(value) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def schema_vocabulary():
    """The names a rules file may use, for its schema (rules_schema.py, which loads pydantic)."""
    from .rules_schema import Vocabulary

    listed = STANDARDS.listed
    return Vocabulary(STANDARDS.names, LEVELS, MAX_ROUNDINGS, tuple(metric_names().items()),
                      by_level=tuple(s.name for s in listed if s.limits_by_level),
                      case_standards=tuple(s.name for s in listed if not s.needs_baseline))


def _load_yaml(path: Path) -> Mapping:
    from ..config import ConfigError, load_yaml, validate
    from .rules_schema import rules_file

    try:
        data = load_yaml(path, "rules file")
        validate(rules_file(schema_vocabulary()), data, path)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    return data


@lru_cache(maxsize=1)
def _default_rules() -> Rules:
    """The shipped thresholds, and no op row of a user's: each op's own is its catalogue record's."""
    data = resources.files("pytest_npuprecision") / "data"
    return Rules.from_mapping(yaml.safe_load((data / "thresholds.yaml").read_text(encoding="utf-8")))
