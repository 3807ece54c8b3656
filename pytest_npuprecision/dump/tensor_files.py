"""A dump's tensor files, read as untrusted input.

Only plain files inside ``dump_tensor_data/`` are opened, ``.pt`` through
``torch.load(weights_only=True)`` and ``.npy`` without pickle, and each is checked against the
descriptor dump.json gives for it (its size before it is read, its dtype and shape after).
"""

from __future__ import annotations

import functools
import os
import pickle
import stat
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import numpy as np
import torch

from ..common import load_tensors
from .descriptors import DumpDataError, TensorSpec

_LOADABLE_SUFFIXES = (".pt", ".npy")

def load_tensor(data_dir: Path, spec: TensorSpec, key: str) -> torch.Tensor | np.ndarray:
    """Load ``spec.data_name`` from ``data_dir`` safely and check it against the descriptor."""
    name = spec.data_name or ""
    shown = Path(data_dir) / name

    def fail(problem: str) -> DumpDataError:
        return DumpDataError(key, spec.where, shown, problem)

    path = _inside(Path(data_dir), name)
    if path is None and os.path.islink(data_dir):  # the folder, not the entry, leads out of the dump
        raise DumpDataError(key, spec.where, data_dir, f"is a link to {os.path.realpath(data_dir)}, outside the dump: "
                                                       f"no tensor file is read through it; copy the folder into "
                                                       f"the dump instead of linking it")
    if path is None:
        raise fail("is outside dump_tensor_data/; data_name must be a plain file name inside that folder")
    suffix = path.suffix.lower()
    if suffix not in _LOADABLE_SUFFIXES:
        raise fail(f"has suffix {suffix!r}; only .pt and .npy tensor files are loaded")
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise fail("does not exist; copy the dump_tensor_data/ folder along with dump.json") from None
    if not stat.S_ISREG(status.st_mode):  # a folder, a FIFO (which would block the read), a device
        raise fail("is not a regular file; re-dump this API")
    declared = spec.numel * spec.dtype.itemsize
    size = status.st_size
    if size > 2 * declared + _FILE_OVERHEAD:
        # Checked before loading: a small view saved with a huge storage would be read whole.
        raise fail(f"is {size} bytes, far more than the {_describe(spec.dtype, spec.shape)} tensor that dump.json "
                   f"declares ({declared} bytes); re-dump this API")
    value = _read_pt(path, fail) if suffix == ".pt" else _read_npy(path, fail)
    if not isinstance(value, torch.Tensor):
        raise fail(f"holds a {type(value).__name__}, not a tensor; re-dump this API")
    if value.layout != torch.strided or value.is_meta or value.is_quantized:
        kind = "a meta" if value.is_meta else "a quantized" if value.is_quantized else f"a {value.layout}"
        raise fail(f"holds {kind} tensor, not a dense tensor with data; re-dump this API")
    if tuple(value.shape) != spec.shape or value.dtype != spec.dtype:
        raise fail(
            f"holds a {_describe(value.dtype, tuple(value.shape))} tensor but dump.json says "
            f"{_describe(spec.dtype, spec.shape)}; the file does not belong to this dump.json"
        )
    return value.numpy() if spec.ndarray else value


# What a tensor file holds beyond its data: torch.save's zip directory and pickle, .npy's header.
_FILE_OVERHEAD = 64 * 1024


def _inside(root: Path, name: str) -> Path | None:
    """``root / name`` resolved, or None when ``name`` is absolute or leads out of ``root``."""
    if not name or "\0" in name or PurePosixPath(name).is_absolute() or PureWindowsPath(name).is_absolute() \
            or PureWindowsPath(name).drive:
        return None
    if "/" not in name and "\\" not in name and name not in (".", "..") and _plain_folder(str(root)) \
            and not os.path.islink(os.path.join(root, name)):
        return root / name  # msprobe's names: a plain file, no link, in a folder that is no link
    # The folder itself is not resolved: a dump_tensor_data that is a link out of the dump leads nowhere.
    real_root = Path(os.path.realpath(root.parent)) / root.name
    # realpath follows symlinks, so a link that points out of the folder is caught here too.
    real = Path(os.path.realpath(root / name))
    return real if real != real_root and real.is_relative_to(real_root) else None


@functools.lru_cache(maxsize=64)
def _plain_folder(root: str) -> bool:
    """The folder exists and is not itself a link (checked once per folder, not per file)."""
    return os.path.isdir(root) and not os.path.islink(root)


def _read_pt(path: Path, fail) -> Any:
    try:
        return load_tensors(path, map_location="cpu")
    except pickle.UnpicklingError:
        raise fail("holds objects other than tensors, which torch.load(weights_only=True) refuses; "
                   "re-dump this API") from None
    except Exception as exc:  # torch raises RuntimeError, EOFError, ValueError... for damaged archives
        raise fail(f"is truncated or corrupt ({type(exc).__name__}); re-dump this API") from None


def _read_npy(path: Path, fail) -> Any:
    try:
        array = np.load(path, allow_pickle=False)
    except Exception as exc:  # ValueError for object arrays, EOFError/OSError for damaged files
        raise fail(f"is not a plain numeric .npy file ({type(exc).__name__}); re-dump this API") from None
    try:
        return torch.from_numpy(np.ascontiguousarray(array))
    except TypeError:
        raise fail(f"holds a numpy {array.dtype} array, which has no torch dtype") from None


def _describe(dtype: torch.dtype, shape: tuple[int, ...]) -> str:
    return f"{str(dtype).removeprefix('torch.')} {list(shape)}"
