"""Which rounding a GPU's TF32 kernels apply to float32 inputs: nearest-even, nearest-away or truncation.

Each op runs on cuda with TF32 off and on; its result is compared with a float64 result of its inputs
rounded each way to 10 (TF32) and 11 (HF32) mantissa bits, in units of float32's eps of the scale
|a|@|b|. The rounding that matches leaves only float32 accumulation (a few eps); the others leave
hundreds. Measured on an H200 (torch 2.11, CUDA 13, cuDNN 9.19): nearest-even at 10 bits for cuBLAS
matmuls and cuDNN conv2d forward; these conv backwards and SDPA did not use TF32 at all.
math_modes.round_mantissa emulates the matching rounding for the CPU tests.
"""
import json
import torch
import torch.nn.functional as F

def rounded(x, bits, mode):
    drop = 23 - bits
    i = x.contiguous().view(torch.int32).clone()
    mask = ~((1 << drop) - 1)
    if mode == "trunc":
        i &= mask
    elif mode == "rne":
        i = (i + ((1 << (drop - 1)) - 1) + ((i >> drop) & 1)) & mask
    elif mode == "rna":
        i = (i + (1 << (drop - 1))) & mask
    return i.view(torch.float32)

def stats(out, ref, scale):
    e = (out.double().cpu() - ref) / scale
    return {"rms_eps": float(e.pow(2).mean().sqrt() / 2**-23), "max_eps": float(e.abs().max() / 2**-23),
            "bias_eps": float((e * ref.sign()).mean() / 2**-23)}

def set_tf32(on):
    torch.backends.cuda.matmul.fp32_precision = "tf32" if on else "ieee"
    torch.backends.cudnn.conv.fp32_precision = "tf32" if on else "ieee"

g = torch.Generator().manual_seed(0)
rows = []
def case(name, run64, run_dev, tensors, scale_fn):
    for on in (False, True):
        set_tf32(on)
        out = run_dev([t.cuda() for t in tensors])
        torch.cuda.synchronize()
        for mode in ("none", "rne", "rna", "trunc"):
            for bits in ((10, 11) if mode != "none" else (23,)):
                ins = [t.double() if mode == "none" else rounded(t, bits, mode).double() for t in tensors]
                ref = run64(ins)
                rows.append({"case": name, "tf32": on, "round": mode, "bits": bits,
                             **stats(out, ref, scale_fn([t.double().abs() for t in tensors]))})

A = torch.randn(512, 2048, generator=g); B = torch.randn(2048, 512, generator=g)
case("mm", lambda t: t[0] @ t[1], lambda t: t[0] @ t[1], [A, B], lambda t: t[0] @ t[1])
Ap = torch.rand(512, 2048, generator=g); Bp = torch.rand(2048, 512, generator=g)
case("mm_pos", lambda t: t[0] @ t[1], lambda t: t[0] @ t[1], [Ap, Bp], lambda t: t[0] @ t[1])
x = torch.randn(8, 64, 16, 16, generator=g); w = torch.randn(128, 64, 3, 3, generator=g)
case("conv2d", lambda t: F.conv2d(t[0], t[1], padding=1), lambda t: F.conv2d(t[0], t[1], padding=1), [x, w],
     lambda t: F.conv2d(t[0], t[1], padding=1))
xp = torch.rand(8, 64, 16, 16, generator=g)
case("conv2d_pos", lambda t: F.conv2d(t[0], t[1], padding=1), lambda t: F.conv2d(t[0], t[1], padding=1), [xp, w.abs()],
     lambda t: F.conv2d(t[0], t[1], padding=1))
go = torch.randn(8, 128, 16, 16, generator=g)
def gi(t):  # grad_input of conv2d from (grad_out, w)
    xx = torch.zeros(8, 64, 16, 16, dtype=t[0].dtype, device=t[0].device, requires_grad=True)
    out = F.conv2d(xx, t[1], padding=1)
    return torch.autograd.grad(out, xx, t[0])[0]
case("conv2d_grad_input", gi, gi, [go, w], lambda t: gi(t))
def gw(t):  # grad_weight from (x, grad_out)
    ww = torch.zeros(128, 64, 3, 3, dtype=t[0].dtype, device=t[0].device, requires_grad=True)
    out = F.conv2d(t[0], ww, padding=1)
    return torch.autograd.grad(out, ww, t[1])[0]
case("conv2d_grad_weight", gw, gw, [x, go], lambda t: gw(t))
q = torch.randn(2, 4, 128, 64, generator=g); k = torch.randn(2, 4, 128, 64, generator=g); v = torch.randn(2, 4, 128, 64, generator=g)
sd = lambda t: F.scaled_dot_product_attention(t[0], t[1], t[2])
case("sdpa", sd, sd, [q, k, v], lambda t: sd(t).abs() + 1e-3)

info = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
        "gpu": torch.cuda.get_device_name(0)}
print(json.dumps(info))
print(f"{'case':20} {'tf32':5} {'round':6} {'bits':4} {'rms_eps':>10} {'max_eps':>10} {'bias_eps':>10}")
for r in rows:
    print(f"{r['case']:20} {str(r['tf32']):5} {r['round']:6} {r['bits']:4} {r['rms_eps']:10.3f} {r['max_eps']:10.3f} {r['bias_eps']:10.3f}")
