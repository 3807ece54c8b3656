"""Backends: the device under test, the golden and the baseline, each chosen by one string.

    auto            npu when torch_npu sees one, else cuda when available, else cpu (device under test only)
    dumped          the dump's recorded outputs and gradients: an offline check, nothing runs (device only)
    cpu, cuda[:N], npu[:N], or any other torch device type (xpu:0, mps)
    module:object   a user's backend: a Backend instance, or a class or function that makes one
    NAME            a backend installed under the ``pytest_npuprecision.backends`` entry-point group

Layer: beside ``ops``, under ``dump`` (docs/architecture.md); imports only ``common``.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import re
import sys
from pathlib import Path
from typing import Literal, Sequence

import torch

from .base import Backend, BackendError, BackendInfo, float32_modes_of
from .cuda import CudaBackend
from .dumped import DUMPED, DumpedOutputs
from .npu import NpuBackend

ENTRY_POINT_GROUP = "pytest_npuprecision.backends"
Role = Literal["device", "golden", "baseline"]

__all__ = ["Backend", "BackendError", "BackendInfo", "CudaBackend", "NpuBackend", "DumpedOutputs", "DUMPED",
           "ENTRY_POINT_GROUP", "float32_modes_of",
           "load_backend", "auto_backend"]


def load_backend(spec: str | torch.device | Backend, role: Role = "device", *, allow_tf32: bool = False,
                 search: Sequence[Path] = ()) -> Backend:
    """The backend a device string names; raise BackendError with the fix when it names none.

    allow_tf32: let a cuda golden or baseline use TF32 (they run with it off otherwise).
    search: folders a ``module:object`` module may also come from, as pytest's rootdir and the
    current folder for ``-p``: added to the end of sys.path only when the module is found nowhere else.
    """
    if isinstance(spec, Backend):
        return spec
    text = str(spec).strip()
    if text == DUMPED:
        if role != "device":
            raise BackendError(f"the {role} cannot be {DUMPED}: only the device under test can come from the dump")
        return DumpedOutputs()
    if text == "auto":
        if role != "device":
            raise BackendError(f"the {role} cannot be auto: name it (cpu or cuda)")
        return auto_backend()
    device_type = _device_type(text)
    if device_type is not None:
        if device_type == "cuda":
            return CudaBackend(text, tf32=None if role == "device" else allow_tf32)
        if device_type == "npu":
            return NpuBackend(text)
        return Backend(text)
    if ":" in text:
        return _from_object(text, text, search)
    return _from_entry_point(text, role)


# Names people type for a device: the one they mean.
_ALIASES = {"gpu": "cuda", "nvidia": "cuda", "ascend": "npu", "offline": "dumped", "dump": "dumped"}


def _did_you_mean(name: str, role: str, installed) -> str:
    lowered = name.lower()
    numbered = re.fullmatch(r"(cuda|npu|gpu)(\d+)", lowered)
    if numbered:
        return f" (did you mean {_ALIASES.get(numbered[1], numbered[1])}:{numbered[2]}?)"
    names = ["auto", DUMPED, "cpu", "cuda", "npu"] if role == "device" else ["cpu", "cuda", "npu"]
    alias = _ALIASES.get(lowered)
    if alias in names:
        return f" (did you mean {alias}?)"
    close = difflib.get_close_matches(lowered, names + sorted(installed), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def auto_backend() -> Backend:
    """npu when torch_npu imports and sees a device, else cuda when available, else cpu."""
    try:
        return NpuBackend()
    except BackendError:
        pass
    if torch.cuda.is_available():
        return CudaBackend()
    return Backend("cpu")


def _device_type(text: str) -> str | None:
    """'cuda' for cuda and cuda:1, 'npu' for npu:0; None when the text is no device string."""
    head, colon, index = text.partition(":")
    if colon and not index.isdigit():
        return None
    if head == "npu":  # torch knows the npu type only after torch_npu renamed its private backend
        return head
    try:
        return torch.device(text).type
    except RuntimeError:
        return None


def _import(module_name: str, search: Sequence[Path]):
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name.partition(".")[0] or not search:
            raise
    sys.path.extend(str(folder) for folder in search if str(folder) not in sys.path)
    return importlib.import_module(module_name)


def _from_object(spec: str, shown: str, search: Sequence[Path] = ()) -> Backend:
    module_name, _, attribute = spec.partition(":")
    try:
        target = _import(module_name, search)
        for part in attribute.split("."):
            target = getattr(target, part)
    except Exception as exc:
        raise BackendError(f"backend {shown!r} does not load ({type(exc).__name__}: {exc}): give module:object "
                           f"with the module importable from here") from None
    return _as_backend(target, shown)


def _as_backend(target: object, shown: str) -> Backend:
    if isinstance(target, type) or (callable(target) and not isinstance(target, Backend)):
        try:
            target = target()
        except BackendError:
            raise
        except Exception as exc:
            raise BackendError(f"backend {shown!r} failed to start ({type(exc).__name__}: {exc})") from None
    if not isinstance(target, Backend):
        raise BackendError(f"backend {shown!r} is a {type(target).__name__}, not a Backend: subclass "
                           f"pytest_npuprecision.Backend (see docs/backends.md, \"Writing a backend\")")
    return target


def _from_entry_point(name: str, role: str = "device") -> Backend:
    installed = {e.name: e for e in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    if name not in installed:
        known = ", ".join(sorted(installed)) or "none installed"
        builtin = "auto, dumped, cpu, cuda[:N], npu[:N]" if role == "device" else "cpu, cuda[:N], npu[:N]"
        raise BackendError(f"{name!r} is not a device or backend{_did_you_mean(name, role, installed)}: use "
                           f"{builtin}, module:object, or an installed backend ({known})")
    try:
        target = installed[name].load()
    except Exception as exc:
        raise BackendError(f"backend {name!r} ({installed[name].value}) does not load "
                           f"({type(exc).__name__}: {exc})") from None
    return _as_backend(target, name)
