"""torch's intra-op threads for the cases: xdist workers share the cores, so each takes its share.

Metrics are many small torch ops, each a parallel region; workers that each keep torch's default of
one thread per core oversubscribe the machine, and microsecond ops then take milliseconds. A thread
count the user chose (OMP_NUM_THREADS, or torch.set_num_threads before the run) is left alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ThreadPolicy:
    threads: int | None  # torch intra-op threads per process running cases; None: torch's own choice
    source: str  # why: "OMP_NUM_THREADS", "cores // workers" or "torch default"

    def as_dict(self) -> dict:
        return {"threads_per_process": self.threads, "source": self.source}


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def thread_policy(workers: int, environ: dict | None = None) -> ThreadPolicy:
    """The thread count for each of ``workers`` processes running cases (0 or 1: a serial run)."""
    environ = os.environ if environ is None else environ
    if environ.get("OMP_NUM_THREADS"):
        return ThreadPolicy(None, "OMP_NUM_THREADS")
    if workers <= 1:
        return ThreadPolicy(None, "torch default")
    return ThreadPolicy(max(1, available_cores() // workers), "cores // workers")


def for_run(config) -> ThreadPolicy:
    """The policy of a pytest run: an xdist worker knows the worker count, the controller its -n."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return thread_policy(int(workerinput.get("workercount", 1)))
    return thread_policy(int(getattr(config.option, "numprocesses", None) or 0))


def apply(policy: ThreadPolicy) -> None:
    if policy.threads is not None:
        import torch

        torch.set_num_threads(policy.threads)
