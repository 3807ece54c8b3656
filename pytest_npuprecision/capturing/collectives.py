"""``Distributed.*`` calls recorded as msprobe records them. torch.distributed's collectives are Python
functions over a process group, which no TorchFunctionMode sees: while a capture's block runs, the names
msprobe hooks are replaced in ``torch.distributed`` by wrappers that hand each call to the recorder.

msprobe's layout is kept: the inputs before the call, with the output buffers a collective only writes as
``null``; the output after it, every positional argument and then every keyword value; an ``async_op`` call
recorded when its work is waited on (or when the block ends, where it never is).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch

# The torch.distributed functions msprobe hooks (its support_wrap_ops.yaml, "distributed").
HOOKED = ("send", "recv", "isend", "irecv", "broadcast", "all_reduce", "reduce", "all_gather", "gather", "scatter",
          "reduce_scatter", "_reduce_scatter_base", "_all_gather_base", "all_to_all_single", "all_to_all",
          "all_gather_into_tensor", "reduce_scatter_tensor", "batch_isend_irecv")

# Arguments a call only writes, recorded as null among its inputs: by position, or by keyword.
WRITTEN_ONLY: dict[str, tuple[int | str, ...]] = {
    "recv": (0, "tensor"), "irecv": (0, "tensor"), "all_gather": (0, "tensor_list"), "gather": (1, "gather_list"),
    "scatter": (0, "tensor"), "reduce_scatter": (0, "output"), "_reduce_scatter_base": (0, "output"),
    "_all_gather_base": (0, "output_tensor"), "all_to_all_single": (0, "output"),
    "all_to_all": (0, "output_tensor_list"), "all_gather_into_tensor": (0, "output_tensor"),
    "reduce_scatter_tensor": (0, "output"),
}

Record = Callable[[str, Callable[..., Any], tuple, dict], Any]


@contextlib.contextmanager
def collectives_recorded(record: Record) -> Iterator[None]:
    """torch.distributed's hooked functions, while the block runs, call ``record(name, func, args, kwargs)``."""
    if not torch.distributed.is_available():
        yield
        return
    dist = torch.distributed
    originals = {name: getattr(dist, name) for name in HOOKED if callable(getattr(dist, name, None))}
    try:
        for name, func in originals.items():
            setattr(dist, name, _wrapper(name, func, record))
        yield
    finally:
        for name, func in originals.items():
            setattr(dist, name, func)


def _wrapper(name: str, func: Callable[..., Any], record: Record) -> Callable[..., Any]:
    def recorded(*args, **kwargs):
        return record(name, func, args, kwargs)

    recorded.__name__ = recorded.__qualname__ = name
    recorded.__wrapped__ = func  # type: ignore[attr-defined]
    return recorded


def written_only(name: str, where: int | str) -> bool:
    """Whether an argument is one the call only writes (recorded as null among the inputs)."""
    return where in WRITTEN_ONLY.get(name, ())


class PendingWork:
    """An async_op call's work: its entry is recorded when it is waited on, as msprobe records it."""

    def __init__(self, work: Any, finish: Callable[[], None]):
        self._work, self._finish = work, finish
        self.recorded = False

    def wait(self, *args, **kwargs):
        done = self._work.wait(*args, **kwargs)
        self.finish()
        return done

    def finish(self) -> None:
        if not self.recorded:
            self.recorded = True
            self._finish()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)
