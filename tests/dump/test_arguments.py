"""Decoding msprobe value descriptors and materializing call inputs from real msprobe dumps."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from fixtures import dump_params, fixture_dump

from pytest_npuprecision.dump.arguments import CallInputs, materialize, tensor_seed
from pytest_npuprecision.dump.descriptors import (
    DumpDataError, DumpedDevice, MalformedDescriptor, TensorSpec, UnsupportedDescriptor, decode_call, decode_grads,
    decode_value,
)
from pytest_npuprecision.dump.dump_cases import SkipReason, load_dump

TENSOR_DUMPS = dump_params("mlp_tensor", "mlp_fp16_tensor", "transformer_tensor", "transformer_bf16_tensor")
STATISTICS_DUMPS = dump_params("mlp_statistics", "transformer_mix_statistics")


def case_of(dump, key):
    return next(c for c in dump.cases if c.key == key)


def tensor_desc(**overrides):
    desc = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 3], "Max": 1.0, "Min": -1.0,
            "Mean": 0.0, "Norm": 1.0, "requires_grad": False}
    return {**desc, **overrides}


def index_desc(shape, top):
    return tensor_desc(dtype="torch.int64", shape=shape, Max=top, Min=0, Mean=None, Norm=None)


# ---------------------------------------------------------------- decoding


@pytest.mark.parametrize(
    "desc, expected",
    [
        (None, None),
        ({"type": "int", "value": 32}, 32),
        ({"type": "float", "value": 1e-05}, 1e-05),
        ({"type": "float", "value": 2}, 2.0),
        ({"type": "float", "value": -math.inf}, -math.inf),
        ({"type": "bool", "value": True}, True),
        ({"type": "str", "value": "mean"}, "mean"),
        ({"type": "slice", "value": [0, None, 2]}, slice(0, None, 2)),
        ({"type": "ellipsis", "value": "..."}, ...),
        ({"type": "torch.Size", "value": [2, 3]}, torch.Size([2, 3])),
        ({"type": "torch.dtype", "value": "torch.float16"}, torch.float16),
        ({"type": "torch.device", "value": "npu:0"}, DumpedDevice("npu:0")),
        ({"type": "torch.memory_format", "format": "contiguous_format"}, torch.contiguous_format),
        ({"type": "float32", "value": 0.5}, 0.5),
        ({"type": "int64", "value": 7}, 7),
        ([{"type": "int", "value": 32}, None], [32, None]),
    ],
)
def test_decode_non_tensor_values(desc, expected):
    assert decode_value(desc, "input_args[1]") == expected


def test_decode_tensor_descriptor_keeps_statistics_and_position():
    desc = tensor_desc(dtype="torch.bfloat16", shape=[8, 16], Max=math.inf, Min=-math.inf, Mean=math.nan,
                       Norm=32.0, requires_grad=True, data_name="Functional.linear.0.forward.input.0.pt")
    spec = decode_value(desc, "input_kwargs['weight']")
    assert (spec.dtype, spec.shape, spec.norm) == (torch.bfloat16, (8, 16), 32.0)
    assert (spec.max, spec.min) == (math.inf, -math.inf)
    assert math.isnan(spec.mean) and spec.requires_grad and spec.where == "input_kwargs['weight']"
    assert spec.data_name == "Functional.linear.0.forward.input.0.pt" and spec.numel == 128


@pytest.mark.parametrize(
    "desc, error, message",
    [
        ({"type": "torch.distributed.ReduceOp", "value": "SUM"}, UnsupportedDescriptor,
         "input_args[1] has type 'torch.distributed.ReduceOp', which this harness cannot rebuild"),
        ({"class_type": "torch.distributed.P2POp"}, UnsupportedDescriptor,
         "input_args[1] has no 'type' (keys ['class_type']), so it cannot be rebuilt"),
        (tensor_desc(dtype="torch_npu.HiFloat8Tensor"), UnsupportedDescriptor,
         "input_args[1] has dtype 'torch_npu.HiFloat8Tensor', which this torch does not know"),
        ("gelu", MalformedDescriptor, "input_args[1] is a str, expected a descriptor object"),
        (tensor_desc(shape="8x16"), MalformedDescriptor,
         "input_args[1] has shape '8x16', expected a list of non-negative ints"),
        (tensor_desc(shape=[8, -1]), MalformedDescriptor,
         "input_args[1] has shape [8, -1], expected a list of non-negative ints"),
        (tensor_desc(Max="big"), MalformedDescriptor,
         "input_args[1] has statistics ['big', -1.0, 0.0, 1.0], expected numbers, booleans or null"),
        ({"type": "int", "value": "3"}, MalformedDescriptor,
         "input_args[1] has value '3', which is not of type 'int'"),
        ({"type": "torch.dtype", "value": "torch.float99"}, MalformedDescriptor,
         "input_args[1] of type 'torch.dtype' has an unusable value 'torch.float99' "
         "('torch.float99' is not a torch dtype)"),
    ],
)
def test_decode_errors_name_the_argument(desc, error, message):
    with pytest.raises(error) as info:
        decode_value(desc, "input_args[1]")
    assert str(info.value) == message


@pytest.mark.parametrize(
    "entry, message",
    [
        ([], "the entry is a list, expected an object"),
        ({"input_args": "x", "input_kwargs": {}}, "input_args is a str, expected a list"),
        ({"input_args": [], "input_kwargs": []}, "input_kwargs is a list, expected an object"),
        ({"input_kwargs": {}}, "input_args is null, expected a list"),
    ],
)
def test_decode_call_rejects_a_bad_entry_structure(entry, message):
    with pytest.raises(MalformedDescriptor) as info:
        decode_call(entry)
    assert str(info.value) == message


def test_masked_fill_fill_value_decodes_to_minus_inf():
    dump = load_dump(fixture_dump("transformer_tensor/step0/rank0/dump.json"))
    call = decode_call(case_of(dump, "Tensor.masked_fill.0.forward").forward)
    assert call.args[2] == float("-inf")
    assert (call.args[1].dtype, call.args[1].max, call.args[1].min) == (torch.bool, True, False)
    output = decode_value(case_of(dump, "Tensor.masked_fill.0.forward").forward["output"][0], "output[0]")
    assert (output.min, output.mean, output.norm) == (-math.inf, -math.inf, math.inf)


def test_decode_grads_of_a_tuple_output():
    dump = load_dump(fixture_dump("transformer_tensor/step0/rank0/dump.json"))
    grads = decode_grads(case_of(dump, "Tensor.split.0.backward").backward)
    assert [g.where for g in grads] == ["backward input[0]", "backward input[1]", "backward input[2]"]


# ---------------------------------------------------------------- tensor mode


@pytest.mark.parametrize("path", TENSOR_DUMPS)
def test_every_tensor_mode_case_materializes_with_the_dumped_shapes_and_dtypes(path):
    dump = load_dump(path)
    runnable = [c for c in dump.cases if c.skip is None]
    assert runnable and len(runnable) == len(dump.cases)
    for case in runnable:
        inputs = materialize(case, dump.data_dir)
        call = decode_call(case.forward)
        got = [t for t in iter_specs_like(inputs.args, call.args)] + \
              [t for k in call.kwargs for t in iter_specs_like(inputs.kwargs[k], call.kwargs[k])]
        for tensor, spec in got:
            assert (tensor.dtype, tuple(tensor.shape)) == (spec.dtype, spec.shape), (case.key, spec.where)
        if case.direction == "backward":
            specs = decode_grads(case.backward)
            assert len(inputs.grad_outputs) == len(specs)
            for tensor, spec in zip(inputs.grad_outputs, specs):
                assert (tensor.dtype, tuple(tensor.shape)) == (spec.dtype, spec.shape), (case.key, spec.where)


def iter_specs_like(value, decoded):
    """Pairs (materialized tensor, its TensorSpec), walking both structures together."""
    if isinstance(decoded, TensorSpec):
        yield value, decoded
    elif isinstance(decoded, (list, tuple)):
        assert len(value) == len(decoded)
        for v, d in zip(value, decoded):
            yield from iter_specs_like(v, d)


def test_loaded_tensors_are_the_files_and_carry_requires_grad():
    dump = load_dump(fixture_dump("mlp_tensor/step0/rank0/dump.json"))
    inputs = materialize(case_of(dump, "Functional.linear.0.forward"), dump.data_dir)
    expected = torch.load(dump.data_dir / "Functional.linear.0.forward.input.1.pt", weights_only=True)
    assert torch.equal(inputs.args[1].detach(), expected)
    assert inputs.requires_grad == ("input_args[1]", "input_args[2]")
    assert [t.requires_grad for t in inputs.args] == [False, True, True]
    assert inputs.grad_outputs == ()


def test_backward_case_gets_the_dumped_output_gradients():
    dump = load_dump(fixture_dump("mlp_tensor/step0/rank0/dump.json"))
    inputs = materialize(case_of(dump, "Functional.linear.0.backward"), dump.data_dir)
    expected = torch.load(dump.data_dir / "Functional.linear.0.backward.input.0.pt", weights_only=True)
    assert len(inputs.grad_outputs) == 1 and torch.equal(inputs.grad_outputs[0], expected)


def test_with_device_replaces_the_dumped_device():
    inputs = CallInputs(args=(DumpedDevice("npu:0"),), kwargs={"device": DumpedDevice("npu:0"), "n": [1]})
    moved = inputs.with_device("cpu")
    assert moved.args == (torch.device("cpu"),) and moved.kwargs == {"device": torch.device("cpu"), "n": [1]}


# ---------------------------------------------------------------- statistics mode


@pytest.mark.parametrize("path", STATISTICS_DUMPS)
def test_every_statistics_case_synthesizes_within_its_extremes(path):
    dump = load_dump(path)
    for case in (c for c in dump.cases if c.skip is None):
        inputs = materialize(case, dump.data_dir)
        call = decode_call(case.forward)
        for tensor, spec in iter_specs_like(inputs.args, call.args):
            assert (tensor.dtype, tuple(tensor.shape)) == (spec.dtype, spec.shape)
            if spec.dtype.is_floating_point and math.isfinite(spec.max) and math.isfinite(spec.min):
                assert (tensor.max().item(), tensor.min().item()) == (spec.max, spec.min), (case.key, spec.where)


def test_backward_case_rebuilds_exactly_the_forward_inputs():
    dump = load_dump(fixture_dump("mlp_statistics/step0/proc11235/dump.json"))
    forward = materialize(case_of(dump, "Functional.linear.0.forward"), dump.data_dir)
    backward = materialize(case_of(dump, "Functional.linear.0.backward"), dump.data_dir)
    assert all(torch.equal(a, b) for a, b in zip(forward.args, backward.args))
    assert len(backward.grad_outputs) == 1 and backward.grad_outputs[0].shape == (8, 32)


def test_synthesized_inputs_are_reproducible_and_distinct():
    path = fixture_dump("mlp_statistics/step0/proc11235/dump.json")
    first = materialize(case_of(load_dump(path), "Functional.linear.1.forward"), path.parent)
    again = materialize(case_of(load_dump(path), "Functional.linear.1.forward"), path.parent)
    salted = materialize(case_of(load_dump(path), "Functional.linear.1.forward"), path.parent, seed=1)
    assert all(torch.equal(a, b) for a, b in zip(first.args, again.args))
    assert not torch.equal(first.args[0], salted.args[0])
    # Same shape, different position: still different values.
    assert tensor_seed(123, "input_args[0]") != tensor_seed(123, "input_args[1]")


def test_embedding_indices_stay_inside_the_table_even_when_statistics_disagree(tmp_path):
    dump_dir = copy_dump(tmp_path, "transformer_mix_statistics/step0/rank0")
    document = json.loads((dump_dir / "dump.json").read_text())
    document["data"]["Functional.embedding.0.forward"]["input_args"][0]["Max"] = 1000
    (dump_dir / "dump.json").write_text(json.dumps(document))
    dump = load_dump(dump_dir / "dump.json")
    indices = materialize(case_of(dump, "Functional.embedding.0.forward"), dump.data_dir).args[0]
    assert indices.min().item() >= 0 and indices.max().item() == 63  # weight is [64, 32]


# ---------------------------------------------------------------- bad data

GELU = "Functional.gelu.0.forward"
GELU_FILE = "Functional.gelu.0.forward.input.0.pt"


def copy_dump(tmp_path, relative):
    target = tmp_path / relative
    shutil.copytree(fixture_dump(relative), target)
    return target


def set_data_name(dump_dir, data_name, **changes):
    document = json.loads((dump_dir / "dump.json").read_text())
    document["data"][GELU]["input_args"][0].update(data_name=data_name, **changes)
    (dump_dir / "dump.json").write_text(json.dumps(document))


class Opaque:
    """Pickled by torch.save as a custom class, which weights_only=True refuses to load."""


def break_missing(d):
    (d / "dump_tensor_data" / GELU_FILE).unlink()
    return d / "dump_tensor_data" / GELU_FILE, "does not exist; copy the dump_tensor_data/ folder along with dump.json"


def break_truncated(d):
    path = d / "dump_tensor_data" / GELU_FILE
    path.write_bytes(path.read_bytes()[:200])
    return path, "is truncated or corrupt (RuntimeError); re-dump this API"


def break_pickled_object(d):
    torch.save(Opaque(), d / "dump_tensor_data" / GELU_FILE)
    return (d / "dump_tensor_data" / GELU_FILE,
            "holds objects other than tensors, which torch.load(weights_only=True) refuses; re-dump this API")


def break_dict(d):
    torch.save({"a": torch.ones(2)}, d / "dump_tensor_data" / GELU_FILE)
    return d / "dump_tensor_data" / GELU_FILE, "holds a dict, not a tensor; re-dump this API"


def break_parent_path(d):
    set_data_name(d, "../../etc/passwd")
    return (d / "dump_tensor_data" / "../../etc/passwd",
            "is outside dump_tensor_data/; data_name must be a plain file name inside that folder")


def break_absolute_path(d):
    set_data_name(d, "/etc/passwd")
    return Path("/etc/passwd"), "is outside dump_tensor_data/; data_name must be a plain file name inside that folder"


def break_symlink(d):
    outside = d.parent / "outside.pt"
    shutil.copy(d / "dump_tensor_data" / GELU_FILE, outside)
    (d / "dump_tensor_data" / "link.pt").symlink_to(outside)
    set_data_name(d, "link.pt")
    return (d / "dump_tensor_data" / "link.pt",
            "is outside dump_tensor_data/; data_name must be a plain file name inside that folder")


def break_suffix(d):
    set_data_name(d, "Functional.gelu.0.forward.input.0.pkl")
    return (d / "dump_tensor_data" / "Functional.gelu.0.forward.input.0.pkl",
            "has suffix '.pkl'; only .pt and .npy tensor files are loaded")


def break_shape(d):
    set_data_name(d, GELU_FILE, shape=[4, 4])
    return (d / "dump_tensor_data" / GELU_FILE,
            "holds a float32 [8, 32] tensor but dump.json says float32 [4, 4]; "
            "the file does not belong to this dump.json")


def break_dtype(d):
    set_data_name(d, GELU_FILE, dtype="torch.float16")
    return (d / "dump_tensor_data" / GELU_FILE,
            "holds a float32 [8, 32] tensor but dump.json says float16 [8, 32]; "
            "the file does not belong to this dump.json")


def break_npy_object_array(d):
    np.save(d / "dump_tensor_data" / "gelu.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    set_data_name(d, "gelu.npy")
    return d / "dump_tensor_data" / "gelu.npy", "is not a plain numeric .npy file (ValueError); re-dump this API"


@pytest.mark.parametrize(
    "breaker",
    [break_missing, break_truncated, break_pickled_object, break_dict, break_parent_path, break_absolute_path,
     break_symlink, break_suffix, break_shape, break_dtype, break_npy_object_array],
)
def test_bad_tensor_data_fails_only_its_case_naming_key_argument_and_file(tmp_path, breaker):
    dump_dir = copy_dump(tmp_path, "mlp_tensor/step0/rank0")
    shown, problem = breaker(dump_dir)
    dump = load_dump(dump_dir / "dump.json")
    with pytest.raises(DumpDataError) as info:
        materialize(case_of(dump, GELU), dump.data_dir)
    assert str(info.value) == f"{GELU} input_args[0]: {shown} {problem}"
    assert (info.value.key, info.value.where, info.value.path) == (GELU, "input_args[0]", str(shown))
    materialize(case_of(dump, "Functional.relu.0.forward"), dump.data_dir)  # its neighbours still load


def test_missing_gradient_file_names_the_backward_key(tmp_path):
    dump_dir = copy_dump(tmp_path, "mlp_tensor/step0/rank0")
    grad_file = dump_dir / "dump_tensor_data" / "Functional.gelu.0.backward.input.0.pt"
    grad_file.unlink()
    dump = load_dump(dump_dir / "dump.json")
    with pytest.raises(DumpDataError) as info:
        materialize(case_of(dump, "Functional.gelu.0.backward"), dump.data_dir)
    assert str(info.value) == (f"Functional.gelu.0.backward backward input[0]: {grad_file} does not exist; "
                               "copy the dump_tensor_data/ folder along with dump.json")


def test_numeric_npy_file_loads(tmp_path):
    dump_dir = copy_dump(tmp_path, "mlp_tensor/step0/rank0")
    real = torch.load(dump_dir / "dump_tensor_data" / GELU_FILE, weights_only=True)
    np.save(dump_dir / "dump_tensor_data" / "gelu.npy", real.numpy())
    set_data_name(dump_dir, "gelu.npy")
    dump = load_dump(dump_dir / "dump.json")
    assert torch.equal(materialize(case_of(dump, GELU), dump.data_dir).args[0].detach(), real)


def test_materializing_a_case_that_cannot_be_rebuilt_names_dump_json(tmp_path):
    dump_dir = copy_dump(tmp_path, "mlp_statistics/step0/proc11235")
    document = json.loads((dump_dir / "dump.json").read_text())
    document["data"][GELU]["input_args"][0].update(dtype="torch.float8_e4m3fn", Max=None, Min=None)
    (dump_dir / "dump.json").write_text(json.dumps(document))
    dump = load_dump(dump_dir / "dump.json")
    case = case_of(dump, GELU)
    assert case.skip is SkipReason.MISSING_DATA
    with pytest.raises(DumpDataError) as info:
        materialize(case, dump.data_dir)
    assert str(info.value) == (
        f"{GELU} input_args[0]: {dump_dir / 'dump.json'} says it is a float8_e4m3fn tensor with no data file "
        "and no Min/Max to synthesize it from; dump with task 'tensor' to test this API")


@pytest.mark.parametrize(
    "op, args, limit",
    [
        # The index statistics (Max 50 / 9) are wider than the tensor they index: the bound wins.
        ("index_select", [tensor_desc(shape=[5, 7]), {"type": "int", "value": 1}, index_desc([9], 50)], 7),
        ("gather", [tensor_desc(shape=[5, 7]), {"type": "int", "value": -2}, index_desc([5, 3], 50)], 5),
        ("cross_entropy", [tensor_desc(shape=[16, 4]), index_desc([16], 9)], 4),
    ],
)
def test_index_roles_take_their_bound_from_the_other_arguments(tmp_path, op, args, limit):
    document = {"task": "statistics", "data": {f"Torch.{op}.0.forward": {"input_args": args, "input_kwargs": {}}}}
    (tmp_path / "dump.json").write_text(json.dumps(document))
    dump = load_dump(tmp_path / "dump.json")
    indices = materialize(dump.cases[0], dump.data_dir).args[-1]
    assert indices.min().item() == 0 and indices.max().item() == limit - 1


def test_arguments_nested_past_any_call_are_malformed_not_a_recursion_error():
    from pytest_npuprecision.dump.descriptors import MAX_NESTING, MalformedDescriptor, decode_value

    deep = [[]]
    for _ in range(2000):
        deep = [deep]
    with pytest.raises(MalformedDescriptor, match=f"nests lists deeper than {MAX_NESTING} levels"):
        decode_value(deep, "input_kwargs['x']")
    shallow = [[[1]]]
    assert decode_value([[[{"type": "int", "value": 1}]]], "x") == [[[1]]] and shallow


def test_a_message_quoting_a_huge_value_from_the_dump_stays_short():
    from pytest_npuprecision.dump.descriptors import MAX_MESSAGE, UnsupportedDescriptor, decode_value

    with pytest.raises(UnsupportedDescriptor) as refused:
        decode_value({"type": "torch.Tensor", "dtype": "x" * 50_000_000, "shape": [1]}, "input_args[0]")
    text = str(refused.value)
    assert len(text) < MAX_MESSAGE + 200 and "characters cut" in text and text.startswith("input_args[0] has dtype 'xxx")


def test_dtypes_msprobe_writes_as_empty_objects_come_back_from_the_recorded_output():
    from pytest_npuprecision.dump.descriptors import decode_call

    tensor = {"type": "torch.Tensor", "dtype": "torch.float16", "shape": [2], "Max": 1, "Min": 0, "Mean": 0.5,
              "Norm": 1, "requires_grad": False}
    as_float64 = {**tensor, "dtype": "torch.float64"}
    # x.to("cpu", torch.float64, ...): the device written, the dtype not.
    to = decode_call({"input_args": [tensor, {"type": "str", "value": "cpu"}, {}], "input_kwargs": {},
                      "output": [as_float64]}, "to")
    assert to.args[2] is torch.float64 and "input_args[2]" in to.guesses[0]
    # _softmax_backward_data(grad, output, dim, input_dtype): the input dtype is the result's.
    backward = decode_call({"input_args": [tensor, tensor, {"type": "int", "value": 0}, {}], "input_kwargs": {},
                            "output": [tensor]}, "_softmax_backward_data")
    assert backward.args[3] is torch.float16


@pytest.mark.parametrize("dtype", ["torch.int64", "torch.int32", "torch.uint8"])
@pytest.mark.parametrize("field, value", [("Max", math.nan), ("Min", -math.inf), ("Max", math.inf)])
def test_an_integer_tensor_with_nonfinite_statistics_is_the_dumps_fault(tmp_path, dtype, field, value):
    # Issue 40: no integer is nan or infinite, so the statistics are corrupt: an input error naming the
    # entry, the argument, the file and the field, never a harness error from int(nan).
    stats = {"Max": 3, "Min": 0, field: value}
    args = [tensor_desc(dtype=dtype, shape=[4], **stats)]
    document = {"task": "statistics", "data": {"Torch.abs.0.forward": {"input_args": args, "input_kwargs": {}}}}
    (tmp_path / "dump.json").write_text(json.dumps(document))
    dump = load_dump(tmp_path / "dump.json")
    with pytest.raises(DumpDataError) as error:
        materialize(dump.cases[0], dump.data_dir)
    assert str(error.value) == (f"Torch.abs.0.forward input_args[0]: {tmp_path / 'dump.json'} says it has {field} "
                                f"{value}, which no {dtype.removeprefix('torch.')} value can be; the statistics are "
                                "corrupt: re-dump this API or delete the entry")
