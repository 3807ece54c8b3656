"""One training step of a small model, recorded by capture (in the test process) or by msprobe (run as a
script, in a child process so its patching of torch stays there). Both build the same model from the same
seed and make the calls in the same order, so their dumps can be compared key by key.

    python capture_step.py MODEL TASK DUMP_PATH THREADS   # msprobe's dump of one step

THREADS is the test process's torch thread count: a reduction's blocking, and so its last bits,
depends on it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 1234


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.norm = nn.LayerNorm(32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(F.gelu(self.norm(F.relu(self.fc1(x)))))


class Block(nn.Module):
    """A pre-norm transformer block: attention by matmul/softmax/bmm, then an MLP; residual adds."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc_in = nn.Linear(d, 4 * d)
        self.fc_out = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        scores = torch.matmul(q, k.transpose(-2, -1)) / (d // h) ** 0.5
        p = torch.softmax(scores, dim=-1)
        y = torch.bmm(p.reshape(b * h, t, t), v.reshape(b * h, t, d // h)).reshape(b, h, t, d // h)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc_out(F.gelu(self.fc_in(self.ln2(x))))


class TinyTransformer(nn.Module):
    def __init__(self, vocab=64, d=32, layers=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([Block(d) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.tok(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def build(model: str, *, batch: int = 2, tokens: int = 8):
    """(model, inputs, targets, number of classes), the same in every process."""
    torch.manual_seed(SEED)
    if model == "mlp":
        return MLP(), torch.randn(8, 16), torch.randint(0, 4, (8,)), 4
    net = TinyTransformer()
    idx = torch.randint(0, 64, (batch, tokens + 1))
    return net, idx[:, :-1], idx[:, 1:], 64


def step(net, x, y, classes) -> torch.Tensor:
    loss = F.cross_entropy(net(x).reshape(-1, classes), y.reshape(-1))
    loss.backward()
    return loss


def msprobe_dump(model: str, task: str, dump_path: str) -> None:
    from msprobe.pytorch import PrecisionDebugger

    config = {"task": task, "dump_path": dump_path, "rank": [], "step": [], "level": "L1", "async_dump": False,
              "risk_level": "ALL",  # every API, as capture records them (msprobe's default drops views)
              task: {"scope": [], "list": [], "data_mode": ["all"],
                     **({"summary_mode": "statistics"} if task == "statistics" else {})}}
    config_path = Path(dump_path).parent / f"msprobe_{task}.json"
    config_path.write_text(json.dumps(config))
    net, x, y, classes = build(model)
    debugger = PrecisionDebugger(config_path=str(config_path))
    debugger.start(model=net, rank_id=0)
    step(net, x, y, classes)
    debugger.stop()
    debugger.step()


if __name__ == "__main__":
    torch.set_num_threads(int(sys.argv[4]))
    msprobe_dump(*sys.argv[1:4])
