"""Write small example dumps in msprobe's format, without an NPU and without msprobe.

This script trains two tiny models for one step on the CPU (fixed seeds, one thread) and records
the public PyTorch APIs they call, the way Huawei's msprobe tool (mindstudio-probe 26.2.0) does at
level L1. It imitates msprobe's dump format; it does not use or need msprobe: the recording
mechanism below is our own (a few torch functions are wrapped while the step runs).

What is written, per dump, under ``<out>/<name>/step0/rank0/``:

- ``dump.json``: ``{"task", "level": "L1", "framework": "pytorch", "dump_data_dir", "data"}``.
  ``data`` holds one forward entry per outermost call of a recorded API, keyed
  ``<Prefix>.<api>.<call index>.forward`` (``Functional`` for ``torch.nn.functional``, ``Torch``
  for ``torch``, ``Tensor`` for tensor methods and operators; the index counts per API from 0),
  then one backward entry per API whose output got a gradient, in the order the gradients arrive,
  then the optimizer's ``Tensor.add_`` updates. A forward entry is ``{"input_args", "input_kwargs",
  "output"}``; a backward entry is ``{"input": [grad of each output], "output": [grad of each
  tensor argument, null where it has none]}``. Note that msprobe's own backward ``output`` holds the
  gradients of the last autograd node instead (for a 2-D linear: bias, null, weight transposed).
- ``dump_tensor_data/<key>.<input|kwargs|output>.<index>.pt`` (task ``tensor`` only): every
  recorded tensor, ``torch.save``-d as a detached contiguous clone; the descriptor's ``data_name``
  is the file name. Task ``statistics`` writes no files and ``dump_data_dir: null``.
- ``stack.json`` (the call stack of each forward entry, limited to this script and torch) and
  ``construct.json`` (``{}``, as msprobe writes at L1).

Tensor descriptors carry ``type, dtype, shape, Max, Min, Mean, Norm, requires_grad[, data_name]``,
with the statistics computed in the tensor's own dtype (integer tensors: Max and Min only; bool:
any and all; 0-d tensors: the value four times). Scalars are ``{"type": "int", "value": 3}``,
tuples and lists are JSON lists, ``None`` is ``null``, a dtype is
``{"type": "torch.dtype", "value": "torch.float32"}``.

Regenerating gives the same dump.json bytes (apart from the absolute ``dump_data_dir``) and the
same tensors. ``torch.save`` stamps every file with a random id, so a ``.pt`` file whose tensor
did not change is left in place rather than rewritten.

Usage::

    python examples/make_example_dump.py                        # all dumps into examples/dumps
    python examples/make_example_dump.py --out /tmp/d mlp_tensor
    pytest --npu-precision examples/dumps/mlp_tensor
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import shutil
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 1234
LEVEL = "L1"
TENSOR_DIR = "dump_tensor_data"
HERE = Path(__file__).resolve()
DEFAULT_OUT = HERE.parent / "dumps"
TORCH_ROOT = Path(torch.__file__).resolve().parent.parent

# The APIs recorded: msprobe prefix, the namespace they live in, and their names there.
RECORDED_APIS = (
    ("Functional", F, ("linear", "relu", "gelu", "silu", "layer_norm", "softmax", "dropout",
                       "embedding", "cross_entropy")),
    ("Torch", torch, ("matmul", "bmm", "softmax", "add", "mul")),
    ("Tensor", torch.Tensor, ("__add__", "__sub__", "__mul__", "__truediv__", "__matmul__", "add_")),
)

_MISSING = object()


# ---------------------------------------------------------------- descriptors


def tensor_stats(t: torch.Tensor) -> tuple:
    """(Max, Min, Mean, Norm) as msprobe writes them, computed in the tensor's own dtype."""
    t = t.detach()
    if t.numel() == 0:
        return None, None, None, None
    if t.dtype == torch.bool:
        return bool(t.any()), bool(t.all()), None, None
    if not t.is_floating_point():
        return int(t.max()), int(t.min()), None, None
    if t.dim() == 0:
        value = t.item()
        return value, value, value, value
    return t.max().item(), t.min().item(), t.mean().item(), torch.norm(t).item()


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


class TensorStore:
    """Saves tensor files; keeps an existing file when it already holds the same tensor."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        self.written: set[str] = set()
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)

    def save(self, tensor: torch.Tensor, name: str) -> None:
        if name in self.written:
            raise RuntimeError(f"tensor file {name} would be written twice")
        self.written.add(name)
        path = self.folder / name
        data = tensor.detach().clone().contiguous()
        if path.exists():
            try:
                old = torch.load(path, weights_only=True)
            except Exception:  # noqa: BLE001 - a broken old file is simply replaced
                old = None
            if isinstance(old, torch.Tensor) and _same_tensor(old, data):
                return
        torch.save(data, path)

    def remove_stale(self) -> None:
        if self.folder is None:
            return
        for path in sorted(self.folder.iterdir()):
            if path.name not in self.written:
                path.unlink()


class Recorder:
    """Wraps ``RECORDED_APIS`` while active and records each outermost call msprobe-style."""

    def __init__(self, store: TensorStore):
        self.store = store
        self.data: dict[str, object] = {}
        self.counts: dict[str, int] = {}
        self.stacks: dict[tuple[str, ...], list[str]] = {}
        self.depth = 0  # > 0 while a recorded call (or our own bookkeeping) runs
        self._saved: list[tuple[object, str, object]] = []

    # -- patching

    def __enter__(self) -> "Recorder":
        for prefix, namespace, names in RECORDED_APIS:
            for name in names:
                original = getattr(namespace, name)
                self._saved.append((namespace, name, vars(namespace).get(name, _MISSING)))
                setattr(namespace, name, self._wrap(f"{prefix}.{name}", name, original))
        return self

    def __exit__(self, *exc) -> None:
        for namespace, name, original in reversed(self._saved):
            if original is _MISSING:
                delattr(namespace, name)
            else:
                setattr(namespace, name, original)
        self._saved.clear()
        self.finish()

    def _wrap(self, api: str, name: str, original):
        in_place = name.endswith("_") and not name.startswith("__")

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            if self.depth:
                return original(*args, **kwargs)
            self.depth += 1
            try:
                return self._call(api, in_place, original, sys._getframe(1), args, kwargs)
            finally:
                self.depth -= 1

        return wrapper

    # -- recording

    def _call(self, api, in_place, original, frame, args, kwargs):
        index = self.counts.get(api, 0)
        self.counts[api] = index + 1
        key = f"{api}.{index}.forward"
        self._add_stack(key, frame)
        entry = {
            "input_args": [self.describe(a, f"{key}.input.{i}") for i, a in enumerate(args)],
            "input_kwargs": {k: self.describe(v, f"{key}.kwargs.{k}") for k, v in kwargs.items()},
            "output": [],
        }
        self.data[key] = entry  # inputs are recorded before an in-place op changes them
        tracked = torch.is_grad_enabled() and not in_place
        backward = _PendingBackward(f"{api}.{index}.backward")
        grads_of_args = backward.arg_grads

        def alias(value):
            if isinstance(value, torch.Tensor):
                position = len(grads_of_args)
                grads_of_args.append(None)
                if tracked and value.requires_grad:
                    # A view of its own, so its hook sees exactly this call's share of the gradient.
                    view = value.view_as(value)
                    view.register_hook(functools.partial(self._on_arg_grad, backward, position))
                    return view
                return value
            if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
                return type(value)(alias(v) for v in value)
            return value

        call_args = alias(list(args))
        call_kwargs = {k: alias(v) for k, v in kwargs.items()}
        result = original(*call_args, **call_kwargs)

        outputs = list(result) if isinstance(result, (list, tuple)) and not isinstance(result, torch.Size) \
            else [result]
        entry["output"] = [self.describe(o, f"{key}.output.{i}") for i, o in enumerate(outputs)]
        backward.out_grads = [None] * len(outputs)
        if tracked:
            for i, out in enumerate(outputs):
                if isinstance(out, torch.Tensor) and out.grad_fn is not None:
                    out.register_hook(functools.partial(self._on_out_grad, backward, i))
        return result

    def _on_out_grad(self, backward, i, grad):
        self.depth += 1
        try:
            if backward.key not in self.data:
                self.data[backward.key] = backward  # the backward entry's place: its first gradient
            backward.out_grads[i] = self.describe(grad, f"{backward.key}.input.{i}")
        finally:
            self.depth -= 1

    def _on_arg_grad(self, backward, position, grad):
        self.depth += 1
        try:
            if backward.key not in self.data:
                self.data[backward.key] = backward
            backward.arg_grads[position] = self.describe(grad, f"{backward.key}.output.{position}")
        finally:
            self.depth -= 1

    def finish(self) -> None:
        for key, value in self.data.items():
            if isinstance(value, _PendingBackward):
                self.data[key] = {"input": value.out_grads, "output": value.arg_grads}

    def describe(self, value, name: str):
        """One msprobe value descriptor; ``name`` is the tensor file name without ``.pt``."""
        if isinstance(value, torch.Tensor):
            with torch.no_grad():
                stats = tensor_stats(value)
            desc = {
                "type": "torch.Tensor",
                "dtype": str(value.dtype),
                "shape": list(value.shape),
                "Max": stats[0], "Min": stats[1], "Mean": stats[2], "Norm": stats[3],
                "requires_grad": value.requires_grad,
            }
            if self.store.folder is not None:
                desc["data_name"] = f"{name}.pt"
                self.store.save(value, desc["data_name"])
            return desc
        if isinstance(value, bool):
            return {"type": "bool", "value": value}
        if isinstance(value, int):
            return {"type": "int", "value": value}
        if isinstance(value, float):
            return {"type": "float", "value": value}
        if isinstance(value, str):
            return {"type": "str", "value": value}
        if isinstance(value, torch.dtype):
            return {"type": "torch.dtype", "value": str(value)}
        if isinstance(value, torch.Size):
            return {"type": "torch.Size", "value": list(value)}
        if isinstance(value, torch.device):
            return {"type": "torch.device", "value": str(value)}
        if isinstance(value, slice):
            return {"type": "slice", "value": [value.start, value.stop, value.step]}
        if value is Ellipsis:
            return {"type": "ellipsis", "value": "..."}
        if isinstance(value, (list, tuple)):
            return [self.describe(v, f"{name}.{i}") for i, v in enumerate(value)]
        return None

    # -- stack.json

    def _add_stack(self, key: str, frame) -> None:
        lines = []
        while frame is not None:
            code = frame.f_code
            shown = _shown_path(code.co_filename)
            if shown is not None:
                source = _source_line(code.co_filename, frame.f_lineno)
                lines.append(f"File {shown}, line {frame.f_lineno}, in {code.co_name}, \n {source}")
            frame = frame.f_back
        self.stacks.setdefault(tuple(lines), []).append(key)

    def stack_json(self) -> dict:
        return {str(i): [keys, list(lines)] for i, (lines, keys) in enumerate(self.stacks.items())}


class _PendingBackward:
    def __init__(self, key: str):
        self.key = key
        self.out_grads: list = []
        self.arg_grads: list = []


def _shown_path(filename: str) -> str | None:
    """This script and torch's files, shown without the machine's folders; None hides a frame."""
    try:
        path = Path(filename).resolve()
    except OSError:
        return None
    if path == HERE:
        return HERE.name
    try:
        relative = path.relative_to(TORCH_ROOT)
    except ValueError:
        return None
    return relative.as_posix() if relative.parts[0] == "torch" else None


@functools.lru_cache(maxsize=None)
def _source_lines(filename: str) -> tuple[str, ...]:
    try:
        with open(filename, encoding="utf-8") as handle:
            return tuple(handle.read().splitlines())
    except OSError:
        return ()


def _source_line(filename: str, lineno: int) -> str:
    lines = _source_lines(filename)
    return lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""


# ---------------------------------------------------------------- the models


class TinyMLP(nn.Module):
    """Linear(16, 32) -> gelu -> LayerNorm(32) -> Linear(32, 4)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.norm = nn.LayerNorm(32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(self.norm(F.gelu(self.fc1(x))))


class TinyAttention(nn.Module):
    """One attention head with a residual and LayerNorm, then a 4-class head."""

    def __init__(self, d: int = 8, classes: int = 4):
        super().__init__()
        self.d = d
        self.qkv = nn.Linear(d, 3 * d)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(x.dtype)  # softmax in fp32
        h = self.norm(x + torch.matmul(probs, v))
        return self.head(h)


def mlp_step():
    model = TinyMLP()
    x = torch.randn(8, 16)
    y = torch.randint(0, 4, (8,))
    return model, lambda: F.cross_entropy(model(x), y)


def attention_bf16_step():
    model = TinyAttention().to(torch.bfloat16)
    x = torch.randn(2, 4, 8).to(torch.bfloat16)
    y = torch.randint(0, 4, (2, 4))
    return model, lambda: F.cross_entropy(model(x).flatten(0, 1), y.flatten())


# name: (task, the function building (model, loss closure))
DUMPS = {
    "mlp_tensor": ("tensor", mlp_step),
    "mlp_statistics": ("statistics", mlp_step),
    "attention_bf16_tensor": ("tensor", attention_bf16_step),
}


# ---------------------------------------------------------------- writing


def make_dump(name: str, out: Path) -> Path:
    """Run one training step of dump ``name`` and write it under ``out``; returns the dump.json path."""
    task, build = DUMPS[name]
    dump_dir = out / name / "step0" / "rank0"
    dump_dir.mkdir(parents=True, exist_ok=True)
    tensor_dir = dump_dir / TENSOR_DIR
    if task == "statistics" and tensor_dir.exists():
        shutil.rmtree(tensor_dir)
    store = TensorStore(tensor_dir if task == "tensor" else None)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(SEED)
        model, loss_fn = build()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
        with Recorder(store) as recorder:  # the batch is built before, the optimizer step is inside
            loss = loss_fn()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    store.remove_stale()

    document = {
        "task": task,
        "level": LEVEL,
        "framework": "pytorch",
        "dump_data_dir": str(tensor_dir.resolve()) if task == "tensor" else None,
        "data": recorder.data,
    }
    _write_json(dump_dir / "dump.json", document)
    _write_json(dump_dir / "stack.json", recorder.stack_json())
    _write_json(dump_dir / "construct.json", {})
    return dump_dir / "dump.json"


def _write_json(path: Path, value) -> None:
    text = json.dumps(value, indent=1)  # msprobe's layout; non-finite floats become bare Infinity / NaN
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"dumps to write (default: all): {', '.join(DUMPS)}")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="output folder (default: the dumps folder next to this script)")
    options = parser.parse_args(argv)
    unknown = [name for name in options.names if name not in DUMPS]
    if unknown:
        parser.error(f"unknown dump {unknown[0]!r}; choose from {', '.join(DUMPS)}")
    for name in options.names or list(DUMPS):
        path = make_dump(name, options.out)
        data = json.loads(path.read_text(encoding="utf-8"))["data"]
        print(f"{path}: {len(data)} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
