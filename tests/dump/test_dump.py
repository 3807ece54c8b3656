"""Finding dump.json files and turning real msprobe dumps into case records."""

import json
import zlib
from collections import Counter

import pytest
from dump_descriptors import gelu_entry, tensor, write_dump
from fixtures import DUMP_FOLDERS, FIXTURES, fixture_dump, needs_dumps

from pytest_npuprecision.checks.case_run import CaseSkipped, Settings, run_case
from pytest_npuprecision.dump.dump_cases import SkipReason, load_dump
from pytest_npuprecision.dump.locations import find_dump_files

# ---------------------------------------------------------------- finding


@needs_dumps(*DUMP_FOLDERS)
def test_find_accepts_a_file_a_rank_folder_a_step_folder_and_a_root():
    dump = fixture_dump("mlp_statistics/step1/proc11235/dump.json")
    assert find_dump_files(dump) == [dump]
    assert find_dump_files(dump.parent) == [dump]
    assert find_dump_files(dump.parent.parent) == [dump]
    assert find_dump_files(fixture_dump("mlp_statistics")) == [
        FIXTURES / f"mlp_statistics/step{n}/proc11235/dump.json" for n in range(3)
    ]
    assert len(find_dump_files(FIXTURES)) == 13  # the steps of the seven dumps in FIXTURE_TABLE


def test_find_sorts_naturally_and_skips_tensor_folders(tmp_path):
    for folder in ("step10/rank0", "step2/rank10", "step2/rank2", "step1/proc7", "step1/rank0/dump_tensor_data"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "dump.json").write_text("{}")
    assert [p.parent.relative_to(tmp_path).as_posix() for p in find_dump_files(tmp_path)] == [
        "step1/proc7", "step2/rank2", "step2/rank10", "step10/rank0",
    ]


def test_find_rejects_a_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        find_dump_files(tmp_path / "nope")
    assert str(info.value) == (f"dump path {str(tmp_path / 'nope')!r} does not exist; "
                               "pass a dump.json or a folder that contains one")


# ---------------------------------------------------------------- the seven real dumps

# folder, steps, entries per step, forward / backward / parameters_grad entries, Module.* entries
FIXTURE_TABLE = [
    ("mlp_statistics", 3, 23, 16, 7, 0, 0),
    ("mlp_tensor", 2, 23, 16, 7, 0, 0),
    ("mlp_fp16_tensor", 2, 23, 16, 7, 0, 0),
    ("transformer_tensor", 1, 125, 79, 46, 0, 0),  # msprobe wrote 2 steps; the repository keeps step0
    ("transformer_bf16_tensor", 1, 125, 79, 46, 0, 0),  # the same
    ("transformer_mix_statistics", 2, 146, 80, 50, 16, 56),
    ("mlp_L0_tensor", 2, 14, 5, 5, 4, 14),
]


@pytest.mark.parametrize("folder, steps, entries, forward, backward, param_grad, modules", FIXTURE_TABLE,
                         ids=[row[0] for row in FIXTURE_TABLE])
def test_fixture_case_counts(folder, steps, entries, forward, backward, param_grad, modules):
    files = find_dump_files(fixture_dump(folder))
    assert len(files) == steps
    for step, path in enumerate(files):
        dump = load_dump(path)
        assert dump.error is None and dump.step == step and dump.framework == "pytorch"
        assert len(dump.cases) == entries
        directions = Counter(c.direction for c in dump.cases)
        expected = Counter({"forward": forward, "backward": backward, "parameters_grad": param_grad})
        assert directions == expected - Counter()  # "- Counter()" drops the zero counts
        skips = Counter(c.skip for c in dump.cases)
        assert skips == Counter({SkipReason.MODULE_ENTRY: modules, None: entries - modules}) - Counter()
        assert all(c.prefix == "Module" for c in dump.cases if c.skip)


def test_dump_file_metadata_comes_from_the_folders_not_the_recorded_paths():
    dump = load_dump(fixture_dump("mlp_statistics/step2/proc11235/dump.json"))
    assert (dump.task, dump.level, dump.step, dump.rank, dump.pid, dump.location) == (
        "statistics", "L1", 2, None, 11235, "step2/proc11235")
    dump = load_dump(fixture_dump("mlp_tensor/step1/rank0/dump.json"))
    assert (dump.task, dump.step, dump.rank, dump.pid) == ("tensor", 1, 0, None)
    assert dump.data_dir == FIXTURES / "mlp_tensor/step1/rank0/dump_tensor_data"
    case = dump.cases[0]
    assert (case.case_id, case.key, case.order) == (
        "step1/rank0::Functional.linear.0.forward", "Functional.linear.0.forward", 0)


def test_cases_keep_dump_order_and_link_forward_and_backward():
    dump = load_dump(fixture_dump("mlp_tensor/step0/rank0/dump.json"))
    raw = json.loads(fixture_dump("mlp_tensor/step0/rank0/dump.json").read_text())["data"]
    assert [c.key for c in dump.cases] == list(raw)
    assert [c.order for c in dump.cases] == list(range(len(raw)))
    by_key = {c.key: c for c in dump.cases}
    forward, backward = by_key["Functional.linear.0.forward"], by_key["Functional.linear.0.backward"]
    assert forward.forward is backward.forward is not None
    assert forward.backward == backward.backward == raw["Functional.linear.0.backward"]
    assert by_key["Functional.dropout.0.forward"].backward is None  # msprobe skips dropout's backward
    assert backward.forward_key == "Functional.linear.0.forward"


def test_seeds_come_only_from_case_ids(tmp_path):
    dump = load_dump(fixture_dump("mlp_tensor/step0/rank0/dump.json"))
    assert all(c.seed == zlib.crc32(c.case_id.encode()) for c in dump.cases)
    by_key = {c.key: c for c in dump.cases}
    assert by_key["Functional.gelu.0.backward"].forward_seed == by_key["Functional.gelu.0.forward"].seed
    # Reversing the file changes every order but no seed.
    document = json.loads(fixture_dump("mlp_tensor/step0/rank0/dump.json").read_text())
    document["data"] = dict(reversed(list(document["data"].items())))
    (tmp_path / "step0/rank0").mkdir(parents=True)
    (tmp_path / "step0/rank0/dump.json").write_text(json.dumps(document))
    reversed_dump = load_dump(tmp_path / "step0/rank0/dump.json")
    assert {c.key: c.seed for c in reversed_dump.cases} == {c.key: c.seed for c in dump.cases}


@pytest.mark.parametrize(
    "key, prefix, name, index, direction, api",
    [
        ("Functional.gelu.0.forward", "Functional", "gelu", 0, "forward", "Functional.gelu.0"),
        ("Torch.linalg.inv.0.forward", "Torch", "linalg.inv", 0, "forward", "Torch.linalg.inv.0"),
        ("NPU.atb.npu_mla_preprocess.3.backward", "NPU", "atb.npu_mla_preprocess", 3, "backward",
         "NPU.atb.npu_mla_preprocess.3"),
        ("Tensor.__add__.12.forward", "Tensor", "__add__", 12, "forward", "Tensor.__add__.12"),
        ("Aten.mul.Tensor.0.forward", "Aten", "mul.Tensor", 0, "forward", "Aten.mul.Tensor.0"),
        ("Module.blocks.0.attn.qkv.Linear.forward.0", "Module", "blocks.0.attn.qkv.Linear", 0, "forward",
         "Module.blocks.0.attn.qkv.Linear.0"),
        ("Module.fc3.Linear.parameters_grad.0", "Module", "fc3.Linear", 0, "parameters_grad", "Module.fc3.Linear.0"),
    ],
)
def test_key_parsing(tmp_path, key, prefix, name, index, direction, api):
    case = one_case(tmp_path, {key: gelu_entry()})
    assert (case.prefix, case.name, case.call_index, case.direction, case.api) == (prefix, name, index, direction, api)
    assert case.case_id == f"step0/rank0::{key}"


# ---------------------------------------------------------------- skips


def scalar(kind, value):
    return {"type": kind, "value": value}


def one_case(tmp_path, data):
    return write_dump(tmp_path, data).cases[-1]


BACKWARD = {"input": [tensor()], "output": [tensor()]}
SKIP_TABLE = [
    ("Functional.gelu.0.forward", gelu_entry(), None, ""),
    ("Jit.custom_op.0.forward", gelu_entry(), None, ""),  # unknown ops are decided elsewhere
    ("Module.fc1.Linear.forward.0", gelu_entry(), SkipReason.MODULE_ENTRY,
     "module-level entries are not single API calls; dump with level L1 or mix"),
    ("Distributed.all_reduce.0.forward", gelu_entry(), None, ""),  # a collective: checks/collectives judges it
    ("VF.lstm.0.forward", gelu_entry(), SkipReason.UNSUPPORTED_PREFIX, "VF APIs cannot be re-run as a single op"),
    ("MindSpeed.gmm.npu_gmm.0.forward", gelu_entry(), None, ""),  # judged against npu_gmm's reference
    ("Functional.gelu.7.backward", BACKWARD, SkipReason.NO_FORWARD,
     "its forward entry Functional.gelu.7.forward is not in dump.json, so its inputs are unknown; "
     "dump with data_mode 'all'"),
    ("Functional.dropout.0.forward", gelu_entry(scalar("float", 0.0), scalar("bool", True)), None, ""),
    ("Functional.dropout.0.forward", gelu_entry(scalar("float", 0.5), scalar("bool", False)), None, ""),
    ("Functional.rrelu.0.forward", gelu_entry(), None, ""),  # eval-mode rrelu is deterministic
    ("Functional.gelu.0.forward",
     {"input_args": [tensor(dtype="torch.float8_e4m3fn", Max=None, Min=None, Mean=None, Norm=None)],
      "input_kwargs": {}, "output": []},
     SkipReason.MISSING_DATA, "input_args[0] is a float8_e4m3fn tensor with no data file and no Min/Max to "
                              "synthesize it from; dump with task 'tensor' to test this API"),
    ("Torch.sum.0.forward", gelu_entry(scalar("torch.distributed.ReduceOp", "SUM")), SkipReason.MISSING_DATA,
     "input_args[1] has type 'torch.distributed.ReduceOp', which this harness cannot rebuild"),
    ("gelu", gelu_entry(), SkipReason.MALFORMED_ENTRY,
     "the key fits neither '<Prefix>.<api>.<index>.<forward|backward>' nor "
     "'Module.<path>.<Class>.<direction>.<index>'; msprobe did not write this entry"),
    ("Functional.gelu.0.forward", {"input_args": "oops", "input_kwargs": {}}, SkipReason.MALFORMED_ENTRY,
     "input_args is a str, expected a list; re-dump this API or delete the entry"),
    ("Functional.gelu.0.forward", None, SkipReason.MALFORMED_ENTRY,
     "the entry is null, expected an object; re-dump this API or delete the entry"),
    ("Functional.gelu.0.forward", gelu_entry(scalar("int", 1.5)), SkipReason.MALFORMED_ENTRY,
     "input_args[1] has value 1.5, which is not of type 'int'; re-dump this API or delete the entry"),
]


@pytest.mark.parametrize("key, entry, reason, detail", SKIP_TABLE,
                         ids=[f"{i}-{row[2].name if row[2] else 'run'}" for i, row in enumerate(SKIP_TABLE)])
def test_skip_table(tmp_path, key, entry, reason, detail):
    case = one_case(tmp_path, {key: entry})
    assert (case.skip, case.skip_detail) == (reason, detail)
    assert case.skip_message == (f"{key}: {detail}" if reason else "")


# Whether a call draws random numbers is the catalogue's to say (ops/randomness.py), asked as the case runs.
RANDOM_TABLE = [
    ("Functional.dropout.0.forward", gelu_entry(scalar("float", 0.5), scalar("bool", True)),
     "dropout draws random numbers (p=0.5, training=True), so device and golden cannot agree"),
    ("Functional.dropout.0.forward", gelu_entry(p=scalar("float", 0.3)),
     "dropout draws random numbers (p=0.3, training=True), so device and golden cannot agree"),
    ("Functional.scaled_dot_product_attention.0.forward", gelu_entry(dropout_p=scalar("float", 0.1)),
     "scaled_dot_product_attention draws random numbers (dropout_p=0.1), so device and golden cannot agree"),
    ("Torch.randn.0.forward", {"input_args": [scalar("int", 4)], "input_kwargs": {}, "output": []},
     "randn draws random numbers (always), so device and golden cannot agree"),
    ("Tensor.bernoulli_.0.forward", gelu_entry(),
     "bernoulli_ draws random numbers (always), so device and golden cannot agree"),
    # an aten key names its overload last: the packet is the op
    ("Aten.native_dropout.default.0.forward", gelu_entry(scalar("float", 0.5), scalar("bool", True)),
     "native_dropout.default draws random numbers (p=0.5, training=True), so device and golden cannot agree"),
]


@pytest.mark.parametrize("key, entry, detail", RANDOM_TABLE, ids=[f"{i}-random" for i in range(len(RANDOM_TABLE))])
def test_a_random_call_skips_as_it_runs(tmp_path, key, entry, detail):
    dump = write_dump(tmp_path, {key: entry})
    case = dump.cases[-1]
    assert case.skip is None  # the dump has nothing against it: the catalogue does
    with pytest.raises(CaseSkipped) as skipped:
        run_case(case, dump.data_dir, Settings(device="cpu"))
    assert (skipped.value.reason, str(skipped.value)) == ("random-op", f"{key}: {detail}")


@pytest.mark.parametrize(
    "backward, reason, detail",
    [
        ({"input": "x"}, SkipReason.MALFORMED_ENTRY,
         "backward input is a str, expected a list; re-dump this API or delete the entry"),
        ([], SkipReason.MALFORMED_ENTRY, "the backward entry is a list, expected an object; "
                                         "re-dump this API or delete the entry"),
        ({"input": [tensor(Max=None, Min=None)]}, SkipReason.MISSING_DATA,
         "backward input[0] is a float32 tensor with no data file and no Min/Max to synthesize it from; "
         "dump with task 'tensor' to test this API"),
    ],
)
def test_backward_entry_problems_mark_only_the_backward_case(tmp_path, backward, reason, detail):
    forward, back = write_dump(tmp_path, {"Functional.gelu.0.forward": gelu_entry(),
                                          "Functional.gelu.0.backward": backward}).cases
    assert forward.skip is None
    assert (back.skip, back.skip_detail) == (reason, detail)


def test_one_malformed_entry_in_a_real_dump_marks_only_its_api(tmp_path):
    document = json.loads(fixture_dump("mlp_tensor/step0/rank0/dump.json").read_text())
    document["data"]["Functional.gelu.0.forward"]["input_args"] = "not a list"
    (tmp_path / "step0/rank0").mkdir(parents=True)
    (tmp_path / "step0/rank0/dump.json").write_text(json.dumps(document))
    dump = load_dump(tmp_path / "step0/rank0/dump.json")
    skipped = {c.key: c.skip_message for c in dump.cases if c.skip}
    assert skipped == {
        "Functional.gelu.0.forward": "Functional.gelu.0.forward: input_args is a str, expected a list; "
                                     "re-dump this API or delete the entry",
        # The backward case re-runs that forward call, so it cannot run either; its message says why.
        "Functional.gelu.0.backward": "Functional.gelu.0.backward: forward entry Functional.gelu.0.forward: "
                                      "input_args is a str, expected a list; re-dump this API or delete the entry",
    }
    assert len(dump.cases) == 23


def test_skip_reasons_are_documented():
    assert len({r.value for r in SkipReason}) == len(SkipReason) == 5
    assert all(r.description.endswith(".") and len(r.description) < 100 for r in SkipReason)


# ---------------------------------------------------------------- bad files


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"{not json", "is not readable JSON (Expecting property name enclosed in double quotes: "
                       "line 1 column 2 (char 1))"),
        (b"", "is not readable JSON (Expecting value: line 1 column 1 (char 0))"),
        (b"\xff\xfe{}", "is not readable JSON ('utf-8' codec can't decode byte 0xff in position 0: "
                        "invalid start byte)"),
        (b"[1, 2]", "holds a JSON list, expected an object"),
        (b'{"task": "tensor", "level": "L1"}', "has no 'data' object"),
        (b'{"task": "tensor", "data": []}', "has a 'data' list, expected an object"),
    ],
)
def test_unusable_file_gives_an_error_not_an_exception(tmp_path, content, problem):
    path = tmp_path / "dump.json"
    path.write_bytes(content)
    dump = load_dump(path)
    assert dump.cases == () and dump.path == path
    assert dump.error == f"{path} {problem}; re-dump it with msprobe or remove it from the dump folder"


def test_bare_infinity_tokens_are_accepted():
    dump = load_dump(fixture_dump("transformer_mix_statistics/step0/rank0/dump.json"))
    assert dump.error is None
    softmax = next(c for c in dump.cases if c.key == "Torch.softmax.0.forward")
    assert softmax.forward["input_args"][0]["Min"] == float("-inf") and softmax.skip is None


def test_outside_the_step_rank_layout_the_case_id_is_the_key(tmp_path):
    path = tmp_path / "dump.json"
    path.write_text(json.dumps({"task": "statistics", "data": {"Functional.gelu.0.forward": gelu_entry()}}))
    dump = load_dump(path)
    assert (dump.step, dump.rank, dump.pid, dump.location) == (None, None, None, "")
    assert dump.cases[0].case_id == "Functional.gelu.0.forward"
