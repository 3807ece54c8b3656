#!/usr/bin/env python3
"""Write the real-model msprobe dumps in this folder: one training step of five small models, each
built the way torchvision, transformers or a training loop builds it, dumped by msprobe itself.

They hold what real dumps hold and synthetic ones miss: autocast entries, batch_norm on 1x1 maps,
RMSNorm's positional ``.to(torch.float32)``, an AdamW step's Python scalars, a float16 overflow.

    python3.11 -m venv /tmp/msvenv
    /tmp/msvenv/bin/pip install torch==2.13.0 mindstudio-probe==26.2.0
    /tmp/msvenv/bin/python make_real_model_dumps.py            # every dump
    /tmp/msvenv/bin/python make_real_model_dumps.py cnn_bn_1x1  # one

msprobe is a tool to make the data, never a test dependency. Its debugger is a per-process
singleton, so each dump is made in a child process; the folder of each is replaced whole.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 20261124


def cnn_bn_1x1(torch, nn, F):
    """A ResNet-style CNN in float32 whose last block normalizes [2, 16, 1, 1]: 2 values per channel."""
    def block(c_in, c_out, stride):
        return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())

    model = nn.Sequential(block(3, 8, 1), block(8, 16, 2), block(16, 16, 2), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step():
        x, y = torch.randn(2, 3, 4, 4) * 2 + 2, torch.tensor([1, 3])
        return F.cross_entropy(model(x), y)
    return model, optimizer, step


def llama_block_bf16(torch, nn, F):
    """A Llama decoder layer in bfloat16: RMSNorm casting to float32 and back, rotary, SDPA, SwiGLU."""
    hidden, heads, seq, vocab = 32, 4, 8, 64

    class RMSNorm(nn.Module):  # as transformers' LlamaRMSNorm
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden))

        def forward(self, x):
            dtype = x.dtype
            x = x.to(torch.float32)
            variance = x.pow(2).mean(-1, keepdim=True)
            x = x * torch.rsqrt(variance + 1e-6)
            return self.weight * x.to(dtype)

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.norm1, self.norm2, self.norm_out = RMSNorm(), RMSNorm(), RMSNorm()
            self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
            self.o = nn.Linear(hidden, hidden, bias=False)
            self.gate = nn.Linear(hidden, 2 * hidden, bias=False)
            self.up = nn.Linear(hidden, 2 * hidden, bias=False)
            self.down = nn.Linear(2 * hidden, hidden, bias=False)
            self.head = nn.Linear(hidden, vocab, bias=False)
            inv_freq = 1.0 / (10000 ** (torch.arange(0, hidden // heads, 2).float() / (hidden // heads)))
            angles = torch.outer(torch.arange(seq).float(), inv_freq)
            self.register_buffer("cos", torch.cat((angles, angles), -1).cos())
            self.register_buffer("sin", torch.cat((angles, angles), -1).sin())

        def forward(self, ids):
            x = self.embed(ids)
            b, t, d = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            attention = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o(attention.transpose(1, 2).reshape(b, t, d))
            h = self.norm2(x)
            x = x + self.down(F.silu(self.gate(h)) * self.up(h))
            return self.head(self.norm_out(x))

    model = Layer().to(torch.bfloat16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        ids = torch.randint(0, vocab, (2, seq + 1))
        logits = model(ids[:, :-1])
        return F.cross_entropy(logits.float().reshape(-1, vocab), ids[:, 1:].reshape(-1))
    return model, optimizer, step


def bert_autocast_bf16(torch, nn, F):
    """A BERT encoder layer in float32 trained under CPU autocast to bfloat16: post-LN, GELU, a pooler."""
    hidden, heads, seq, vocab = 32, 4, 8, 64

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.word, self.position = nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden)
            self.ln_embed, self.ln_attention, self.ln_out = (nn.LayerNorm(hidden, eps=1e-12) for _ in range(3))
            self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
            self.attention_out = nn.Linear(hidden, hidden)
            self.intermediate, self.output = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)
            self.pooler, self.classifier = nn.Linear(hidden, hidden), nn.Linear(hidden, 3)

        def forward(self, ids):
            b, t = ids.shape
            x = self.ln_embed(self.word(ids) + self.position(torch.arange(t)))

            def split(y):
                return y.view(b, t, heads, hidden // heads).transpose(1, 2)
            q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hidden // heads)
            context = torch.matmul(F.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, t, hidden)
            x = self.ln_attention(self.attention_out(context) + x)
            x = self.ln_out(self.output(F.gelu(self.intermediate(x))) + x)
            return self.classifier(torch.tanh(self.pooler(x[:, 0])))

    model = Layer()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        ids, labels = torch.randint(0, vocab, (2, seq)), torch.tensor([0, 2])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return F.cross_entropy(model(ids), labels)
    return model, optimizer, step


def adamw_step(torch, nn, F):
    """One AdamW step on a small float32 MLP: the optimizer's addcmul_/addcdiv_ with Python scalars."""
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, foreach=False)

    def step():
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        return F.cross_entropy(model(x), y)
    return model, optimizer, step


def fp16_overflow_mlp(torch, nn, F):
    """A float16 MLP that overflows: squared ReLU, a softmax without max subtraction, and a loss scaler
    that finds infinite gradients and skips the step, as a user chasing an overflow dumps it."""
    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 8)

        def forward(self, x):
            h = F.relu(self.fc1(x))
            scores = self.fc2(h * h)
            e = torch.exp(scores)
            return e / e.sum(-1, keepdim=True)

    model = MLP().to(torch.float16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        x, y = (torch.randn(4, 16) * 3).to(torch.float16), torch.tensor([0, 3, 5, 7])
        probabilities = model(x)
        return F.nll_loss(torch.log(probabilities.float() + 1e-4), y) * 1024.0  # loss scale
    return model, optimizer, step


LOSS_SCALED = {"fp16_overflow_mlp"}
MODELS = {f.__name__: f for f in (cnn_bn_1x1, llama_block_bf16, bert_autocast_bf16, adamw_step, fp16_overflow_mlp)}


def dump_one(name: str) -> None:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from msprobe.pytorch import PrecisionDebugger, seed_all

    out = HERE / name
    config = {"task": "tensor", "dump_path": str(out), "rank": [], "step": [], "level": "L1",
              "async_dump": False, "risk_level": "ALL", "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}
    config_path = HERE / "configs" / f"{name}.json"
    config_path.parent.mkdir(exist_ok=True)
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)

    seed_all(SEED)
    model, optimizer, step = MODELS[name](torch, nn, F)
    debugger = PrecisionDebugger(config_path=str(config_path))
    debugger.start(model=model, rank_id=0)
    loss = step()
    optimizer.zero_grad()
    loss.backward()
    finite = True
    if name in LOSS_SCALED:  # a loss scaler skips the step when a gradient overflowed
        finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)
    if finite:
        optimizer.step()
    debugger.stop()
    debugger.step()
    print(json.dumps({"dump": name, "loss": float(loss.detach()), "stepped": bool(finite)}))


def main(argv: list[str]) -> int:
    if argv[:1] == ["--one"]:
        dump_one(argv[1])
        return 0
    names = argv or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"unknown dump {unknown}; known: {', '.join(MODELS)}", file=sys.stderr)
        return 2
    for name in names:
        done = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True)
        (HERE / "configs").mkdir(exist_ok=True)
        (HERE / "configs" / f"{name}.log").write_text(done.stdout + done.stderr)
        print(f"{name}: {'ok' if done.returncode == 0 else f'failed ({done.returncode})'}: "
              f"{done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
