"""Example custom ops, registered as a team registers its own kernels; op_cases/custom_ops.yaml tests them.

A custom op is a function the harness calls on the device under test, plus a reference it calls in
float64 for the golden. ``like`` names a built-in op with the same arguments whose table row and
reduction length apply (docs/op-cases.md, "Custom ops"). Both ops here are plain torch, so they run
on any device; swap in your own kernels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pytest_npuprecision import register_op
from pytest_npuprecision.common.torch_compat import rms_norm  # F.rms_norm, which torch 2.1 to 2.3 lack

_HALF = (torch.float16, torch.bfloat16)


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    # Fused kernels keep half-precision inputs in float32 inside and round once, at the output.
    return torch.float32 if x.dtype in _HALF else x.dtype


def example_rms_norm(x, normalized_shape, weight=None, eps=1e-6):
    """RMSNorm as a kernel writes it: x / sqrt(mean(x^2) + eps) * weight, in float32 for half inputs."""
    dims = tuple(range(-len(normalized_shape), 0))
    inside = x.to(_compute_dtype(x))
    y = inside * torch.rsqrt(inside.square().mean(dims, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(y.dtype)
    return y.to(x.dtype)


def example_swiglu(x, dim=-1):
    """A fused-style SwiGLU, torch_npu.npu_swiglu's contract: silu(a) * b for (a, b) = the halves of x along dim."""
    a, b = x.to(_compute_dtype(x)).chunk(2, dim=dim)
    return (F.silu(a) * b).to(x.dtype)


def swiglu_reference(x, dim=-1):
    """The golden: the same formula written independently, in the input's dtype (float64 for the golden)."""
    a, b = x.chunk(2, dim=dim)
    return a * torch.sigmoid(a) * b


# rms_norm's row: the error bound with K = the normalized size. npu_swiglu's: the error bound, elementwise.
register_op("example_rms_norm", example_rms_norm, reference=rms_norm, like="rms_norm")
register_op("example_swiglu", example_swiglu, reference=swiglu_reference, like="npu_swiglu")


def pytest_configure(config):
    """The project's own test run judges the shipped op cases on the CPU, where their expectations were
    set: ``auto`` would take a GPU where one is visible, and CUDA's half cumsum errs past its bound
    there (tests/backends/test_cuda_findings.py keeps that finding). A run that checks a dump or names a device
    is left as asked."""
    if config.getoption("npu_precision_device", None) == "auto" and not config.getoption("npu_precision", None):
        config.option.npu_precision_device = "cpu"
