"""The msprobe name of a call that torch's function mode hands us, or None for a call msprobe would not
record (metadata reads, plumbing, constant factories).

Names are ``Functional.<name>``, ``Torch.<name>``, ``Tensor.<name>`` and ``NPU.<name>``. Python
operators reach the mode as the plain method (``x + y`` arrives as ``TensorBase.add``); the opcode the
caller is executing tells which, so ``x + y`` is named ``Tensor.__add__`` and ``x.add(y)`` ``Tensor.add``.
"""

from __future__ import annotations

import dis
import functools
import sys
from types import FrameType, FunctionType
from typing import Any, Callable

import torch
import torch.nn.functional as F

from ..common import TENSOR_METHOD_PREFIXES

# Calls that read or move metadata, or only re-label memory: msprobe skips them too, and a precision check
# has nothing to judge in them.
_NOT_RECORDED = frozenset({
    "size", "dim", "stride", "numel", "nelement", "element_size", "item", "tolist", "data_ptr", "storage_offset",
    "is_contiguous", "is_floating_point", "is_complex", "is_signed", "is_set_to", "is_nonzero", "is_same_size",
    "untyped_storage", "storage", "get_device", "has_names", "ndimension", "dim_order",
    "view", "contiguous", "clone", "copy_", "detach", "detach_", "requires_grad_", "retain_grad", "register_hook",
    "backward", "new_zeros", "new_ones", "new_empty", "new_tensor", "cpu", "cuda", "numpy", "__getitem__",
    "__len__", "__iter__", "__repr__", "__format__", "__hash__", "__index__", "__reduce_ex__", "__deepcopy__",
    "__array__", "__contains__", "__dlpack__", "__neg__", "__get__", "__set__",
    # constant or random factories: nothing goes in, so nothing can be imprecise
    "ones", "zeros", "empty", "empty_like", "ones_like", "zeros_like", "rand", "randn", "randint", "randperm",
    "rand_like", "randn_like", "randint_like", "tensor", "as_tensor", "from_numpy", "empty_strided", "scalar_tensor",
    "manual_seed", "get_default_dtype", "is_tensor", "is_grad_enabled", "is_autocast_enabled",
})

# BINARY_OP's argument -> the Tensor dunder it calls (CPython's NB_* order, Include/opcode.h).
_BINARY_OPS = ("__add__", "__and__", "__floordiv__", "__lshift__", "__matmul__", "__mul__", "__mod__", "__or__",
               "__pow__", "__rshift__", "__sub__", "__truediv__", "__xor__",
               "__iadd__", "__iand__", "__ifloordiv__", "__ilshift__", "__imatmul__", "__imul__", "__imod__",
               "__ior__", "__ipow__", "__irshift__", "__isub__", "__itruediv__", "__ixor__")
_COMPARE_OPS = {"<": "__lt__", "<=": "__le__", "==": "__eq__", "!=": "__ne__", ">": "__gt__", ">=": "__ge__"}
# The method each dunder arrives as; an operator is only renamed when the method matches.
_DUNDER_METHOD = {
    "__add__": "add", "__and__": "bitwise_and", "__floordiv__": "floor_divide", "__lshift__": "__lshift__",
    "__matmul__": "matmul", "__mul__": "mul", "__mod__": "remainder", "__or__": "bitwise_or", "__pow__": "pow",
    "__rshift__": "__rshift__", "__sub__": "sub", "__truediv__": "div", "__xor__": "bitwise_xor",
    "__lt__": "lt", "__le__": "le", "__eq__": "eq", "__ne__": "ne", "__gt__": "gt", "__ge__": "ge",
}


def api_name(func: Callable[..., Any], caller: FrameType | None) -> str | None:
    """``Functional.gelu`` for F.gelu; None for a call that is not recorded."""
    name = getattr(func, "__name__", None)
    if not isinstance(name, str) or name in _NOT_RECORDED:
        return None
    module = getattr(func, "__module__", None) or ""
    if module.startswith("torch_npu"):
        return f"NPU.{name}"
    if isinstance(func, FunctionType) and not module.startswith("torch"):
        return _custom(func)
    if getattr(F, name, None) is func:
        return None if name.startswith("_") else f"Functional.{name}"
    qualname = getattr(func, "__qualname__", "") or ""
    if qualname.startswith(TENSOR_METHOD_PREFIXES):
        operator = _operator(name, caller)
        if operator is not None:
            return f"Tensor.{operator}"
        return None if _private(name) else f"Tensor.{name}"
    if getattr(torch, name, None) is func and not name.startswith("_"):
        return f"Torch.{name}"
    return None


def _custom(func: Callable[..., Any]) -> str | None:
    """A function registered with register_op that reaches the mode (``torch.overrides.wrap_torch_function``
    makes a Python function do so) is recorded whole, as ``Custom.<name>``, which the harness resolves."""
    from ..ops import name_of

    name = name_of(func)
    return f"Custom.{name}" if name is not None else None


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _operator(method: str, caller: FrameType | None) -> str | None:
    """The dunder a Python operator in the caller's current instruction maps ``method`` to, if any."""
    if caller is None:
        return None
    opname, arg = _instruction(caller.f_code, caller.f_lasti)
    if opname == "BINARY_OP" and isinstance(arg, int) and arg < len(_BINARY_OPS):
        dunder = _BINARY_OPS[arg]
    elif opname == "COMPARE_OP":
        dunder = _COMPARE_OPS.get(str(arg))
    else:
        return None
    plain = dunder.replace("__i", "__", 1) if dunder.startswith("__i") and dunder != "__iter__" else dunder
    expected = _DUNDER_METHOD.get(plain)
    if expected is None:
        return None
    inplace = dunder != plain
    return dunder if method == (expected + "_" if inplace else expected) or method == dunder else None


@functools.lru_cache(maxsize=4096)
def _instruction(code, offset: int) -> tuple[str | None, Any]:
    found = None  # f_lasti may point into the instruction's inline cache entries
    for instruction in dis.get_instructions(code):
        if instruction.offset > offset:
            break
        found = instruction
    if found is None:
        return None, None
    return found.opname, (found.argrepr if found.opname == "COMPARE_OP" else found.arg)


def caller_frame(depth: int) -> FrameType | None:
    try:
        return sys._getframe(depth + 1)
    except ValueError:
        return None
