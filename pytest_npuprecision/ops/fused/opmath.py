"""The dtype a fair kernel computes in, and the small argument readers every reference shares."""

from __future__ import annotations

from typing import Any

import torch

_WIDENED = (torch.float16, torch.bfloat16)


def opmath_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for half types (what NPU and CUDA kernels accumulate in), else the dtype itself."""
    return torch.float32 if dtype in _WIDENED else dtype


def widened(tensor: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    return None if tensor is None else tensor.to(dtype)


def int_list(value: Any) -> list[int] | None:
    """A dump writes int lists as lists, tuples or int tensors; the reference wants plain ints."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.reshape(-1).tolist()]
    if isinstance(value, (int, float)):
        return [int(value)]
    return [int(v) for v in value]


def statistic_dtype(dtype: torch.dtype) -> torch.dtype:
    """Statistics torch_npu documents as float32 (rstd, softmax_max) stay float64 in a float64 golden."""
    return torch.float64 if dtype == torch.float64 else torch.float32
