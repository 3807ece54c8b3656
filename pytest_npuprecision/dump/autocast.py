"""Mixed-precision (autocast) entries: tell them from the dump itself, and check the replay's dtypes.

Under ``torch.autocast`` a linear takes a float32 weight and a bfloat16 activation and returns
bfloat16, and a cross_entropy takes bfloat16 and returns float32. Neither can be replayed without
autocast: the first raises, the second is judged in a dtype the model never produced. The dump
does not say that autocast was on, so it is inferred, as msprobe does: float inputs of two or more
dtypes, or one input dtype that differs from the recorded output's.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch

from .descriptors import DescriptorError, TensorSpec, decode_value, iter_specs

_LOW_PRECISION = (torch.bfloat16, torch.float16)
# Ops whose output dtype differs from their input's by definition, not by autocast.
_CASTS = frozenset({"to", "type", "type_as", "float", "half", "bfloat16", "double", "view_as_real", "view_as_complex"})


def recorded_dtypes(value: Any, where: str) -> list[torch.dtype] | None:
    """The float dtypes of the tensors a dump entry's ``output`` records, depth first; None if unreadable."""
    try:
        specs = list(iter_specs(decode_value(value, where)))
    except DescriptorError:
        return None
    return [s.dtype for s in specs if s.dtype.is_floating_point]


def _float_dtypes(tensors: Iterable[Any]) -> list[torch.dtype]:
    return [t.dtype for t in tensors if isinstance(t, (torch.Tensor, TensorSpec)) and t.dtype.is_floating_point]


def inferred_autocast(name: str, inputs: Iterable[Any], outputs: list[torch.dtype] | None,
                      has_dtype_argument: bool, inplace: bool = False) -> tuple[torch.dtype | None, str | None]:
    """(the autocast dtype, the note saying why) for a call whose dtypes only autocast explains. An
    in-place op is never autocast: it keeps self's dtype whatever its operands' (a float32 added
    into a bfloat16 tensor is added in float32, then rounded once to bfloat16)."""
    if name in _CASTS or has_dtype_argument or inplace:
        return None, None
    given = set(_float_dtypes(inputs))
    produced = set(outputs or ())
    mixed = len(given) >= 2
    changed = len(given) == 1 and bool(produced) and produced != given
    if not (mixed or changed):
        return None, None
    low = [d for d in (*sorted(produced, key=str), *sorted(given, key=str)) if d in _LOW_PRECISION]
    if not low:
        return None, None
    dtype = low[0]
    why = (f"inputs of {_names(given)}" if mixed else f"{_names(given)} inputs") + \
        (f" and a recorded {_names(produced)} output" if produced else "")
    return dtype, f"run under autocast({_name(dtype)}), inferred from {why}"


def dtype_differences(judged: dict[str, torch.dtype], recorded: list[torch.dtype] | None) -> list[str]:
    """Outputs judged in another dtype than the dump recorded, in order: each a note for the case."""
    if not recorded or len(recorded) != len(judged):
        return []
    return [f"{name} is judged in {_name(mine)} but the dump recorded {_name(theirs)}: this replay did not run "
            f"the call as the model did" for (name, mine), theirs in zip(judged.items(), recorded) if mine != theirs]


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _names(dtypes: set[torch.dtype]) -> str:
    return " and ".join(sorted(_name(d) for d in dtypes))
