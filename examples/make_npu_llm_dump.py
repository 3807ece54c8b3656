"""Write an Ascend-style example dump: a Llama-like block whose fused ops are recorded as ``NPU.*``.

No NPU and no torch_npu are needed. Each fused op runs as a plain-torch composite in the block's
dtype (bfloat16, float16 for the projection that overflows), standing in for the NPU kernel: it
computes in float32 and rounds once, as a fair kernel does, and is written independently of the
float64 references in ``pytest_npuprecision/ops/fused``. The recorder of ``make_example_dump.py``
writes msprobe's format; a backward entry's ``output`` holds the gradient of each tensor argument in
order, as torch_npu's single autograd node per fused op gives them.

Two dumps:

- ``npu_llm_tensor``: the fair stand-ins. Checked offline (``--npu-precision-device dumped``) with
  torch_npu absent, every ``NPU.*`` case is judged against its float64 reference and passes.
- ``npu_llm_defects_tensor``: the same step with four planted defects in the recorded results: one
  NaN in ``npu_swiglu``, attention whose sums are accumulated in bfloat16, a rotary with the sign of
  its rotated half flipped, and a float16 projection that saturates at 65504 where the exact result
  overflows. Those cases fail; the rest pass.

Usage::

    python examples/make_npu_llm_dump.py            # both dumps into examples/dumps
    pytest --npu-precision examples/dumps/npu_llm_tensor --npu-precision-device dumped
"""

from __future__ import annotations

import argparse
import math
import sys
import types
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_example_dump as recording  # noqa: E402  (the msprobe-format recorder)

HIDDEN, HEADS, SEQ, BATCH = 32, 4, 8, 2
FLOAT32 = torch.float32


# ---------------------------------------------------------------- fair stand-ins for the NPU kernels


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def npu_rms_norm(x, gamma, epsilon=1e-6):
    wide = x.to(FLOAT32)
    rstd = torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + epsilon)
    return (wide * rstd * gamma.to(FLOAT32)).to(x.dtype), rstd.detach()  # rstd's own gradient is never used


def npu_rotary_mul(x, r1, r2, rotary_mode="half"):
    wide = x.to(FLOAT32)
    return (wide * r1.to(FLOAT32) + _rotate_half(wide) * r2.to(FLOAT32)).to(x.dtype)


def _heads(t: torch.Tensor) -> torch.Tensor:  # BSH -> BNSD
    return t.reshape(t.shape[0], t.shape[1], HEADS, -1).transpose(1, 2)


def npu_fusion_attention(query, key, value, head_num, input_layout, pse=None, padding_mask=None, atten_mask=None,
                         scale=1.0, keep_prob=1.0, pre_tockens=2147483647, next_tockens=2147483647,
                         inner_precise=0, prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None,
                         sparse_mode=0, gen_mask_parallel=True, sync=False):
    q, k, v = (_heads(t).to(FLOAT32) for t in (query, key, value))
    scores = (q @ k.transpose(-2, -1)) * scale
    scores = scores.masked_fill(atten_mask, float("-inf"))
    row_max = scores.amax(-1, keepdim=True)
    weights = torch.exp(scores - row_max)
    total = weights.sum(-1, keepdim=True)
    out = (weights / total).to(query.dtype).to(FLOAT32) @ v  # probabilities rounded before P @ V
    out = out.transpose(1, 2).reshape(query.shape).to(query.dtype)
    stats = [s.expand(*s.shape[:-1], 8).contiguous() for s in (row_max, total)]
    return out, stats[0], stats[1], query.new_empty(0), 0, 0, 0


def npu_swiglu(x, dim=-1):
    gate, up = x.to(FLOAT32).chunk(2, dim=dim)
    return (F.silu(gate) * up).to(x.dtype)


def npu_linear(x, weight, bias=None):
    return F.linear(x.to(FLOAT32), weight.to(FLOAT32), None if bias is None else bias.to(FLOAT32)).to(x.dtype)


FAIR = {f.__name__: f for f in (npu_rms_norm, npu_rotary_mul, npu_fusion_attention, npu_swiglu, npu_linear)}


# ---------------------------------------------------------------- planted defects


def swiglu_with_a_nan(x, dim=-1):
    out = npu_swiglu(x, dim).clone()
    out.view(-1)[3] = float("nan")
    return out


def attention_accumulated_in_bfloat16(query, key, value, head_num, input_layout, atten_mask=None, scale=1.0,
                                      **kwargs):
    """Scores and P @ V summed term by term in bfloat16: the error grows with the sum's length."""
    q, k, v = (_heads(t).to(torch.bfloat16) for t in (query, key, value))
    scores = torch.zeros(*q.shape[:-1], k.shape[-2], dtype=torch.bfloat16)
    for d in range(q.shape[-1]):
        scores = scores + q[..., d:d + 1] * k[..., d].unsqueeze(-2)
    scores = (scores.to(FLOAT32) * scale).masked_fill(atten_mask, float("-inf"))
    row_max = scores.amax(-1, keepdim=True)
    weights = torch.exp(scores - row_max)
    total = weights.sum(-1, keepdim=True)
    probabilities = (weights / total).to(torch.bfloat16)
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=torch.bfloat16)
    for j in range(v.shape[-2]):
        out = out + probabilities[..., j:j + 1] * v[..., j:j + 1, :]
    out = out.transpose(1, 2).reshape(query.shape).to(query.dtype)
    stats = [s.expand(*s.shape[:-1], 8).contiguous() for s in (row_max, total)]
    return out, stats[0], stats[1], query.new_empty(0), 0, 0, 0


def rotary_with_a_flipped_sign(x, r1, r2, rotary_mode="half"):
    wide = x.to(FLOAT32)
    return (wide * r1.to(FLOAT32) - _rotate_half(wide) * r2.to(FLOAT32)).to(x.dtype)


def linear_that_saturates(x, weight, bias=None):
    exact = npu_linear(x, weight, bias)
    largest = torch.finfo(x.dtype).max
    return exact.nan_to_num(posinf=largest, neginf=-largest)  # inf clamped to the dtype's max


DEFECTS = {"npu_swiglu": swiglu_with_a_nan, "npu_fusion_attention": attention_accumulated_in_bfloat16,
           "npu_rotary_mul": rotary_with_a_flipped_sign, "npu_linear": linear_that_saturates}


# ---------------------------------------------------------------- the block


class LlamaBlock(torch.nn.Module):
    def __init__(self, npu: types.SimpleNamespace):
        super().__init__()
        self.npu = npu
        dtype = torch.bfloat16
        self.norm1 = torch.nn.Parameter(torch.ones(HIDDEN, dtype=dtype) + 0.1 * torch.randn(HIDDEN).to(dtype))
        self.norm2 = torch.nn.Parameter(torch.ones(HIDDEN, dtype=dtype) + 0.1 * torch.randn(HIDDEN).to(dtype))
        self.qkv = torch.nn.Parameter((torch.randn(3 * HIDDEN, HIDDEN) / math.sqrt(HIDDEN)).to(dtype))
        self.out = torch.nn.Parameter((torch.randn(HIDDEN, HIDDEN) / math.sqrt(HIDDEN)).to(dtype))
        self.up = torch.nn.Parameter((torch.randn(4 * HIDDEN, HIDDEN) / math.sqrt(HIDDEN)).to(dtype))
        self.down = torch.nn.Parameter((torch.randn(HIDDEN, 2 * HIDDEN) / math.sqrt(2 * HIDDEN)).to(dtype))
        self.logits = torch.nn.Parameter((torch.randn(8, HIDDEN) * 200).to(torch.float16))
        angles = torch.arange(SEQ)[:, None] * torch.exp(-math.log(10000.0) * torch.arange(0, HIDDEN // HEADS, 2)
                                                        / (HIDDEN // HEADS))[None]
        angles = torch.cat((angles, angles), dim=-1)  # [S, D]
        self.cos = angles.cos().repeat(1, HEADS)[None].to(dtype)  # [1, S, H]: one table for every head
        self.sin = angles.sin().repeat(1, HEADS)[None].to(dtype)
        self.causal = torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1)

    def forward(self, x):
        npu = self.npu
        h, _ = npu.npu_rms_norm(x, self.norm1)
        q, k, v = F.linear(h, self.qkv).chunk(3, dim=-1)
        q, k = npu.npu_rotary_mul(q, self.cos, self.sin), npu.npu_rotary_mul(k, self.cos, self.sin)
        attention = npu.npu_fusion_attention(q, k, v, HEADS, "BSH", atten_mask=self.causal,
                                             scale=1 / math.sqrt(HIDDEN // HEADS))[0]
        x = x + F.linear(attention, self.out)
        h, _ = npu.npu_rms_norm(x, self.norm2)
        x = x + F.linear(npu.npu_swiglu(F.linear(h, self.up), dim=-1), self.down)
        # A float16 head on large activations: its exact results pass float16's largest value.
        return x, npu.npu_linear(x.to(torch.float16), self.logits)


def _step(defects: bool):
    kernels = {**FAIR, **(DEFECTS if defects else {})}
    npu = types.SimpleNamespace(**kernels)
    model = LlamaBlock(npu)
    x = torch.randn(BATCH, SEQ, HIDDEN).to(torch.bfloat16)

    def loss():
        hidden, logits = model(x)
        return hidden.float().pow(2).mean() + logits.float().nan_to_num(0, 0, 0).mean() * 1e-6

    return model, loss, npu


def make(name: str, out: Path, defects: bool) -> Path:
    torch.manual_seed(recording.SEED)
    model, loss_fn, npu = _step(defects)
    apis = recording.RECORDED_APIS
    recording.RECORDED_APIS = apis + (("NPU", npu, tuple(FAIR)),)
    recording.DUMPS[name] = ("tensor", lambda: (model, loss_fn))
    try:
        return recording.make_dump(name, out)
    finally:
        recording.RECORDED_APIS = apis
        del recording.DUMPS[name]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=recording.DEFAULT_OUT)
    options = parser.parse_args(argv)
    for name, defects in (("npu_llm_tensor", False), ("npu_llm_defects_tensor", True)):
        path = make(name, options.out, defects)
        print(f"{path}: {len(recording.json.loads(path.read_text())['data'])} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
