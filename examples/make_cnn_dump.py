"""Write a float32 dump of a small ResNet-style CNN's training step, for checking convolutions on a GPU.

cuDNN computes float32 convolutions in TF32 by PyTorch's default (torch_npu in HF32): this dump is
what ``benchmarks/gpu_check.py`` judges on cuda as run and as IEEE. It is captured on the CPU with
``pytest_npuprecision.capture`` (fixed seed, one thread), forward and backward, every tensor saved.

    python examples/make_cnn_dump.py            # into examples/cnn_float32_tensor
    pytest --npu-precision examples/cnn_float32_tensor --npu-precision-device cuda
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import pytest_npuprecision

DEFAULT_OUT = Path(__file__).resolve().parent / "cnn_float32_tensor"


class Block(nn.Module):
    def __init__(self, channels: int, stride: int = 1):
        super().__init__()
        wide = channels * stride
        self.conv1 = nn.Conv2d(channels, wide, 3, stride=stride, padding=1, bias=False)
        self.norm1 = nn.BatchNorm2d(wide)
        self.conv2 = nn.Conv2d(wide, wide, 3, padding=1, bias=False)
        self.norm2 = nn.BatchNorm2d(wide)
        self.skip = nn.Conv2d(channels, wide, 1, stride=stride, bias=False) if stride > 1 else nn.Identity()

    def forward(self, x):
        y = F.relu(self.norm1(self.conv1(x)))
        return F.relu(self.norm2(self.conv2(y)) + self.skip(x))


class SmallResNet(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.blocks = nn.Sequential(Block(16), Block(16, stride=2), Block(32, stride=2))
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        x = self.blocks(F.relu(self.stem(x)))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    out = parser.parse_args().out
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = SmallResNet()
    images, labels = torch.randn(2, 3, 16, 16), torch.randint(0, 10, (2,))
    shutil.rmtree(out, ignore_errors=True)
    with pytest_npuprecision.capture(out, task="tensor", step=0, rank=0, list=["conv", "linear", "batch_norm"]):
        F.cross_entropy(model(images), labels).backward()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
