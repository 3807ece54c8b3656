"""The memory budget counts what a factory call makes from its size arguments, whatever output the
dump declares: a dumped Torch.ones(40000, 25000) with a [4] output is 10**9 elements (issue 40)."""

import json

import pytest

from pytest_npuprecision.checks.case_run import CaseSkipped, Settings, run_case
from pytest_npuprecision.dump.descriptors import CaseEntries, decode_call
from pytest_npuprecision.dump.dump_cases import load_dump
from pytest_npuprecision.replay.memory_budget import case_bytes, factory_elements


def integer(value):
    return {"type": "int", "value": value}


def number(value):
    return {"type": "float", "value": value}


def tensor(shape=(4,), dtype="torch.float32"):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": 1.0, "Min": -1.0, "Mean": 0.0,
            "Norm": 1.0, "requires_grad": False}


SIZE = {"type": "torch.Size", "value": [40000, 25000]}
HUGE = 40000 * 25000


@pytest.mark.parametrize("name, args, kwargs, elements", [
    ("ones", [integer(40000), integer(25000)], {}, HUGE),
    ("zeros", [SIZE], {}, HUGE),
    ("empty", [[integer(40000), integer(25000)]], {}, HUGE),
    ("ones", [], {"size": SIZE}, HUGE),
    ("full", [SIZE, number(1.0)], {}, HUGE),
    ("empty_strided", [SIZE, [integer(25000), integer(1)]], {}, HUGE),
    ("randint", [integer(3), SIZE], {}, HUGE),
    ("new_ones", [tensor(), SIZE], {}, HUGE),
    ("new_full", [tensor(), SIZE, number(2.0)], {}, HUGE),
    ("ones_like", [tensor((40000, 25000))], {}, HUGE),
    ("arange", [integer(10**9)], {}, 10**9),
    ("arange", [number(0.0), number(1.0), number(0.25)], {}, 4),
    ("arange", [integer(5), integer(1)], {}, 0),  # empty: an end before the start
    ("arange", [integer(0), integer(10), integer(0)], {}, 0),  # torch refuses a zero step itself
    ("linspace", [integer(0), integer(1), integer(10**9)], {}, 10**9),
    ("eye", [integer(40000)], {}, 40000 * 40000),
    ("eye", [integer(3), integer(5)], {}, 15),
    ("ones", [integer(-4), integer(3)], {}, 0),  # torch refuses a negative size before allocating
    ("relu", [tensor()], {}, 0),
])
def test_a_factory_call_counts_what_its_size_arguments_make(name, args, kwargs, elements):
    assert factory_elements(name, decode_call({"input_args": args, "input_kwargs": kwargs}, name)) == elements


def test_a_factory_past_the_budget_is_skipped_before_it_allocates(tmp_path):
    entry = {"input_args": [integer(40000), integer(25000)], "input_kwargs": {}, "output": [tensor()]}
    need = case_bytes(CaseEntries("ones", entry), direction="forward", baseline=False)
    # 8 bytes an element on the device (no dtype: the widest), 8 for the golden, 32 for the metrics.
    assert need == HUGE * 48
    path = tmp_path / "step0" / "rank0" / "dump.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"task": "statistics", "data": {"Torch.ones.0.forward": %s}}' % json.dumps(entry))
    case, = load_dump(path).cases
    with pytest.raises(CaseSkipped, match="need about 44.7 GiB .* past the budget of 2.0 GiB") as skipped:
        run_case(case, path.parent, Settings("cpu", max_case_bytes=2 * 2**30))
    assert skipped.value.reason == "too-large"


def test_a_dtype_argument_sets_the_bytes_of_an_element():
    entry = {"input_args": [SIZE], "input_kwargs": {"dtype": {"type": "torch.dtype", "value": "torch.float16"}},
             "output": [tensor()]}
    assert case_bytes(CaseEntries("zeros", entry), direction="forward", baseline=True) == HUGE * (2 * 2 + 8 + 32)
