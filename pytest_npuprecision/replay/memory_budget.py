"""How much memory a dump case needs, known before anything is loaded or made, and the budget it must fit.

A dump states every tensor's shape, and a crafted or damaged one can state [10**12]. The estimate
comes from those shapes alone, so a case past the budget is skipped before a byte is allocated.
It counts what a case holds at its peak: the inputs on the host and the device, their float64
golden copies, a baseline copy, gradients on each side for a backward case, and the outputs with
the float64 work of the metrics.
"""

from __future__ import annotations

import math
import os
from typing import Any, Iterable

import torch

from ..dump import CaseEntries, DecodedCall, DescriptorError, TensorSpec, decode_value, iter_specs

_GOLDEN_ITEMSIZE = 8  # float64
_METRIC_BYTES = 32  # float64 error, bound and mask work per output element


def available_memory() -> int | None:
    """MemAvailable of this machine, in bytes; None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def default_budget() -> int:
    """Half the available memory, shared among the xdist workers; 4 GiB where memory cannot be read."""
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
    available = available_memory()
    return 4 * 2**30 if available is None else available // (2 * workers)


def _bytes(specs: Iterable[TensorSpec], per_element: int) -> int:
    return sum(spec.numel * (spec.dtype.itemsize + per_element) for spec in specs)


def case_bytes(entries: CaseEntries, *, direction: str, baseline: bool) -> int:
    """The peak bytes of one case, from its entries' descriptors; undecodable parts count nothing
    (they fail the case later, with their own message). A factory call (ones, arange, new_zeros...)
    counts what its size arguments make, whatever output the dump declares."""
    call = _decoded(lambda: entries.call)
    inputs = _specs(lambda: call.specs()) if call is not None else []
    outputs = _specs(lambda: iter_specs(decode_value(entries.output(), "output")))
    copies = 2 if baseline else 1  # the device's copy, and the baseline's
    need = sum(s.numel * (s.dtype.itemsize * (1 + copies) + _GOLDEN_ITEMSIZE) for s in inputs)
    made = 0 if call is None else factory_elements(entries.name, call)
    need += max(_bytes(outputs, _GOLDEN_ITEMSIZE + _METRIC_BYTES),
                made * (_made_itemsize(call) * copies + _GOLDEN_ITEMSIZE + _METRIC_BYTES))
    if direction == "backward":
        need *= 2  # the gradients of every input, on each side
        grads = _specs(lambda: (g for g in entries.grads if g is not None))
        need += sum(g.numel * (g.dtype.itemsize * (1 + copies) + _GOLDEN_ITEMSIZE) for g in grads)
    return need


def input_elements(entries: CaseEntries) -> int:
    """The elements of a call's tensor inputs as its forward entry declares them; 0 where it cannot be decoded."""
    call = _decoded(lambda: entries.call)
    return 0 if call is None else sum(spec.numel for spec in _specs(lambda: call.specs()))


def _decoded(make, undecodable: Any = None) -> Any:
    try:
        return make()
    except (DescriptorError, AttributeError, TypeError):
        return undecodable


def _specs(make) -> list[TensorSpec]:
    return _decoded(lambda: list(make()), [])


# ---------------------------------------------------------------- factory calls

# Factories that take a size, as ints or one sequence (torch.ones(2, 3), torch.ones((2, 3)), size=...),
# after the tensor a new_* method is called on; and the arguments before the size.
_SIZED = {"ones": 0, "zeros": 0, "empty": 0, "rand": 0, "randn": 0, "full": 0, "empty_strided": 0,
          "empty_permuted": 0, "new_ones": 1, "new_zeros": 1, "new_empty": 1, "new_full": 1,
          "new_empty_strided": 1}
_ONE_SEQUENCE = frozenset({"full", "empty_strided", "empty_permuted", "new_full", "new_empty_strided"})
_LIKE = frozenset({"ones_like", "zeros_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like"})
_WIDEST = 8  # float64 and int64: the widest dtype a factory makes unless a dtype argument says otherwise


def factory_elements(name: str, call: DecodedCall) -> int:
    """How many elements a factory call makes from its size arguments (0 for any other op, or a size
    it cannot read): what torch.ones(40000, 25000) allocates whatever output the dump declares."""
    name = name.rsplit(".", 1)[-1]
    args, kwargs = call.args, call.kwargs
    if name in _SIZED:
        skip = _SIZED[name]
        size = kwargs.get("size", args[skip:skip + 1] if name in _ONE_SEQUENCE else args[skip:])
        return _numel(size)
    if name == "randint":  # randint(high, size) or randint(low, high, size)
        return _numel(kwargs.get("size", args[-1:]))
    if name in ("arange", "range"):
        return _arange_length(args, kwargs)
    if name in ("linspace", "logspace"):
        steps = kwargs.get("steps", args[2] if len(args) > 2 else None)
        return steps if _is_int(steps) and steps > 0 else 0
    if name == "eye":
        n = kwargs.get("n", args[0] if args else None)
        m = kwargs.get("m", args[1] if len(args) > 1 else n)
        return n * m if _is_int(n) and _is_int(m) and n > 0 and m > 0 else 0
    if name in _LIKE:
        like = next(iter(call.specs()), None)
        return like.numel if like is not None else 0
    return 0


def _numel(size: Any) -> int:
    """Elements of a size given as ints or as one sequence of ints; 0 where it is neither."""
    if isinstance(size, (list, tuple)) and len(size) == 1 and isinstance(size[0], (list, tuple)):
        size = size[0]
    if not isinstance(size, (list, tuple)) or not all(_is_int(d) for d in size):
        return 0
    return math.prod(max(d, 0) for d in size)


def _arange_length(args: tuple, kwargs: dict) -> int:
    numbers = list(args[:3])
    if len(numbers) == 1:
        numbers.insert(0, 0)  # arange(end)
    start = kwargs.get("start", numbers[0] if numbers else 0)
    end = kwargs.get("end", numbers[1] if len(numbers) > 1 else None)
    step = kwargs.get("step", numbers[2] if len(numbers) > 2 else 1)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (start, end, step)) or step == 0:
        return 0
    length = (end - start) / step
    return math.ceil(length) if math.isfinite(length) and length > 0 else 0


def _made_itemsize(call: DecodedCall | None) -> int:
    dtype = None if call is None else call.kwargs.get("dtype")
    return dtype.itemsize if isinstance(dtype, torch.dtype) else _WIDEST


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
