"""torch_npu's matmuls fused with a collective (npu_mm_reduce_scatter_base, npu_all_gather_base_mm,
npu_mm_all_reduce_base), judged from
every rank of their communicator (issue 54). No NPU here: each rank's entry is written as msprobe writes an NPU
op's, with the results a fair kernel gives (each rank's product accumulated in float32 and rounded, the
reduce-scatter's sum in the tensor's dtype), or with a defect planted in one rank's result.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from collective_outcomes import outcomes
from pytest_npuprecision.capturing.describe import TensorSink, describe
from pytest_npuprecision.capturing.writer import DumpWriter
from pytest_npuprecision.common.torch_compat import nextafter


def write_ranks(root: Path, key: str, calls: dict[int, tuple[list, dict, list]]) -> Path:
    """One dump.json per rank holding ``key``: (args, kwargs, outputs) described as msprobe describes them."""
    for rank, (args, kwargs, outputs) in calls.items():
        folder = root / "step0" / f"rank{rank}"
        (folder / "dump_tensor_data").mkdir(parents=True)
        sink = TensorSink(folder / "dump_tensor_data")
        writer = DumpWriter(folder, "tensor", sink)
        writer.add(key, {"input_args": [describe(a, f"{key}.input.{i}", sink) for i, a in enumerate(args)],
                         "input_kwargs": {k: describe(v, f"{key}.input.{k}", sink) for k, v in kwargs.items()},
                         "output": [describe(o, f"{key}.output.{i}", sink) for i, o in enumerate(outputs)]}, None)
        writer.write()
    return root


def _rounded_product(a, b):
    return (a.float() @ b.float()).to(a.dtype)


def _inputs(world, dtype, seed, m=16, k=256, n=24):
    generator = torch.Generator().manual_seed(seed)
    return ([torch.randn(m, k, generator=generator).to(dtype) for _ in range(world)],
            [(torch.randn(k, n, generator=generator) / 16).to(dtype) for _ in range(world)])


def mm_reduce_scatter(root: Path, world: int, dtype, groups: int = 1, plant=None) -> Path:
    """``groups`` communicators of ``world`` ranks each, rank r in group r // world."""
    calls = {}
    for g in range(groups):
        x1s, x2s = _inputs(world, dtype, seed=g)
        total = _rounded_product(x1s[0], x2s[0])
        for a, b in zip(x1s[1:], x2s[1:]):
            total = total + _rounded_product(a, b)  # the sum in the dtype, one rank after another
        for at in range(world):
            out = total.chunk(world)[at].clone()
            rank = g * world + at
            if plant is not None and rank == 1:
                out = plant(out, x1s, x2s, at)
            calls[rank] = ([x1s[at], x2s[at], f"hccl_tp{g}", world], {}, [out])
    return write_ranks(root, "NPU.npu_mm_reduce_scatter_base.0.forward", calls)


def mm_all_reduce(root: Path, world: int, dtype, plant=None) -> Path:
    """npu_mm_all_reduce_base over (s, m, k) inputs: every rank holds the whole sum."""
    x1s, x2s = _inputs(world, dtype, seed=3)
    x1s = [x.reshape(2, 8, -1) for x in x1s]
    total = _rounded_product(x1s[0], x2s[0])
    for a, b in zip(x1s[1:], x2s[1:]):
        total = total + _rounded_product(a, b)
    calls = {}
    for rank in range(world):
        out = total.clone() if plant is None or rank != 1 else plant(total)
        calls[rank] = ([x1s[rank], x2s[rank], "hccl_world"], {"reduce_op": "sum"}, [out])
    return write_ranks(root, "NPU.npu_mm_all_reduce_base.0.forward", calls)


def all_gather_mm(root: Path, world: int, dtype, plant=None) -> Path:
    x1s, x2s = _inputs(world, dtype, seed=7, m=8)
    gathered = torch.cat(x1s)
    calls = {}
    for rank in range(world):
        outputs = [_rounded_product(gathered, x2s[rank]), gathered.clone()]
        if plant is not None and rank == 1:
            outputs = plant(outputs)
        calls[rank] = ([x1s[rank], x2s[rank], "hccl_world", world], {"gather_output": True}, outputs)
    return write_ranks(root, "NPU.npu_all_gather_base_mm.0.forward", calls)


def statuses(root: Path) -> dict[str, str]:
    return {case_id: outcome[0] for case_id, outcome in outcomes(root).items()}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("world", [2, 4])
def test_fair_fused_collectives_pass(tmp_path, world, dtype):
    found = statuses(mm_reduce_scatter(tmp_path / "rs", world, dtype)) | statuses(all_gather_mm(tmp_path / "ag", world,
                                                                                                dtype))
    found |= statuses(mm_all_reduce(tmp_path / "ar", world, dtype))
    assert len(found) == 3 * world and set(found.values()) == {"pass"}


def test_a_planted_mm_all_reduce_defect_fails(tmp_path):
    found = statuses(mm_all_reduce(tmp_path / "ar", 4, torch.bfloat16, plant=_up_8_ulp))
    assert found == {f"step0/rank{rank}::NPU.npu_mm_all_reduce_base.0.forward": "error" if rank == 1 else "pass"
                     for rank in range(4)}


def test_communicators_group_the_ranks(tmp_path):
    """Two tensor-parallel groups of 2 in a job of 4: each rank's golden is its own group's sum."""
    found = statuses(mm_reduce_scatter(tmp_path / "tp", 2, torch.bfloat16, groups=2))
    assert found == {f"step0/rank{rank}::NPU.npu_mm_reduce_scatter_base.0.forward": "pass" for rank in range(4)}


def _one_element(out, *_, by=1.05):
    """One element 5 % off: a float16 sum of 4 rounded partials may fairly err by 4 ulp of their absolute sum,
    and the error bound standard fails an element at 8 times its bound (1 % is 10 ulp of float16)."""
    out = out.clone()
    out[3, 5] *= by
    return out


def _own_partial_dropped(out, x1s, x2s, at):
    return out - _rounded_product(x1s[at], x2s[at]).chunk(len(x1s))[at]


def _up_8_ulp(out, *_):
    for _ in range(8):  # torch 2.1 has no float16 nextafter on the CPU: the compatibility module's steps the bits
        out = nextafter(out, torch.full_like(out, float("inf")))
    return out


@pytest.mark.parametrize("plant", [_one_element, _own_partial_dropped, _up_8_ulp])
def test_planted_reduce_scatter_defects_fail(tmp_path, plant):
    found = statuses(mm_reduce_scatter(tmp_path / "rs", 4, torch.float16, plant=plant))
    assert {case_id for case_id, status in found.items() if status != "pass"} == \
        {"step0/rank1::NPU.npu_mm_reduce_scatter_base.0.forward"}
    assert found["step0/rank1::NPU.npu_mm_reduce_scatter_base.0.forward"] == "error"


@pytest.mark.parametrize("plant", [lambda outs: [_one_element(outs[0]), outs[1]],
                                   lambda outs: [outs[0], torch.cat([outs[1][:8], outs[1][:8], outs[1][16:]])]],
                         ids=["product off", "shard duplicated"])
def test_planted_all_gather_mm_defects_fail(tmp_path, plant):
    found = statuses(all_gather_mm(tmp_path / "ag", 4, torch.float16, plant=plant))
    assert found["step0/rank1::NPU.npu_all_gather_base_mm.0.forward"] == "error"
    assert [status for status in found.values()].count("pass") == 3


def test_a_rank_of_the_communicator_missing_skips(tmp_path):
    root = mm_reduce_scatter(tmp_path / "rs", 4, torch.bfloat16)
    for rank in (2, 3):  # the job's other group: two ranks record another communicator, one of them is gone
        path = root / "step0" / f"rank{rank}" / "dump.json"
        path.write_text(path.read_text().replace('"hccl_tp0"', f'"hccl_tp{rank}"'))
    found = outcomes(root)
    reason, message = found["step0/rank0::NPU.npu_mm_reduce_scatter_base.0.forward"]
    assert reason == "ranks-missing" and "2 rank folder(s)" in message and "whose world_size is 4" in message
