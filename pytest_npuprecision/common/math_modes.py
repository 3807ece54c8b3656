"""Float32 math modes: the narrower formats an accelerator may compute float32 matmuls, convolutions
and recurrent layers in, and which ops each covers.

A GPU with TF32 on (cuDNN convolutions by PyTorch's default) or an NPU with HF32 on (torch_npu's
default for convolutions) rounds each float32 input of the products to fewer mantissa bits, then
accumulates in float32. A fair kernel in that mode errs by that rounding, far past float32's own
bound: the backend reports its modes (``Backend.float32_modes``), replay/error_bounds.py widens the error bound
of the ops a mode covers by the format's rounding of their inputs, and the verdict names the mode.

Formats, with where each figure comes from (docs/standards.md, "Float32 math modes"):
- TF32: 10 explicit mantissa bits, float32's exponent (NVIDIA's TensorFloat-32); measured on an H200
  (cuBLAS and cuDNN), inputs rounded to nearest, ties to even.
- HF32: 11 explicit mantissa bits, float32's exponent (CANN's ATC reference, ``--allow_hf32``);
  rounded to nearest (Ascend C ``SetHF32``: ties to even by default, or away from zero).
- float16 / bfloat16 products: CANN's ``ACL_PRECISION_MODE`` allow_fp32_to_fp16 (the default on
  Atlas training products) and allow_fp32_to_bf16 compute matrix ops in them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

FLOAT32_MANTISSA_BITS = 23

# The families of float32 ops a switch covers; which ops each holds is the op catalogue's
# (OpRecord.math_family: ops/table/): cuBLAS's and cuDNN's, and the NPU's cube unit.
FAMILIES = ("matmul", "conv", "rnn")


@dataclass(frozen=True)
class MathMode:
    """How a device computes one family of float32 ops."""

    name: str  # "ieee", "tf32", "hf32", "float16", "bfloat16"
    mantissa_bits: int = FLOAT32_MANTISSA_BITS  # explicit fraction bits each input keeps before the products
    setting: str = ""  # what set it, as the user would read it: "torch.backends.cudnn.allow_tf32 is True"
    switch_off: str = ""  # the line that turns it off in the user's own training

    @property
    def reduced(self) -> bool:
        return self.mantissa_bits < FLOAT32_MANTISSA_BITS

    @property
    def unit_roundoff(self) -> float:
        """The largest relative error of rounding a float32 input to this format (to nearest)."""
        return math.ldexp(1.0, -self.mantissa_bits - 1)

    @property
    def label(self) -> str:
        return {"tf32": "TF32", "hf32": "HF32"}.get(self.name, self.name)


IEEE = MathMode("ieee")


def tf32(setting: str = "", switch_off: str = "") -> MathMode:
    return MathMode("tf32", 10, setting, switch_off)


def hf32(setting: str = "", switch_off: str = "") -> MathMode:
    return MathMode("hf32", 11, setting, switch_off)


def half_products(dtype: str, setting: str = "", switch_off: str = "") -> MathMode:
    """float32 computed with float16 or bfloat16 products (``ACL_PRECISION_MODE`` allow_fp32_to_fp16)."""
    return MathMode(dtype, {"float16": 10, "bfloat16": 7}[dtype], setting, switch_off)


@dataclass(frozen=True)
class Float32Modes:
    """A device's float32 math mode per family of ops; IEEE float32 wherever none is reduced."""

    matmul: MathMode = IEEE
    conv: MathMode = IEEE
    rnn: MathMode = IEEE
    known: bool = True  # False where nothing tells (a dump judged offline records no mode)

    def for_family(self, family: str | None) -> MathMode:
        """The mode a float32 call of an op of this family ran in: IEEE for the ops no family covers."""
        return IEEE if family is None else getattr(self, family)

    @property
    def reduced(self) -> bool:
        return any(getattr(self, family).reduced for family in FAMILIES)

    def describe(self) -> str:
        return describe_modes(self.as_dict())

    def as_dict(self) -> dict[str, Any]:
        return {**{family: getattr(self, family).name for family in FAMILIES}, "known": self.known}


def describe_modes(modes: dict[str, Any]) -> str:
    """'float32 matmul ieee, conv tf32, rnn tf32' from Float32Modes.as_dict(); 'float32 ieee' when
    nothing is reduced. From the dict, so that the xdist controller says it as its workers sent it."""
    if not modes.get("known", True):
        return "float32 modes not recorded, taken as ieee"
    if all(modes.get(family, "ieee") == "ieee" for family in FAMILIES):
        return "float32 ieee"
    return "float32 " + ", ".join(f"{family} {modes.get(family, 'ieee')}" for family in FAMILIES)


# How a run judges float32 ops that ran in a reduced mode (--npu-precision-fp32).
POLICIES = {
    "as-run": "judge each case at the float32 mode its device ran in (TF32, HF32): a fair TF32 kernel passes",
    "ieee": "judge float32 against its own rounding: a case that ran in TF32 or HF32 fails, naming the mode",
    "run-ieee": "pin the device under test to IEEE float32 for the run (TF32 and HF32 off), judged as such",
}
DEFAULT_POLICY = "as-run"


# CANN's ACL_PRECISION_MODE values, and the half type each computes float32 matrix ops in (None: float32
# kept). torch_npu sets the option (torch_npu.npu.set_option) but has no getter, so a run is told it.
ACL_PRECISION_MODES = {
    "allow_fp32_to_fp16": "float16", "force_fp16": "float16", "allow_fp32_to_bf16": "bfloat16",
    "must_keep_origin_dtype": None, "force_fp32": None, "cube_fp16in_fp32out": None,
}
_BY_NAME = {"ieee": IEEE, "tf32": tf32(), "hf32": hf32(), "float16": half_products("float16"),
            "bfloat16": half_products("bfloat16")}


# The line that turns a declared mode off in training: TF32 on a GPU, HF32 on an NPU (each family its own
# switch; cuDNN's covers convolutions and RNNs), a half type through CANN's precision mode.
_CANN_OFF = "torch_npu.npu.set_option({'ACL_PRECISION_MODE': 'must_keep_origin_dtype'})"
_SWITCHES_OFF = {
    **{("tf32", family): switch for family, switch in (("matmul", "torch.backends.cuda.matmul.allow_tf32 = False"),
                                                        ("conv", "torch.backends.cudnn.allow_tf32 = False"),
                                                        ("rnn", "torch.backends.cudnn.allow_tf32 = False"))},
    **{("hf32", family): f"torch.npu.{'matmul' if family == 'matmul' else 'conv'}.allow_hf32 = False"
       for family in FAMILIES},
    **{(half, family): _CANN_OFF for half in ("float16", "bfloat16") for family in FAMILIES},
    **{("ieee", family): "" for family in FAMILIES},
}


def declared_modes(text: str) -> Float32Modes:
    """The modes a run is told (--npu-precision-fp32-modes): an ACL_PRECISION_MODE value, or
    FAMILY=MODE pairs such as ``conv=hf32,matmul=ieee``. ValueError names what is wrong and the fix."""
    setting = f"--npu-precision-fp32-modes {text}"
    if text in ACL_PRECISION_MODES:
        half = ACL_PRECISION_MODES[text]
        if half is None:
            return Float32Modes()
        mode = half_products(half, f"ACL_PRECISION_MODE {text!r} ({setting})", _CANN_OFF)
        return Float32Modes(matmul=mode, conv=mode)
    modes = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        family, equals, name = (part.strip() for part in pair.partition("="))
        if not equals or family not in FAMILIES or name not in _BY_NAME:
            raise ValueError(f"float32 modes {text!r}: {pair!r} is not FAMILY=MODE with FAMILY one of "
                             f"{', '.join(FAMILIES)} and MODE one of {', '.join(_BY_NAME)}; or give an "
                             f"ACL_PRECISION_MODE value ({', '.join(ACL_PRECISION_MODES)})")
        modes[family] = replace(_BY_NAME[name], setting=setting, switch_off=_SWITCHES_OFF[name, family])
    if not modes:
        raise ValueError(f"float32 modes {text!r} names no family: give FAMILY=MODE pairs such as conv=hf32")
    return Float32Modes(**modes)


def round_mantissa(tensor, bits: int):
    """A float32 tensor rounded to ``bits`` explicit mantissa bits, to nearest with ties to even, as
    TF32 (10) and HF32 (11) hold it; float32's exponent range is kept. Infs and NaNs pass unchanged."""
    import torch

    drop = FLOAT32_MANTISSA_BITS - bits
    if drop <= 0:
        return tensor
    x = tensor.to(torch.float32).contiguous()
    raw = x.view(torch.int32)
    halfway = (1 << (drop - 1)) - 1
    kept = (raw + halfway + ((raw >> drop) & 1)) & ~((1 << drop) - 1)
    return torch.where(torch.isfinite(x), kept.view(torch.float32), x)
