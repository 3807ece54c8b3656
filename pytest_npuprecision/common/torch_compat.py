"""Every use of a torch API newer than the oldest torch the plugin supports (2.1), each with its fallback.

torch_npu pins the torch of each of its releases (2.1, 2.3, 2.4, 2.5, ...), so the plugin runs on
all of them. Each entry names the torch version that added what it wraps; the fallback does what
that version's torch does, or tells the caller that this torch cannot.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
import warnings
from typing import Any, Callable, Iterator

import torch

OLDEST = (2, 1)


def _release(version: str) -> tuple[int, int]:
    """'2.5.1+cpu' -> (2, 5)."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


TORCH = _release(torch.__version__)


class UnsupportedEnvironment(RuntimeError):
    """This torch (or its numpy) cannot run the plugin; the message says what to install."""


def check_environment() -> None:
    """Raise UnsupportedEnvironment for a torch older than OLDEST, or one that cannot use the numpy
    installed beside it (torch 2.1 and 2.2 were built against numpy 1: with numpy 2 every
    ``tensor.numpy()`` raises "Numpy is not available")."""
    if TORCH < OLDEST:
        raise UnsupportedEnvironment(f"pytest-npuprecision needs torch {OLDEST[0]}.{OLDEST[1]} or later, and this is "
                                     f"torch {torch.__version__}: install a newer torch (or torch_npu release)")
    try:
        torch.zeros(1).numpy()
    except RuntimeError as exc:
        import numpy

        raise UnsupportedEnvironment(f"torch {torch.__version__} cannot use the installed numpy {numpy.__version__} "
                                     f"(torch says: {exc}): install 'numpy<2' beside this torch") from None


def default_device() -> torch.device:
    """torch.get_default_device() (2.3). Before it, a device context was a mode that factory calls
    obey, so a factory call shows where they land."""
    getter = getattr(torch, "get_default_device", None)
    return getter() if getter is not None else torch.empty(0).device


def is_compiling() -> bool:
    """torch.compiler.is_compiling() (2.3). Before it, torch._dynamo.is_compiling(); torch._dynamo is
    imported on first use of torch.compile, so a process that has not imported it compiles nothing."""
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and hasattr(compiler, "is_compiling"):
        return compiler.is_compiling()
    dynamo = sys.modules.get("torch._dynamo")
    return bool(dynamo is not None and dynamo.is_compiling())


def fp32_precision(path: str) -> str | None:
    """torch.backends.PATH.fp32_precision (2.9: one float32 switch per backend, "ieee", "tf32" or "bf16"),
    where "none" inherits from the module above (cudnn.conv from cudnn, then torch.backends): the
    precision the library actually gets. None before 2.9, where only the older flags exist
    (allow_tf32, torch.get_float32_matmul_precision)."""
    if not hasattr(getattr(torch.backends.cudnn, "conv", None), "fp32_precision"):
        return None
    parts = path.split(".")
    while parts:
        module = torch.backends
        for part in parts:
            module = getattr(module, part, None)
        value = getattr(module, "fp32_precision", "none")
        if value != "none":
            return value
        parts.pop()
    return "ieee"


@contextlib.contextmanager
def _torchs_own_deprecations() -> Iterator[None]:
    """Silences the deprecation warnings torch 2.1 and 2.2 raise against themselves: listing the
    overridable functions reads torch.has_cuda and the like, and torch.load uses TypedStorage."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"'has_\w+' is deprecated", category=UserWarning)
        warnings.filterwarnings("ignore", message="TypedStorage is deprecated", category=UserWarning)
        yield


def overridable_functions() -> dict[Any, list[Any]]:
    """torch.overrides.get_overridable_functions(), without torch 2.1's warnings against itself."""
    with _torchs_own_deprecations():
        return torch.overrides.get_overridable_functions()


@functools.lru_cache(maxsize=1)
def testing_overrides() -> dict[Any, Any]:
    """torch.overrides.get_testing_overrides(), without torch 2.1's warnings against itself."""
    with _torchs_own_deprecations():
        return torch.overrides.get_testing_overrides()


def load_tensors(path: Any, **kwargs: Any) -> Any:
    """torch.load(path, weights_only=True), without torch 2.1's warnings against itself."""
    with _torchs_own_deprecations():
        return torch.load(path, weights_only=True, **kwargs)


# The qualname prefix of Tensor methods: "_TensorBase." up to torch 2.2, "TensorBase." from 2.3.
TENSOR_METHOD_PREFIXES = ("TensorBase.", "_TensorBase.", "Tensor.")


# Float dtypes of later torches than 2.1 (float8_e4m3fnuz and float8_e5m2fnuz came in 2.2,
# float8_e8m0fnu in 2.7): the tables may name them on any torch.
LATER_FLOAT_DTYPES = ("float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")


def rms_norm(input: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None,
             eps: float | None = None) -> torch.Tensor:
    """torch.nn.functional.rms_norm (2.4); before it, the same formula, in the input's dtype."""
    native = getattr(torch.nn.functional, "rms_norm", None)
    if native is not None:
        return native(input, normalized_shape, weight, eps)
    dims = tuple(range(-len(normalized_shape), 0))
    eps = torch.finfo(input.dtype).eps if eps is None else eps
    out = input * torch.rsqrt(input.square().mean(dims, keepdim=True) + eps)
    return out if weight is None else out * weight


def rms_norm_eps(input_dtype: torch.dtype, given: float | None) -> float:
    """The eps rms_norm's kernel adds for an input of ``input_dtype``: the golden must add the same.

    From torch 2.7 (pytorch#142848) the kernel computes in float32 for half inputs and adds a given
    eps, or float32's, in float32. torch 2.4 to 2.6 held eps in the input's own dtype: a given eps
    rounded to it, and the input dtype's eps by default (float16's 9.8e-4, not float32's 1.2e-7).
    """
    half = input_dtype in (torch.float16, torch.bfloat16)
    compute = input_dtype if TORCH < (2, 7) or not half else torch.float32
    value = torch.finfo(compute).eps if given is None else given
    return torch.tensor(value, dtype=compute).item() if compute != torch.float64 else float(value)


# ---------------------------------------------------------------- kernels older torches lack


@functools.lru_cache(maxsize=None)
def _has_kernel(name: str, dtype: torch.dtype, device_type: str) -> bool:
    """Whether torch.<name> runs for ``dtype`` on this device type (torch 2.1's CPU lacks float16
    aminmax and nextafter)."""
    probe = torch.zeros(2, dtype=dtype, device=device_type)
    try:
        getattr(torch, name)(*([probe, probe] if name == "nextafter" else [probe]))
    except (RuntimeError, NotImplementedError):
        return False
    return True


def aminmax(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.aminmax, computed in float32 where this torch has no kernel for the dtype (exact: a
    wider float holds every value of a narrower one)."""
    if _has_kernel("aminmax", t.dtype, t.device.type):
        return torch.aminmax(t)
    low, high = torch.aminmax(t.to(torch.float32))
    return low.to(t.dtype), high.to(t.dtype)


def nextafter(t: torch.Tensor, towards: torch.Tensor) -> torch.Tensor:
    """torch.nextafter; where this torch has no kernel for a 16-bit float, the next value found by
    stepping its bit pattern, as the kernel does."""
    if _has_kernel("nextafter", t.dtype, t.device.type):
        return torch.nextafter(t, towards)
    bits = t.view(torch.int16).to(torch.int32)
    smallest = torch.ones_like(bits)  # the smallest subnormal's pattern, signed below
    up = (towards > t) == (t > 0)  # moving away from zero adds one to the magnitude's pattern
    stepped = torch.where(t == 0, torch.where(towards > 0, smallest, smallest | 0x8000),
                          torch.where(up, bits + 1, bits - 1))
    result = torch.where(stepped > 0x7FFF, stepped - 0x10000, stepped).to(torch.int16).view(t.dtype)
    return torch.where((t == towards) | t.isnan() | towards.isnan(), torch.where(t.isnan(), t, towards), result)


# ---------------------------------------------------------------- kernels an op lacks on this torch

# The message torch gives for a dtype a kernel is not built for: '"addmm_impl_cpu_" not implemented for
# 'Half'', or without quotes ('grid_sampler_2d_cpu not implemented for Half').
_NOT_IMPLEMENTED = re.compile(r"\"?(?P<kernel>[\w:]+)\"? not implemented for '?(?P<dtype>Half|BFloat16|Float|Double|"
                             r"Complex(?:Half|Float|Double)|Float8_\w+|Byte|Char|Short|Int|Long|Bool|UInt\d+)'?(?!\w)")


def missing_kernel(op: str, side: str, cause: BaseException | None) -> str | None:
    """Why ``op`` cannot run on ``side`` ("device (cpu)") when ``cause`` is torch saying it has no
    kernel there for a dtype; None for any other error."""
    gap = kernel_gap(cause)
    if gap is None:
        return None
    kernel, dtype = gap
    return f"{op} has no {dtype} kernel on the {side} in torch {torch.__version__} (\"{kernel}\" not implemented for '{dtype}')"


# Functions that came after the oldest torch: an op case of one is skipped on an older torch, and so is
# a test that calls one (tests/conftest.py).
ADDED_IN = {"rms_norm": (2, 4), "unravel_index": (2, 2)}


def optional(module: Any, name: str) -> Callable[..., Any]:
    """``module.name``; where this torch lacks it (F.rms_norm before 2.4), a stand-in that raises, when
    called, the AttributeError a direct use would: a table that names the op still imports."""
    found = getattr(module, name, None)
    if found is not None:
        return found

    def lacking(*args: Any, **kwargs: Any) -> Any:
        raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}", name=name, obj=module)

    lacking.__name__ = name
    return lacking


def kernel_gap(cause: BaseException | None) -> tuple[str, str] | None:
    """(kernel, dtype) when ``cause`` is torch saying it has no kernel for a dtype, else None."""
    found = _NOT_IMPLEMENTED.search(str(cause)) if isinstance(cause, (RuntimeError, NotImplementedError)) else None
    return None if found is None else (found["kernel"], found["dtype"])


def newer_op(api_name: str) -> str | None:
    """Why an op this torch does not know is skipped rather than a misspelling: it came in a later torch."""
    name = api_name.rsplit(".", 1)[-1]
    added = ADDED_IN.get(name)
    if added is None or TORCH >= added:
        return None
    return f"{api_name} came in torch {added[0]}.{added[1]}; this is torch {torch.__version__}"


def lacking(exc: BaseException) -> str | None:
    """What this torch lacks, where ``exc`` says it: a function that came in a later torch (the
    AttributeError optional's stand-in raises), or a kernel not built for a dtype; None for any other error."""
    if isinstance(exc, AttributeError):
        module = getattr(exc.obj, "__name__", "") if exc.obj is not None else ""
        return newer_op(f"{module}.{exc.name}") if module.startswith("torch") else None
    gap = kernel_gap(exc)
    return None if gap is None else f"torch {torch.__version__} has no {gap[1]} kernel \"{gap[0]}\""
