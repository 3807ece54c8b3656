"""Case records, and the reports made of them: JSON Lines, msprobe-compatible CSV, terminal summary.

Records are plain JSON-able dicts with English keys, so that pytest-xdist can carry them from the
workers to the controller, which alone writes the files.
"""

from __future__ import annotations

import csv
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from .cases import CaseResult, Settings
from .dump import DumpCase

# msprobe's details columns, in its order (its headers are Chinese; users' scripts read them).
DETAILS_COLUMNS = (
    "API Name", "Bench Dtype", "DEVICE Dtype", "Shape", "余弦相似度", "最大绝对误差", "双百指标", "双千指标",
    "双万指标", "二进制一致错误率", "误差均衡性", "均方根误差", "小值域错误占比", "相对误差最大值", "相对误差平均值",
    "inf/nan错误率", "相对误差错误率", "绝对误差错误率", "ULP误差最大值", "ULP误差平均值", "ULP误差大于阈值占比",
    "Status", "Message",
)
RESULT_COLUMNS = ("API name", "Forward Test Success", "Backward Test Success", "Message")
_BLANK = " "  # msprobe writes a single space for an empty cell


def case_record(case: DumpCase, settings: Settings, *, result: CaseResult | None = None, status: str = "",
                message: str = "", reason: str = "") -> dict[str, Any]:
    location, _, _ = case.case_id.rpartition("::")
    record = {
        "case_id": case.case_id, "key": case.key, "api": case.api, "direction": case.direction,
        "order": case.order, "location": location, "source": str(case.source), "seed": case.seed,
        "device": str(settings.device), "golden": "cpu float64", "status": status, "reason": reason,
        "message": message, "seconds": None, "op_seconds": None, "outputs": [],
    }
    if result is not None:
        record.update(status=result.status.value, seconds=result.seconds, op_seconds=result.op_seconds,
                      notes=list(result.notes), outputs=[_output(o.name, o.verdict) for o in result.outputs])
    return record


def _output(name: str, verdict) -> dict[str, Any]:
    return {
        "name": name, "status": verdict.status.value, "standard": verdict.standard, "dtype": verdict.dtype,
        "shape": list(verdict.shape),
        "checks": [{"metric": c.metric, "value": c.value, "limit": c.limit, "status": c.status.value,
                    "baseline": c.baseline} for c in verdict.checks],
        "metrics": verdict.metrics.as_dict(),
        "worst": None if verdict.worst is None else {"index": list(verdict.worst.index), "actual": verdict.worst.actual,
                                                      "golden": verdict.worst.golden},
    }


def write_jsonl(records: list[dict], path: Path) -> None:
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, sort_keys=True) + "\n")


def write_msprobe_csv(records: list[dict], folder: Path, stamp: str) -> tuple[Path, Path]:
    """accuracy_checking_result_<stamp>.csv and accuracy_checking_details_<stamp>.csv, as msprobe writes them."""
    result_path = folder / f"accuracy_checking_result_{stamp}.csv"
    details_path = folder / f"accuracy_checking_details_{stamp}.csv"
    by_api: dict[str, dict[str, dict]] = {}
    for record in records:
        by_api.setdefault(record["api"], {})[record["direction"]] = record
    with result_path.open("w", encoding="utf-8-sig", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(RESULT_COLUMNS)
        for api, sides in by_api.items():
            forward, backward = sides.get("forward"), sides.get("backward")
            message = next((r["message"] for r in (forward, backward) if r and r["status"] == "skip"), "")
            row = [api, _csv_status(forward), _csv_status(backward)]
            writer.writerow(row + [message] if message else row)
    with details_path.open("w", encoding="utf-8-sig", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(DETAILS_COLUMNS)
        for record in records:
            for index, output in enumerate(record["outputs"]):
                writer.writerow(_details_row(f"{record['api']}.{record['direction']}.output.{index}", output))
    return result_path, details_path


def _csv_status(record: dict | None) -> str:
    if record is None:
        return _BLANK
    return {"skip": "SKIP", "input-error": "error"}.get(record["status"], record["status"])


def _details_row(name: str, output: dict) -> list[str]:
    m = output["metrics"]
    numel = max(m["numel"], 1)

    def number(value: float) -> str:
        return f"{value:.14f}"

    floating = output["dtype"].startswith(("float", "bfloat"))
    cells = {
        "余弦相似度": m["cosine"], "最大绝对误差": m["max_abs_err"], "双千指标": m["thousandth_ratio"],
        "二进制一致错误率": m["binary_mismatch"] / numel, "误差均衡性": m["error_balance"], "均方根误差": m["rmse"],
        "小值域错误占比": m["small_value_err_ratio"], "相对误差最大值": m["max_rel_err"],
        "相对误差平均值": m["mean_rel_err"], "inf/nan错误率": m["nonfinite_mismatch"] / numel,
        "相对误差错误率": m["rel_err_ratio"], "绝对误差错误率": m["small_value_err_ratio"],
        "ULP误差最大值": m["max_ulp_err"], "ULP误差平均值": m["mean_ulp_err"], "ULP误差大于阈值占比": m["ulp_over_ratio"],
    } if floating else {"二进制一致错误率": m["binary_mismatch"] / numel}
    row = [name, "torch.float64" if floating else f"torch.{output['dtype']}", f"torch.{output['dtype']}",
           str(tuple(output["shape"]))]
    row += [number(cells[c]) if c in cells else _BLANK for c in DETAILS_COLUMNS[4:-2]]
    failing = [c["metric"] for c in output["checks"] if c["status"] != "pass"]
    row += [output["status"], f"{output['standard']} standard" + (f": {', '.join(failing)}" if failing else "")]
    return row


class Collector:
    """Gathers case records on the controller and writes the reports and the summary once."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.records: list[dict] = []
        self.written: list[Path] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        text = getattr(report, "npu_precision", None)
        if text and report.when == "call":
            self.records.append(json.loads(text))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        folder = self.config.getoption("npu_precision_report")
        if folder is None or hasattr(self.config, "workerinput"):
            return  # xdist workers send their records to the controller instead
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        records = sorted(self.records, key=lambda r: (r["location"], r["order"]))
        write_jsonl(records, folder / "cases.jsonl")
        self.written = [folder / "cases.jsonl", *write_msprobe_csv(records, folder, time.strftime("%Y%m%d%H%M%S"))]

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.records or hasattr(self.config, "workerinput"):
            return
        tr = terminalreporter
        tr.write_sep("=", "npu-precision summary")
        counts = Counter(r["status"] for r in self.records)
        tr.write_line("cases: " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
        standards = Counter(o["standard"] for r in self.records for o in r["outputs"])
        if standards:
            tr.write_line("outputs by standard: " + ", ".join(f"{n} {s}" for s, n in sorted(standards.items())))
        failing = [r for r in self.records if r["status"] in ("error", "input-error")]
        firsts: dict[str, dict] = {}
        for record in sorted(failing, key=lambda r: r["order"]):
            firsts.setdefault(record["location"] or record["source"], record)
        for location, record in sorted(firsts.items()):
            tr.write_line(f"first failing API in {location or 'dump'}: {record['key']} ({_worst_text(record)})")
        for record in sorted(failing, key=_severity, reverse=True)[:5]:
            tr.write_line(f"worst: {record['case_id']}: {_worst_text(record)}")
        for path in self.written:
            tr.write_line(f"report written: {path}")


def _failing_checks(record: dict):
    return [c for o in record["outputs"] for c in o["checks"] if c["status"] == "error"]


def _severity(record: dict) -> float:
    ratios = [c["value"] / c["limit"] if c["limit"] else float("inf") for c in _failing_checks(record)]
    return max(ratios, default=float("inf"))


def _worst_text(record: dict) -> str:
    checks = _failing_checks(record)
    if not checks:
        return record["message"].splitlines()[0] if record["message"] else record["status"]
    worst = max(checks, key=lambda c: c["value"] / c["limit"] if c["limit"] else float("inf"))
    return f"{worst['metric']} {worst['value']:.4g} > {worst['limit']:.4g}"
