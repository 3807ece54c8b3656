"""How close fair cases of real dumps come to their limits (issue 53's margins).

Runs every tensor dump of real models the repository carries (msprobe's own dumps in tests/data, the
real-model dumps, the example dumps) on the cpu, whose kernels are torch's own, and offline (the
results the dump recorded, which the same CPU kernels made). Every passing check's value over its limit
is its share of the limit; the table gives each check's largest share and where, and every case past
``--margin`` (0.5 by default: no fair case should sit past half of any limit).

    python benchmarks/real_margins.py [--margin 0.5] [--devices cpu dumped]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
DUMPS = [*(DATA / "msprobe-dumps" / n for n in ("mlp_tensor", "mlp_fp16_tensor", "mlp_L0_tensor",
                                                   "transformer_tensor", "transformer_bf16_tensor")),
         *(DATA / "real-models" / n for n in ("cnn_bn_1x1", "llama_block_bf16", "bert_autocast_bf16",
                                               "adamw_step", "fp16_overflow_mlp")),
         ROOT / "examples" / "dumps"]


def shares(dump: Path, device: str, reports: Path) -> list[tuple[float, str, str, str]]:
    """(share of the limit, metric, case, output) of every upper check of every passing case."""
    report = reports / f"{dump.name}-{device}"
    subprocess.run([sys.executable, "-m", "pytest", "--npu-precision", str(dump), "--npu-precision-device", device,
                    "--npu-precision-report", str(report), "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
                   capture_output=True, text=True, cwd=ROOT)
    found = []
    cases = report / "cases.jsonl"
    if not cases.exists():
        return found
    for line in cases.read_text().splitlines():
        record = json.loads(line)
        if record["status"] not in ("pass", "warning"):
            continue
        for output in record.get("outputs", []):
            for check in output["checks"]:
                if check["upper"] and check["limit"]:
                    found.append((check["value"] / check["limit"], check["metric"], f"{dump.name}::{record['key']}",
                                  output["name"]))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--margin", type=float, default=0.5)
    parser.add_argument("--devices", nargs="*", default=["cpu", "dumped"])
    options = parser.parse_args(argv)
    worst: dict[str, tuple[float, str, str]] = {}
    past, total = [], 0
    with tempfile.TemporaryDirectory() as folder:
        for dump in (d for d in DUMPS if d.exists()):
            for device in options.devices:
                for share, metric, case, output in shares(dump, device, Path(folder)):
                    total += 1
                    if share > worst.get(metric, (-1.0,))[0]:
                        worst[metric] = (share, f"{case} [{device}]", output)
                    if share > options.margin:
                        past.append((share, metric, f"{case} [{device}]", output))
    print(f"{'check':28} {'largest share':>13}  where")
    for metric, (share, case, output) in sorted(worst.items(), key=lambda item: -item[1][0]):
        print(f"{metric:28} {share:13.3f}  {case} {output}")
    print(f"\n{total} checks of passing cases; {len(past)} past {options.margin} of their limit")
    for share, metric, case, output in sorted(past, reverse=True):
        print(f"  {share:.3f}  {metric:24} {case} {output}")
    return 1 if past else 0


if __name__ == "__main__":
    raise SystemExit(main())
