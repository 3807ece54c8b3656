"""A failing case's tensors saved for a closer look, as msprobe's acc_check ``-save_error_data`` does:
its inputs, and per compared output the device's result, the golden and the baseline, as ``.pt``
files under the report folder (``--npu-precision-save-error-data``).

Bounded: a case whose tensors pass ``CASE_BYTES`` saves none of them (its record says why), and a
process stops saving once it has written ``RUN_BYTES`` (each xdist worker counts its own). Files
hold plain tensors, or lists and dicts of them, for ``torch.load(path, weights_only=True)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch

from ..common import folder_name, format_size

CASE_BYTES = 256 << 20
RUN_BYTES = 2 << 30
_written = [0]  # bytes this process has saved


def save_error_data(folder: Path, case_id: str, args: Sequence[Any], kwargs: dict[str, Any],
                    outputs: Sequence[Any]) -> dict[str, Any]:
    """Save one failing case's tensors under ``folder``; return what its record says of them.

    outputs: objects with ``name``, ``actual``, ``golden`` and ``baseline`` (runner.RunOutput).
    """
    files: dict[str, Any] = {"inputs.pt": {"args": _plain(args), "kwargs": _plain(kwargs)}}
    for out in outputs:
        for side in ("actual", "golden", "baseline"):
            tensor = getattr(out, side)
            if tensor is not None:
                files[f"{out.name}.{'device' if side == 'actual' else side}.pt"] = tensor.detach().cpu()
    size = sum(_bytes(value) for value in files.values())
    if size > CASE_BYTES:
        return {"saved": False, "why": f"its tensors need {format_size(size)}, past {format_size(CASE_BYTES)} a case"}
    if _written[0] + size > RUN_BYTES:
        return {"saved": False, "why": f"this run already saved {format_size(_written[0])} of error data, "
                                       f"the {format_size(RUN_BYTES)} a process may"}
    where = folder / folder_name(case_id, 180)
    where.mkdir(parents=True, exist_ok=True)
    for name, value in files.items():
        torch.save(value, where / name)
    _written[0] += size
    return {"saved": True, "folder": str(where), "files": sorted(files)}


def _plain(value: Any, depth: int = 0) -> Any:
    """Tensors, numbers, strings and None in lists and dicts; anything else as its repr."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and depth < 8:
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, dict) and depth < 8:
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    return repr(value)[:200]


def _bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, list):
        return sum(_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_bytes(v) for v in value.values())
    return 0
