"""msprobe's result and details CSVs, written from case records, for the scripts that read acc_check's."""

from __future__ import annotations

import csv
from pathlib import Path

from ...common import shown_key

# msprobe's details columns, in its order (its headers are Chinese; users' scripts read them).
DETAILS_COLUMNS = (
    "API Name", "Bench Dtype", "DEVICE Dtype", "Shape", "余弦相似度", "最大绝对误差", "双百指标", "双千指标",
    "双万指标", "二进制一致错误率", "误差均衡性", "均方根误差", "小值域错误占比", "相对误差最大值", "相对误差平均值",
    "inf/nan错误率", "相对误差错误率", "绝对误差错误率", "ULP误差最大值", "ULP误差平均值", "ULP误差大于阈值占比",
    "Status", "Message",
)
RESULT_COLUMNS = ("API name", "Forward Test Success", "Backward Test Success", "Message")
_BLANK = " "  # msprobe writes a single space for an empty cell



def write_msprobe_csv(records: list[dict], folder: Path, stamp: str) -> list[Path]:
    """accuracy_checking_result_<stamp>.csv and accuracy_checking_details_<stamp>.csv per dump, step and rank.

    msprobe's acc_check writes one pair per dump.json, and its readers key rows by API name alone
    (api_precision_compare refuses a name twice; a resumed acc_check skips every name already listed),
    so each dump/step/rank gets its own pair under folder/msprobe/<location>/, the case ids' location.
    """
    by_location: dict[str, list[dict]] = {}
    for record in records:
        if record.get("kind", "dump") == "dump":  # msprobe knows dumped APIs only
            by_location.setdefault(record["location"], []).append(record)
    written = []
    for location, located in sorted(by_location.items()):
        target = folder / "msprobe" / location
        target.mkdir(parents=True, exist_ok=True)
        written += _write_msprobe_pair(located, target, stamp)
    return written


def _write_msprobe_pair(records: list[dict], folder: Path, stamp: str) -> tuple[Path, Path]:
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
            row = [shown_key(api), _csv_status(forward), _csv_status(backward)]
            writer.writerow(row + [message] if message else row)
    with details_path.open("w", encoding="utf-8-sig", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(DETAILS_COLUMNS)
        for record in records:
            name = f"{shown_key(record['api'])}.{record['direction']}.output"
            for index, output in enumerate(record["outputs"]):
                writer.writerow(_details_row(f"{name}.{index}", output))
            if not record["outputs"]:  # as acc_check writes a skipped API: blank dtypes and metrics, the reason
                writer.writerow([f"{name}.0", *[_BLANK] * (len(DETAILS_COLUMNS) - 3), _csv_status(record),
                                 _one_line(record.get("message") or record.get("reason") or "")])
    return result_path, details_path


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]


def _csv_status(record: dict | None) -> str:
    if record is None:
        return _BLANK
    return {"skip": "SKIP", "input-error": "error"}.get(record["status"], record["status"])


def _details_row(name: str, output: dict) -> list[str]:
    m = output["metrics"]
    if m is None:  # judged by its statistics: no element metrics
        return [name, _BLANK, f"torch.{output['dtype']}", str(tuple(output["shape"]))] + \
            [_BLANK] * (len(DETAILS_COLUMNS) - 6) + [output["status"], f"{output['standard']} standard"]
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
