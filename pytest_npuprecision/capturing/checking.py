"""A captured dump checked as ``pytest --npu-precision`` checks one: every entry is a case, run by the
same cases.run_case on the device under test (or offline, from the captured outputs, with the ``dumped``
device) and judged by the same standards. Here the outcomes are collected instead of becoming items."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..checks import CaseInputError, CaseSkipped, DumpIndex, Settings, run_case
from ..dump import load_dump
from ..precision import Status, render_message


@dataclass(frozen=True)
class CallOutcome:
    key: str  # "Functional.linear.0.forward"
    status: str  # "pass", "fail", "skip" or "error" (the dump entry could not be used)
    message: str = ""


@dataclass(frozen=True)
class DumpCheck:
    folder: Path
    outcomes: tuple[CallOutcome, ...]

    def of(self, status: str) -> list[CallOutcome]:
        return [o for o in self.outcomes if o.status == status]

    def summary(self) -> str:
        counts = {s: len(self.of(s)) for s in ("pass", "fail", "error", "skip")}
        return ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no calls captured"


def check_dump(folder: Path, settings: Settings) -> DumpCheck:
    """Run and judge every entry of the dump.json in ``folder``."""
    dump = load_dump(folder / "dump.json")
    if dump.error:
        return DumpCheck(folder, (CallOutcome(str(folder / "dump.json"), "error", dump.error),))
    index = DumpIndex()  # a collective's other ranks are in other folders: it skips, naming the step folder
    index.add(dump)
    return DumpCheck(folder, tuple(_outcome(case, dump.data_dir, settings, index) for case in dump.cases))


def _outcome(case, data_dir: Path, settings: Settings, index: DumpIndex) -> CallOutcome:
    try:
        result = run_case(case, data_dir, settings, index)
    except CaseSkipped as skipped:
        return CallOutcome(case.key, "skip", f"[{skipped.reason}] {skipped}")
    except CaseInputError as bad:
        return CallOutcome(case.key, "error", str(bad))
    if result.status is not Status.ERROR:
        return CallOutcome(case.key, "pass")
    failing = [f"{out.name}: {render_message(out.verdict)}" for out in result.outputs
               if out.verdict.status is Status.ERROR]
    return CallOutcome(case.key, "fail", "\n".join(failing))
