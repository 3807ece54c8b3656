"""The building blocks of every configuration file's schema, on one validation library (pydantic v2).

Each schema says what a file may hold; files.validate turns a mismatch into ``FILE: key.path: problem``.
Leaf checks raise one of three error kinds that the formatter knows: ``expected`` (the wrong kind of
value), ``unknown_name`` (a name outside a fixed list) and ``unknown_key`` (a mapping key the model
lacks). The schemas themselves sit beside the module that reads each file: precision/rules_schema.py,
reports/known_failures_schema.py, checks/recorded_file_schema.py and opcases/schema.py.

Imported only by the functions that load a file, so that importing the plugin never imports pydantic.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Annotated, Any, Callable, ClassVar

import torch
from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from ..common import LATER_FLOAT_DTYPES, parse_dtype

# The branches of a tagged union appear in pydantic's error locations; the formatter drops them.
BRANCH_TAGS = frozenset({"(number)", "(pair)", "(names)", "(table)", "(limit)"})


def expected(what: str) -> PydanticCustomError:
    """The value is of the wrong kind; the formatter appends ``, got VALUE``."""
    return PydanticCustomError("expected", "expected {what}", {"what": what})


def unknownname(what: str, choices: tuple[str, ...] | str) -> PydanticCustomError:
    shown = choices if isinstance(choices, str) else ", ".join(choices)
    return PydanticCustomError("unknown_name", "is not {what}: use {choices}", {"what": what, "choices": shown})


def as_float(value: Any) -> float | None:
    """The value as a float, or None when it is no number (bools, strings, ints past float's range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def limit_number(value: Any) -> float:
    number = as_float(value)
    if number is None or not math.isfinite(number) or number < 0:
        raise expected("a finite number >= 0")
    return number


def any_number(value: Any) -> float:
    """A number recorded by a run: NaN and inf are values a metric can take."""
    number = as_float(value)
    if number is None:
        raise expected("a number")
    return number


def count(most: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
            raise expected(f"a whole number from 0 to {most}")
        return value
    return check


def text(value: Any) -> str:
    if not isinstance(value, str):
        raise expected("a string")
    return value


def name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise expected("a name")
    return value


def one_of(what: str, choices: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in choices:
            raise unknownname(what, choices)
        return value
    return check


def mapping(what: str) -> BeforeValidator:
    return _container(dict, f"a mapping of {what}")


def list_of(what: str) -> BeforeValidator:
    return _container(list, f"a list of {what}")


def _container(kind: type, described: str) -> BeforeValidator:
    """A value of ``kind``, checked before pydantic would coerce or describe it in its own words."""
    def check(value: Any) -> Any:
        if not isinstance(value, kind):
            raise expected(described)
        return value
    return BeforeValidator(check)


@lru_cache(maxsize=None)
def float_dtype_names() -> tuple[str, ...]:
    """This torch's float dtypes, and those of later torches: a table's row for a dtype this torch
    lacks loads, and is never used."""
    names = {str(v).removeprefix("torch.") for v in vars(torch).values() if isinstance(v, torch.dtype)}
    return tuple(sorted({n for n in names if getattr(torch, n).is_floating_point} | set(LATER_FLOAT_DTYPES)))


def float_dtype(value: Any) -> str:
    if isinstance(value, str) and value in float_dtype_names():
        return value
    try:
        canonical = str(parse_dtype(value)).removeprefix("torch.")
    except (TypeError, ValueError) as exc:
        hint = str(exc).rsplit(": ", 1)[-1]
        raise unknownname("a float dtype", hint.removeprefix("use ")) from None
    raise unknownname("a float dtype's name", canonical)


Text = Annotated[Any, BeforeValidator(text)]
Name = Annotated[Any, BeforeValidator(name)]
Number = Annotated[Any, BeforeValidator(any_number)]
LimitNumber = Annotated[Any, BeforeValidator(limit_number)]
FloatDtype = Annotated[Any, BeforeValidator(float_dtype)]


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
