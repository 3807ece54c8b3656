"""capture(): record every API call of a PyTorch program in msprobe's dump format.

Forward calls come from torch's own interception, a ``TorchFunctionMode``; the backward of a call from a
hook on its first output's autograd node, which hands over the gradients of the node's outputs (written
as the backward entry's ``input``) and of its inputs (its ``output``), as msprobe writes them.

What the mode cannot see is said, not dropped: a tensor that reaches a recorded call from an autograd node
that no call in the capture made came from code outside the mode's reach (a ``torch.jit.script``
function, a compiled region, a C++ extension that skips torch's dispatch); each is named in
``Capture.unrecorded`` and in a ``CaptureGapWarning`` when the block ends.
"""

from __future__ import annotations

import os
import shutil
import threading
import traceback
import warnings
from pathlib import Path
from typing import Any, Iterable

import torch
from torch.overrides import TorchFunctionMode

from ..common import CaptureGapWarning, is_compiling
from ..ops import is_inplace
from .called import as_called
from .collectives import PendingWork, collectives_recorded, written_only
from .describe import TensorSink, describe
from .naming import api_name, caller_frame
from .selection import ScopeWindow, Selection
from .writer import DumpWriter

TASKS = ("tensor", "statistics")
SUMMARY_MODES = ("statistics", "md5")
_HERE = os.path.dirname(os.path.abspath(__file__))
_TORCH_OVERRIDES = os.path.join("torch", "overrides.py")


class Capture:
    """A context manager; see :func:`capture`. After the block, ``folder`` holds the dump and ``keys`` its
    entries in order."""

    def __init__(self, path: str | os.PathLike, *, task: str = "tensor", level: str = "L1",
                 scope: Iterable[str] | None = None, list: Iterable[str] | None = None,
                 data_mode: Iterable[str] | None = None, step: int | None = None, rank: int | None = None,
                 summary_mode: str = "statistics"):
        if task not in TASKS:
            raise ValueError(f"task={task!r}: capture writes 'tensor' or 'statistics'")
        if summary_mode not in SUMMARY_MODES:
            raise ValueError(f"summary_mode={summary_mode!r}: capture writes 'statistics' or 'md5' (each tensor's "
                             f"CRC32 beside its statistics, as msprobe does)")
        self.summary_mode = summary_mode
        if level != "L1":
            raise ValueError(f"level={level!r}: capture records API calls (L1); module-level dumps (L0, mix) "
                             "need msprobe")
        self.task = task
        self.selection = Selection(tuple(scope or ()), tuple(list or ()), frozenset(data_mode or {"all"}))
        self.step = 0 if step is None else int(step)
        self.rank = rank
        self.folder = Path(path) / f"step{self.step}" / _rank_folder(rank)
        self.unrecorded: list[str] = []
        self._writer: DumpWriter | None = None
        self._mode: _Recorder | None = None

    @property
    def keys(self) -> list[str]:
        return list(self._writer.data) if self._writer is not None else []

    def __enter__(self) -> "Capture":
        if self.folder.exists():
            shutil.rmtree(self.folder)  # one capture is one step of one rank: a rerun replaces it
        self.folder.mkdir(parents=True)
        sink = TensorSink(self.folder / "dump_tensor_data" if self.task == "tensor" else None,
                          checksums=self.summary_mode == "md5")
        if sink.folder is not None:
            sink.folder.mkdir()
        self._writer = DumpWriter(self.folder, self.task, sink)
        self._mode = _Recorder(self._writer, self.selection, self.unrecorded)
        self._collectives = collectives_recorded(self._mode.collective)
        self._collectives.__enter__()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        assert self._mode is not None and self._writer is not None
        self._mode.__exit__(*exc_info)
        self._collectives.__exit__(*exc_info)
        self._mode.finish_pending()  # an async collective never waited on: recorded as its buffers are now
        self._mode.closed = True  # a backward run after the block is not part of this dump
        self._writer.write()
        if self.unrecorded:
            shown = "; ".join(self.unrecorded[:5]) + (f"; and {len(self.unrecorded) - 5} more"
                                                      if len(self.unrecorded) > 5 else "")
            warnings.warn(CaptureGapWarning(f"capture into {self.folder}: {len(self.unrecorded)} computation(s) "
                                            f"were not recorded: {shown}"), stacklevel=2)


def capture(path: str | os.PathLike, *, task: str = "tensor", level: str = "L1", scope: Iterable[str] | None = None,
            list: Iterable[str] | None = None, data_mode: Iterable[str] | None = None, step: int | None = None,
            rank: int | None = None, summary_mode: str = "statistics") -> Capture:
    """Record every API call made inside the ``with`` block as msprobe's dump:
    ``path/step<step>/rank<rank>/{dump.json, stack.json, construct.json, dump_tensor_data/}``.

    task: "tensor" saves each tensor as a .pt file beside its statistics; "statistics" writes only
    Max/Min/Mean/Norm. scope: the first and last API to record; list: API names (or parts of them) to
    keep; data_mode: any of "forward", "backward", "input", "output" ("all" by default); summary_mode:
    "md5" adds each tensor's checksum (a CRC32, under msprobe's key "md5"). Run the backward inside the
    block: its entries are written when the block ends.
    """
    return Capture(path, task=task, level=level, scope=scope, list=list, data_mode=data_mode, step=step, rank=rank,
                   summary_mode=summary_mode)


def _rank_folder(rank: int | None) -> str:
    if rank is not None:
        return f"rank{int(rank)}"
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return f"rank{torch.distributed.get_rank()}"
    return f"proc{os.getpid()}"  # msprobe's name for a process that knows no rank


class _Recorder(TorchFunctionMode):
    def __init__(self, writer: DumpWriter, selection: Selection, unrecorded: list[str]):
        super().__init__()
        self.writer = writer
        self.selection = selection
        self.window = ScopeWindow(selection.scope)
        self.unrecorded = unrecorded
        self.counters: dict[str, int] = {}
        self.closed = False
        self._busy = threading.local()
        self._made: set[int] = set()  # sequence numbers of the autograd nodes calls in the capture made
        self._pending: list[PendingWork] = []  # async collectives, recorded when waited on
        self._first_node = _next_sequence_nr()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(self._busy, "on", False) or self.closed:
            return func(*args, **kwargs)
        if is_compiling():
            return func(*args, **kwargs)
        frame = caller_frame(1)
        name = api_name(func, frame)
        if name is None:
            result = func(*args, **kwargs)
            self._note_made(result)
            return result
        index = self.counters.get(name, 0)
        self.counters[name] = index + 1
        api = f"{name}.{index}"
        self._check_sources(api, args, kwargs)
        if not (self.window.admits(api) and self.selection.named(api)):
            result = func(*args, **kwargs)
            self._note_made(result)
            return result
        inputs = None
        if self.selection.wants("forward") and writes_its_inputs(name, kwargs):
            # Described (and saved) before the call changes them, as msprobe records an in-place call:
            # an optimizer's add_ or lerp_ is judged on what the step used, not on its own result.
            inputs = self._described_inputs(api, func, args, kwargs, frame)
        result = func(*args, **kwargs)
        self._note_made(result)
        self._busy.on = True
        try:
            if self.selection.wants("forward"):
                if inputs is None:
                    inputs = self._described_inputs(api, func, args, kwargs, frame)
                self._forward(api, inputs, result, frame)
            if self.selection.wants("backward") and not _dropout_p0(name, args, kwargs):
                self._hook_backward(api, result)
        finally:
            self._busy.on = False
        return result

    def collective(self, name: str, func, args: tuple, kwargs: dict):
        """One torch.distributed call (capturing/collectives.py), recorded as ``Distributed.<name>``."""
        if getattr(self._busy, "on", False) or self.closed or is_compiling():
            return func(*args, **kwargs)
        qualified = f"Distributed.{name}"
        index = self.counters.get(qualified, 0)
        self.counters[qualified] = index + 1
        api = f"{qualified}.{index}"
        if not (self.window.admits(api) and self.selection.named(api) and self.selection.wants("forward")):
            return func(*args, **kwargs)
        key, sink, frame = f"{api}.forward", self.writer.sink, caller_frame(2)
        self._busy.on = True  # the collective's own tensor ops are not calls of the program
        try:
            entry: dict[str, Any] = {}
            if self.selection.parts("input"):
                entry["input_args"] = [None if written_only(name, i) else describe(a, f"{key}.input.{i}", sink)
                                       for i, a in enumerate(args)]
                entry["input_kwargs"] = {k: None if written_only(name, k) else describe(v, f"{key}.input.{k}", sink)
                                         for k, v in kwargs.items()}
            result = func(*args, **kwargs)
        finally:
            self._busy.on = False

        def finish() -> None:
            self._busy.on = True
            try:
                if self.selection.parts("output"):
                    after = [*args, *kwargs.values()]
                    entry["output"] = [describe(v, f"{key}.output.{i}", sink) for i, v in enumerate(after)]
                self.writer.add(key, entry, _stack(frame))
            finally:
                self._busy.on = False

        if result is not None and callable(getattr(result, "wait", None)):  # async_op: recorded at its wait()
            pending = PendingWork(result, finish)
            self._pending.append(pending)
            return pending
        finish()
        return result

    def finish_pending(self) -> None:
        for pending in self._pending:
            pending.finish()

    def _described_inputs(self, api: str, func, args: tuple, kwargs: dict, frame) -> dict[str, Any]:
        if not self.selection.parts("input"):
            return {}
        was_busy = getattr(self._busy, "on", False)
        self._busy.on = True
        try:
            key, sink = f"{api}.forward", self.writer.sink
            called_args, called_kwargs = as_called(func, args, kwargs, frame)
            return {"input_args": [describe(a, f"{key}.input.{i}", sink) for i, a in enumerate(called_args)],
                    "input_kwargs": {k: describe(v, f"{key}.input.{k}", sink) for k, v in called_kwargs.items()}}
        finally:
            self._busy.on = was_busy

    def _forward(self, api: str, inputs: dict[str, Any], result: Any, frame) -> None:
        key = f"{api}.forward"
        entry: dict[str, Any] = dict(inputs)
        if self.selection.parts("output"):
            outputs = list(result) if isinstance(result, (tuple, list)) else [result]
            entry["output"] = [describe(o, f"{key}.output.{i}", self.writer.sink) for i, o in enumerate(outputs)]
        self.writer.add(key, entry, _stack(frame))

    def _hook_backward(self, api: str, result: Any) -> None:
        first = _first_tensor(result)
        if first is None or not (first.requires_grad and torch.is_grad_enabled()) or first.grad_fn is None:
            return
        key = f"{api}.backward"

        def hook(grad_inputs, grad_outputs):
            if self.closed:
                return None
            self._busy.on = True
            try:
                sink = self.writer.sink
                entry: dict[str, Any] = {}
                if self.selection.parts("input"):
                    entry["input"] = [describe(g, f"{key}.input.{i}", sink) for i, g in enumerate(grad_outputs)]
                if self.selection.parts("output"):
                    entry["output"] = [describe(g, f"{key}.output.{i}", sink) for i, g in enumerate(grad_inputs)]
                self.writer.add(key, entry, None)
            finally:
                self._busy.on = False
            return None

        first.grad_fn.register_hook(hook)

    def _note_made(self, result: Any) -> None:
        for tensor in _tensors(result):
            if tensor.grad_fn is not None:
                self._made.add(tensor.grad_fn._sequence_nr())

    def _check_sources(self, api: str, args: tuple, kwargs: dict) -> None:
        """Name an input whose autograd node was made in the capture, but by no call the mode saw."""
        for where, tensor in _named_tensors(args, kwargs):
            node = tensor.grad_fn
            if node is None:
                continue
            number = node._sequence_nr()
            if number >= self._first_node and number not in self._made:
                self._made.add(number)  # one report per gap
                self.unrecorded.append(f"{where} of {api} came from {node.name()}, made by code capture cannot "
                                       "see (torch.jit.script, a compiled region or an extension op)")


def writes_its_inputs(name: str, kwargs: dict) -> bool:
    """An in-place call (add_, __iadd__, relu(inplace=True)) or one given out=: it changes an input."""
    return is_inplace(name) or kwargs.get("out") is not None or kwargs.get("inplace") is True


def _next_sequence_nr() -> int:
    with torch.enable_grad():
        return (torch.zeros((), requires_grad=True) * 1).grad_fn._sequence_nr() + 1


def _dropout_p0(name: str, args: tuple, kwargs: dict) -> bool:
    """msprobe writes no backward for a dropout with p=0 (an identity); capture agrees."""
    if "dropout" not in name:
        return False
    p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
    return p == 0


def _first_tensor(value: Any) -> torch.Tensor | None:
    return next(iter(_tensors(value)), None)


def _tensors(value: Any, depth: int = 0):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)) and depth < 4:
        for item in value:
            yield from _tensors(item, depth + 1)
    elif isinstance(value, dict) and depth < 4:
        for item in value.values():
            yield from _tensors(item, depth + 1)


def _named_tensors(args: tuple, kwargs: dict):
    for i, value in enumerate(args):
        for tensor in _tensors(value):
            yield f"input {i}", tensor
    for name, value in kwargs.items():
        for tensor in _tensors(value):
            yield f"input {name!r}", tensor


def _stack(frame) -> list[str]:
    lines = []
    for summary in traceback.extract_stack(frame)[::-1]:
        if summary.filename.startswith(_HERE) or summary.filename.endswith(_TORCH_OVERRIDES):
            continue
        lines.append(f"File {summary.filename}, line {summary.lineno}, in {summary.name}, \n {summary.line or ''}")
    return lines
