"""Statistics dumps judged offline (issue 55): two statistics dumps of the same steps compared by what their
statistics can show, one statistics dump by the invariants its ops' definitions put on them, and checksum dumps
bit for bit. The pairs come from statistics_pairs.py: a GPU side on torch's CPU kernels, an NPU side on fair but
different kernels everywhere, and maybe one planted defect."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from statistics_pairs import PLANTED_API, FairKernels, capture_pair
from torch.overrides import TorchFunctionMode

from fixtures import fixture_dump
from pytest_npuprecision import capture
from pytest_npuprecision.capturing.describe import TensorSink, describe
from pytest_npuprecision.checks.statistics.invariants import FAMILIES, NoInvariant, check_invariants
from pytest_npuprecision.checks.statistics.summaries import call_summaries
from pytest_npuprecision.dump.descriptors import CaseEntries
from pytest_npuprecision.ops.catalogue import op_record
from pytest_npuprecision.ops.records import STATISTICS_FAMILIES
from pytest_npuprecision.ops.resolution import resolve
from pytest_npuprecision.precision.verdict import Status

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dumps" / "mlp_statistics"


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """pairs(plant, dtype) -> (device dump, baseline dump), captured once per module."""
    made: dict[tuple[str, str], tuple[Path, Path]] = {}

    def pair(plant: str, dtype: str) -> tuple[Path, Path]:
        if (plant, dtype) not in made:
            made[plant, dtype] = capture_pair(tmp_path_factory.mktemp(f"{plant}_{dtype}"), plant, getattr(torch, dtype))
        return made[plant, dtype]

    return pair


def run(pytester, dump: Path, baseline: Path | None = None, *extra: str):
    report = pytester.path / "report"
    options = ["--npu-precision-baseline", str(baseline)] if baseline else []
    result = pytester.runpytest("--npu-precision", str(dump), "--npu-precision-device", "dumped", *options,
                                "--npu-precision-report", str(report), "-p", "no:cacheprovider", *extra)
    records = [json.loads(line) for line in (report / "cases.jsonl").read_text().splitlines()] \
        if (report / "cases.jsonl").exists() else []
    return result, records


def failing(records: list[dict]) -> set[str]:
    return {r["case_id"] for r in records if r["status"] not in ("pass", "skip")}


def api_of(case_id: str) -> str:
    """'step0/rank0::Functional.gelu.2.forward' -> 'Functional.gelu'."""
    return case_id.split("::")[1].rsplit(".", 2)[0]


def parting_lines(result) -> list[str]:
    return [line for line in result.outlines if line.startswith("where the dumps")]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_fair_pair_blames_nothing_and_parts_nowhere(pytester, pairs, dtype):
    npu, gpu = pairs("none", dtype)
    result, records = run(pytester, npu, gpu)
    assert result.ret == 0, "\n".join(result.outlines[-30:])
    assert not failing(records)
    assert parting_lines(result)[0].startswith("where the dumps part: nowhere")
    judged = [r for r in records if r["status"] == "pass"]
    assert len(judged) > 200 and all(r["baseline_state"] == "dump" for r in judged)
    # Drift is everywhere: downstream calls part by more than rounding, and say it is inherited.
    assert sum("inherited" in " ".join(r.get("notes", [])) for r in judged) > 5


PLANTED = [("gelu_scale", "float32"), ("gelu_scale", "bfloat16"), ("linear_scale", "float32"),
           ("linear_scale", "bfloat16"), ("softmax_bf16_sum", "float32"), ("softmax_bf16_sum", "bfloat16")]


@pytest.mark.parametrize("plant,dtype", PLANTED)
def test_a_planted_pair_parts_first_at_the_planted_op_in_every_step_and_blames_nothing_downstream(
        pytester, pairs, plant, dtype):
    npu, gpu = pairs(plant, dtype)
    result, records = run(pytester, npu, gpu)
    blamed = failing(records)
    planted = PLANTED_API[plant]
    assert blamed and {api_of(case_id) for case_id in blamed} == {planted}, sorted(blamed)
    # The planted op's own backward may part too: it runs on the outputs the defect wrote.
    lines = parting_lines(result)
    assert len(lines) == 2
    for step, line in enumerate(lines):
        assert line.startswith(f"where the dumps first part in step{step}/rank0: {planted}.0.forward"), line


def test_the_planted_pair_judges_alike_under_xdist(pytester, pairs):
    npu, gpu = pairs("gelu_scale", "float32")
    serial, serial_records = run(pytester, npu, gpu)
    parallel, parallel_records = run(pytester, npu, gpu, "-n", "2")
    assert failing(parallel_records) == failing(serial_records)
    assert parting_lines(parallel) == parting_lines(serial)
    assert parallel.ret == serial.ret == 1


@pytest.mark.parametrize("plant,dtype", [("gelu_scale", "float32"), ("gelu_scale", "bfloat16"),
                                         ("softmax_bf16_sum", "float32")])
def test_one_statistics_dump_fails_its_planted_op_by_its_invariants(pytester, pairs, plant, dtype):
    npu, _ = pairs(plant, dtype)
    result, records = run(pytester, npu)
    blamed = failing(records)
    planted = PLANTED_API[plant]
    assert {api_of(c) for c in blamed} == {planted}
    assert all(c.endswith(".forward") for c in blamed)
    assert len(blamed) == 6  # three blocks, two steps: every call of it
    assert all(o["standard"] == "statistics-invariants" for r in records if r["case_id"] in blamed
               for o in r["outputs"])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_fair_statistics_dump_passes_every_invariant(pytester, pairs, dtype):
    result, records = run(pytester, pairs("none", dtype)[0])
    assert result.ret == 0 and not failing(records)
    judged = [r for r in records if r["status"] == "pass"]
    skipped = [r for r in records if r["status"] == "skip"]
    assert len(judged) > 150
    assert {r["reason"] for r in skipped} == {"no-invariant"}
    assert any("linear has no invariant" in r["message"] for r in skipped)


@pytest.mark.parametrize("name", ["mlp_statistics", "transformer_mix_statistics", "example"])
def test_msprobe_s_real_model_statistics_dumps_pass_every_invariant(pytester, name):
    dump = EXAMPLE if name == "example" else fixture_dump(name)
    result, records = run(pytester, dump)
    assert result.ret == 0 and not failing(records), [r["message"] for r in records if r["status"] == "error"]
    assert sum(r["status"] == "pass" for r in records) >= 3


def test_a_tensor_dump_beside_a_statistics_baseline_pairs_by_statistics(pytester, tmp_path, pairs):
    npu, _ = capture_pair(tmp_path / "tensor", "none", torch.float32, task="tensor")
    gpu = pairs("none", "float32")[1]
    result, records = run(pytester, npu, gpu)
    assert result.ret == 0 and not failing(records)
    standards = {o["standard"] for r in records for o in r["outputs"]}
    assert "statistics-pair" in standards or "statistics-invariants+statistics-pair" in standards


def test_a_statistics_baseline_beside_a_replayed_dump_is_one_usage_error_naming_dumped(pytester, pairs):
    npu, gpu = pairs("none", "float32")
    result = pytester.runpytest("--npu-precision", str(npu), "--npu-precision-device", "cpu",
                                "--npu-precision-baseline", str(gpu), "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--npu-precision-device dumped" in result.stderr.str()


# ---------------------------------------------------------------- checksums (summary_mode md5)


class _OneBitOff(TorchFunctionMode):
    """The device: torch's kernels, except that ``func``'s first output element is one unit in the last place off."""

    def __init__(self, func):
        super().__init__()
        self.func = func

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is self.func:
            with torch.no_grad():
                flat = out.data.reshape(-1).clone()
                flat[0] = torch.nextafter(flat[0], torch.tensor(math.inf, dtype=flat.dtype))
                out.data.copy_(flat.view(out.shape))
        return out


def _checksum_dump(folder: Path, plant=None) -> Path:
    torch.manual_seed(7)
    layer = torch.nn.Linear(16, 16)
    x = torch.randn(8, 16)
    with _OneBitOff(plant) if plant else _Nothing(), capture(folder, task="statistics", summary_mode="md5", rank=0):
        F.gelu(F.relu(layer(x)).transpose(0, 1)).sum()
    return folder


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("plant,fails", [(F.gelu, False), (F.relu, True)], ids=["gelu", "relu"])
def test_checksum_dumps_part_where_an_output_differs_although_its_inputs_do_not(pytester, tmp_path, plant, fails):
    npu = _checksum_dump(tmp_path / "npu", plant)
    gpu = _checksum_dump(tmp_path / "gpu")
    entry = json.loads((npu / "step0" / "rank0" / "dump.json").read_text())["data"]["Functional.linear.0.forward"]
    assert len(entry["output"][0]["md5"]) == 8
    result, records = run(pytester, npu, gpu)
    name = "Functional.relu.0.forward" if plant is F.relu else "Functional.gelu.0.forward"
    assert parting_lines(result)[0].startswith(f"where the dumps first part in step0/rank0: {name}")
    assert failing(records) == ({f"step0/rank0::{name}"} if fails else set())
    by_id = {r["case_id"]: r for r in records}
    upstream = by_id["step0/rank0::Functional.linear.0.forward"]
    assert "checksum" in upstream["outputs"][0]["standard"] and upstream["status"] == "pass"


# ---------------------------------------------------------------- the invariants, one call at a time


def _judged(func, args: tuple, kwargs: dict | None = None, defect=None, name: str | None = None) -> list:
    """The invariant findings of one call as a statistics dump would record it, its output maybe corrupted."""
    kwargs = kwargs or {}
    out = func(*args, **kwargs)
    if defect is not None:
        out = defect(out.clone(memory_format=torch.contiguous_format))
    sink = TensorSink(None)
    entry = {"input_args": [describe(a, f"a{i}", sink) for i, a in enumerate(args)],
             "input_kwargs": {k: describe(v, k, sink) for k, v in kwargs.items()},
             "output": [describe(out, "out", sink)]}
    api = name or f"Functional.{func.__name__}"
    op = resolve(api)
    entries = CaseEntries(op.base_name, entry)
    return check_invariants(op_record(op.base_name).statistics, op, entries.call, call_summaries(entries, False),
                            backward=False)


def _nan(t):
    t.view(-1)[3] = math.nan
    return t


def _scaled(factor):
    return lambda t: t * factor


def _far_element(t):
    flat = t.view(-1)
    flat[flat.argmax()] = flat.max() * 1.5 + 1
    return t


torch.manual_seed(0)
_X = torch.randn(32, 64)
_ROWS = torch.randn(16, 128) * 3
CALLS = {
    "gelu": (F.gelu, (_X,), {}, None),
    "sigmoid": (torch.sigmoid, (_X,), {}, "Torch.sigmoid"),
    "tanh": (torch.tanh, (_X,), {}, "Torch.tanh"),
    "exp": (torch.exp, (_X,), {}, "Torch.exp"),
    "relu": (F.relu, (_X,), {}, None),
    "scalar_div": (torch.Tensor.__truediv__, (_X, 2.828), {}, "Tensor.__truediv__"),
    "softmax": (torch.softmax, (_ROWS, -1), {}, "Torch.softmax"),
    "log_softmax": (F.log_softmax, (_ROWS,), {"dim": -1}, None),
    "layer_norm": (F.layer_norm, (_ROWS + 1, [128]), {}, None),
    "add": (torch.Tensor.__add__, (_X + 0.5, _X[0]), {}, "Tensor.__add__"),
    "transpose": (torch.Tensor.transpose, (_X, 0, 1), {}, "Tensor.transpose"),
    "mean": (torch.mean, (_X + 0.3, -1), {}, "Torch.mean"),
    "sum": (torch.sum, (_X + 0.3, 0), {}, "Torch.sum"),
}
# What each planted defect moves that the statistics show: NaN everywhere; a 1 % scale where an extreme or the
# Mean is pinned; one element far off where the extremes are bounded.
DEFECTS = {"nan": _nan, "scale": _scaled(1.01), "far_element": _far_element}
SHOWN = {
    "nan": set(CALLS),
    "scale": {"gelu", "sigmoid", "tanh", "exp", "relu", "scalar_div", "softmax", "layer_norm", "add", "transpose",
              "mean", "sum"},
    "far_element": {"gelu", "sigmoid", "tanh", "exp", "relu", "scalar_div", "softmax", "log_softmax", "add",
                    "transpose", "mean"},
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("call", sorted(CALLS))
def test_every_invariant_passes_a_fair_call(call, dtype):
    func, args, kwargs, name = CALLS[call]
    args = tuple(a.to(dtype) if isinstance(a, torch.Tensor) else a for a in args)
    found = _judged(func, args, kwargs, name=name)
    assert found and all(f.check.status is Status.PASS for f in found), [f.text for f in found]


@pytest.mark.parametrize("call,defect", [(c, d) for d in sorted(DEFECTS) for c in sorted(SHOWN[d])])
def test_the_invariants_fail_each_planted_defect_they_can_show(call, defect):
    func, args, kwargs, name = CALLS[call]
    found = _judged(func, args, kwargs, DEFECTS[defect], name=name)
    assert any(f.check.status is Status.ERROR for f in found), [f.text for f in found]


def test_every_family_the_catalogue_names_has_its_invariants_and_no_other():
    assert set(STATISTICS_FAMILIES) == FAMILIES


def test_a_call_with_no_invariant_says_why():
    with pytest.raises(NoInvariant, match="linear has no invariant"):
        _judged(F.linear, (_X, torch.randn(8, 64)))


# ---------------------------------------------------------------- untrusted statistics


def test_hostile_statistics_fail_or_skip_alone_and_every_other_case_is_judged(pytester, tmp_path):
    """A statistics dump is untrusted: a statistic that is no number, a checksum that is no string and a shape
    of 10^24 elements each end their own case (an input error, or a pair too large to replay), and the rest run."""
    npu, gpu = tmp_path / "npu", tmp_path / "gpu"
    edited = {}
    for side in (npu, gpu):
        shutil.copytree(EXAMPLE, side)
        path = side / "step0" / "rank0" / "dump.json"
        edited[side] = (path, json.loads(path.read_text()))
        huge = edited[side][1]["data"]["Functional.linear.1.forward"]  # in both: the pair still pairs
        huge["input_args"][0]["shape"], huge["output"][0]["shape"] = [10**12, 10**12], [10**12, 4]
    data = edited[npu][1]["data"]
    data["Functional.gelu.0.forward"]["output"][0]["Max"] = "large"
    data["Functional.layer_norm.0.forward"]["output"][0]["md5"] = 5
    for path, dump in edited.values():
        path.write_text(json.dumps(dump))
    result, records = run(pytester, npu, gpu)
    by_id = {r["case_id"].split("::")[1]: r for r in records}
    assert by_id["Functional.gelu.0.forward"]["status"] == "input-error"
    assert "'large'" in by_id["Functional.gelu.0.forward"]["message"]
    assert by_id["Functional.layer_norm.0.forward"]["status"] == "input-error"
    assert "md5" in by_id["Functional.layer_norm.0.forward"]["message"]
    large = by_id["Functional.linear.1.forward"]
    assert large["status"] == "skip" and "past the budget" in large["message"]
    others = [r for key, r in by_id.items() if key not in ("Functional.gelu.0.forward", "Functional.layer_norm.0.forward",
                                                           "Functional.linear.1.forward")]
    assert sum(r["status"] == "pass" for r in others) >= 8 and all(r["status"] in ("pass", "skip") for r in others)
