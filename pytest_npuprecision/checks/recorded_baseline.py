"""Recorded baselines: one run's metrics against the golden, kept in a file for a run on another machine.

msprobe compares an NPU with a GPU by running both, writing two CSVs and joining them with a third
tool, and it cannot tell when the two runs drew different random inputs. Here the trusted run
writes ``--npu-precision-record FILE``: per case, a fingerprint of its inputs and every output's
metrics against the float64 golden. The run under test reads it back with
``--npu-precision-baseline FILE`` and uses those metrics as the baseline of the benchmark standard;
a case whose inputs fingerprint differently is refused, and cases the file lacks are reported.

The file is sorted JSON with one case a line, so that it reads and diffs well under review.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from ..config import ConfigError, load_json, validate

if TYPE_CHECKING:  # the reports write a record file where torch was never imported
    from ..precision import Metrics

FORMAT = "pytest-npuprecision record"
VERSION = 1
_JUDGED = ("pass", "warning", "error")


class BaselineFileError(ValueError):
    """The baseline file cannot be used: the message names the file and the fix."""


@dataclass(frozen=True)
class RecordedOutput:
    dtype: str
    shape: tuple[int, ...]
    metrics: Metrics


@dataclass(frozen=True)
class RecordedCase:
    fingerprint: Mapping[str, Any]  # InputFingerprint.as_dict() of the recording run
    outputs: Mapping[str, RecordedOutput]


@dataclass(frozen=True)
class RecordedBaseline:
    path: Path
    device: Mapping[str, Any]  # BackendInfo.as_dict() of the recording run's device
    golden: str
    cases: Mapping[str, RecordedCase]

    @property
    def label(self) -> str:
        """``gpu.json (recorded on cuda:0, NVIDIA H100 80GB HBM3, 250 cases)``."""
        return (f"{self.path.name} (recorded on {self.device.get('name', '?')}, "
                f"{self.device.get('device_name', '?')}, {len(self.cases)} cases)")

    @classmethod
    def load(cls, path: Path | str) -> "RecordedBaseline":
        path = Path(path)
        try:
            data = load_json(path, "baseline")
        except ConfigError as exc:
            raise BaselineFileError(f"{exc}: give a file written by --npu-precision-record") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise BaselineFileError(f"baseline {path} is not a pytest-npuprecision record: write one with "
                                    f"--npu-precision-record on the trusted machine")
        if data.get("version") != VERSION:
            raise BaselineFileError(f"baseline {path} has record version {data.get('version')!r}, this plugin "
                                    f"reads version {VERSION}: record it again with this version")
        from .recorded_file_schema import RecordedFile

        try:
            record = validate(RecordedFile, data, path)
        except ConfigError as exc:
            raise BaselineFileError(f"{exc}: record the file again") from None
        cases = {case_id: RecordedCase(dict(entry.fingerprint.model_dump()),
                                       {name: RecordedOutput(out.dtype, tuple(out.shape), out.metrics)
                                        for name, out in entry.outputs.items()})
                 for case_id, entry in record.cases.items()}
        return cls(path, record.device, record.golden, cases)


def write_record(path: Path, device: Mapping[str, Any], golden: str, records: Iterable[dict]) -> int:
    """Write the judged cases among ``records`` (plain case records) to ``path``; return how many."""
    cases = {}
    for record in records:
        if record["status"] in _JUDGED and record.get("fingerprint"):
            cases[record["case_id"]] = {
                "fingerprint": record["fingerprint"],
                "outputs": {o["name"]: {"dtype": o["dtype"], "shape": o["shape"], "metrics": o["metrics"]}
                            for o in record["outputs"]},
            }
    head = {"format": FORMAT, "version": VERSION, "device": dict(device), "golden": golden}
    # One case a line, sorted: a re-recorded baseline diffs case by case.
    lines = [f"  {json.dumps(key)}: {json.dumps(value, sort_keys=True)}" for key, value in sorted(cases.items())]
    text = json.dumps(head, indent=1, sort_keys=True)[:-2] + ',\n "cases": {\n' + ",\n".join(lines) + "\n }\n}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return len(cases)
