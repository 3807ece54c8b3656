"""Values as msprobe describes them in dump.json: a tensor as its dtype, shape, statistics, requires_grad
and the name of its .pt file; a number, bool or string as its value; lists, tuples and dicts element by
element. Statistics are msprobe's Max/Min/Mean/Norm (NaN and Infinity written bare, as json allows)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

_SCALARS = (bool, int, float, str)


@dataclass(frozen=True)
class TensorSink:
    """Where a tensor task saves its tensors; None of it for a statistics task."""

    folder: Path | None  # dump_tensor_data, or None: statistics only
    checksums: bool = False  # msprobe's summary_mode "md5": each tensor's CRC32, written as "md5"


def describe(value: Any, name: str, sink: TensorSink, depth: int = 0) -> Any:
    """The descriptor of one argument or result; ``name`` is its data_name without ``.pt``."""
    if isinstance(value, torch.Tensor):
        return _tensor(value, name, sink)
    if value is None:
        return None
    if isinstance(value, _SCALARS):
        return {"type": type(value).__name__, "value": value}
    if isinstance(value, torch.dtype):
        return {"type": "torch.dtype", "value": str(value)}
    if isinstance(value, torch.device):
        return {"type": "torch.device", "value": str(value)}
    if isinstance(value, torch.Size):
        return {"type": "torch.Size", "value": list(value)}
    if isinstance(value, slice):
        return {"type": "slice", "value": [_plain(value.start), _plain(value.stop), _plain(value.step)]}
    if value is Ellipsis:
        return {"type": "ellipsis", "value": "..."}
    distributed = _distributed(value)
    if distributed is not None:
        return distributed
    if isinstance(value, (list, tuple)) and depth < 8:
        return [describe(v, f"{name}.{i}", sink, depth + 1) for i, v in enumerate(value)]
    if isinstance(value, dict) and depth < 8:
        return {str(k): describe(v, f"{name}.{k}", sink, depth + 1) for k, v in value.items()}
    return {}  # msprobe writes an object it cannot describe as {} as well; the reader says so when replaying


def _distributed(value: Any) -> dict | None:
    """A reduce op or a process group as msprobe writes them: the op's name, the group's global ranks."""
    if not torch.distributed.is_available():
        return None
    dist = torch.distributed
    if isinstance(value, dist.ReduceOp.RedOpType):
        return {"type": "torch.distributed.ReduceOp", "value": str(value)}
    if isinstance(value, dist.ProcessGroup):
        return {"type": "torch.ProcessGroup", "group_ranks": dist.get_process_group_ranks(value),
                "group_id": str(getattr(value, "group_name", ""))}
    return None


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, torch.Tensor) else value


def _tensor(tensor: torch.Tensor, name: str, sink: TensorSink) -> dict:
    desc: dict[str, Any] = {"type": "torch.Tensor", "dtype": str(tensor.dtype), "shape": list(tensor.shape)}
    desc.update(statistics(tensor))
    desc["requires_grad"] = bool(tensor.requires_grad)
    if sink.folder is not None:  # a statistics dump names no file, as msprobe's does not
        desc["data_name"] = f"{name}.pt"
        # A copy on the CPU, detached and compact: later in-place updates must not change what was recorded.
        torch.save(tensor.detach().to("cpu", copy=True).contiguous(), sink.folder / f"{name}.pt")
    if sink.checksums:
        desc["md5"] = checksum(tensor)
    return desc


def checksum(tensor: torch.Tensor) -> str:
    """msprobe's "md5" of a tensor: the CRC32 of its bytes in memory order, as 8 hex digits."""
    data = tensor.detach().to("cpu").contiguous().reshape(-1)
    return f"{zlib.crc32(data.view(torch.uint8).numpy().tobytes()) if data.numel() else 0:08x}"


def statistics(tensor: torch.Tensor) -> dict[str, Any]:
    """Max, Min, Mean and Norm as Python numbers; Mean and Norm are None for integer and bool tensors."""
    with torch.no_grad():
        data = tensor.detach()
        if data.numel() == 0:
            return {"Max": None, "Min": None, "Mean": None, "Norm": None}
        if data.is_complex():
            return {"Max": None, "Min": None, "Mean": None, "Norm": float(torch.linalg.vector_norm(data))}
        floating = data.is_floating_point()
        wide = data.float() if floating and data.dtype in (torch.float16, torch.bfloat16) else data
        stats = {"Max": wide.max().item(), "Min": wide.min().item()}
        if floating:
            stats["Mean"] = wide.mean().item()
            stats["Norm"] = torch.linalg.vector_norm(wide).item()
        else:
            stats["Mean"] = stats["Norm"] = None
        return stats
