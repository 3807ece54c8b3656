"""What the ``npu_precision_capture`` fixture hands a test: call it for a ``with`` block that records the
block and, when it ends, checks every captured call; a failure names the test and each failing API."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ..checks import Settings
from ..common import folder_name
from .checking import DumpCheck, check_dump
from .recorder import capture


class CapturedCallsFailed(AssertionError):
    """Some captured call is not precise enough, or its entry could not be replayed."""


class CaptureFixture:
    def __init__(self, test: str, root: Path, settings: Settings, keep: Path | None = None):
        """root: a temporary folder for the dumps; keep: where a failing step's dump is copied to stay
        (the report folder's captured/), since pytest removes its temporary folders after three runs."""
        self.test = test
        self.root = root
        self.settings = settings
        self.keep = keep
        self.checks: list[DumpCheck] = []

    def __call__(self, **options: Any) -> _CheckedBlock:
        """Record the block (``capture``'s options: task, scope, list, data_mode), then check it."""
        return _CheckedBlock(self, options)

    def check(self, folder: Path, step: int) -> None:
        __tracebackhide__ = True
        check = check_dump(folder, self.settings)
        self.checks.append(check)
        bad = check.of("fail") + check.of("error")
        if not bad:
            return
        root, where = self.root, f"{folder} (a temporary folder: pytest removes it after three more runs; " \
                                 f"--npu-precision-report DIR keeps a copy)"
        if self.keep is not None:
            root = self.keep / folder_name(self.test, 120)
            kept = root / folder.relative_to(self.root)
            shutil.copytree(folder, kept, dirs_exist_ok=True)
            where = str(kept)
        lines = [f"{self.test}: {len(bad)} captured call(s) not precise enough on "
                 f"{self.settings.device.name} ({check.summary()}); dump: {where}"]
        for outcome in bad:
            lines.append(f"{outcome.key} ({outcome.status}): {outcome.message}")
        lines.append(f"rerun one: pytest --npu-precision {root} --npu-precision-case "
                     f"step{step}/rank0::{bad[0].key}")
        raise CapturedCallsFailed("\n".join(lines))


class _CheckedBlock:
    """The ``with`` block: a class rather than a generator, so that a failure's traceback ends in the
    test's own ``with`` line, with no contextlib frame before the one message."""

    def __init__(self, fixture: CaptureFixture, options: dict[str, Any]):
        self.fixture = fixture
        self.step = len(fixture.checks)
        self.capturing = capture(fixture.root, step=self.step, rank=0, **options)

    def __enter__(self) -> Any:
        self.recorded = self.capturing.__enter__()
        return self.recorded

    def __exit__(self, *raised: Any) -> None:
        __tracebackhide__ = True
        self.capturing.__exit__(*raised)
        if raised[0] is None:
            self.fixture.check(self.recorded.folder, self.step)
