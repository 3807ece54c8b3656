"""Which calls a capture keeps: msprobe's ``scope``, ``list`` and ``data_mode`` for an L1 (API) dump."""

from __future__ import annotations

from dataclasses import dataclass

DATA_MODES = frozenset({"all", "forward", "backward", "input", "output"})


@dataclass(frozen=True)
class Selection:
    scope: tuple[str, ...] = ()  # [first API, last API], both kept: "Functional.linear.0", "Torch.bmm.0.forward"
    names: tuple[str, ...] = ()  # keep an API whose name holds one of these: "relu", "Functional.linear.1"
    data_mode: frozenset[str] = frozenset({"all"})

    def __post_init__(self) -> None:
        if len(self.scope) not in (0, 2):
            raise ValueError(f"scope={list(self.scope)!r}: give two API names, the first and the last to record "
                             "(e.g. ['Functional.linear.0', 'Torch.bmm.0']), or none")
        unknown = set(self.data_mode) - DATA_MODES
        if unknown:
            raise ValueError(f"data_mode {sorted(unknown)!r} is not one of {sorted(DATA_MODES)}")

    def wants(self, direction: str) -> bool:
        return bool(self.data_mode & {"all", direction})

    def parts(self, kind: str) -> bool:
        """Whether a call's ``kind`` side ("input" or "output") is written."""
        modes = self.data_mode
        return "all" in modes or kind in modes or not (modes & {"input", "output"})

    def named(self, api: str) -> bool:
        """``api`` is "Functional.linear.0": kept by the list filter (an empty list keeps everything)."""
        if not self.names:
            return True
        short = api.split(".")[1] if api.count(".") >= 2 else api
        return any(name == short or name in api for name in self.names)


class ScopeWindow:
    """Opens at the scope's first API and closes after its last; without a scope it is always open."""

    def __init__(self, scope: tuple[str, ...]):
        self._first, self._last = (_api(scope[0]), _api(scope[1])) if scope else (None, None)
        self._open = not scope

    def admits(self, api: str) -> bool:
        if self._first is not None and api == self._first:
            self._open = True
        inside = self._open
        if self._last is not None and api == self._last:
            self._open = False
        return inside


def _api(name: str) -> str:
    """"Torch.bmm.0.forward" and "Torch.bmm.0" name the same call."""
    for suffix in (".forward", ".backward"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name
