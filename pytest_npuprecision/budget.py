"""How much memory a dump case needs, known before anything is loaded or made, and the budget it must fit.

A dump states every tensor's shape, and a crafted or damaged one can state [10**12]. The estimate
comes from those shapes alone, so a case past the budget is skipped before a byte is allocated.
It counts what a case holds at its peak: the inputs on the host and the device, their float64
golden copies, a baseline copy, gradients on each side for a backward case, and the outputs with
the float64 work of the metrics.
"""

from __future__ import annotations

import os
from typing import Any, Iterable

from .arguments import DescriptorError, TensorSpec, decode_call, decode_grads, decode_value, iter_specs

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


def case_bytes(forward: Any, backward: Any, *, direction: str, baseline: bool, name: str = "") -> int:
    """The peak bytes of one case, from its entries' descriptors; undecodable parts count nothing
    (they fail the case later, with their own message)."""
    inputs = _specs(lambda: decode_call(forward, name).specs())
    outputs = _specs(lambda: iter_specs(decode_value(forward.get("output"), "output")) if isinstance(forward, dict)
                     else ())
    copies = 2 if baseline else 1  # the device's copy, and the baseline's
    need = sum(s.numel * (s.dtype.itemsize * (1 + copies) + _GOLDEN_ITEMSIZE) for s in inputs)
    need += _bytes(outputs, _GOLDEN_ITEMSIZE + _METRIC_BYTES)
    if direction == "backward":
        need *= 2  # the gradients of every input, on each side
        grads = _specs(lambda: (g for g in decode_grads(backward) if g is not None))
        need += sum(g.numel * (g.dtype.itemsize * (1 + copies) + _GOLDEN_ITEMSIZE) for g in grads)
    return need


def _specs(make) -> list[TensorSpec]:
    try:
        return list(make())
    except (DescriptorError, AttributeError, TypeError):
        return []
