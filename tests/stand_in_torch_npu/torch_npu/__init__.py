"""A STAND-IN for torch_npu, for pytest-npuprecision's own tests: not Huawei's torch_npu, and it runs no op.

It mimics the parts of torch_npu that ``pytest_npuprecision.backends.npu`` touches, so that device
selection, the INF_NAN report and the error messages can be tested on a machine without an NPU:

- importing it renames torch's PrivateUse1 backend to ``npu`` and registers ``torch.npu``, as
  torch_npu does. The rename cannot be undone in a process: import this only in a subprocess, with
  this folder (tests/stand_in_torch_npu) on its PYTHONPATH.
- ``torch.npu`` (also ``torch_npu.npu``): is_available, device_count, current_device, set_device,
  get_device_name, synchronize, manual_seed, manual_seed_all; ``torch_npu.npu.utils.is_support_inf_nan()``;
  the HF32 switches ``torch.npu.matmul.allow_hf32`` (False) and ``torch.npu.conv.allow_hf32`` (True), as
  torch_npu's defaults are.
- ``__version__`` is "2.13.0.standin".

No kernel is registered: any tensor op on an npu tensor fails, and the few ``npu_*`` ops it names (for
the resolution of hooked ops) raise when called. Environment variables steer it, read
on every call (the first one at import):

    STAND_IN_NPU_IMPORT_ERROR   set: the import raises ImportError, like torch_npu on a broken CANN install
    STAND_IN_NPU_COUNT          how many NPUs are visible (default 8; 0: none)
    STAND_IN_NPU_INF_NAN        1: INF_NAN mode, 0: saturation mode; absent: utils has no
                                is_support_inf_nan (an older torch_npu), so callers fall back to
                                the INF_NAN_MODE_ENABLE environment variable

What it was asked, for tests to read: ``npu.standin_set_device_calls`` (every index set_device got)
and ``npu.standin_seeds`` (every seed manual_seed got).
"""

import os
import sys
import types

if os.environ.get("STAND_IN_NPU_IMPORT_ERROR"):
    # Before torch is touched, so a failed import leaves the process as it was.
    raise ImportError("libhccl.so: cannot open shared object file: No such file or directory "
                      "(stand-in torch_npu: STAND_IN_NPU_IMPORT_ERROR is set)")

import torch

__version__ = "2.13.0.standin"
DEVICE_NAME = "Ascend910B2-standin"

_current = {"index": 0}
standin_set_device_calls: list[int] = []
standin_seeds: list[int] = []


def device_count() -> int:
    return int(os.environ.get("STAND_IN_NPU_COUNT", "8"))


def is_available() -> bool:
    return device_count() > 0


def current_device() -> int:
    return _current["index"]


def _index_of(device) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    index = torch.device(device).index
    return current_device() if index is None else index


def set_device(device) -> None:
    index = _index_of(device)
    if not 0 <= index < device_count():
        raise RuntimeError(f"stand-in torch_npu: invalid device id {index} ({device_count()} visible)")
    standin_set_device_calls.append(index)
    _current["index"] = index


def get_device_name(device=None) -> str:
    _index_of(device)
    return DEVICE_NAME


def synchronize(device=None) -> None:
    """Nothing is ever queued."""


def manual_seed(seed: int) -> None:
    standin_seeds.append(int(seed))


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def _is_in_bad_fork() -> bool:  # torch.manual_seed seeds a registered device module through these two
    return False


def _is_support_inf_nan() -> bool:
    return os.environ["STAND_IN_NPU_INF_NAN"].strip() == "1"


def _utils_attribute(name: str):
    """``is_support_inf_nan`` exists only while STAND_IN_NPU_INF_NAN is set (PEP 562 module __getattr__)."""
    if name == "is_support_inf_nan" and os.environ.get("STAND_IN_NPU_INF_NAN") is not None:
        return _is_support_inf_nan
    raise AttributeError(f"module 'torch_npu.npu.utils' has no attribute {name!r}")


utils = types.ModuleType("torch_npu.npu.utils", "Stand-in torch_npu.npu.utils.")
utils.__getattr__ = _utils_attribute

npu = types.ModuleType("torch_npu.npu", "Stand-in torch.npu: device bookkeeping only, no kernels.")
for _function in (device_count, is_available, current_device, set_device, get_device_name, synchronize,
                  manual_seed, manual_seed_all, _is_in_bad_fork):
    setattr(npu, _function.__name__, _function)
npu.utils = utils
npu.matmul = types.SimpleNamespace(allow_hf32=False)
npu.conv = types.SimpleNamespace(allow_hf32=True)
npu.standin_set_device_calls = standin_set_device_calls
npu.standin_seeds = standin_seeds

def _kernel(name: str):
    """A torch_npu op as this stand-in has it: named, with no kernel behind it."""
    def op(*args, **kwargs):
        raise RuntimeError(f"stand-in torch_npu: {name} has no kernel")
    op.__name__ = name
    return op


# A few of the ops msprobe hooks: ones the harness has float64 references for, and ones it has none for.
for _name in ("npu_rms_norm", "npu_fusion_attention", "npu_grouped_matmul", "npu_quant_matmul",
              "npu_moe_token_permute", "npu_moe_token_unpermute", "npu_kronecker_quant", "npu_mm_reduce_scatter_base"):
    globals()[_name] = _kernel(_name)

sys.modules["torch_npu.npu"] = npu
sys.modules["torch_npu.npu.utils"] = utils
torch.utils.rename_privateuse1_backend("npu")
torch._register_device_module("npu", npu)  # torch.npu, as torch_npu registers it
