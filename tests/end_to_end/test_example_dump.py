"""The example dumps in examples/dumps: msprobe's format, consistent, and reproducible by the script."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "make_example_dump.py"
DUMPS = ROOT / "examples" / "dumps"
from fixtures import FIXTURES, made_with_this_torch

# name: task, dtype of the model, {API: number of forward calls}, number of backward entries
EXPECTED = {
    "mlp_tensor": ("tensor", torch.float32, {
        "Functional.linear": 2, "Functional.gelu": 1, "Functional.layer_norm": 1,
        "Functional.cross_entropy": 1, "Tensor.add_": 6}, 5),
    "mlp_statistics": ("statistics", torch.float32, {
        "Functional.linear": 2, "Functional.gelu": 1, "Functional.layer_norm": 1,
        "Functional.cross_entropy": 1, "Tensor.add_": 6}, 5),
    "attention_bf16_tensor": ("tensor", torch.bfloat16, {
        "Functional.linear": 2, "Torch.matmul": 2, "Tensor.__truediv__": 1, "Torch.softmax": 1,
        "Tensor.__add__": 1, "Functional.layer_norm": 1, "Functional.cross_entropy": 1, "Tensor.add_": 6}, 9),
}
# written by examples/make_npu_llm_dump.py and tested in test_npu_llm_example.py
NPU_DUMPS = ["npu_llm_defects_tensor", "npu_llm_tensor"]
TENSOR_KEYS = ["type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad", "data_name"]
KEY = re.compile(r"(?P<api>(?P<prefix>Functional|Torch|Tensor)\.(?P<name>[A-Za-z_][A-Za-z0-9_]*))"
                 r"\.(?P<index>\d+)\.(?P<direction>forward|backward)")


def dump_path(name: str, root: Path = DUMPS) -> Path:
    return root / name / "step0" / "rank0" / "dump.json"


def load(name: str, root: Path = DUMPS) -> dict:
    with open(dump_path(name, root), encoding="utf-8") as handle:
        return json.load(handle)


def descriptors(value, where: str):
    """(where, descriptor) for every tensor descriptor in a forward or backward entry value."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield from descriptors(item, f"{where}.{i}")
    elif isinstance(value, dict) and value.get("type") == "torch.Tensor":
        yield where, value


def entry_tensors(key: str, entry: dict):
    """(expected file stem, descriptor) for each tensor of one entry, named the way msprobe names files."""
    if key.endswith(".forward"):
        yield from descriptors(entry["input_args"], f"{key}.input")
        for name, value in entry["input_kwargs"].items():
            yield from descriptors(value, f"{key}.kwargs.{name}")
        yield from descriptors(entry["output"], f"{key}.output")
    else:
        yield from descriptors(entry["input"], f"{key}.input")
        yield from descriptors(entry["output"], f"{key}.output")


def all_tensors(document: dict):
    for key, entry in document["data"].items():
        yield from entry_tensors(key, entry)


def tensor_file(name: str, data_name: str) -> Path:
    return dump_path(name).parent / "dump_tensor_data" / data_name


@pytest.fixture(scope="module", params=list(EXPECTED))
def dump(request):
    return request.param, load(request.param)


# ---------------------------------------------------------------- layout and keys


def test_the_dumps_are_all_there_and_small():
    assert sorted(p.name for p in DUMPS.iterdir() if p.is_dir()) == sorted([*EXPECTED, *NPU_DUMPS])
    for name in EXPECTED:
        assert sorted(p.name for p in dump_path(name).parent.iterdir()) == sorted(
            ["dump.json", "stack.json", "construct.json"]
            + (["dump_tensor_data"] if EXPECTED[name][0] == "tensor" else []))
    size = sum(p.stat().st_size for p in DUMPS.rglob("*") if p.is_file())
    assert size < 2_500_000, f"examples/dumps holds {size} bytes"


def test_top_level_keys_and_values(dump):
    name, document = dump
    task = EXPECTED[name][0]
    assert list(document) == ["task", "level", "framework", "dump_data_dir", "data"]
    assert (document["task"], document["level"], document["framework"]) == (task, "L1", "pytorch")
    if task == "tensor":
        recorded = Path(document["dump_data_dir"])
        assert recorded.is_absolute()
        assert recorded.parts[-4:] == (name, "step0", "rank0", "dump_tensor_data")
    else:
        assert document["dump_data_dir"] is None


def test_keys_entries_and_call_indices(dump):
    name, document = dump
    _, _, forward_counts, backward_count = EXPECTED[name]
    counts, seen_forward = {}, set()
    backwards = 0
    for key, entry in document["data"].items():
        match = KEY.fullmatch(key)
        assert match, key
        api, index = match["api"], int(match["index"])
        if match["direction"] == "forward":
            assert index == counts.get(api, 0), f"{key}: call indices count per API from 0"
            counts[api] = index + 1
            seen_forward.add(f"{api}.{index}")
            assert list(entry) == ["input_args", "input_kwargs", "output"], key
            assert isinstance(entry["input_args"], list) and isinstance(entry["input_kwargs"], dict)
            assert isinstance(entry["output"], list) and entry["output"], key
        else:
            backwards += 1
            assert f"{api}.{index}" in seen_forward, f"{key} comes before its forward entry"
            assert list(entry) == ["input", "output"], key
    assert counts == forward_counts
    assert backwards == backward_count
    # msprobe's order: the model's forwards, its backwards as the gradients arrive, the optimizer's updates
    directions = [KEY.fullmatch(k)["direction"] for k in document["data"] if not k.startswith("Tensor.add_.")]
    assert directions == sorted(directions, key=lambda d: d == "backward")
    assert list(document["data"])[-6:] == [f"Tensor.add_.{i}.forward" for i in range(6)]


def test_the_first_backward_is_the_loss_and_the_last_is_the_first_linear(dump):
    _, document = dump
    backward = [k for k in document["data"] if k.endswith(".backward")]
    assert backward[0] == "Functional.cross_entropy.0.backward"
    assert backward[-1] == "Functional.linear.0.backward"
    loss_grad = document["data"]["Functional.cross_entropy.0.backward"]["input"][0]
    assert loss_grad["shape"] == [] and loss_grad["Max"] == 1.0


def fixture_tensor_keys() -> list:
    real = FIXTURES / "mlp_tensor" / "step0" / "rank0" / "dump.json"
    if not real.exists():
        pytest.skip(f"the real msprobe fixture {real} is not here")
    with open(real, encoding="utf-8") as handle:
        entry = json.load(handle)["data"]["Functional.linear.0.forward"]
    return list(entry["input_args"][0])


def test_descriptor_key_order_is_msprobes():
    assert fixture_tensor_keys() == TENSOR_KEYS


def test_descriptors(dump):
    name, document = dump
    task, model_dtype, _, _ = EXPECTED[name]
    keys = TENSOR_KEYS if task == "tensor" else TENSOR_KEYS[:-1]
    seen_dtypes = set()
    for where, desc in all_tensors(document):
        assert list(desc) == keys, where
        seen_dtypes.add(desc["dtype"])
        if task == "tensor":
            assert desc["data_name"] == f"{where}.pt"
        assert isinstance(desc["requires_grad"], bool)
        if where.split(".")[3] == "backward":
            assert desc["requires_grad"] is False, where
        if desc["dtype"] == "torch.int64":
            assert isinstance(desc["Max"], int) and desc["Mean"] is None and desc["Norm"] is None
    assert str(model_dtype) in seen_dtypes and "torch.int64" in seen_dtypes
    # scalars, lists and dtypes as msprobe writes them
    layer_norm = document["data"]["Functional.layer_norm.0.forward"]["input_args"]
    width = layer_norm[0]["shape"][-1]
    assert layer_norm[1] == [{"type": "int", "value": width}]
    assert layer_norm[4] == {"type": "float", "value": 1e-05}
    assert document["data"]["Tensor.add_.0.forward"]["input_kwargs"] == {"alpha": {"type": "float", "value": -0.1}}
    if "Torch.softmax.0.forward" in document["data"]:
        assert document["data"]["Torch.softmax.0.forward"]["input_kwargs"] == {
            "dim": {"type": "int", "value": -1}, "dtype": {"type": "torch.dtype", "value": "torch.float32"}}


def test_backward_entries_match_their_forward(dump):
    _, document = dump
    data = document["data"]
    for key, entry in data.items():
        if not key.endswith(".backward"):
            continue
        forward = data[key[: -len("backward")] + "forward"]
        outputs = [d for _, d in descriptors(forward["output"], "")]
        assert [(g["shape"], g["dtype"]) for g in entry["input"]] == [(o["shape"], o["dtype"]) for o in outputs]
        arguments = [d for _, d in descriptors(forward["input_args"], "")]
        arguments += [d for v in forward["input_kwargs"].values() for _, d in descriptors(v, "")]
        assert len(entry["output"]) == len(arguments), key
        for grad, argument in zip(entry["output"], arguments):
            if argument["requires_grad"]:
                assert (grad["shape"], grad["dtype"]) == (argument["shape"], argument["dtype"]), key
            else:
                assert grad is None, key


def test_strict_json(dump):
    name, _ = dump

    def reject(token):
        raise ValueError(f"non-finite {token} in {name}")

    json.loads(dump_path(name).read_text(encoding="utf-8"), parse_constant=reject)


def test_stack_and_construct(dump):
    name, document = dump
    folder = dump_path(name).parent
    assert json.loads((folder / "construct.json").read_text(encoding="utf-8")) == {}
    stack = json.loads((folder / "stack.json").read_text(encoding="utf-8"))
    assert list(stack) == [str(i) for i in range(len(stack))]
    keys = [k for keys, _ in stack.values() for k in keys]
    assert sorted(keys) == sorted(k for k in document["data"] if k.endswith(".forward"))  # each key once
    for _, lines in stack.values():
        assert lines and all(line.startswith("File ") and ", line " in line for line in lines)


# ---------------------------------------------------------------- tensor files and statistics


def _close(recorded, reference: float, dtype: torch.dtype, scale: float) -> bool:
    eps = torch.finfo(dtype).eps
    return math.isclose(recorded, reference, rel_tol=4 * eps, abs_tol=4 * eps * scale)


@pytest.mark.parametrize("name", [n for n, e in EXPECTED.items() if e[0] == "tensor"])
def test_tensor_files_load_and_match_their_descriptors(name):
    document = load(name)
    folder = dump_path(name).parent / "dump_tensor_data"
    names = [desc["data_name"] for _, desc in all_tensors(document)]
    assert len(names) == len(set(names))
    assert set(names) == {p.name for p in folder.iterdir()}, "data_name values and files differ"
    for where, desc in all_tensors(document):
        tensor = torch.load(folder / desc["data_name"], weights_only=True)
        assert isinstance(tensor, torch.Tensor) and tensor.is_contiguous()
        assert list(tensor.shape) == desc["shape"], where
        assert str(tensor.dtype) == desc["dtype"], where
        assert tensor.requires_grad is False
        if tensor.dtype == torch.int64:
            assert (desc["Max"], desc["Min"]) == (int(tensor.max()), int(tensor.min())), where
            continue
        assert tensor.is_floating_point(), where
        assert desc["Max"] == tensor.max().item() and desc["Min"] == tensor.min().item(), where
        wide = tensor.double()
        scale = wide.abs().mean().item()
        if tensor.dim() == 0:
            assert desc["Mean"] == desc["Norm"] == tensor.item(), where
            continue
        assert _close(desc["Mean"], wide.mean().item(), tensor.dtype, scale), where
        assert _close(desc["Norm"], torch.linalg.vector_norm(wide).item(), tensor.dtype, 0.0), where


@pytest.mark.parametrize("name", [n for n, e in EXPECTED.items() if e[0] == "tensor"])
def test_tensors_chain_through_the_step(name):
    """The loss's inputs are the head's output, and each optimizer update uses the grad its API recorded."""
    data = load(name)["data"]

    def tensor(key, role, index):
        return torch.load(tensor_file(name, data[key][role][index]["data_name"]), weights_only=True)

    head = "Functional.linear.1.forward"
    assert torch.equal(tensor(head, "output", 0).flatten(0, -2), tensor("Functional.cross_entropy.0.forward",
                                                                         "input_args", 0))
    # parameters in registration order: first linear, the LayerNorm, the last linear
    grads = [("Functional.linear.0.backward", 1), ("Functional.linear.0.backward", 2),
             ("Functional.layer_norm.0.backward", 1), ("Functional.layer_norm.0.backward", 2),
             ("Functional.linear.1.backward", 1), ("Functional.linear.1.backward", 2)]
    for i, (key, index) in enumerate(grads):
        update = f"Tensor.add_.{i}.forward"
        assert torch.equal(tensor(update, "input_args", 1), tensor(key, "output", index)), update
        before, after = tensor(update, "input_args", 0), tensor(update, "output", 0)
        expected = before.add(tensor(update, "input_args", 1), alpha=-0.1)
        assert torch.equal(after, expected), update


def test_statistics_dump_has_no_files_and_the_tensor_dumps_numbers():
    statistics, tensors = load("mlp_statistics"), load("mlp_tensor")
    assert statistics["dump_data_dir"] is None
    assert not (dump_path("mlp_statistics").parent / "dump_tensor_data").exists()
    assert all("data_name" not in desc for _, desc in all_tensors(statistics))

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "data_name"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    assert statistics["data"] == strip(tensors["data"])  # same model and seed, minus the files


# ---------------------------------------------------------------- the dump reader


@pytest.mark.parametrize("name", list(EXPECTED))
def test_the_dump_reader_parses_every_entry(name):
    dump_module = pytest.importorskip("pytest_npuprecision.dump.dump_cases")
    if not hasattr(dump_module, "load_dump"):
        pytest.skip("pytest_npuprecision.dump.dump_cases has no load_dump")
    document = load(name)
    parsed = dump_module.load_dump(dump_path(name))
    assert parsed.error is None
    assert (parsed.task, parsed.level, parsed.framework) == (EXPECTED[name][0], "L1", "pytorch")
    assert [case.key for case in parsed.cases] == list(document["data"])
    assert [case.key for case in parsed.cases if case.skip is not None] == []  # nothing random, nothing missing


# ---------------------------------------------------------------- reproducibility


# CPUs with other vector units (AVX2, AVX-512) round float32 matmuls differently: a fresh run matches
# the committed dumps to a few float32 ulp of each tensor's scale, not bit for bit.
REPRODUCED_ULPS = 16


def _same_up_to_rounding(fresh, committed, where: str = "") -> list[str]:
    """Where two dump.json documents differ beyond rounding: structure, names and integers exactly;
    each tensor's Max, Min, Mean and Norm within REPRODUCED_ULPS float32 ulp of its Norm."""
    if isinstance(committed, dict) and isinstance(fresh, dict):
        if list(fresh) != list(committed):
            return [f"{where}: keys {list(fresh)} != {list(committed)}"]
        scale = abs(committed["Norm"]) if isinstance(committed.get("Norm"), float) else 0.0
        found = []
        for key, value in committed.items():
            if scale and key in ("Max", "Min", "Mean", "Norm") and isinstance(value, float):
                if not math.isclose(fresh[key], value, abs_tol=REPRODUCED_ULPS * 2.0 ** -23 * scale):
                    found.append(f"{where}.{key}: {fresh[key]!r} != {value!r}")
            elif key != "dump_data_dir":
                found += _same_up_to_rounding(fresh[key], value, f"{where}.{key}")
        return found
    if isinstance(committed, list) and isinstance(fresh, list) and len(fresh) == len(committed):
        return [d for i, (f, c) in enumerate(zip(fresh, committed)) for d in _same_up_to_rounding(f, c, f"{where}[{i}]")]
    return [] if fresh == committed else [f"{where}: {fresh!r} != {committed!r}"]


def _close_tensors(fresh: torch.Tensor, committed: torch.Tensor) -> bool:
    if not committed.is_floating_point():
        return torch.equal(fresh, committed)
    scale = committed.double().abs().max().item() if committed.numel() else 0.0
    tolerance = REPRODUCED_ULPS * torch.finfo(committed.dtype).eps * scale
    return bool(((fresh.double() - committed.double()).abs() <= tolerance).all())


def _own_frames(stack: Path) -> dict:
    """stack.json without torch's own frames, whose files and line numbers are the torch version's."""
    return {index: [names, [f for f in frames if not f.startswith("File torch/")]]
            for index, (names, frames) in json.loads(stack.read_text()).items()}


@made_with_this_torch()
def test_the_script_reproduces_the_dumps(tmp_path):
    out = tmp_path / "dumps"
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    hint = "the committed dumps differ from a fresh run; regenerate with python examples/make_example_dump.py"
    for name, (task, *_rest) in EXPECTED.items():
        committed, fresh = dump_path(name), dump_path(name, out)
        assert not _same_up_to_rounding(load(name, out), load(name)), hint
        assert load(name, out)["dump_data_dir"] == (
            str((fresh.parent / "dump_tensor_data").resolve()) if task == "tensor" else None)
        assert (fresh.parent / "construct.json").read_bytes() == (committed.parent / "construct.json").read_bytes()
        assert _own_frames(fresh.parent / "stack.json") == _own_frames(committed.parent / "stack.json")
        if task != "tensor":
            assert not (fresh.parent / "dump_tensor_data").exists()
            continue
        old_dir, new_dir = committed.parent / "dump_tensor_data", fresh.parent / "dump_tensor_data"
        assert sorted(p.name for p in new_dir.iterdir()) == sorted(p.name for p in old_dir.iterdir())
        for path in sorted(old_dir.iterdir()):
            old = torch.load(path, weights_only=True)
            new = torch.load(new_dir / path.name, weights_only=True)
            assert old.dtype == new.dtype and old.shape == new.shape, path.name
            assert _close_tensors(new, old), f"{path.name}: {hint}"


def test_the_script_writes_only_the_dumps_asked_for_and_rejects_unknown_names(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "mlp_statistics"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["mlp_statistics"]
    assert not _same_up_to_rounding(load("mlp_statistics", tmp_path), load("mlp_statistics"))
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "nope"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "unknown dump 'nope'" in done.stderr
