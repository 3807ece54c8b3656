"""One rank of a small gloo job on the CPU whose collectives are recorded, by capture or by msprobe.

    python collective_job.py RANK WORLD PORT OUT [capture|msprobe|ddp]

Step 0 makes every collective the harness judges, in float32, bfloat16 and float16 (SUM, AVG, MAX; explicit
groups; async; the list and tensor forms; roots; splits; an int64 sum), as gloo computes them: sums in the
tensor's own dtype around a ring. Step 1 makes the half-precision sums again through an all-reduce and a
reduce-scatter that keep float32 partial sums, as some backends do. Both are fair; tests plant defects in
copies of the dump. ``ddp`` records one step of a DDP model instead. ``run_job`` starts WORLD such processes and
waits for them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import torch
import torch.distributed as dist

HALVES = (torch.bfloat16, torch.float16)


def values(rank: int, step: int, n: int, dtype: torch.dtype, salt: int) -> torch.Tensor:
    """Terms of either sign over four binades, so that sums cancel in places."""
    generator = torch.Generator().manual_seed(1000 * step + 100 * rank + salt)
    x = torch.randn(n, generator=generator, dtype=torch.float64)
    return (x * torch.exp2(torch.randint(-2, 2, (n,), generator=generator))).to(dtype)


def collectives(rank: int, world: int, step: int, groups: list) -> None:
    n = 4096
    for salt, dtype in enumerate((torch.float32, torch.bfloat16, torch.float16)):
        x = values(rank, step, n, dtype, salt)
        dist.all_reduce(x)
        y = values(rank, step, n, dtype, salt + 10)
        dist.all_reduce(y, op=dist.ReduceOp.MAX)
        z = values(rank, step, n, dtype, salt + 20)
        dist.all_reduce(z, op=dist.ReduceOp.AVG)
        shards = values(rank, step, n * world, dtype, salt + 30)
        out = torch.empty(n, dtype=dtype)
        dist.reduce_scatter_tensor(out, shards)
        parts = [values(rank, step, 512, dtype, salt + 40 + i) for i in range(world)]
        received = torch.empty(512, dtype=dtype)
        dist.reduce_scatter(received, parts)
    if step:
        return
    group = groups[rank // 2]
    w = values(rank, step, 1024, torch.float32, 50)
    dist.all_reduce(w, group=group)
    a = values(rank, step, 1024, torch.float32, 51)
    dist.all_reduce(a, async_op=True).wait()
    gathered = [torch.empty(256) for _ in range(world)]
    dist.all_gather(gathered, values(rank, step, 256, torch.float32, 52))
    joined = torch.empty(256 * world, dtype=torch.bfloat16)
    dist.all_gather_into_tensor(joined, values(rank, step, 256, torch.bfloat16, 53))
    b = values(rank, step, 300, torch.float16, 54)
    dist.broadcast(b, src=world - 1)
    r = values(rank, step, 300, torch.float32, 55)
    dist.reduce(r, dst=0)
    single = torch.empty(8 * world)
    dist.all_to_all_single(single, values(rank, step, 8 * world, torch.float32, 56))
    splits = [rank + 1 + j for j in range(world)]  # rank i sends rank j (i + 1 + j) rows
    uneven = torch.empty(sum(i + 1 + rank for i in range(world)), 3)
    dist.all_to_all_single(uneven, values(rank, step, sum(splits) * 3, torch.float32, 57).reshape(-1, 3),
                           output_split_sizes=[i + 1 + rank for i in range(world)], input_split_sizes=splits)
    listed = [torch.empty(16) for _ in range(world)]
    dist.all_to_all(listed, [values(rank, step, 16, torch.float32, 58 + j) for j in range(world)])
    scattered = torch.empty(64)
    dist.scatter(scattered, [values(rank, step, 64, torch.float32, 60 + j) for j in range(world)] if rank == 0
                 else None, src=0)
    gathered_at_0 = [torch.empty(32) for _ in range(world)] if rank == 0 else None
    dist.gather(values(rank, step, 32, torch.float32, 61), gathered_at_0, dst=0)
    counts = torch.arange(100, dtype=torch.int64) * (rank + 1)
    dist.all_reduce(counts)


def averaged(func, world: int):
    """An AVG all-reduce as a backend without one makes it: the sum, then one division, in the dtype."""
    def call(tensor, op=dist.ReduceOp.SUM, *args, **kwargs):
        if op != dist.ReduceOp.AVG:
            return func(tensor, op, *args, **kwargs)
        work = func(tensor, dist.ReduceOp.SUM, *args, **kwargs)
        tensor.div_(world)
        return work
    return call


def scattered(all_reduce, rank: int, world: int) -> dict:
    """reduce_scatter and reduce_scatter_tensor as a backend without them makes them (torch 2.1's gloo): the
    whole sum, of which each rank keeps its share."""
    def reduce_scatter_tensor(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
        whole = input.clone()
        all_reduce(whole, op, group)
        output.copy_(whole.reshape(world, -1)[rank].reshape(output.shape))

    def reduce_scatter(output, input_list, op=dist.ReduceOp.SUM, group=None, async_op=False):
        whole = torch.stack(input_list)
        all_reduce(whole, op, group)
        output.copy_(whole[rank])

    return {"reduce_scatter_tensor": reduce_scatter_tensor, "reduce_scatter": reduce_scatter}


def gathered(all_gather, world: int):
    """all_gather_into_tensor as a backend without it makes it (torch 2.1's gloo): a list gather, joined."""
    def all_gather_into_tensor(output, input, group=None, async_op=False):
        parts = [torch.empty_like(input) for _ in range(world)]
        all_gather(parts, input, group)
        output.copy_(torch.cat([part.reshape(-1) for part in parts]).reshape(output.shape))
    return all_gather_into_tensor


def exchanged(all_to_all_single):
    """all_to_all as a backend without it makes it (torch 2.1's gloo): one all_to_all_single of the lists joined."""
    def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
        joined = torch.empty(sum(t.numel() for t in output_tensor_list), dtype=output_tensor_list[0].dtype)
        all_to_all_single(joined, torch.cat([t.reshape(-1) for t in input_tensor_list]),
                          [t.numel() for t in output_tensor_list], [t.numel() for t in input_tensor_list], group)
        for out, part in zip(output_tensor_list, joined.split([t.numel() for t in output_tensor_list])):
            out.copy_(part.reshape(out.shape))
    return all_to_all


def unsupported(call) -> bool:
    """Whether gloo refuses a collective (every rank alike: before any sends, or AVG at its wait)."""
    try:
        call()
        return False
    except RuntimeError:
        return True


def widened(func):
    """A backend that sums half-precision tensors with float32 partial sums and rounds once at the end."""
    def call(output_or_tensor, *args, **kwargs):
        if output_or_tensor.dtype not in HALVES:
            return func(output_or_tensor, *args, **kwargs)
        wide = output_or_tensor.float()
        args = tuple(a.float() if isinstance(a, torch.Tensor) else
                     [t.float() for t in a] if isinstance(a, list) else a for a in args)
        work = func(wide, *args, **kwargs)
        output_or_tensor.copy_(wide)
        return work
    return call


def ddp_step(rank: int, out: str) -> None:
    """One step of a DDP model whose gradient all-reduce goes through a Python communication hook, captured."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    from pytest_npuprecision import capture

    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                                        torch.nn.Linear(64, 8)))
    model.register_comm_hook(None, default_hooks.allreduce_hook)
    x = values(rank, 0, 16 * 64, torch.float32, 0).reshape(16, 64)
    with capture(out, step=0, rank=rank):
        model(x).square().mean().backward()


def main(rank: int, world: int, port: int, out: str, recorder: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    if recorder == "ddp":
        ddp_step(rank, out)
        dist.barrier()
        dist.destroy_process_group()
        return
    groups = [dist.new_group([2 * g, 2 * g + 1]) for g in range(world // 2)]
    if unsupported(lambda: dist.all_reduce(torch.ones(1), op=dist.ReduceOp.AVG)):  # torch 2.1's gloo
        dist.all_reduce = averaged(dist.all_reduce, world)
    if unsupported(lambda: dist.reduce_scatter_tensor(torch.empty(1), torch.ones(world))):
        for name, func in scattered(dist.all_reduce, rank, world).items():
            setattr(dist, name, func)
    if unsupported(lambda: dist.all_gather_into_tensor(torch.empty(world), torch.ones(1))):
        dist.all_gather_into_tensor = gathered(dist.all_gather, world)
    if unsupported(lambda: dist.all_to_all([torch.empty(1) for _ in range(world)], [torch.ones(1)] * world)):
        dist.all_to_all = exchanged(dist.all_to_all_single)
    if unsupported(lambda: dist.all_reduce(torch.ones(1, dtype=torch.bfloat16))):  # torch 2.1's gloo
        for name in ("all_reduce", "reduce_scatter_tensor", "reduce_scatter", "all_gather_into_tensor"):
            setattr(dist, name, widened(getattr(dist, name)))
    native = {name: getattr(dist, name) for name in ("all_reduce", "reduce_scatter_tensor", "reduce_scatter")}
    for step in (0, 1):
        if step == 1:
            for name, func in native.items():
                setattr(dist, name, widened(func))
        with recording(recorder, out, step, rank):
            collectives(rank, world, step, groups)
        dist.barrier()
    dist.destroy_process_group()


def recording(recorder: str, out: str, step: int, rank: int):
    if recorder == "capture":
        from pytest_npuprecision import capture

        return capture(out, step=step, rank=rank)
    return _MsprobeStep(out, step)


class _MsprobeStep:
    """msprobe's debugger for one step (it numbers the steps itself, from 0)."""

    debugger = None

    def __init__(self, out: str, step: int):
        if _MsprobeStep.debugger is None:
            import json

            from msprobe.pytorch import PrecisionDebugger

            config = Path(out) / f"config{dist.get_rank()}.json"
            config.parent.mkdir(parents=True, exist_ok=True)
            config.write_text(json.dumps({"task": "tensor", "dump_path": out, "rank": [], "step": [], "level": "L1",
                                          "async_dump": False,
                                          "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}))
            _MsprobeStep.debugger = PrecisionDebugger(config_path=str(config))

    def __enter__(self):
        self.debugger.start()

    def __exit__(self, *exc_info):
        self.debugger.stop()
        self.debugger.step()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_job(world: int, out: Path, recorder: str = "capture", timeout: float = 240) -> Path:
    """WORLD ranks of this job, recorded into ``out``; raises with their output where one fails."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    ranks = [subprocess.Popen([sys.executable, __file__, str(rank), str(world), str(port), str(out), recorder],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env) for rank in range(world)]
    failed = []
    for rank, process in enumerate(ranks):
        output, _ = process.communicate(timeout=timeout)
        if process.returncode:
            failed.append(f"rank {rank} exited {process.returncode}:\n{output.decode(errors='replace')[-3000:]}")
    if failed:
        raise RuntimeError("\n".join(failed))
    return out


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4],
         sys.argv[5] if len(sys.argv) > 5 else "capture")
