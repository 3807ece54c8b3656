"""Resolving msprobe API names to callables: the names in the fixture dumps and the awkward ones."""

import importlib.util

import pytest
import torch
import torch.nn.functional as F

from pytest_npuprecision.ops.resolution import ResolvedOp, base_name, resolve

# Every API kind that appears in the seven fixture dumps, plus the other prefixes.
FIXTURE_OPS = [
    ("Functional.linear", F.linear, "function", False),
    ("Functional.relu", F.relu, "function", False),
    ("Functional.gelu", F.gelu, "function", False),
    ("Functional.layer_norm", F.layer_norm, "function", False),
    ("Functional.dropout", F.dropout, "function", False),
    ("Functional.cross_entropy", F.cross_entropy, "function", False),
    ("Functional.embedding", F.embedding, "function", False),
    ("Functional.scaled_dot_product_attention", F.scaled_dot_product_attention, "function", False),
    ("Torch.matmul", torch.matmul, "function", False),
    ("Torch.bmm", torch.bmm, "function", False),
    ("Torch.softmax", torch.softmax, "function", False),
    ("Torch.triu", torch.triu, "function", False),
    ("Torch.arange", torch.arange, "function", False),
    ("Tensor.__add__", torch.Tensor.__add__, "method", False),
    ("Tensor.__truediv__", torch.Tensor.__truediv__, "method", False),
    ("Tensor.masked_fill", torch.Tensor.masked_fill, "method", False),
    ("Tensor.split", torch.Tensor.split, "method", False),
    ("Tensor.transpose", torch.Tensor.transpose, "method", False),
    ("Tensor.reshape", torch.Tensor.reshape, "method", False),
    ("Tensor.add_", torch.Tensor.add_, "method", True),
    ("Aten.mm", torch.ops.aten.mm, "function", False),
    ("Aten.add.Tensor", torch.ops.aten.add.Tensor, "function", False),
    ("Torch.linalg.inv", torch.linalg.inv, "function", False),
    ("Torch.fft.fft", torch.fft.fft, "function", False),
    ("Torch.special.erf", torch.special.erf, "function", False),
]


@pytest.mark.parametrize(("api", "func", "kind", "inplace"), FIXTURE_OPS, ids=[row[0] for row in FIXTURE_OPS])
def test_fixture_ops_resolve(api, func, kind, inplace):
    op = resolve(api)
    assert op.unsupported is None
    assert op.func is func
    assert (op.api_name, op.kind, op.inplace) == (api, kind, inplace)


def test_resolved_ops_are_callable_the_same_way():
    x = torch.tensor([1.0, 2.0])
    assert torch.equal(resolve("Tensor.__add__").func(x, 1.0), x + 1.0)
    assert torch.equal(resolve("Aten.mm").func(x[None], x[:, None]), torch.tensor([[5.0]]))


def test_resolving_twice_returns_the_cached_object():
    assert resolve("Functional.gelu") is resolve("Functional.gelu")
    assert resolve("Functional.not_a_thing") is resolve("Functional.not_a_thing")


@pytest.mark.skipif(importlib.util.find_spec("torch_npu") is not None, reason="torch_npu is installed here")
def test_npu_ops_without_torch_npu_are_unsupported():
    op = resolve("NPU.npu_rms_norm")
    assert op.func is None and op.reference is not None  # judged offline
    assert op.unsupported.startswith("unsupported: NPU.npu_rms_norm: torch_npu is not installed")


def test_npu_ops_without_a_reference_skip_as_no_reference_with_or_without_torch_npu():
    op = resolve("NPU.atb.x")
    assert op.func is None and op.unsupported_reason == "no-reference"
    assert "has no float64 reference here" in op.unsupported and "register_op('atb.x'" in op.unsupported


@pytest.mark.parametrize(("api", "reason"), [
    ("Functional.not_a_thing", "torch.nn.functional.not_a_thing is not a known operator"),
    ("Aten.mm.no_such_overload", "aten.mm has no overload 'no_such_overload'"),
    ("Tensor.shape", "torch.Tensor.shape is not a known operator"),
    ("Torch.Tensor", "torch.Tensor is not a known operator"),
    ("Functional.torch", "torch.nn.functional.torch is not a known operator"),
    ("VF.lstm", "torch._VF internals"),
    ("Distributed.all_reduce", "collective communication ops need a process group"),
    ("MindSpeed.npu_x", "MindSpeed's npu_x has no float64 reference here"),
    ("Module.fc1.Linear", "whole nn.Module"),
    ("Mystery.op", "unknown prefix 'Mystery'"),
    ("gelu", "expected '<Prefix>.<name>'"),
])
def test_unknown_names_come_back_unsupported_and_named(api, reason):
    op = resolve(api)
    assert isinstance(op, ResolvedOp) and op.func is None
    assert op.unsupported.startswith(f"unsupported: {api}: ")
    assert reason in op.unsupported


@pytest.mark.parametrize(("api", "base", "inplace", "reflected"), [
    ("Tensor.__matmul__", "matmul", False, False),
    ("Tensor.__rmatmul__", "matmul", False, True),
    ("Tensor.__radd__", "add", False, True),
    ("Tensor.__iadd__", "add", True, False),
    ("Tensor.__rshift__", "rshift", False, False),
    ("Tensor.__rrshift__", "rshift", False, True),
    ("Tensor.__invert__", "invert", False, False),
    ("Tensor.__setitem__", "setitem", True, False),
    ("Tensor.__getitem__", "getitem", False, False),
    ("Tensor.add_", "add", True, False),
    ("Functional.relu_", "relu", True, False),
    ("Aten.add_.Tensor", "add", True, False),
    ("Aten.mm.default", "mm", False, False),
    ("Torch.linalg.norm", "norm", False, False),
])
def test_spellings_normalise(api, base, inplace, reflected):
    op = resolve(api)
    assert op.unsupported is None
    assert (op.base_name, op.inplace, op.reflected) == (base, inplace, reflected)
    assert base_name(api) == base


# Names a crafted dump may carry to reach files, the process or Python internals (issue 13).
HOSTILE_NAMES = [
    ("Torch.os.system", "torch.os is not an operator namespace"),
    ("Torch.load", "reads or writes files"),
    ("Torch.save", "reads or writes files"),
    ("Torch.from_file", "reads or writes files"),
    ("Aten.from_file", "reads or writes files"),
    ("Torch.hub.load", "torch.hub is not an operator namespace"),
    ("Torch.serialization.load", "torch.serialization is not an operator namespace"),
    ("Torch._C._get_tracing_state", "torch._C is not an operator namespace"),
    ("Torch.set_default_dtype", "changes global state"),
    ("Torch.manual_seed", "changes global state"),
    ("Torch.use_deterministic_algorithms", "torch.use_deterministic_algorithms is not a known operator"),
    ("Tensor.__reduce_ex__", "Python protocol method"),
    ("Tensor.__reduce__", "Python protocol method"),
    ("Tensor.__setstate__", "Python protocol method"),
    ("Tensor.__getattribute__", "Python protocol method"),
    ("Tensor.__class__.__subclasses__", "not an operator name"),
    ("Tensor.share_memory_", "reads or writes files"),
    ("Tensor.untyped_storage", "reads or writes files"),
    ("Tensor.register_hook", "reads or writes files"),
    ("Tensor.backward", "changes global state"),
    ("Tensor.numpy", "not a tensor computation"),
    ("Functional.__class__", "Python protocol method"),
    ("Functional.torch.load", "not an operator name"),
    ("Aten.__class__", "not an aten operator name"),
    ("Aten.mm.__call__", "not an aten operator name"),
]


@pytest.mark.parametrize(("api", "reason"), HOSTILE_NAMES, ids=[row[0] for row in HOSTILE_NAMES])
def test_only_operators_resolve(api, reason):
    op = resolve(api)
    assert op.func is None, f"{api} resolved to {op.func!r}"
    assert op.unsupported.startswith(f"unsupported: {api}: not a known operator")
    assert reason in op.unsupported


def test_tensor_type_refuses_a_name_that_is_not_a_tensor_type():
    from pytest_npuprecision.ops.allowlist import unsafe_argument

    assert unsafe_argument("type", ("os.system",), {}) is not None
    assert unsafe_argument("type", (), {"dtype": "builtins.exec"}) is not None
    assert unsafe_argument("type", ("torch.FloatTensor",), {}) is None
    assert unsafe_argument("add", ("os.system",), {}) is None


@pytest.mark.parametrize("api", ["Functional.relu_", "Torch.relu_", "Torch.exp_", "Functional.elu_", "Tensor.add_",
                                 "Torch.linalg.vector_norm", "Torch.nn.functional.gelu", "Torch.zeros",
                                 "Functional.sigmoid", "Torch.trace", "Aten.gelu_backward"])
def test_operators_outside_the_overridable_table_still_resolve(api):
    assert resolve(api).unsupported is None


def _dump_api_names(folder):
    import json
    import re

    names = set()
    for path in sorted(folder.rglob("dump.json")):
        for key in json.loads(path.read_text(encoding="utf-8"))["data"]:
            match = re.fullmatch(r"(.+)\.\d+\.(forward|backward)", key)
            if match and not key.startswith(("Module.", "Distributed.", "MindSpeed.", "VF.")):
                names.add(match[1])
    return names


def test_every_api_name_in_the_fixture_and_example_dumps_resolves():
    """The allow-list loses no real operator that msprobe's dumps use."""
    from pathlib import Path

    from fixtures import DUMP_FOLDERS, FIXTURES, fixture_dump

    here = Path(__file__).resolve().parents[1]  # tests/
    folders = [FIXTURES, here.parent / "examples" / "dumps", here / "data" / "real-models"]
    for folder in DUMP_FOLDERS:
        fixture_dump(folder)  # all seven, or skip: a partial set would lose names
    names = set().union(*(_dump_api_names(folder) for folder in folders))
    assert len(names) >= 20
    npu = {name for name in names if name.startswith("NPU.")}
    assert len(npu) >= 5
    # Without torch_npu an NPU op cannot run live, but its reference is its golden (offline check).
    assert all(resolve(name).reference is not None for name in npu)
    assert {name: resolve(name).unsupported for name in names - npu if resolve(name).unsupported} == {}


@pytest.mark.parametrize("name", ["os.system", "subprocess.run", "builtins.exec", "torch.load", "torch.hub.load",
                                  "torch.Tensor.__reduce_ex__", "torch_npu.npu.set_dump"])
def test_op_case_files_go_through_the_same_allow_list(name, tmp_path):
    """An op case's dotted path imports nothing: it names a torch or torch_npu operator, or is refused."""
    from pytest_npuprecision.opcases.run import resolve_op
    from pytest_npuprecision.opcases.schema import SchemaError

    with pytest.raises(SchemaError) as refused:
        resolve_op(name, "op")
    assert "op" in str(refused.value) and repr(name) in str(refused.value)


@pytest.mark.parametrize(("name", "func"), [("torch.nn.functional.gelu", F.gelu), ("torch.matmul", torch.matmul),
                                            ("torch.Tensor.add", torch.Tensor.add),
                                            ("torch.linalg.inv", torch.linalg.inv)])
def test_op_case_dotted_paths_to_operators_still_resolve(name, func):
    from pytest_npuprecision.opcases.run import resolve_op

    op, _ = resolve_op(name, "op")
    assert op.func is func and op.api_name == name


def test_a_name_containing_a_denied_word_inside_another_word_resolves():
    # "hub" (torch.hub) inside huber_loss is no reason to refuse it.
    assert resolve("Functional.huber_loss").func is torch.nn.functional.huber_loss
    assert resolve("Torch._softmax_backward_data").func is torch._softmax_backward_data
