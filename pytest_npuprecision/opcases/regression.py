"""Write a failing example as a regression case: a YAML entry plus the tensors it needs.

The YAML file is an ordinary op case file whose inputs are fixed (``file:`` and ``value:``), so the
collector picks it up like any other and it reruns once, deterministically, with no Hypothesis and
no example database. Tensors (and any value YAML cannot hold exactly, such as tuples or dtypes) are
saved with torch.save next to it and loaded with torch.load(weights_only=True). The file name ends
with a digest of the inputs, so finding the same example again rewrites the same files.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import yaml

from ..dump import update_with_tensor
from .run import case_seed
from .spec import BrokenCase, Call, OpCase, dtype_name, op_label

# What a regression case takes from the case that found it, as that case reads now: the inputs stay.
_CURRENT = ("reference", "standard", "limits", "roundings", "reason", "backward")


def _plain(value: Any) -> bool:
    """Values YAML writes and reads back exactly as the same Python value."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return type(value) is list and all(_plain(v) for v in value)


def _digest(case: OpCase, dtype: torch.dtype, call: Call) -> str:
    digest = hashlib.sha1(f"{op_label(case.op)}|{dtype}|{case.backward}".encode())
    for value in (*call.args, *sorted(call.kwargs.items())):
        if isinstance(value, torch.Tensor):
            update_with_tensor(digest, value)
        else:
            digest.update(repr(value).encode())
    return digest.hexdigest()[:8]


def regression_name(case: OpCase, dtype: torch.dtype, call: Call) -> str:
    return f"{case.id}-{dtype_name(dtype)}-{_digest(case, dtype, call)}"


def write_regression(case: OpCase, dtype: torch.dtype, call: Call, folder: Path, root: Path | None = None, *,
                     shrunk: bool = True) -> Path:
    """Write ``call`` as a fixed case in ``folder``; return the YAML file's path.

    root: the rootdir, to print the rerun command relative to it. shrunk: whether Hypothesis shrank it.
    """
    name = regression_name(case, dtype, call)
    data_dir = folder / name
    data_dir.mkdir(parents=True, exist_ok=True)
    grads = None if call.requires_grad is None else set(call.requires_grad)

    def entry(value: Any, key: int | str, stem: str) -> Any:
        if _plain(value) and not isinstance(value, dict):
            return value
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().clone()
        torch.save(value, data_dir / f"{stem}.pt")
        spec: dict[str, Any] = {"file": f"{name}/{stem}.pt"}
        if grads is not None and key not in grads and isinstance(value, torch.Tensor):
            spec["grad"] = False
        return spec

    found_by = f"{case.source}::{case.item_name(dtype)}"
    record: dict[str, Any] = {"id": name, "op": op_label(case.op), "dtypes": [dtype_name(dtype)]}
    if case.reference is not None:
        record["reference"] = op_label(case.reference)
    if case.standard is not None:
        record["standard"] = case.standard
    if case.limits:
        record["limits"] = {s: dict(m) for s, m in case.limits.items()}
    if case.roundings is not None:
        record["roundings"] = case.roundings
    if case.reason is not None:
        record["reason"] = case.reason
    if case.backward:
        record["backward"] = True
    record["seed"] = case_seed(case)
    record["found_by"] = found_by
    record["inputs"] = [entry(v, i, f"input{i}") for i, v in enumerate(call.args)]
    if call.kwargs:
        record["kwargs"] = {k: entry(v, k, f"kwarg_{k}") for k, v in call.kwargs.items()}
    path = folder / f"{name}.yaml"
    shown = path
    if root is not None and path.resolve().is_relative_to(root.resolve()):
        shown = path.resolve().relative_to(root.resolve())
    header = (f"# Written by pytest-npuprecision: the failing example Hypothesis found for {found_by}\n"
              f"# ({'shrunk' if shrunk else 'not shrunk'}). It reruns as it is, without Hypothesis: "
              f"pytest {shown.as_posix()}\n"
              f"# Its inputs are fixed; its standard, limits, roundings and reference are the case's as it reads\n"
              f"# now (those below only while that case is gone). Keep it and the folder {name}/ as a\n"
              f"# regression case: it fails until the op is fixed, then delete both to retire it.\n")
    path.write_text(header + yaml.safe_dump({"cases": [record]}, sort_keys=False, width=100), encoding="utf-8")
    return path


def with_current_settings(case: OpCase, root: Path, origins: dict[Path, list] | None = None) -> OpCase:
    """A regression case with the settings of the case that found it, as that case reads now; its own
    frozen ones, said so, where that case is gone. origins caches each origin file's cases."""
    if case.found_by is None:
        return case
    from .schema import load_case_file  # schema imports this module's readers' types

    source, _, item = case.found_by.rpartition("::")
    case_id = item.partition("[")[0]
    path = root / source
    if origins is None:
        origins = {}
    if path not in origins:
        origins[path] = load_case_file(path, root) if source.endswith((".yaml", ".yml")) and path.is_file() else []
    origin = next((c for c in origins[path] if not isinstance(c, BrokenCase) and c.id == case_id), None)
    if origin is None:
        return replace(case, settings_from=f"{case.found_by} is gone, so the settings frozen in this file judge it; "
                                           f"delete the file and its folder to retire it")
    return replace(case, **{name: getattr(origin, name) for name in _CURRENT},
                   settings_from=f"the settings of {case.found_by} as it reads now")
