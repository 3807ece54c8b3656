"""torch's intra-op threads in a pytest run: one for a small case, the process's budget for a large one.

A case is many small torch ops (the golden, the metrics), each a possible parallel region. Below
about a million elements a second thread has little to share and mostly waits at the region's
barrier; on a busy machine each wait lasts a time slice, and small cases cost 4x the CPU they cost
with one thread. So each case runs with one thread unless its inputs hold LARGE_CASE_ELEMENTS or
more (as its dump or op case declares them); a large one runs with the budget: the process's count
in a serial run, the cores shared among xdist workers otherwise. This is the CPU's side of a case
(the golden, the metrics, a cpu device); a cuda or npu device runs its own kernels whatever the count.

A count the user chose wins, for every case: --npu-precision-threads, OMP_NUM_THREADS, or a
torch.set_num_threads before the run. Nothing here changes torch's count outside a pytest run that
runs cases (check_call from Python keeps the user's), and the run gives the process its count back.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

# Where a case surely gains from more threads on an idle machine (judging a 1M-element output: about
# 0.75x the one-thread time); a busy one loses at every size (docs/scale.md, "Threads per case";
# benchmarks/bench_threads.py --crossover measures it).
LARGE_CASE_ELEMENTS = 1 << 20


@dataclass(frozen=True)
class ThreadPolicy:
    # Threads for a large case, and for every case where not per_case; None: the process's own count.
    threads: int | None
    # Why: "--npu-precision-threads", "OMP_NUM_THREADS", "torch.set_num_threads", "cores // workers" or "torch default"
    source: str
    per_case: bool = False  # a case of fewer than LARGE_CASE_ELEMENTS input elements runs with one thread

    def threads_for(self, elements: int) -> int | None:
        """The count for a case whose inputs hold ``elements`` elements; None: leave the process's."""
        return 1 if self.per_case and elements < LARGE_CASE_ELEMENTS else self.threads

    def as_dict(self) -> dict:
        return {"threads_per_process": self.threads, "source": self.source,
                "small_case_threads": 1 if self.per_case else self.threads,
                "large_case_elements": LARGE_CASE_ELEMENTS if self.per_case else None}


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def thread_policy(workers: int, environ: dict | None = None, *, option: int | None = None,
                  user_threads: int | None = None) -> ThreadPolicy:
    """The policy of each of ``workers`` processes running cases (0 or 1: a serial run).

    option: --npu-precision-threads; user_threads: the count torch had when the run began, where the
    user had set one (see chosen_by_user)."""
    environ = os.environ if environ is None else environ
    if option is not None:
        return ThreadPolicy(option, "--npu-precision-threads")
    if environ.get("OMP_NUM_THREADS"):
        return ThreadPolicy(None, "OMP_NUM_THREADS")
    if user_threads is not None:
        return ThreadPolicy(user_threads, "torch.set_num_threads")
    if workers <= 1:
        return ThreadPolicy(None, "torch default", per_case=True)
    return ThreadPolicy(max(1, available_cores() // workers), "cores // workers", per_case=True)


def chosen_by_user() -> int | None:
    """torch's count where the user set one before the run (in a conftest.py, say); None where torch is
    not imported yet or has its default. A count equal to a default torch could have picked (the
    cores this process may use, or their physical cores) reads as the default."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "get_num_threads"):
        return None
    count = torch.get_num_threads()
    return None if count in (available_cores(), physical_cores()) else count


def physical_cores() -> int:
    """The physical cores among the CPUs this process may use: torch's default where cores run two
    hardware threads. The logical count where the topology cannot be read."""
    try:
        cpus = os.sched_getaffinity(0)
    except AttributeError:
        return available_cores()
    cores = set()
    for cpu in cpus:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add((topology.joinpath("physical_package_id").read_text().strip(),
                       topology.joinpath("core_id").read_text().strip()))
        except OSError:
            return len(cpus)
    return len(cores) or len(cpus)


def for_run(config) -> ThreadPolicy:
    """The policy of a pytest run: an xdist worker knows the worker count, the controller its -n."""
    option = config.getoption("npu_precision_threads", None)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        workers = int(workerinput.get("workercount", 1))
    else:
        workers = int(getattr(config.option, "numprocesses", None) or 0)
    return thread_policy(workers, option=option, user_threads=chosen_by_user())


_active: ThreadPolicy | None = None  # the policy of the pytest run in this process, between apply and release
# What each apply found, for its release: the policy before it (a pytest run inside a test of another
# run) and torch's count where apply changed it.
_applied: list[tuple[ThreadPolicy | None, int | None]] = []


def apply(policy: ThreadPolicy) -> None:
    """Start ``policy`` in this process: a pytest run that runs cases, until release()."""
    global _active
    count = None
    if policy.threads is not None:
        import torch

        if torch.get_num_threads() != policy.threads:
            count = torch.get_num_threads()
            torch.set_num_threads(policy.threads)
    _applied.append((_active, count))
    _active = policy


def release() -> None:
    """The run is over: torch's count and the policy as they were before its apply."""
    global _active
    if not _applied:
        return
    _active, count = _applied.pop()
    if count is not None:
        import torch

        torch.set_num_threads(count)


def active() -> ThreadPolicy | None:
    return _active


def call_elements(args, kwargs) -> int:
    """The elements of a call's tensor arguments, in lists and tuples too: its case's size here."""
    import torch

    count, stack = 0, [*args, *kwargs.values()]
    while stack:
        value = stack.pop()
        if isinstance(value, (list, tuple)):
            stack.extend(value)
        elif isinstance(value, torch.Tensor):
            count += value.numel()
    return count


@contextlib.contextmanager
def for_case(elements: int) -> Iterator[None]:
    """Run one case, whose inputs hold ``elements`` elements, with its count; the process's count after."""
    policy = _active
    want = None if policy is None else policy.threads_for(elements)
    if want is None:
        yield
        return
    import torch

    have = torch.get_num_threads()
    if want == have:
        yield
        return
    torch.set_num_threads(want)
    try:
        yield
    finally:
        torch.set_num_threads(have)
