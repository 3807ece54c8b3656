"""The op catalogue: everything the harness knows about one op, in one frozen record.

Built once, on first use, from the built-in table (ops/table/: one record per op, its standard,
level, roundings, accumulation rule, traits, randomness and why it skips), with each torch_npu op's
float64 reference (ops.fused) joined by name and every op torch tags ``nondeterministic_seeded``
marked random. It is validated as it is built: a name declared twice, a reference with no record, a
standard and a rule that contradict each other, or a reducing op with no reduction is a
``CatalogueError`` that names the op. A user's rules file goes over each record's row at run time
(:func:`op_rule`). Every other layer asks the catalogue (:func:`op_record`); docs/generated/ops.md is
printed from it (docs/generate.py).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..precision import OpName, OpRule, Rules, STANDARDS, parse_op_name
from .fused import FUSED_OPS, FusedOp
from .records import UNKNOWN, OpRecord
from .randomness import ALWAYS, SEEDED_ATEN_OPS, folded_name, seeded_aten_ops
from .table import builtin


class CatalogueError(ValueError):
    """The built-in table contradicts itself about one op; the message names it and the fix."""


class Catalogue:
    """Every op's record by bare name, and lookups by the names dumps and users write."""

    def __init__(self, records: Mapping[str, OpRecord]):
        self.records = MappingProxyType(dict(records))
        self._by_reference = {id(r.reference.reference): r for r in records.values() if r.reference is not None}

    def __iter__(self):
        return iter(self.records.values())

    def __len__(self) -> int:
        return len(self.records)

    def get(self, name: str | None) -> OpRecord:
        """The record of bare name ``name`` (``ops.base_name`` of an API name), or UNKNOWN."""
        return self.records.get(name or "", UNKNOWN)

    def of_reference(self, fn: Callable[..., Any]) -> OpRecord | None:
        """The record whose float64 reference ``fn`` is (a torch_npu op's), or None."""
        return self._by_reference.get(id(fn))


def build(records: Iterable[OpRecord], fused: Mapping[str, FusedOp]) -> Catalogue:
    """The catalogue of ``records``, each with its reference from ``fused``, validated: raises
    CatalogueError naming the first op declared twice or whose record contradicts itself."""
    declared: dict[str, OpRecord] = {}
    for record in records:
        if record.name in declared:
            raise CatalogueError(f"op {record.name!r} has two records in the op table (ops/table/): keep one")
        declared[record.name] = record
    orphans = sorted(set(fused) - set(declared))
    if orphans:
        raise CatalogueError(f"torch_npu op {orphans[0]!r} has a reference but no record: add one to "
                             f"ops/table/torch_npu.py with the standard that judges it")
    tagged = {folded_name(name) for name in SEEDED_ATEN_OPS}  # always random, unless a record says when
    for name in sorted(tagged - set(declared)):
        declared[name] = OpRecord(name, OpRule(), random=ALWAYS)
    built = {}
    for name, record in sorted(declared.items()):
        twin = parse_op_name(name).bare  # native_layer_norm is judged by layer_norm's row, as dumps name it
        if twin != name and twin in declared:
            record = dataclasses.replace(record, table=declared[twin].table)
        if record.random is None and name in tagged:
            record = dataclasses.replace(record, random=ALWAYS)
        record = dataclasses.replace(record, reference=fused.get(name))
        _validate(record)
        built[name] = record
    return Catalogue(built)


def _validate(record: OpRecord) -> None:
    name, rule, standard = record.name, record.accumulation, record.standard
    judged_by = STANDARDS.get(standard)  # None where the record names no standard
    one_rounding = judged_by is not None and judged_by.one_rounding
    grows = judged_by is not None and judged_by.scales_with_accumulation  # with the reduction
    if one_rounding and record.reduces:
        raise CatalogueError(f"op {name!r} is judged by {standard}, one rounding per element, yet its accumulation "
                             f"rule sums many terms: judge it by error_bound, or drop the rule")
    never_judged = record.random is not None and record.random.every_call  # each case of it skips as random-op
    if grows and rule is None and not record.elementwise and not never_judged:
        raise CatalogueError(f"op {name!r} is judged by {standard}, whose bound grows with the reduction, yet no "
                             f"accumulation rule says what it sums: give its record a rule (bounds.accumulation), "
                             f"or mark it elementwise=True if it sums nothing")
    if record.elementwise and record.reduces:
        raise CatalogueError(f"op {name!r} is marked elementwise and has a reducing accumulation rule: keep one")
    if record.plain_sum and rule is None:
        raise CatalogueError(f"op {name!r} is a plain sum with no accumulation rule: the order check needs its terms")
    if record.reference is not None and standard is None:
        raise CatalogueError(f"torch_npu op {name!r} has a reference but no standard: name the standard that judges "
                             f"it in its record (ops/table/torch_npu.py)")


@lru_cache(maxsize=1)
def catalogue() -> Catalogue:
    """The built-in catalogue, built and validated once per process."""
    return build(builtin(), FUSED_OPS)


def op_record(name: str | None) -> OpRecord:
    """The record of bare op name ``name`` (``ops.base_name("Tensor.add_")`` is "add"), or UNKNOWN."""
    return catalogue().get(name)


def op_rule(rules: Rules, op: OpName | None) -> OpRule:
    """The row that judges ``op``: its record's built-in row, with the user's row in ``rules`` on top."""
    if op is None:
        return OpRule()
    return op_record(op.bare).table.overridden_by(rules.override(op))


def judged_like(rules: Rules, name: str, twin: str | None, *, standard: str | None = None,
                limits: Mapping[str, Mapping[str, Any]] | None = None, roundings: int | None = None) -> Rules:
    """``rules`` with op ``name`` judged by the row of built-in ``twin`` (a custom op's ``like``; else its
    own), then by the given standard, limits and roundings."""
    row = op_rule(rules, parse_op_name(twin or name))
    return rules.with_row(name, row, standard=standard, limits=limits, roundings=roundings)


def golden_on_dtype_grid(rules: Rules, name: str) -> bool:
    """Whether op ``name`` is defined on its dtype's own grid (nextafter): its golden runs in the input's dtype."""
    return op_record(name).dtype_grid_golden or name in rules.dtype_grid_golden


def random_reason(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
    """Why calling op ``name`` (as a dump spells it after its namespace: "bernoulli_") with these arguments
    gives a result no golden can redraw, or None where it does not: its record's randomness; else the
    installed torch's tag, for an op newer than the catalogue; else a name that says dropout."""
    randomness = op_record(folded_name(name)).random
    if randomness is not None and randomness.in_place_only and folded_name(name) == name:
        randomness = None
    if randomness is None and name in seeded_aten_ops():
        randomness = ALWAYS
    if randomness is None:
        return "its name says dropout" if "dropout" in name else None
    return randomness.reason(args, kwargs)


__all__ = ["Catalogue", "CatalogueError", "OpRecord", "UNKNOWN", "build", "catalogue", "golden_on_dtype_grid",
           "judged_like", "op_record", "op_rule", "random_reason"]
