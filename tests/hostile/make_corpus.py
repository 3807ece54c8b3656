"""A corpus of hostile dumps: each item a dump folder with one bad entry (or a bad file) and one good entry.

Run ``python tests/hostile/make_corpus.py OUTDIR`` to write it; tests/end_to_end/test_hostile.py builds it in a
temporary folder and checks that every item ends as the skip, input error or usage error it names,
that no payload runs, that nothing outside the dump is opened, and that the good entry still passes.
Nothing here is committed as a binary: every file is made by this script.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

GOOD_KEY = "Functional.relu.0.forward"
BAD_KEY = "Functional.relu.1.forward"
WHOLE_FILE = "dump.json"  # the key of the one record a dump.json that cannot be read gets


@dataclass(frozen=True)
class Context:
    """Where an item is built: its dump folder, the folder outside every dump, and the marker folder."""

    dump: Path  # <root>/<item>, holding step0/rank0/dump.json
    outside: Path  # a secret file and a payload live here; nothing may open them
    markers: Path  # a payload that runs leaves a file here

    @property
    def rank(self) -> Path:
        return self.dump / "step0" / "rank0"

    @property
    def data(self) -> Path:
        return self.rank / "dump_tensor_data"

    def payload(self, name: str) -> str:
        """Python that leaves a marker when it runs."""
        return f"open({str(self.markers / name)!r}, 'w').write('ran')\n"


@dataclass(frozen=True)
class Item:
    name: str
    build: Callable[[Context], None]
    key: str  # the entry whose outcome is checked
    status: str  # "skip", "input-error" or "pass"
    reason: str = ""  # a skip's reason
    whole_file: bool = False  # the dump.json cannot be read: one input-error record, no good case
    needs_non_root: bool = False


# ---------------------------------------------------------------- descriptors


def stats(shape=(4,), dtype="torch.float32", **extra) -> dict:
    desc = {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": 1.0, "Min": -1.0, "Mean": 0.0,
            "Norm": 1.0, "requires_grad": False}
    desc.update(extra)
    return desc


def call(*args, output=None, **kwargs) -> dict:
    return {"input_args": list(args), "input_kwargs": kwargs, "output": [output or stats()]}


def string(value: str) -> dict:
    return {"type": "str", "value": value}


def integer(value: int) -> dict:
    return {"type": "int", "value": value}


HUGE = [40000, 25000]  # 10**9 float32 elements: 4 GiB on the device, 8 GiB for the float64 golden
ANSI_KEY = "Functional.relu\x1b[2J\x1b[31m.1.forward"  # clears the screen and turns it red


def write_dump(ctx: Context, entries: dict, *, task: str = "statistics", good: bool = True) -> None:
    ctx.rank.mkdir(parents=True, exist_ok=True)
    data = ({GOOD_KEY: call(stats())} if good and task == "statistics" else {}) | entries
    document = {"task": task, "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}
    (ctx.rank / "dump.json").write_text(json.dumps(document))


def statistics_item(name: str, entries: Callable[[Context], dict], key: str, status: str, reason: str = "") -> Item:
    return Item(name, lambda ctx: write_dump(ctx, entries(ctx)), key, status, reason)


# ---------------------------------------------------------------- tensor dumps


def tensor_dump(ctx: Context, bad_name: str, make_bad: Callable[[Context, Path], None] | None,
                shape=(4,)) -> None:
    """A tensor-mode dump: a good relu with real files, and one whose input file ``bad_name`` is bad."""
    ctx.data.mkdir(parents=True, exist_ok=True)
    good = torch.linspace(-1, 1, 4)  # relu's good case
    torch.save(good, ctx.data / "good.in.pt")
    torch.save(torch.relu(good), ctx.data / "good.out.pt")
    if make_bad is not None:
        make_bad(ctx, ctx.data / bad_name)
    entries = {
        GOOD_KEY: call(stats(data_name="good.in.pt"), output=stats(data_name="good.out.pt")),
        BAD_KEY: call(stats(shape, data_name=bad_name), output=stats(shape, data_name="good.out.pt")),
    }
    write_dump(ctx, entries, task="tensor", good=False)


def tensor_item(name: str, bad_name: str, make_bad, status: str = "input-error", reason: str = "",
                shape=(4,), needs_non_root: bool = False) -> Item:
    return Item(name, lambda ctx: tensor_dump(ctx, bad_name, make_bad, shape), BAD_KEY, status, reason,
                needs_non_root=needs_non_root)


class _Payload:
    """Unpickling this runs a shell command: weights_only loading must refuse it."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _outside_file(ctx: Context) -> Path:
    secret = ctx.outside / "secret.pt"
    torch.save(torch.zeros(4), secret)
    return secret


def _truncated(ctx: Context, path: Path) -> None:
    torch.save(torch.zeros(4), path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _inflated(ctx: Context, path: Path) -> None:
    # torch.save of a view writes its whole storage: 4 MB behind a declared [8, 32].
    torch.save(torch.randn(1_000_000)[:256].view(8, 32), path)


def _linked_data_folder(ctx: Context) -> None:
    elsewhere = ctx.outside / "tensors"
    elsewhere.mkdir()
    torch.save(torch.zeros(4), elsewhere / "x.pt")
    (elsewhere / "test_payload.py").write_text(ctx.payload("linked-test") + "def test_x():\n    pass\n")
    ctx.rank.mkdir(parents=True)
    ctx.data.symlink_to(elsewhere, target_is_directory=True)
    entries = {BAD_KEY: call(stats(data_name="x.pt"), output=stats(data_name="x.pt"))}
    write_dump(ctx, entries, task="tensor", good=False)
    # The good entry lives in a sibling rank folder with real files.
    sibling = Context(ctx.dump, ctx.outside, ctx.markers)
    rank1 = sibling.dump / "step0" / "rank1"
    (rank1 / "dump_tensor_data").mkdir(parents=True)
    torch.save(torch.linspace(-1, 1, 4), rank1 / "dump_tensor_data" / "in.pt")
    document = {"task": "tensor", "level": "L1", "framework": "pytorch", "dump_data_dir": None,
                "data": {GOOD_KEY: call(stats(data_name="in.pt"), output=stats(data_name="in.pt"))}}
    (rank1 / "dump.json").write_text(json.dumps(document))


def _linked_beside_good(ctx: Context) -> None:
    """The link beside entries that never read through it: they end as they would without it."""
    elsewhere = ctx.outside / "tensors"
    elsewhere.mkdir()
    torch.save(torch.zeros(4), elsewhere / "x.pt")
    ctx.rank.mkdir(parents=True)
    ctx.data.symlink_to(elsewhere, target_is_directory=True)
    write_dump(ctx, {BAD_KEY: call(stats(data_name="x.pt"), output=stats())}, task="tensor", good=False)
    document = json.loads((ctx.rank / "dump.json").read_text())
    document["data"] = {GOOD_KEY: call(stats()), **document["data"]}  # synthesized: no file to read
    (ctx.rank / "dump.json").write_text(json.dumps(document))


def _save(value) -> Callable[[Context, Path], None]:
    return lambda ctx, path: torch.save(value, path)


TENSOR_ITEMS = [
    Item("data_name-climbs-out", lambda ctx: tensor_dump(ctx, os.path.relpath(_outside_file(ctx), ctx.data), None),
         BAD_KEY, "input-error"),
    Item("data_name-absolute", lambda ctx: tensor_dump(ctx, str(_outside_file(ctx)), None), BAD_KEY, "input-error"),
    tensor_item("data_name-links-out", "link.pt", lambda ctx, path: path.symlink_to(_outside_file(ctx))),
    Item("dump_tensor_data-links-out", _linked_data_folder, BAD_KEY, "input-error"),
    Item("dump_tensor_data-links-out-beside-good", _linked_beside_good, BAD_KEY, "input-error"),
    tensor_item("truncated-pt", "bad.pt", _truncated),
    tensor_item("zero-byte-pt", "bad.pt", lambda ctx, path: path.write_bytes(b"")),
    tensor_item("dict-pt", "bad.pt", _save({"a": torch.zeros(4)})),
    tensor_item("wrong-shape-pt", "bad.pt", _save(torch.zeros(5))),
    tensor_item("folder-pt", "bad.pt", lambda ctx, path: path.mkdir()),
    tensor_item("pickle-payload-pt", "bad.pt", lambda ctx, path: torch.save(_Payload(ctx.markers / "pickle"), path)),
    tensor_item("pickle-payload-npy", "bad.npy", lambda ctx, path: np.save(
        path, np.array([_Payload(ctx.markers / "npy")], dtype=object), allow_pickle=True)),
    tensor_item("meta-pt", "bad.pt", _save(torch.empty(4, device="meta"))),
    tensor_item("sparse-pt", "bad.pt", _save(torch.zeros(4).to_sparse())),
    tensor_item("fifo-pt", "bad.pt", lambda ctx, path: os.mkfifo(path)),
    tensor_item("unreadable-pt", "bad.pt", lambda ctx, path: (torch.save(torch.zeros(4), path), path.chmod(0)),
                needs_non_root=True),
    tensor_item("inflated-storage-pt", "bad.pt", _inflated, shape=(8, 32)),
]


# ---------------------------------------------------------------- statistics entries and names


def _secret_path(ctx: Context) -> str:
    return str(_outside_file(ctx))


NAME_ITEMS = [
    statistics_item("os-system", lambda ctx: {"Torch.os.system.0.forward": call(
        string(f"touch {ctx.markers / 'os-system'}"))}, "Torch.os.system.0.forward", "skip", "unsupported-op"),
    statistics_item("torch-load", lambda ctx: {"Torch.load.0.forward": call(string(_secret_path(ctx)))},
                    "Torch.load.0.forward", "skip", "unsupported-op"),
    statistics_item("torch-from-file", lambda ctx: {"Torch.from_file.0.forward": call(string(_secret_path(ctx)))},
                    "Torch.from_file.0.forward", "skip", "unsupported-op"),
    statistics_item("hub-load", lambda ctx: {"Torch.hub.load.0.forward": call(string("owner/repo"), string("model"))},
                    "Torch.hub.load.0.forward", "skip", "unsupported-op"),
    statistics_item("reduce-ex", lambda ctx: {"Tensor.__reduce_ex__.0.forward": call(stats(), {"type": "int",
                                                                                                "value": 2})},
                    "Tensor.__reduce_ex__.0.forward", "skip", "unsupported-op"),
    statistics_item("setstate", lambda ctx: {"Tensor.__setstate__.0.forward": call(stats(), string("x"))},
                    "Tensor.__setstate__.0.forward", "skip", "unsupported-op"),
    statistics_item("share-memory", lambda ctx: {"Tensor.share_memory_.0.forward": call(stats())},
                    "Tensor.share_memory_.0.forward", "skip", "unsupported-op"),
    statistics_item("functional-class", lambda ctx: {"Functional.__class__.0.forward": call(stats())},
                    "Functional.__class__.0.forward", "skip", "unsupported-op"),
    statistics_item("torch-c-walk", lambda ctx: {"Torch._C._get_tracing_state.0.forward": call()},
                    "Torch._C._get_tracing_state.0.forward", "skip", "unsupported-op"),
    statistics_item("subclasses-walk", lambda ctx: {"Tensor.__class__.__subclasses__.0.forward": call(stats())},
                    "Tensor.__class__.__subclasses__.0.forward", "skip", "unsupported-op"),
    statistics_item("tensor-type-import", lambda ctx: {"Tensor.type.0.forward": call(stats(), string("os.system"))},
                    "Tensor.type.0.forward", "skip", "unsupported-op"),
    statistics_item("shape-10-to-12", lambda ctx: {BAD_KEY: call(stats((10**12,)), output=stats((10**12,)))},
                    BAD_KEY, "skip", "too-large"),
    statistics_item("shape-10-to-9", lambda ctx: {BAD_KEY: call(stats((10**9,)), output=stats((10**9,)))},
                    BAD_KEY, "skip", "too-large"),
    statistics_item("shape-2-to-70", lambda ctx: {BAD_KEY: call(stats((2**35, 2**35)))}, BAD_KEY, "skip", "too-large"),
    statistics_item("negative-shape", lambda ctx: {BAD_KEY: call(stats((-4,)))}, BAD_KEY, "skip", "malformed-entry"),
    statistics_item("input-args-not-a-list", lambda ctx: {BAD_KEY: {"input_args": {"a": 1}, "input_kwargs": {},
                                                                    "output": []}},
                    BAD_KEY, "skip", "malformed-entry"),
    statistics_item("no-input-args", lambda ctx: {BAD_KEY: {"output": []}}, BAD_KEY, "skip", "malformed-entry"),
    statistics_item("float128", lambda ctx: {BAD_KEY: call(stats(dtype="torch.float128"))}, BAD_KEY, "skip",
                    "missing-data"),
    statistics_item("max-below-min", lambda ctx: {BAD_KEY: call(stats(Max=-1.0, Min=1.0))}, BAD_KEY, "pass"),
    statistics_item("negative-norm", lambda ctx: {BAD_KEY: call(stats(Norm=-3.0))}, BAD_KEY, "pass"),
    statistics_item("bare-nan-and-infinity", lambda ctx: {BAD_KEY: call(stats(Max=float("inf"), Min=float("-inf"),
                                                                             Mean=float("nan")))}, BAD_KEY, "pass"),
    statistics_item("arguments-nested-deep", lambda ctx: {BAD_KEY: call(stats(), json.loads("[" * 500 + "]" * 500))},
                    BAD_KEY, "skip", "malformed-entry"),
    statistics_item("string-of-50-mb", lambda ctx: {BAD_KEY: call(stats(), approximate=string("x" * 50_000_000))},
                    BAD_KEY, "input-error"),
    statistics_item("backward-without-forward", lambda ctx: {"Functional.relu.7.backward": {
        "input": [stats()], "output": [stats()]}}, "Functional.relu.7.backward", "skip", "no-forward"),
    statistics_item("key-with-newline", lambda ctx: {"Functional.re\nlu.1.forward": call(stats())},
                    "Functional.re\nlu.1.forward", "skip", "malformed-entry"),
    statistics_item("key-with-dot-dot", lambda ctx: {"Torch.../../etc.0.forward": call(stats())},
                    "Torch.../../etc.0.forward", "skip", "unsupported-op"),
    statistics_item("key-with-ansi-escape", lambda ctx: {ANSI_KEY: call(stats())}, ANSI_KEY, "input-error"),
    statistics_item("int64-max-nan", lambda ctx: {BAD_KEY: call(stats(dtype="torch.int64", Max=float("nan")))},
                    BAD_KEY, "input-error"),
    statistics_item("int32-min-infinity", lambda ctx: {BAD_KEY: call(stats(dtype="torch.int32", Min=float("-inf")))},
                    BAD_KEY, "input-error"),
]


# ---------------------------------------------------------------- factory calls that a small output hides


def factory_item(name: str, api: str, *args, **kwargs) -> Item:
    key = f"{api}.0.forward"
    return statistics_item(name, lambda ctx: {key: call(*args, **kwargs)}, key, "skip", "too-large")


FACTORY_ITEMS = [
    factory_item("torch-ones-huge", "Torch.ones", *map(integer, HUGE)),
    factory_item("torch-zeros-size", "Torch.zeros", {"type": "torch.Size", "value": HUGE}),
    factory_item("torch-full-list", "Torch.full", [integer(d) for d in HUGE], {"type": "float", "value": 1.0}),
    factory_item("torch-ones-size-keyword", "Torch.ones", size={"type": "torch.Size", "value": HUGE}),
    factory_item("torch-arange-huge-end", "Torch.arange", integer(10**9)),
    factory_item("torch-linspace-huge-steps", "Torch.linspace", integer(0), integer(1), integer(10**9)),
    factory_item("torch-eye-huge", "Torch.eye", integer(40000)),
    factory_item("torch-ones-like-huge", "Torch.ones_like", stats(HUGE)),
]


# ---------------------------------------------------------------- whole files and folders


def _raw_dump(text: str | bytes) -> Callable[[Context], None]:
    def build(ctx: Context) -> None:
        ctx.rank.mkdir(parents=True)
        target = ctx.rank / "dump.json"
        target.write_bytes(text if isinstance(text, bytes) else text.encode())
    return build


def _duplicate_keys(ctx: Context) -> None:
    ctx.rank.mkdir(parents=True)
    good = json.dumps(call(stats()))
    (ctx.rank / "dump.json").write_text(
        '{"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": null, "data": {'
        f'"{BAD_KEY}": {{"input_args": "first copy"}}, "{GOOD_KEY}": {good}, "{BAD_KEY}": {good}}}}}')


def _fifo_dump(ctx: Context) -> None:
    ctx.rank.mkdir(parents=True)
    os.mkfifo(ctx.rank / "dump.json")


def _linked_dump(ctx: Context) -> None:
    ctx.rank.mkdir(parents=True)
    elsewhere = ctx.outside / "dump.json"
    elsewhere.write_text(json.dumps({"task": "statistics", "data": {GOOD_KEY: call(stats())}}))
    (ctx.rank / "dump.json").symlink_to(elsewhere)


def _with_payloads(ctx: Context) -> None:
    write_dump(ctx, {})
    (ctx.dump / "conftest.py").write_text(ctx.payload("conftest"))
    (ctx.dump / "step0" / "test_payload.py").write_text(ctx.payload("test-file") + "def test_x():\n    pass\n")
    (ctx.dump / "op_cases").mkdir()
    (ctx.dump / "op_cases" / "cases.yaml").write_text(
        f"cases:\n  - op: os.system\n    dtypes: [float32]\n    inputs: [{{value: 'touch {ctx.markers / 'yaml'}'}}]\n")
    (ctx.rank / "loop").symlink_to("..", target_is_directory=True)


FILE_ITEMS = [
    Item("malformed-json", _raw_dump('{"data": {'), WHOLE_FILE, "input-error", whole_file=True),
    Item("truncated-json", _raw_dump(json.dumps({"task": "statistics", "data": {GOOD_KEY: call(stats())}})[:60]),
         WHOLE_FILE, "input-error", whole_file=True),
    Item("empty-json", _raw_dump(""), WHOLE_FILE, "input-error", whole_file=True),
    Item("not-utf-8", _raw_dump(b'{"data": {"\xff": 1}}'), WHOLE_FILE, "input-error", whole_file=True),
    Item("top-level-array", _raw_dump("[1, 2, 3]"), WHOLE_FILE, "input-error", whole_file=True),
    Item("no-data", _raw_dump('{"task": "statistics"}'), WHOLE_FILE, "input-error", whole_file=True),
    Item("nested-10000-deep", _raw_dump('{"data": ' + "[" * 10_000 + "]" * 10_000 + "}"), WHOLE_FILE,
         "input-error", whole_file=True),
    Item("fifo-dump-json", _fifo_dump, WHOLE_FILE, "input-error", whole_file=True),
    Item("dump-json-links-out", _linked_dump, WHOLE_FILE, "input-error", whole_file=True),
    Item("duplicate-keys", _duplicate_keys, BAD_KEY, "input-error"),
    Item("code-in-the-dump-folder", _with_payloads, GOOD_KEY, "pass"),
]

ITEMS = TENSOR_ITEMS + NAME_ITEMS + FACTORY_ITEMS + FILE_ITEMS


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def build(root: Path, outside: Path, markers: Path, items=ITEMS) -> list[Item]:
    """Write every item as ``root/<name>``; return the items built (chmod items skip under root)."""
    built = []
    for item in items:
        if item.needs_non_root and is_root():
            continue  # root reads a chmod-000 file anyway
        item_outside = outside / item.name
        item_outside.mkdir(parents=True)
        item.build(Context(root / item.name, item_outside, markers))
        built.append(item)
    return built


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/hostile/make_corpus.py OUTDIR")
    out = Path(sys.argv[1])
    for folder in ("dumps", "outside", "markers"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    made = build(out / "dumps", out / "outside", out / "markers")
    print(f"{len(made)} items in {out / 'dumps'}: run pytest --npu-precision={out / 'dumps'} --npu-precision-device cpu")
