"""Collectives judged from a multi-rank dump (issue 54): each rank's recorded result against the float64 golden
of every participating rank's recorded inputs.

The dumps are made here: 2- and 4-rank gloo jobs on the CPU (tests/collective_job.py), recorded by capture,
whose layout matches msprobe's key for key (checked where msprobe is installed). gloo sums in the tensor's own
dtype around a ring; step 1 sums half-precision tensors with float32 partial sums. Both are fair, and defects
are planted in copies of the dumps.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collective_job import run_job
from collective_outcomes import outcomes
from pytest_npuprecision import Status, judge
from pytest_npuprecision.backends import DumpedOutputs
from pytest_npuprecision.checks.case_run import CaseSkipped, Settings, run_case
from pytest_npuprecision.checks.collectives.definitions import reduced
from pytest_npuprecision.checks.collectives.ranks import DumpIndex
from pytest_npuprecision.dump.dump_cases import load_dump

JUDGED = {"all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
          "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "scatter", "gather"}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict[int, Path]:
    return {world: run_job(world, tmp_path_factory.mktemp(f"ranks{world}")) for world in (2, 4)}


def api(case_id: str) -> str:
    return case_id.rpartition("::")[2].split(".")[1]


@pytest.mark.parametrize("world", [2, 4])
def test_every_collective_entry_is_judged_or_skipped_with_its_reason(jobs, world):
    found = outcomes(jobs[world])
    assert len(found) == world * (27 + 15)  # 27 calls in step 0, 15 in step 1, on every rank
    passed = {api(case_id) for case_id, (status, _) in found.items() if status == "pass"}
    assert passed == JUDGED
    skipped = {case_id: outcome for case_id, outcome in found.items() if outcome[0] != "pass"}
    # reduce leaves partial sums, and gather nothing, on every rank but the root: undefined, so skipped
    assert sorted(skipped) == sorted(f"step0/rank{rank}::Distributed.{name}.0.forward"
                                     for rank in range(1, world) for name in ("reduce", "gather"))
    assert {reason for reason, _ in skipped.values()} == {"undefined-output"}
    assert "AVG over" in found["step0/rank0::Distributed.all_reduce.2.forward"][1]
    group = f"group {2 * (world // 2 - 1)}, {2 * (world // 2 - 1) + 1}"  # the last rank's explicit group
    assert group in found[f"step0/rank{world - 1}::Distributed.all_reduce.9.forward"][1]


def plant(source: Path, target: Path, world: int) -> set[str]:
    """Rank 1's dump with the defects issue 54 names; returns the case ids that must fail."""
    shutil.copytree(source, target)
    folder = target / "step0" / "rank1" / "dump_tensor_data"

    def edit(name: str, change) -> None:
        path = folder / f"Distributed.{name}.pt"
        torch.save(change(torch.load(path)).contiguous(), path)

    def one_element(t):
        t = t.clone()
        t[7] *= 1.01
        return t

    def up_8_ulp(t):
        for _ in range(8):
            t = torch.nextafter(t, torch.full_like(t, float("inf")))
        return t

    own = torch.load(folder / "Distributed.all_reduce.10.forward.input.0.pt")
    share = torch.load(folder / "Distributed.reduce_scatter_tensor.0.forward.input.1.pt").reshape(world, -1)[1]
    second = torch.load(folder / "Distributed.all_gather.0.forward.output.0.1.pt")
    edit("all_reduce.0.forward.output.0", one_element)  # float32 SUM: one element 1 % off
    edit("all_reduce.2.forward.output.0", up_8_ulp)  # float32 AVG: +8 ulp over the whole output
    edit("all_reduce.3.forward.output.0", up_8_ulp)  # bfloat16 SUM: the same
    edit("all_reduce.10.forward.output.0", lambda t: own.clone())  # async: its own input, unreduced
    edit("reduce_scatter_tensor.0.forward.output.0", lambda t: t - share)  # its own shard dropped
    edit("all_gather.0.forward.output.0.0", lambda t: second.clone())  # rank 1's shard in rank 0's place
    return {f"step0/rank1::Distributed.{name}.forward" for name in (
        "all_reduce.0", "all_reduce.2", "all_reduce.3", "all_reduce.10", "reduce_scatter_tensor.0", "all_gather.0")}


@pytest.mark.parametrize("world", [2, 4])
def test_planted_defects_fail_and_nothing_else_does(jobs, tmp_path, world):
    planted = plant(jobs[world], tmp_path / "planted", world)
    found = outcomes(tmp_path / "planted")
    failed = {case_id for case_id, (status, _) in found.items() if status == "error"}
    assert failed == planted
    assert {status for case_id, (status, _) in found.items() if case_id not in planted} <= {"pass", "undefined-output"}


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_planted_dump_fails_its_cases_under_pytest(jobs, tmp_path, workers):
    planted = plant(jobs[4], tmp_path / "planted", 4)
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rf", "--npu-precision",
                          str(tmp_path / "planted"), "--npu-precision-device", "dumped", "-k", "Distributed", *workers],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 1, run.stdout[-3000:]
    failed = {line.split("::", 1)[1].split(" - ")[0] for line in run.stdout.splitlines() if line.startswith("FAILED")}
    assert failed == planted
    summary = next(line for line in run.stdout.splitlines() if line.startswith("collectives:"))
    assert summary.startswith(f"collectives: 6 error, {4 * 42 - 6 - 6} pass, 6 skip (6 undefined-output)")


def only(root: Path, target: Path, ranks: tuple[int, ...]) -> Path:
    """Step 0 of a dump, with only some of its rank folders."""
    for rank in ranks:
        shutil.copytree(root / "step0" / f"rank{rank}", target / "step0" / f"rank{rank}")
    return target


def test_a_rank_folder_missing_skips_the_calls_that_need_it(jobs, tmp_path):
    found = outcomes(only(jobs[4], tmp_path / "three", (0, 1, 2)))
    assert found["step0/rank0::Distributed.all_reduce.0.forward"][0] == "ranks-missing"
    assert "rank folder(s) 0, 1, 2" in found["step0/rank0::Distributed.all_reduce.0.forward"][1]
    assert found["step0/rank1::Distributed.all_reduce.9.forward"][0] == "pass"  # its group, [0, 1], is whole
    assert found["step0/rank2::Distributed.all_reduce.9.forward"][0] == "ranks-missing"  # [2, 3] is not
    assert found["step0/rank0::Distributed.broadcast.0.forward"][0] == "ranks-missing"


def test_two_of_four_ranks_are_not_taken_for_the_whole_job(jobs, tmp_path):
    """Ranks 0 and 1 alone look like a 2-rank job, but the step's reduce-scatters take 4 shards (and its gathers
    list 4 tensors): every default-group call of the step skips, even an all_reduce whose own shapes say nothing
    of the world's size."""
    found = outcomes(only(jobs[4], tmp_path / "two", (0, 1)))
    reason, message = found["step0/rank0::Distributed.all_reduce.0.forward"]
    assert reason == "ranks-missing" and "but the job had 4 ranks (Distributed.reduce_scatter_tensor.0.forward of rank 0 spans 4)" in message, message
    assert found["step0/rank0::Distributed.all_reduce.9.forward"][0] == "pass"  # the explicit group [0, 1]
    assert all(outcome[0] in ("pass", "ranks-missing") for outcome in found.values())


def test_one_rank_folder_given_names_the_step_folder_to_pass(jobs):
    rank0 = jobs[2] / "step0" / "rank0"
    dump = load_dump(rank0 / "dump.json", root=rank0)
    index = DumpIndex()
    index.add(dump)
    case = next(c for c in dump.cases if c.key == "Distributed.all_reduce.0.forward")
    with pytest.raises(CaseSkipped) as skipped:
        run_case(case, dump.data_dir, Settings(device=DumpedOutputs()), index)
    assert skipped.value.reason == "ranks-missing"
    assert f"the rank folder(s) 1 of {jobs[2] / 'step0'} were not given: pass {jobs[2] / 'step0'}" in str(skipped.value)


def test_a_statistics_dump_skips_saying_so(jobs, tmp_path):
    target = shutil.copytree(jobs[2], tmp_path / "statistics")
    for dump_json in target.glob("step*/rank*/dump.json"):
        document = json.loads(dump_json.read_text())
        document["task"] = "statistics"
        text = json.dumps(document)
        dump_json.write_text(text.replace('"data_name"', '"no_data_name"'))
        shutil.rmtree(dump_json.parent / "dump_tensor_data")
    found = outcomes(target)
    assert {reason for reason, _ in found.values()} == {"statistics-dump", "undefined-output"}


def edited(root: Path, target: Path, rank: int, key: str, change) -> Path:
    shutil.copytree(root, target)
    path = target / "step0" / f"rank{rank}" / "dump.json"
    document = json.loads(path.read_text())
    change(document["data"][key])
    path.write_text(json.dumps(document))
    return target


def _group(ranks):
    def change(entry):
        entry["input_kwargs"]["group"]["group_ranks"] = ranks
    return change


def _set(where, value):
    def change(entry):
        holder, name = where(entry)
        holder[name] = value
    return change


HOSTILE = [
    ("a rank past every folder", "all_reduce.9", _group([0, 10**9]), "ranks-missing", "are not among the rank folders"),
    ("negative ranks", "all_reduce.9", _group([-1, 0]), "malformed-entry", "not distinct non-negative integers"),
    ("a rank named twice", "all_reduce.9", _group([1, 1]), "malformed-entry", "not distinct non-negative integers"),
    ("a group of a million ranks", "all_reduce.9", _group(list(range(2**20 + 1))), "malformed-entry",
     "names 1048577 ranks"),
    ("a group without its ranks", "all_reduce.9", _group(None), "group-unknown", "recorded without its ranks"),
    ("a root of a billion", "broadcast.0", _set(lambda e: (e["input_kwargs"], "src"), {"type": "int", "value": 10**9}),
     "malformed-entry", "not a rank"),
    ("a root outside the group", "broadcast.0", _set(lambda e: (e["input_kwargs"], "src"), {"type": "int", "value": 7}),
     "group-unknown", "its root, rank 7, is not in its group"),
    ("an op with no golden", "all_reduce.1",
     _set(lambda e: (e["input_kwargs"], "op"), {"type": "torch.distributed.ReduceOp", "value": "RedOpType.PREMUL_SUM"}),
     "no-reference", "PREMUL_SUM"),
    ("a file outside its folder", "all_reduce.0",
     _set(lambda e: (e["input_args"][0], "data_name"), "../../rank0/dump_tensor_data/x.pt"),
     "input-error", "is outside dump_tensor_data/"),
    ("an output list that is not the arguments", "all_reduce.0", _set(lambda e: (e, "output"), []),
     "malformed-entry", "is not the list of the call's 1 arguments"),
    ("a shape the other ranks did not send", "all_reduce.0",
     _set(lambda e: (e["input_args"][0], "shape"), [4095]), "input-error", "holds a float32 [4096] tensor but dump.json says float32 [4095]"),
]


@pytest.mark.parametrize("what, name, change, reason, message", HOSTILE, ids=[row[0] for row in HOSTILE])
def test_a_hostile_entry_skips_or_fails_alone(jobs, tmp_path, what, name, change, reason, message):
    key = f"Distributed.{name}.forward"
    found = outcomes(edited(jobs[2], tmp_path / "hostile", 1, key, change))
    got, text = found.pop(f"step0/rank1::{key}")
    assert (got, message in text) == (reason, True), text
    for case_id, (status, _) in found.items():  # every other case, rank 0's of the same key too where it reads
        if case_id != f"step0/rank0::{key}":  # rank 1's broken entry, which says so
            assert status in ("pass", "undefined-output"), case_id


def test_ranks_that_disagree_fail_as_the_dump_s_fault(jobs, tmp_path):
    """Rank 1 records a MAX where rank 0 records the default SUM: the keys do not line up."""
    op = {"type": "torch.distributed.ReduceOp", "value": "RedOpType.MAX"}
    found = outcomes(edited(jobs[2], tmp_path / "disagree", 1, "Distributed.all_reduce.0.forward",
                            lambda entry: (entry["input_kwargs"].update(op=op), entry["output"].append(op))))
    status, message = found["step0/rank0::Distributed.all_reduce.0.forward"]
    assert status == "input-error" and "records op 'MAX', this rank's 'SUM'" in message


# ---------------------------------------------------------------- fair orders, as a property


def _sum_in_order(parts: list[torch.Tensor], order: str, generator: torch.Generator) -> torch.Tensor:
    """The ranks' sum as a fair backend makes it: in the dtype, along a ring's rotation, a tree or a random
    order, or with float32 partial sums rounded once."""
    if order == "float32 partials":
        return torch.stack([p.float() for p in parts]).sum(0).to(parts[0].dtype)
    if order == "tree":
        level = list(parts)
        while len(level) > 1:
            level = [level[i] + level[i + 1] if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
        return level[0]
    n = len(parts)
    if order == "ring":  # element chunk c starts at rank c + 1 and goes around
        chunks = [torch.tensor_split(p, n) for p in parts]
        out = []
        for c in range(n):
            acc = chunks[(c + 1) % n][c]
            for step in range(2, n + 1):
                acc = acc + chunks[(c + step) % n][c]
            out.append(acc)
        return torch.cat(out)
    permutation = torch.randperm(n, generator=generator).tolist()
    acc = parts[permutation[0]]
    for rank in permutation[1:]:
        acc = acc + parts[rank]
    return acc


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**31), ranks=st.integers(2, 8), dtype=st.sampled_from([torch.float32, torch.bfloat16,
                                                                                    torch.float16]),
       order=st.sampled_from(["ring", "tree", "random", "float32 partials"]), op=st.sampled_from(["SUM", "AVG"]),
       spread=st.sampled_from([0, 2, 6]))
def test_fair_reduction_orders_pass(seed, ranks, dtype, order, op, spread):
    generator = torch.Generator().manual_seed(seed)
    parts = [(torch.randn(2048, generator=generator, dtype=torch.float64)
              * torch.exp2(torch.randint(-spread, spread + 1, (2048,), generator=generator))).to(dtype)
             for _ in range(ranks)]
    total = _sum_in_order(parts, order, generator)
    actual = total if op == "SUM" else (total.float() / ranks).to(dtype) if order == "float32 partials" \
        else total / ranks
    tensor = reduced("tensor", actual, op, parts)
    verdict = judge(tensor.actual, tensor.golden, standard=tensor.standard, accumulation=tensor.accumulation)
    assert verdict.status is Status.PASS, verdict.message()
    correctly_rounded = reduced("tensor", tensor.golden.to(dtype), op, parts)
    assert judge(correctly_rounded.actual, correctly_rounded.golden, standard=correctly_rounded.standard,
                 accumulation=correctly_rounded.accumulation).status is Status.PASS


def test_a_ddp_step_with_a_python_comm_hook_is_judged(tmp_path):
    """DDP all-reduces its buckets in C++, unseen; through the allreduce comm hook the same all-reduce is a
    dist.all_reduce call, recorded when the step's block ends (DDP waits on its future, not on the work)."""
    found = outcomes(run_job(2, tmp_path / "ddp", recorder="ddp"))
    assert found.keys() == {f"step0/rank{rank}::Distributed.all_reduce.0.forward" for rank in (0, 1)}
    assert {status for status, _ in found.values()} == {"pass"}


needs_msprobe = pytest.mark.skipif(importlib.util.find_spec("msprobe") is None,
                                   reason="msprobe (mindstudio-probe) is not installed")


def _skeleton(value):
    if isinstance(value, list):
        return [_skeleton(item) for item in value]
    if isinstance(value, dict):
        if value.get("type") == "torch.Tensor":
            return ("tensor", value["dtype"], tuple(value["shape"]), value.get("data_name"))
        if value.get("type") == "torch.ProcessGroup":
            return ("group", tuple(value["group_ranks"]))
        return {key: _skeleton(item) for key, item in value.items()}
    return value


@needs_msprobe
def test_capture_records_collectives_as_msprobe_does(jobs, tmp_path):
    msprobe = run_job(2, tmp_path / "msprobe", recorder="msprobe")
    for rank in (0, 1):
        ours = json.loads((jobs[2] / "step0" / f"rank{rank}" / "dump.json").read_text())["data"]
        theirs = json.loads((msprobe / "step0" / f"rank{rank}" / "dump.json").read_text())["data"]
        keys = [key for key in theirs if key.startswith("Distributed.")]
        assert keys == [key for key in ours if key.startswith("Distributed.")]
        assert all(_skeleton(ours[key]) == _skeleton(theirs[key]) for key in keys)
    found = outcomes(msprobe)
    assert {status for status, _ in found.values()} == {"pass", "undefined-output"}
