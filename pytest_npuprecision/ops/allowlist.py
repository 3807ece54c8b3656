"""Which names from a dump or an op case may reach a callable: tensor operators, and nothing else.

A dump is untrusted data, and ``torch``, ``torch.Tensor`` and ``torch_npu`` re-export file I/O,
process control and Python internals. So a name resolves only when torch itself lists it as an
operator: its table of overridable functions (``torch.overrides.get_overridable_functions``, which
covers ``torch``, ``torch.nn.functional``, ``torch.Tensor`` and the linalg, fft and special
namespaces), a few tensor factories torch leaves out of that table, ``torch.ops.aten`` overloads and
torch_npu's registered ``npu_*`` operators. Names that read or write files, touch the process or
are Python protocol methods are denied even where torch lists them.
"""

from __future__ import annotations

import re
from functools import lru_cache
from types import ModuleType
from typing import Any

import torch

from ..common import overridable_functions

# Tensor dunders that are operators; every other dunder is Python protocol (__reduce_ex__, __setstate__...).
_BINARY = ("add", "sub", "mul", "matmul", "truediv", "floordiv", "div", "mod", "pow", "and", "or", "xor",
           "lshift", "rshift")
OPERATOR_DUNDERS = frozenset(
    [f"__{op}__" for op in _BINARY] + [f"__r{op}__" for op in _BINARY] + [f"__i{op}__" for op in _BINARY]
    + [f"__{op}__" for op in ("neg", "pos", "abs", "invert", "eq", "ne", "lt", "le", "gt", "ge", "getitem",
                              "setitem", "bool", "nonzero", "float", "int", "index", "len", "contains")]
)

# Operators torch keeps out of its overridable table (they take no tensor to dispatch on, or are
# deprecated aliases) but that msprobe hooks and that only compute.
_UNLISTED_OPERATORS = frozenset({
    "arange", "range", "linspace", "logspace", "eye", "full", "ones", "zeros", "empty", "empty_strided",
    "empty_permuted", "scalar_tensor", "tensor", "as_tensor", "asarray", "as_strided", "tril_indices",
    "triu_indices", "bartlett_window", "blackman_window", "hamming_window", "hann_window", "kaiser_window",
    "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "normal",
    "sigmoid", "tanh", "hardsigmoid", "hardswish", "upsample", "upsample_bilinear", "upsample_nearest",
    "unflatten", "vander", "grouped_mm", "scaled_mm", "scaled_grouped_mm", "fft_fftfreq", "fft_rfftfreq",
    "fill", "segment_reduce", "index_put_", "_softmax_backward_data", "_log_softmax_backward_data",
})
_UNLISTED_FUNCTIONAL = frozenset({"sigmoid", "tanh", "hardsigmoid", "hardswish", "upsample", "upsample_bilinear",
                                  "upsample_nearest"})

# Substrings of names that reach files, the process, storage sharing, hooks or autograd's engine.
_DENIED_WORDS = ("load", "save", "file", "storage", "share_memory", "hook", "pickle", "dump", "print",
                 "profil", "register", "compile", "export", "script", "seed", "set_default", "tolist",
                 "numpy", "pin_memory", "data_ptr", "fork")
# Tensor methods torch lists as overridable that change global state or are not computations.
_DENIED_NAMES = frozenset({"backward", "set_", "requires_grad_", "retain_grad", "detach_", "resize_", "resize_as_",
                           "record_stream", "apply_", "map_", "map2_", "new", "module_load"})

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# The namespaces of torch's overridable table, by the dotted prefix a dump or an op case writes.
_NAMESPACES = {"": "torch", "nn.functional": "torch.nn.functional", "linalg": "torch.linalg",
               "fft": "torch.fft", "special": "torch.special"}


def denied(name: str) -> str | None:
    """Why an operator name is refused whatever namespace lists it, or None."""
    if name.startswith("__") and name.endswith("__"):
        return None if name in OPERATOR_DUNDERS else "it is a Python protocol method, not an operator"
    lowered = name.lower()
    word = next((w for w in _DENIED_WORDS if w in lowered), None)
    # torch.hub as a whole word: a substring would deny huber_loss
    if word is not None or "hub" in lowered.split("_") or name in _DENIED_NAMES:
        return "it reads or writes files, touches the process or changes global state, not a tensor computation"
    return None


@lru_cache(maxsize=1)
def _operators() -> dict[str, frozenset[Any]]:
    """The operator objects of each namespace ("torch", "torch.nn.functional", "torch.Tensor", ...).

    Kept as objects, not names: torch's C functions carry other names (``torch.linalg.inv`` is
    ``linalg_inv``), and what a dump names must be the very object torch lists.
    """
    table: dict[str, set[Any]] = {}
    for namespace, functions in overridable_functions().items():
        if isinstance(namespace, ModuleType):
            key = "torch" if namespace.__name__ == "torch.functional" else namespace.__name__
        elif namespace is torch.Tensor:
            key = "torch.Tensor"
        else:
            continue  # properties of Tensor (shape, grad, ...): not callable operators
        table.setdefault(key, set()).update(functions)
    for key, names in (("torch", _UNLISTED_OPERATORS), ("torch.nn.functional", _UNLISTED_FUNCTIONAL)):
        module = _module(key)
        table[key].update(getattr(module, name) for name in names if hasattr(module, name))
    return {key: frozenset(objects) for key, objects in table.items()}


def torch_operator(dotted: str) -> tuple[Any | None, str | None]:
    """``torch.<dotted>`` (``matmul``, ``linalg.inv``, ``nn.functional.gelu``): (callable, None) or (None, why)."""
    namespace, _, name = dotted.rpartition(".")
    module = _NAMESPACES.get(namespace)
    if module is None:
        return None, f"torch.{namespace} is not an operator namespace (torch, linalg, fft, special, nn.functional)"
    return _listed(module, name)


def functional_operator(name: str) -> tuple[Any | None, str | None]:
    return _listed("torch.nn.functional", name)


def tensor_operator(name: str) -> tuple[Any | None, str | None]:
    return _listed("torch.Tensor", name)


def _listed(namespace: str, name: str) -> tuple[Any | None, str | None]:
    if not _NAME.fullmatch(name):
        return None, f"{name!r} is not an operator name"
    why = denied(name)
    if why is not None:
        return None, why
    root: Any = torch.Tensor if namespace == "torch.Tensor" else _module(namespace)
    found = getattr(root, name, None)
    # torch lists ``relu`` but not its in-place ``relu_``, in torch and in torch.nn.functional alike.
    listed = _is_listed(namespace, found) or (
        name.endswith("_") and any(_is_listed(n, getattr(_module(n), name[:-1], None)) for n in (namespace, "torch")))
    if not listed or not callable(found) or isinstance(found, type):
        return None, f"{namespace}.{name} is not a known operator of this torch {torch.__version__}"
    return found, None


def _is_listed(namespace: str, found: Any) -> bool:
    try:
        return found in _operators().get(namespace, ())
    except TypeError:  # unhashable: no function
        return False


def _module(namespace: str) -> Any:
    module: Any = torch
    for part in namespace.split(".")[1:]:
        module = getattr(module, part)
    return module


def aten_operator(name: str) -> tuple[Any | None, str | None]:
    """``torch.ops.aten.<packet>`` or ``<packet>.<overload>``: only registered operator overloads."""
    parts = name.split(".")
    if len(parts) > 2 or not all(_NAME.fullmatch(p) and not p.startswith("__") for p in parts):
        return None, f"{name!r} is not an aten operator name ('<op>' or '<op>.<overload>')"
    why = denied(parts[0])
    if why is not None:
        return None, why
    try:
        packet = getattr(torch.ops.aten, parts[0])
    except (AttributeError, RuntimeError):
        return None, f"aten has no operator {parts[0]!r} in this torch {torch.__version__}"
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return None, f"aten.{parts[0]} is not an operator"
    if len(parts) == 1:
        return packet, None
    overload = getattr(packet, parts[1], None) if parts[1] in packet.overloads() else None
    if overload is None:
        return None, f"aten.{parts[0]} has no overload {parts[1]!r}"
    return overload, None


# torch_npu operators msprobe hooks whose names lack the npu_ prefix.
_NPU_OPS_WITHOUT_PREFIX = frozenset({"fast_gelu", "one_"})


def npu_operator(torch_npu: ModuleType, name: str) -> tuple[Any | None, str | None]:
    """torch_npu's ``npu_*`` operators, top level or in a ``torch.ops`` namespace (``atb.npu_mla_preprocess``)."""
    parts = name.split(".")
    if len(parts) > 2 or not all(_NAME.fullmatch(p) and not p.startswith("__") for p in parts):
        return None, f"{name!r} is not an NPU operator name"
    op = parts[-1]
    if not op.lstrip("_").startswith("npu_") and op not in _NPU_OPS_WITHOUT_PREFIX:
        return None, f"{name!r} is not one of torch_npu's npu_* operators"
    why = denied(op)
    if why is not None:
        return None, why
    namespaces = [torch.ops.npu] if len(parts) == 1 else []
    if len(parts) == 2:
        try:
            namespaces.append(getattr(torch.ops, parts[0]))
        except (AttributeError, RuntimeError):
            pass
    for namespace in namespaces:
        try:
            found = getattr(namespace, op)
        except (AttributeError, RuntimeError):
            continue
        if isinstance(found, torch._ops.OpOverloadPacket):
            return found, None
    found = getattr(torch_npu, op, None) if len(parts) == 1 else None
    if callable(found) and not isinstance(found, (type, ModuleType)):
        return found, None
    return None, None


# ``Tensor.type("torch.FloatTensor")`` imports the dotted name it is given: only tensor type names pass.
_TENSOR_TYPE = re.compile(r"torch\.(cuda\.|npu\.)?[A-Z][A-Za-z]*Tensor")


def unsafe_argument(op: str, args: tuple, kwargs: dict) -> str | None:
    """Why a string argument would make ``op`` do more than compute, or None."""
    if op != "type":
        return None
    for value in (*args, *kwargs.values()):
        if isinstance(value, str) and not _TENSOR_TYPE.fullmatch(value):
            return f"Tensor.type({value!r}) would import that name; only tensor type names such as torch.FloatTensor run"
    return None
