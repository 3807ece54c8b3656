"""Calls that PyTorch's own OpInfo samples showed the harness replaying wrongly (issue 21, part 3),
each dumped by msprobe itself (tests/data/replay, written by make_replay_dumps.py there) and replayed
on a CPU device: what torch computes fairly passes, what no golden can redraw skips as random, and
nothing ends as an input error or a harness error."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import torch
from fixtures import judged_here

from pytest_npuprecision.dump.fingerprints import update_with_tensor
from pytest_npuprecision.ops.catalogue import op_record, random_reason
from pytest_npuprecision.ops.randomness import folded_name, seeded_aten_ops

DUMPS = Path(__file__).resolve().parents[1] / "data" / "replay"
_reports = (f"report_{i}" for i in itertools.count())


def run(pytester, dump: str, *options: str, subprocess: bool = False) -> dict[str, dict]:
    report = pytester.path / next(_reports)
    # A planted backend runs in a child: the in-process runs before it left their own Backend class behind.
    (pytester.runpytest_subprocess if subprocess else pytester.runpytest)("--npu-precision", str(DUMPS / dump), "--npu-precision-report", str(report),
                       "-p", "no:cacheprovider", "--npu-precision-device", "cpu", *options)
    records = [json.loads(line) for line in (report / "cases.jsonl").read_text().splitlines()]
    return {r["key"]: r for r in records}


def statuses(records: dict[str, dict]) -> dict[str, str]:
    return {key: r["status"] for key, r in records.items()}


# ---------------------------------------------------------------- random ops

def test_every_op_the_installed_torch_tags_seeded_is_random():
    tagged = seeded_aten_ops()  # whatever this torch's version tags
    assert {"bernoulli", "randn", "multinomial"} <= tagged
    switched = {name for name in tagged if op_record(folded_name(name)).random is not None
                and not op_record(folded_name(name)).random.every_call}
    assert {"dropout", "rrelu", "lstm"} <= switched
    assert all(random_reason(name, (), {}) == "always" for name in tagged - switched)
    assert random_reason("add", (), {}) is None and random_reason("dropout", (None, 0.0), {}) is None


def test_random_windows_skip_and_recorded_windows_are_judged(pytester):
    records = run(pytester, "random")
    assert statuses(records) == {
        "Functional.fractional_max_pool2d.0.forward": "skip",  # windows drawn inside the call
        "Functional.fractional_max_pool2d.0.backward": "skip",
        "Functional.fractional_max_pool2d.1.forward": "pass",  # _random_samples recorded: deterministic
        "Functional.fractional_max_pool3d.0.forward": "skip",
        "Functional.fractional_max_pool3d.1.forward": "pass",
        "Functional.rrelu.0.forward": "skip",  # training=True draws the slopes
        "Functional.rrelu.1.forward": "pass",
        "Tensor.sum.0.forward": "pass",
        "Tensor.sum.0.backward": "pass",
    }
    assert records["Functional.fractional_max_pool2d.0.forward"]["reason"] == "random-op"
    assert "_random_samples not recorded" in records["Functional.fractional_max_pool3d.0.forward"]["message"]
    assert "training=True" in records["Functional.rrelu.0.forward"]["message"]


def test_recorded_windows_still_catch_a_wrong_pooling(pytester):
    tests = str(Path(__file__).resolve().parents[1])
    pytester.makepyfile(planted_pool=f"import sys\nsys.path.insert(0, {tests!r})\n"
                                     "from faulty_backend import Fault, FaultyBackend\n"
                                     "backend = FaultyBackend({'Functional.fractional_max_pool2d': Fault('wrong_element')})\n")
    pytester.syspathinsert()
    records = run(pytester, "random", "--npu-precision-device", "planted_pool:backend", subprocess=True)
    assert records["Functional.fractional_max_pool2d.1.forward"]["status"] == "error"


# ---------------------------------------------------------------- stride-0 inputs

def test_an_expanded_one_element_input_is_fingerprinted(pytester):
    records = run(pytester, "stride0")
    assert set(statuses(records).values()) == {"pass"}
    assert records["Torch.mul.0.forward"]["fingerprint"]["inputs"]["input_args[1]"].startswith("float32[1] ")


def digest(t: torch.Tensor) -> str:
    h = hashlib.blake2b(digest_size=8)
    update_with_tensor(h, t)
    return h.hexdigest()


def test_an_expanded_tensor_is_hashed_once_per_distinct_value():
    one = torch.tensor([0.25])
    assert digest(one.expand(1)) == digest(torch.as_strided(one, (1,), (0,))) == digest(one.clone())
    row = torch.arange(5.0)
    # a trillion rows, never materialized; the same rows from another storage hash the same
    assert digest(row.expand(10**12, 5)) == digest(row.clone().expand(10**12, 5))
    assert digest(row.expand(3, 5)) != digest(row.expand(4, 5))  # the shape is hashed
    assert digest(row.expand(3, 5)) != digest((row + 1).expand(3, 5))  # and the values


# ---------------------------------------------------------------- complex outputs

def test_complex_outputs_are_judged_as_real_and_imaginary_parts(pytester):
    records = run(pytester, "complex_outputs")
    assert set(statuses(records).values()) == {"pass"}
    for key in ("Tensor.cfloat.0.forward", "Torch.polar.0.forward", "Torch.stft.0.forward"):
        assert [o["name"] for o in records[key]["outputs"]] == ["output.0.real", "output.0.imag"]


def test_a_wrong_complex_element_fails(pytester):
    tests = str(Path(__file__).resolve().parents[1])
    pytester.makepyfile(planted_polar=f"import sys\nsys.path.insert(0, {tests!r})\n"
                                      "from faulty_backend import Fault, FaultyBackend\n"
                                      "backend = FaultyBackend({'Torch.polar': Fault('wrong_element')})\n")
    pytester.syspathinsert()
    records = run(pytester, "complex_outputs", "--npu-precision-device", "planted_polar:backend", subprocess=True)
    assert records["Torch.polar.0.forward"]["status"] == "error"
    assert records["Torch.stft.0.forward"]["status"] == "pass"


# ---------------------------------------------------------------- group_norm's three gradients

def test_group_norm_backward_takes_the_one_gradient_msprobe_recorded_beside_two_nulls(pytester):
    records = run(pytester, "group_norm")
    assert statuses(records) == {"Functional.group_norm.0.forward": "pass",
                                 "Functional.group_norm.0.backward": "pass"}
    grads = [o["name"] for o in records["Functional.group_norm.0.backward"]["outputs"]]
    assert len(grads) == 3  # input, weight and bias


# ---------------------------------------------------------------- ops defined on their dtype's grid

def test_nextafter_is_judged_against_a_golden_on_its_own_dtype_grid(pytester):
    records = judged_here(run(pytester, "dtype_grid"))  # torch 2.1's CPU has no float16 nextafter
    for key in [k for k in ("Torch.nextafter.0.forward", "Torch.nextafter.1.forward", "Torch.nextafter.2.forward")
                if k in records]:
        assert records[key]["status"] == "pass", records[key]["message"]
        assert [o["standard"] for o in records[key]["outputs"]] == ["binary"]
        assert any("inputs' dtype" in note for note in records[key]["notes"])


def test_a_wrong_nextafter_element_fails(pytester):
    tests = str(Path(__file__).resolve().parents[1])
    pytester.makepyfile(planted_grid=f"import sys\nsys.path.insert(0, {tests!r})\n"
                                     "from faulty_backend import Fault, FaultyBackend\n"
                                     "backend = FaultyBackend({'Torch.nextafter': Fault('wrong_element')})\n")
    pytester.syspathinsert()
    records = judged_here(run(pytester, "dtype_grid", "--npu-precision-device", "planted_grid:backend",
                              subprocess=True))
    assert {records[k]["status"] for k in records if k.startswith("Torch.nextafter.")} == {"error"}


# ---------------------------------------------------------------- labels

def test_arguments_that_do_not_bind_blame_the_replay_not_the_dump(pytester):
    """msprobe names torch.linalg.svd Torch.svd; replayed as torch.svd, full_matrices does not bind.
    Once the resolver calls torch.linalg.svd the case passes; until then it must not read as the
    dump's input error."""
    record = run(pytester, "misreplayed")["Torch.svd.0.forward"]
    assert record["status"] in ("pass", "harness-error"), record["message"]
    if record["status"] == "harness-error":
        assert "the replay is at fault, not the dump" in record["message"]
        assert "full_matrices" in record["message"]


def test_ops_whose_result_is_uninitialized_memory_skip_as_random():
    for name in ("resize_", "resize_as_", "empty_like", "new_empty"):
        assert random_reason(name, (), {}) == "its result is uninitialized memory", name
    assert random_reason("zeros_like", (), {}) is None
    assert random_reason("resize", (), {}) is None  # not in place: a view of the same elements
