"""The float64 golden on the CPU against the float64 golden on a GPU: time and agreement.

For each op below, runs one case forward and backward with the GPU as the device under test,
once with the CPU golden (the default) and once with ``--npu-precision-golden cuda``'s golden,
and prints each golden's seconds, their ratio, and how far apart the two goldens are (max
|difference| over max |golden|; float64 summation order alone gives ~1e-15). The first call of
each op warms cuBLAS and cuDNN up and is not counted. Without a GPU it says so and exits 0.

    python benchmarks/bench_golden.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics

import torch

from pytest_npuprecision import Backend
from pytest_npuprecision.backends import load_backend
from pytest_npuprecision.ops.resolution import resolve
from pytest_npuprecision.replay.runner import run_call


def _randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype)


def ops() -> dict[str, tuple]:
    """name: (api, args, kwargs, inputs to differentiate); built only when there is a GPU to run them."""
    half, bf16 = torch.float16, torch.bfloat16
    qkv = tuple(_randn(4, 16, 1024, 64, dtype=half, seed=s) for s in range(3))
    return {
        "matmul fp32 [2048,8192]@[8192,2048]":
            ("Torch.matmul", (_randn(2048, 8192), _randn(8192, 2048, seed=1)), {}, (0, 1)),
        "linear bf16 [4096,4096]x[4096,4096]":
            ("Functional.linear", (_randn(4096, 4096, dtype=bf16), _randn(4096, 4096, dtype=bf16, seed=1)), {}, (0, 1)),
        "sdpa fp16 causal [4,16,1024,64]":
            ("Functional.scaled_dot_product_attention", qkv, {"is_causal": True}, (0, 1, 2)),
        "conv2d fp32 [16,64,56,56]*[128,64,3,3]":
            ("Functional.conv2d", (_randn(16, 64, 56, 56), _randn(128, 64, 3, 3, seed=1)), {"padding": 1}, (0, 1)),
    }


def golden_seconds(api: str, args, kwargs, grad, device: Backend, golden: Backend, repeat: int):
    op = resolve(api)
    result = None
    times = []
    for _ in range(repeat):
        result = run_call(op, args, kwargs, device=device, golden=golden, backward=True, requires_grad=grad, seed=1)
        times.append(result.golden_seconds)
    return statistics.median(times), result


def difference(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().cpu().double(), b.detach().cpu().double()
    return ((a - b).abs().max() / b.abs().max().clamp_min(torch.finfo(torch.float64).tiny)).item()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(f"no GPU visible (torch {torch.__version__}, cuda {torch.version.cuda}): nothing to compare")
        return 0
    device, cpu, cuda = load_backend("cuda"), Backend("cpu"), load_backend("cuda", "golden")
    print(f"{torch.cuda.get_device_name(0)}; torch {torch.__version__}, cuda {torch.version.cuda}; "
          f"{torch.get_num_threads()} CPU threads; median of {args.repeat}")
    header = f"{'op (forward + backward)':<40} {'cpu golden s':>12} {'cuda golden s':>13} {'cpu/cuda':>9} {'goldens differ':>14}"
    print(header + "\n" + "-" * len(header))
    for name, (api, op_args, kwargs, grad) in ops().items():
        run_call(resolve(api), op_args, kwargs, device=device, golden=cuda, backward=True, requires_grad=grad)  # warm-up
        cpu_s, on_cpu = golden_seconds(api, op_args, kwargs, grad, device, cpu, args.repeat)
        cuda_s, on_cuda = golden_seconds(api, op_args, kwargs, grad, device, cuda, args.repeat)
        apart = max(difference(g.golden, c.golden)
                    for g, c in zip(on_cuda.outputs + on_cuda.grads, on_cpu.outputs + on_cpu.grads))
        print(f"{name:<40} {cpu_s:>12.3f} {cuda_s:>13.4f} {cpu_s / cuda_s:>8.0f}x {apart:>14.2g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
