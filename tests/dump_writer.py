"""An msprobe tensor dump written from real torch calls: each call's descriptors, with the statistics msprobe
records, and its tensors as .pt files. Shared by the tests that need such a dump of their own
(tests/checks/test_real_model_cases.py, tests/plugin/test_user_words.py, tests/plugin/test_xdist_controller.py)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from pytest_npuprecision.dump.dump_cases import load_dump


class DumpWriter:
    """An msprobe tensor dump built from real calls: descriptors with statistics, and .pt files."""

    def __init__(self, root: Path):
        self.folder = root / "step0" / "rank0"
        (self.folder / "dump_tensor_data").mkdir(parents=True)
        self.data: dict = {}

    def tensor(self, t: torch.Tensor, name: str, requires_grad: bool = False) -> dict:
        torch.save(t.detach().clone(), self.folder / "dump_tensor_data" / name)
        floats = t.detach().double()
        return {"type": "torch.Tensor", "dtype": str(t.dtype), "shape": list(t.shape),
                "Max": floats.max().item(), "Min": floats.min().item(), "Mean": floats.mean().item(),
                "Norm": floats.norm().item(), "requires_grad": requires_grad, "data_name": name}

    def value(self, v, name: str, requires_grad=False):
        if isinstance(v, torch.Tensor):
            return self.tensor(v, name, requires_grad)
        if v is None:
            return None
        return {"type": type(v).__name__, "value": v}

    def call(self, api: str, args, kwargs=None, outputs=(), raw_args: dict | None = None,
             grad_in=(), grad_out=(), grad_inputs=()) -> None:
        """Record api's forward (and its backward when grad_in is given); raw_args overrides descriptors."""
        kwargs = kwargs or {}
        forward = f"{api}.forward"
        entry = {"input_args": [self.value(a, f"{forward}.input.{i}.pt", i in grad_inputs) for i, a in enumerate(args)],
                 "input_kwargs": {k: self.value(v, f"{forward}.input.{k}.pt") for k, v in kwargs.items()},
                 "output": [self.value(o, f"{forward}.output.{i}.pt") for i, o in enumerate(outputs)]}
        for index, desc in (raw_args or {}).items():
            entry["input_args"][index] = desc
        self.data[forward] = entry
        if grad_in:
            backward = f"{api}.backward"
            self.data[backward] = {"input": [self.value(g, f"{backward}.input.{i}.pt") for i, g in enumerate(grad_in)],
                                   "output": [self.value(g, f"{backward}.output.{i}.pt") for i, g in enumerate(grad_out)]}

    def load(self):
        document = {"task": "tensor", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": self.data}
        (self.folder / "dump.json").write_text(json.dumps(document))
        return load_dump(self.folder / "dump.json")
