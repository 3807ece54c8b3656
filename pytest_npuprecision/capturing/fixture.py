"""What the ``npu_precision_capture`` fixture hands a test: call it for a ``with`` block that records the
block and, when it ends, checks every captured call; a failure names the test and each failing API."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

from ..cases import Settings
from .checking import DumpCheck, check_dump
from .recorder import capture


class CapturedCallsFailed(AssertionError):
    """Some captured call is not precise enough, or its entry could not be replayed."""


class CaptureFixture:
    def __init__(self, test: str, root: Path, settings: Settings):
        self.test = test
        self.root = root
        self.settings = settings
        self.checks: list[DumpCheck] = []

    @contextlib.contextmanager
    def __call__(self, **options: Any) -> Iterator[Any]:
        """Record the block (``capture``'s options: task, scope, list, data_mode), then check it."""
        __tracebackhide__ = True
        step = len(self.checks)
        with capture(self.root, step=step, rank=0, **options) as recorded:
            yield recorded
        check = check_dump(recorded.folder, self.settings)
        self.checks.append(check)
        bad = check.of("fail") + check.of("error")
        if bad:
            lines = [f"{self.test}: {len(bad)} captured call(s) not precise enough on "
                     f"{self.settings.device.name} ({check.summary()}); dump: {recorded.folder}"]
            for outcome in bad:
                lines.append(f"{outcome.key} ({outcome.status}): {outcome.message}")
            lines.append(f"rerun one: pytest --npu-precision {self.root} --npu-precision-case "
                         f"step{step}/rank0::{bad[0].key}")
            raise CapturedCallsFailed("\n".join(lines))
