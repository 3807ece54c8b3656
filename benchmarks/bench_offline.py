"""Seconds per case of the offline check (--npu-precision-device dumped) against a live cpu device.

Runs every case of the CPU-recorded tensor dumps in tests/data (msprobe's fixtures and the real-model
dumps), and of a bfloat16 transformer block at training sizes recorded here, in process, through the
core the plugin uses: once with the device side read from the dump and once run live on the cpu. Prints
the median seconds per case of each and their ratio. Both run the same float64 golden; the offline path
runs nothing on the device side but reads one more file per case. On the tiny test dumps the kernels
take microseconds, less than reading a result file; at training sizes the device's run is what offline
saves.

    python benchmarks/bench_offline.py [--repeat 3] [--tokens 512 --hidden 512]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from pytest_npuprecision.checks.case_run import CaseInputError, CaseSkipped, Settings, run_case
from pytest_npuprecision.dump.dump_cases import load_dump
from pytest_npuprecision.dump.locations import find_dump_files

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
DUMPS = [DATA / "msprobe-dumps" / name for name in ("mlp_tensor", "transformer_tensor", "transformer_bf16_tensor")] + [
    DATA / "real-models" / name for name in ("cnn_bn_1x1", "llama_block_bf16", "bert_autocast_bf16", "adamw_step")]


def training_size_dump(out: Path, tokens: int, hidden: int) -> Path:
    """A bfloat16 pre-LN transformer block's forward and backward, recorded by the example recorder."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import make_example_dump as recording

    def block():
        layers = torch.nn.ModuleDict({"norm": torch.nn.LayerNorm(hidden), "qkv": torch.nn.Linear(hidden, 3 * hidden),
                                      "up": torch.nn.Linear(hidden, 4 * hidden),
                                      "down": torch.nn.Linear(4 * hidden, hidden)}).to(torch.bfloat16)
        x = torch.randn(1, tokens, hidden, dtype=torch.bfloat16)

        def loss():
            q, k, v = layers["qkv"](F.layer_norm(x, (hidden,))).chunk(3, dim=-1)
            attention = torch.matmul(F.softmax(torch.matmul(q, k.transpose(1, 2)) / hidden ** 0.5, dim=-1), v)
            h = x + attention
            return (h + layers["down"](F.gelu(layers["up"](h)))).float().pow(2).mean()
        return layers, loss

    recording.DUMPS["training_size_bf16"] = ("tensor", block)
    return recording.make_dump("training_size_bf16", out).parents[2]


def case_seconds(root: Path, settings: Settings, judged: set[str] | None) -> dict[str, float]:
    """Seconds of each case that ran (not skipped), by case id; only those in ``judged`` when given."""
    seconds = {}
    for path in find_dump_files(root):
        dump = load_dump(path)
        for case in dump.cases:
            if judged is not None and case.case_id not in judged:
                continue
            started = time.perf_counter()
            try:
                run_case(case, dump.data_dir, settings)
            except (CaseSkipped, CaseInputError):
                continue
            seconds[case.case_id] = time.perf_counter() - started
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each dump; the fastest per case counts")
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=512)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        compare(DUMPS, args.repeat, "the test dumps")
        compare([training_size_dump(Path(folder), args.tokens, args.hidden)], args.repeat,
                f"training sizes ({args.tokens} tokens x {args.hidden})")


def compare(dumps: list[Path], repeat: int, label: str) -> None:
    offline, live = Settings(device="dumped"), Settings(device=torch.device("cpu"))
    all_offline, all_live = [], []
    for root in dumps:
        # Only the cases both paths judge: offline skips gradients msprobe could not attribute.
        best_offline = case_seconds(root, offline, None)
        best_live = case_seconds(root, live, set(best_offline))
        for _ in range(repeat - 1):
            for best, settings in ((best_offline, offline), (best_live, live)):
                for case_id, s in case_seconds(root, settings, set(best_offline)).items():
                    best[case_id] = min(best[case_id], s)
        common = sorted(set(best_offline) & set(best_live))
        off = statistics.median(best_offline[c] for c in common) * 1e3
        on = statistics.median(best_live[c] for c in common) * 1e3
        all_offline += [best_offline[c] for c in common]
        all_live += [best_live[c] for c in common]
        print(f"{root.name:26s} {len(common):4d} cases: dumped {off:6.2f} ms/case, cpu {on:6.2f} ms/case, "
              f"cpu/dumped {on / off:.2f}x")
    total_off, total_on = sum(all_offline), sum(all_live)
    print(f"{label}: {len(all_offline):4d} cases: dumped {total_off:.2f} s, cpu {total_on:.2f} s, "
          f"cpu/dumped {total_on / total_off:.2f}x (median per case "
          f"{statistics.median(all_live) / statistics.median(all_offline):.2f}x)")


if __name__ == "__main__":
    main()
