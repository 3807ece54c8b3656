"""The benchmark standard between two fair float32 matmuls, judged each way round.

A baseline is meant to be a fair kernel. For random float32 matmuls of three shapes, this judges
one kernel that meets the error bound (torch's, on all threads) against another that meets it too
(the same product with K split in two halves, then added: another blocking), then the other way
round, and prints per check the share of cases failing each way. A check that fails a kernel
against a more accurate one, and never the reverse, sees a real difference in accuracy (a sequential
sum of K/2 terms, twice, errs about 1/sqrt(2) as much as one of K terms). A check that fails both
ways round is measuring noise.

The benchmark standard's scaled ratios compare errors in units of each element's error bound. For
contrast, msprobe's relative-error ratios are shown as msprobe takes them (every element with
|golden| >= small_value, at its L2 limits), where a golden far smaller than its terms makes
|error| / |golden| heavy-tailed.

    python benchmarks/bench_fair_ratios.py [--seeds 40]
"""

from __future__ import annotations

import argparse
import collections

import torch

from pytest_npuprecision import Accumulation, Status, judge

SHAPES = ((32, 64, 48), (16, 1024, 32), (64, 4096, 64))  # (M, K, N)


def fair_pair(m: int, k: int, n: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    a, b = torch.randn(m, k, generator=generator), torch.randn(k, n, generator=generator)
    half = k // 2
    other_blocking = a[:, :half] @ b[:half] + a[:, half:] @ b[half:]
    golden = a.double() @ b.double()
    accumulation = Accumulation(k, (a.double().square() @ b.double().square()).sqrt())
    return a @ b, other_blocking, golden, accumulation


CHECKS = ("small_value_err_ratio", "rmse_ratio", "max_scaled_err_ratio", "mean_scaled_err_ratio", "error_balance_ratio",
          "max_bound_ratio", "mean_bound_ratio", "bound_bias", "magnitude_bound_bias")
MSPROBE = {"max_rel_err": 2.0, "mean_rel_err": 1.2}  # msprobe's L2 limits on its relative-error ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40)
    args = parser.parse_args()
    print(f"fair float32 matmul pairs, {args.seeds} seeds a shape: share of cases failing each check")
    print(f"{'(M, K, N)':<16} {'check':<44} {'torch vs split':>14} {'split vs torch':>14}")
    for shape in SHAPES:
        failed = {"torch vs split": collections.Counter(), "split vs torch": collections.Counter()}
        identical = 0  # where torch's kernel already splits K so, the pair tells nothing
        for seed in range(args.seeds):
            torch_kernel, split_kernel, golden, accumulation = fair_pair(*shape, seed)
            identical += torch.equal(torch_kernel, split_kernel)
            for way, (device, baseline) in zip(failed, ((torch_kernel, split_kernel), (split_kernel, torch_kernel))):
                verdict = judge(device, golden, baseline=baseline, op="matmul", accumulation=accumulation)
                failed[way].update(c.metric for c in verdict.checks if c.status is Status.ERROR)
                failed[way]["(the case)"] += verdict.status is Status.ERROR
                plain = Accumulation(shape[1])  # no term norms: every element counts, as msprobe takes them
                mine = judge(device, golden, op="matmul", accumulation=plain).metrics
                theirs = judge(baseline, golden, op="matmul", accumulation=plain).metrics
                failed[way].update(f"{name}_ratio (msprobe)" for name, limit in MSPROBE.items()
                                   if getattr(mine, name) / max(getattr(theirs, name), 2.0**-23) > limit)
        for metric in (*CHECKS, *(f"{m}_ratio (msprobe)" for m in MSPROBE), "(the case)"):
            shares = [f"{failed[way][metric] / args.seeds:>14.3f}" for way in failed]
            print(f"{str(shape):<16} {metric:<44} {' '.join(shares)}")
        print(f"{str(shape):<16} {'(bit-identical pairs)':<44} {identical / args.seeds:>14.3f}")


if __name__ == "__main__":
    main()
