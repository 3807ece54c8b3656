"""How much memory a dump case needs, known before anything is loaded or made, and the budget it must fit.

A dump states every tensor's shape, and a crafted or damaged one can state [10**12]. The estimate
comes from those shapes alone, so a case past the budget is skipped before a byte is allocated.
It counts what a case holds at its peak: the inputs on the host and the device, their float64
golden copies, a baseline copy, gradients on each side for a backward case, and the outputs with
the float64 work of the metrics.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable

from .arguments import DescriptorError, TensorSpec, decode_call, decode_grads, decode_value, iter_specs

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?(?:e[0-9]+)?)\s*([a-z]*)\s*", re.IGNORECASE)
_GOLDEN_ITEMSIZE = 8  # float64
_METRIC_BYTES = 32  # float64 error, bound and mask work per output element


def parse_size(text: str) -> int:
    """'512MiB', '4GB', '1e9' or '4096' in bytes; ValueError that says how to write one."""
    match = _SIZE.fullmatch(text)
    unit = match[2].lower() if match else None
    if match is None or unit not in _UNITS or float(match[1]) <= 0:
        raise ValueError(f"{text!r} is not a memory size: write bytes or a number with a unit, such as 512MiB or 4GB")
    return int(float(match[1]) * _UNITS[unit])


def format_size(size: int) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


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
