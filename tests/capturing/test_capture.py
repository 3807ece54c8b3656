"""capture(): the files it writes, the names and counters, forward and backward entries, statistics,
filters, and the gaps it reports instead of hiding."""

from __future__ import annotations

import json
import os

import pytest
import torch
import torch.nn.functional as F

from pytest_npuprecision import CaptureGapWarning, capture


def entries(recorded) -> dict:
    return json.loads((recorded.folder / "dump.json").read_text())["data"]


def test_writes_msprobes_folders_and_files(tmp_path):
    x = torch.randn(4, 3, requires_grad=True)
    with capture(tmp_path, step=2, rank=1) as recorded:
        F.gelu(x).sum().backward()
    assert recorded.folder == tmp_path / "step2" / "rank1"
    assert sorted(p.name for p in recorded.folder.iterdir()) == ["construct.json", "dump.json", "dump_tensor_data",
                                                                  "stack.json"]
    dump = json.loads((recorded.folder / "dump.json").read_text())
    assert (dump["task"], dump["level"], dump["framework"]) == ("tensor", "L1", "pytorch")
    assert list(dump["data"]) == ["Functional.gelu.0.forward", "Tensor.sum.0.forward", "Tensor.sum.0.backward",
                                  "Functional.gelu.0.backward"]
    saved = torch.load(recorded.folder / "dump_tensor_data" / "Functional.gelu.0.forward.input.0.pt",
                       weights_only=True)
    assert torch.equal(saved, x.detach())
    stacks = json.loads((recorded.folder / "stack.json").read_text())
    assert stacks["0"][0] == ["Functional.gelu.0.forward"]
    assert "test_capture.py" in stacks["0"][1][0] and "F.gelu(x)" in stacks["0"][1][0]


def test_without_a_rank_the_folder_is_msprobes_proc_pid(tmp_path):
    with capture(tmp_path, task="statistics") as recorded:
        torch.ones(2).exp()
    assert recorded.folder == tmp_path / "step0" / f"proc{os.getpid()}"


def test_backward_entries_hold_output_gradients_as_input_and_input_gradients_as_output(tmp_path):
    a = torch.randn(3, 4, requires_grad=True)
    b = torch.randn(4, 2, requires_grad=True)
    with capture(tmp_path, rank=0) as recorded:
        out = torch.matmul(a, b)
        out.backward(torch.full_like(out, 2.0))
    entry = entries(recorded)["Torch.matmul.0.backward"]
    data = recorded.folder / "dump_tensor_data"
    grad_out = torch.load(data / entry["input"][0]["data_name"], weights_only=True)
    assert torch.equal(grad_out, torch.full((3, 2), 2.0))
    grads = [torch.load(data / d["data_name"], weights_only=True) for d in entry["output"]]
    assert torch.allclose(grads[0], a.grad) and torch.allclose(grads[1], b.grad)
    assert [d["requires_grad"] for d in entry["output"]] == [False, False]


def test_operators_are_named_by_the_operator_written(tmp_path):
    x, y = torch.randn(3), torch.randn(3)
    with capture(tmp_path, rank=0) as recorded:
        x + y
        x.add(y)
        x * y
        x / 2
        x < y
        z = x.clone()
        z += y
        x @ y
    assert list(entries(recorded)) == ["Tensor.__add__.0.forward", "Tensor.add.0.forward", "Tensor.__mul__.0.forward",
                                       "Tensor.__truediv__.0.forward", "Tensor.__lt__.0.forward",
                                       "Tensor.__iadd__.0.forward", "Tensor.__matmul__.0.forward"]


def test_counters_count_each_api_and_skip_plumbing(tmp_path):
    x = torch.randn(2, 3)
    with capture(tmp_path, rank=0) as recorded:
        for _ in range(3):
            x = torch.relu(x.view(3, 2).contiguous().view(2, 3))
        x.size(), x.shape, torch.zeros(2)
    assert list(entries(recorded)) == ["Torch.relu.0.forward", "Torch.relu.1.forward", "Torch.relu.2.forward"]


def test_a_python_functional_keeps_the_callers_arguments(tmp_path):
    x = torch.randn(2, 8)
    with capture(tmp_path, rank=0) as recorded:
        F.layer_norm(x, (8,), None, None, 1e-5)
        F.dropout(x, p=0.0)
    data = entries(recorded)
    assert len(data["Functional.layer_norm.0.forward"]["input_args"]) == 5
    assert data["Functional.layer_norm.0.forward"]["input_kwargs"] == {}
    assert len(data["Functional.dropout.0.forward"]["input_args"]) == 1
    assert data["Functional.dropout.0.forward"]["input_kwargs"] == {"p": {"type": "float", "value": 0.0}}


def test_statistics_are_msprobes_with_bare_nan_and_infinity(tmp_path):
    with capture(tmp_path, task="statistics", rank=0) as recorded:
        torch.log(torch.tensor([1.0, 0.0]))
        torch.log(torch.tensor([-1.0]))
    text = (recorded.folder / "dump.json").read_text()
    assert '"Min": -Infinity' in text and '"Max": NaN' in text
    out = entries(recorded)["Torch.log.0.forward"]["output"][0]
    assert (out["Max"], out["Min"], out["Mean"]) == (0.0, float("-inf"), float("-inf"))
    assert "data_name" not in out and not (recorded.folder / "dump_tensor_data").exists()
    # an integer tensor: no mean or norm
    with capture(tmp_path / "ints", task="statistics", rank=0) as recorded:
        torch.tensor([3, 1, 2]).sort()
    desc = entries(recorded)["Tensor.sort.0.forward"]["input_args"][0]
    assert (desc["Max"], desc["Min"], desc["Mean"], desc["Norm"]) == (3, 1, None, None)


def test_list_scope_and_data_mode_select_like_msprobes_config(tmp_path):
    def step(**options):
        x = torch.randn(4, requires_grad=True)
        with capture(tmp_path / str(len(list(tmp_path.iterdir()))), rank=0, **options) as recorded:
            (torch.exp(x) * torch.sin(x)).relu().sum().backward()
        return entries(recorded)

    assert list(step(list=["exp", "relu"])) == ["Torch.exp.0.forward", "Tensor.relu.0.forward",
                                                "Tensor.relu.0.backward", "Torch.exp.0.backward"]
    assert list(step(scope=["Torch.sin.0", "Tensor.relu.0.forward"])) == [
        "Torch.sin.0.forward", "Tensor.__mul__.0.forward", "Tensor.relu.0.forward", "Tensor.relu.0.backward",
        "Tensor.__mul__.0.backward", "Torch.sin.0.backward"]
    forward_inputs = step(data_mode=["forward", "input"])
    assert all(k.endswith(".forward") for k in forward_inputs)
    assert all(set(v) == {"input_args", "input_kwargs"} for v in forward_inputs.values())


def test_bad_options_say_what_to_use(tmp_path):
    with pytest.raises(ValueError, match="level='L0': capture records API calls"):
        capture(tmp_path, level="L0")
    with pytest.raises(ValueError, match="task='summary'"):
        capture(tmp_path, task="summary")
    with pytest.raises(ValueError, match="scope=\\['a'\\]: give two API names"):
        capture(tmp_path, scope=["a"])
    with pytest.raises(ValueError, match="data_mode \\['both'\\]"):
        capture(tmp_path, data_mode=["both"])


@torch.jit.script
def scripted(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * 2


def test_a_torch_jit_script_function_is_reported_not_silently_dropped(tmp_path):
    x = torch.randn(3, requires_grad=True)
    with pytest.warns(CaptureGapWarning, match="input 0 of Torch.exp.0 came from MulBackward") as caught:
        with capture(tmp_path, rank=0) as recorded:
            torch.exp(scripted(x)).sum().backward()
    assert list(entries(recorded))[:2] == ["Torch.exp.0.forward", "Tensor.sum.0.forward"]
    assert len(recorded.unrecorded) == 1 and "torch.jit.script" in str(caught[0].message)
