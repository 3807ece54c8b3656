"""Resolve msprobe API names (``Functional.gelu``, ``Tensor.__add__``, ``Aten.add.Tensor``) to callables.

Resolution never raises: a name that cannot be run comes back with ``unsupported`` set to a reason,
which the plugin turns into a skip for that one case. Each name resolves once per process.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Literal

import torch

from . import allowlist, namesakes, registry

OpKind = Literal["function", "method"]

# Binary operators that have reflected (``__radd__``) and in-place (``__iadd__``) dunder forms.
_BINARY_DUNDERS = frozenset({
    "add", "sub", "mul", "matmul", "truediv", "floordiv", "div", "mod", "pow",
    "and", "or", "xor", "lshift", "rshift",
})

# msprobe prefixes that name something other than a single op we can call (section 1.5, C6).
_NOT_SINGLE_OPS = {
    "VF": "torch._VF internals (lstm, gru, ...) are not public ops; test the Functional or Torch op instead",
    "Distributed": "collective communication ops need a process group",
    "Module": "module entries cover a whole nn.Module, not a single op",
}
# torch's private multi-tensor kernels (an optimizer's fused step, its foreach norms) that msprobe records
# under Torch; torch lists them under aten only, where they resolve.
_ATEN_ONLY = ("_fused_", "_foreach_")


@dataclass(frozen=True)
class ResolvedOp:
    """One msprobe API name and what calling it means.

    For ``kind == "method"`` the callable is the unbound ``torch.Tensor`` method, so the tensor the
    method was called on is ``args[0]`` and every op is called the same way: ``func(*args, **kwargs)``.
    """

    api_name: str  # "Tensor.__add__", as in the dump, without call index and direction
    func: Callable[..., Any] | None
    kind: OpKind = "function"
    inplace: bool = False  # writes into args[0] (``add_``, ``__iadd__``, ``__setitem__``)
    unsupported: str | None = None
    # The skip reason a case of it gives when it cannot run: unsupported-op, or no-reference (a torch_npu
    # or MindSpeed op with no float64 reference here), or needs-process-group.
    unsupported_reason: str = "unsupported-op"
    reference: Callable[..., Any] | None = None  # a registered custom op's golden (default: func itself)
    like: str | None = None  # a registered custom op's built-in twin, whose table rows apply
    standard: str | None = None  # a registered custom op's forward standard
    # msprobe names torch.linalg.svd and torch.svd both Torch.svd: the functions this name may be, of
    # which a dump case chooses one by its recorded arguments (namesakes.choose); func is torch.<name>.
    namesakes: tuple[tuple[str, Callable[..., Any]], ...] = ()

    @property
    def prefix(self) -> str:
        return self.api_name.partition(".")[0]

    @property
    def name(self) -> str:
        """The name after the prefix: ``__add__``, ``linalg.inv``, ``add.Tensor``."""
        return self.api_name.partition(".")[2]

    @property
    def base_name(self) -> str:
        """The op with in-place, reflected and dunder spellings removed: ``__rmatmul__`` -> ``matmul``."""
        return self.like or base_name(self.api_name)

    def own_rules(self, rules: Any) -> Any:
        """``rules`` (precision.rules.Rules) as they judge this op: a user's op by its own standard, or by
        the table row of the op it is like; every other op as they are."""
        if not (self.like or self.standard):
            return rules
        from .catalogue import judged_like  # lazy: the catalogue reads the bounds' and fused tables

        return judged_like(rules, self.api_name, self.like, standard=self.standard)

    @property
    def reflected(self) -> bool:
        """``__radd__`` style: ``args[0]`` is the right-hand operand."""
        inner = _dunder_inner(self.name)
        return inner is not None and inner not in _BINARY_DUNDERS and inner[0] == "r" and inner[1:] in _BINARY_DUNDERS


def _dunder_inner(name: str) -> str | None:
    if len(name) > 4 and name.startswith("__") and name.endswith("__"):
        return name[2:-2]
    return None


def op_segment(api_name: str) -> str:
    """The op's own segment of an API name, as spelled: ``Tensor.add_`` -> ``add_``, ``Aten.mm.default`` -> ``mm``."""
    prefix, _, rest = api_name.partition(".")
    # Aten names are "packet.overload" (add.Tensor); elsewhere dots are namespaces (linalg.inv).
    return rest.split(".")[0] if prefix == "Aten" else rest.split(".")[-1]


def base_name(api_name: str) -> str:
    """The bare op name used for per-op tables: ``Tensor.add_`` -> ``add``, ``Aten.mm.default`` -> ``mm``."""
    segment = op_segment(api_name)
    inner = _dunder_inner(segment)
    if inner is not None:
        if inner in _BINARY_DUNDERS:
            return inner
        if inner[:1] in ("r", "i") and inner[1:] in _BINARY_DUNDERS:
            return inner[1:]
        return inner
    return segment[:-1] if segment.endswith("_") and not segment.endswith("__") else segment


def is_inplace(api_name: str) -> bool:
    """Whether the call writes into its first argument (``add_``, ``__iadd__``, ``__setitem__``)."""
    segment = op_segment(api_name)
    inner = _dunder_inner(segment)
    if inner is not None:
        return inner == "setitem" or (inner[:1] == "i" and inner[1:] in _BINARY_DUNDERS)
    return segment.endswith("_")


@lru_cache(maxsize=1)
def _torch_npu() -> tuple[Any | None, str | None]:
    """Import torch_npu once, lazily, only when an NPU op is resolved."""
    try:
        return importlib.import_module("torch_npu"), None
    except Exception as exc:  # a broken CANN setup raises more than ImportError
        return None, f"{type(exc).__name__}: {exc}"


def _unsupported(api_name: str, reason: str, code: str = "unsupported-op") -> ResolvedOp:
    return ResolvedOp(api_name=api_name, func=None, unsupported=f"unsupported: {api_name}: {reason}",
                      unsupported_reason=code)


def _registered(api_name: str, name: str) -> ResolvedOp | None:
    """A custom op registered under ``name`` (see ops.registry), named ``api_name`` here: judged as its
    ``like``, or else as its reference where that is an op the catalogue knows."""
    custom = registry.registered_op(name)  # the registry loads entry points on its first use
    if custom is None:
        return None
    return ResolvedOp(api_name=api_name, func=custom.fn, reference=custom.reference,
                      like=custom.like or reference_like(custom.reference), standard=custom.standard)


def operator_name(fn: Any) -> str | None:
    """The msprobe name of a torch operator given as a function: torch.matmul -> Torch.matmul; None for
    any other callable."""
    name = getattr(fn, "__name__", "")
    if not isinstance(name, str) or not name:
        return None
    if fn is getattr(torch.nn.functional, name, None):  # some are C functions of another module
        return f"Functional.{name}"
    if fn is getattr(torch, name, None):
        return f"Torch.{name}"
    if fn is getattr(torch.Tensor, name, None):
        return f"Tensor.{name}"
    short = name.removeprefix("linalg_")  # msprobe names torch.linalg.svd (linalg_svd) Torch.svd
    if fn is getattr(torch.linalg, short, None):  # and the ones it does not hook by their namespace
        return f"Torch.{short}" if short in namesakes.LINALG else f"Torch.linalg.{short}"
    return None


def reference_like(reference: Any) -> str | None:
    """The catalogue name a user's op is judged as when its reference is an op the catalogue knows
    (torch.prod, a torch_npu op's fused reference): that op's record then bounds it, as ``like=``
    would. None for any other reference."""
    if reference is None:
        return None
    from .catalogue import catalogue  # lazy: the catalogue reads the bounds' and fused tables

    fused = catalogue().of_reference(reference)
    if fused is not None:
        return fused.name
    name = operator_name(reference)
    return None if name is None else base_name(name)


@lru_cache(maxsize=None)
def resolve(api_name: str) -> ResolvedOp:
    """Map an msprobe API name to its callable; never raises (see ``ResolvedOp.unsupported``).

    A name registered with ``register_op`` wins as written (``my_op``, ``NPU.my_op``); ``Custom.<name>``
    is always a registered op; under another prefix a registered bare name stands in where torch
    (or torch_npu) has no such op.
    """
    custom = _registered(api_name, api_name)
    if custom is not None:
        return custom
    prefix, _, name = api_name.partition(".")
    if prefix == "Custom" and name:
        return _registered(api_name, name) or _unsupported(
            api_name, f"no custom op {name!r} is registered: call register_op({name!r}, fn) in a conftest.py "
                      f"or a package's pytest_npuprecision.ops entry point")
    found = _resolve_builtin(api_name, prefix, name)
    if found.unsupported and name and prefix not in _NOT_SINGLE_OPS:
        return _registered(api_name, name) or found
    return found


registry.on_change(resolve.cache_clear)  # a registration changes what a name means


def _npu(api_name: str, name: str) -> ResolvedOp:
    """A torch_npu op: its golden is the float64 reference of fused/, whether torch_npu imports or
    not (torch_npu has no CPU or float64 kernels for its fused ops). Without torch_npu it cannot run
    live, yet an offline check (the dumped device) still judges it against the reference."""
    from .catalogue import op_record  # lazy: only dumps with NPU ops need the references

    record = op_record(name)
    if record.reference is None and record.unjudged is None and name.endswith("_"):
        record = op_record(name[:-1])  # the in-place spelling (npu_scatter_nd_update_): judged by its result
    if record.unjudged is not None:  # a collective or a workspace query: nothing a golden computes
        return _unsupported(api_name, record.unjudged[1], record.unjudged[0])
    reference = None if record.reference is None else record.reference.reference
    if reference is None:  # live or offline, torch_npu or not: no float64 golden to judge it against
        return _unsupported(api_name, _no_reference(f"torch_npu's {name}", name), "no-reference")
    module, problem = _torch_npu()
    if module is None:
        found = _unsupported(api_name, f"torch_npu is not installed or does not import ({problem}); check its "
                                       f"recorded results offline with --npu-precision-device dumped")
        return dataclasses.replace(found, reference=reference)
    func, why = allowlist.npu_operator(module, name)
    if func is None or not callable(func):
        found = _unsupported(api_name, f"not a known operator: {why or f'no such op {name!r} in torch_npu'}")
        return dataclasses.replace(found, reference=reference)
    return ResolvedOp(api_name=api_name, func=func, inplace=is_inplace(api_name), reference=reference)


def _no_reference(what: str, name: str) -> str:
    return (f"{what} has no float64 reference here, so no golden can judge it; to judge it, register one in a "
            f"conftest.py: register_op({name!r}, torch_npu.{name}, reference=<your float64 function>) "
            f"(docs/ops.md lists the ops with references)")


def _mindspeed(api_name: str, name: str) -> ResolvedOp:
    """``MindSpeed.<module>.<op>``: MindSpeed's wrappers of torch_npu kernels, judged against the
    reference of the op they wrap (ops/fused MINDSPEED_OPS). They run live only through MindSpeed, which
    this harness does not import: offline (the dumped device) judges them."""
    from .fused import MINDSPEED_OPS  # lazy: only dumps with MindSpeed ops need the references

    fused = MINDSPEED_OPS.get(name)
    if fused is None:
        return _unsupported(api_name, _no_reference(f"MindSpeed's {name}", name.rpartition(".")[2]), "no-reference")
    found = _unsupported(api_name, f"MindSpeed's {name} runs only inside MindSpeed; check its recorded results "
                                   f"offline with --npu-precision-device dumped")
    return dataclasses.replace(found, reference=fused.reference)


def _torch(api_name: str, name: str) -> ResolvedOp:
    """``Torch.<name>``: torch's, or torch.linalg's where msprobe hooks that under the same name; a
    private multi-tensor kernel (``_fused_adamw_``, ``_foreach_norm``) as its aten spelling."""
    options = []
    for qualified in namesakes.candidates(name):
        found, why = allowlist.torch_operator(qualified)
        if found is None and name.startswith(_ATEN_ONLY):
            found, _ = allowlist.aten_operator(name)
            if found is not None:
                return _callable(api_name, name, found, "function")
        if found is None:
            return _unsupported(api_name, f"not a known operator: {why}")
        options.append((qualified, found))
    if len(options) == 1:
        return _callable(api_name, name, options[0][1], "function")
    plain = dict(options)[name]
    return dataclasses.replace(_callable(api_name, name, plain, "function"), namesakes=tuple(options))


def _callable(api_name: str, name: str, found: Any, kind: OpKind) -> ResolvedOp:
    if not callable(found) or isinstance(found, type):
        return _unsupported(api_name, f"{name!r} is a {type(found).__name__}, not a callable op")
    return ResolvedOp(api_name=api_name, func=found, kind=kind, inplace=is_inplace(api_name))


def choose_namesake(op: ResolvedOp, args: tuple, kwargs: dict, recorded_shapes=None,
                    recorded: Callable[[], tuple] = tuple) -> ResolvedOp:
    """The function of ``op``'s namesakes that made this call (see namesakes.choose); raises
    namesakes.NoSingleNamesake where the call does not say which."""
    if not op.namesakes:
        return op
    _, func = namesakes.choose(op.api_name, op.namesakes, tuple(args), dict(kwargs), recorded_shapes, recorded)
    return dataclasses.replace(op, func=func, namesakes=())


def _resolve_builtin(api_name: str, prefix: str, name: str) -> ResolvedOp:
    if not name:
        return _unsupported(api_name, "expected '<Prefix>.<name>' such as 'Functional.gelu'")
    if prefix in _NOT_SINGLE_OPS:
        return _unsupported(api_name, _NOT_SINGLE_OPS[prefix])

    kind: OpKind = "function"
    if prefix == "Functional":
        found, why = allowlist.functional_operator(name)
    elif prefix == "Tensor":
        (found, why), kind = allowlist.tensor_operator(name), "method"
    elif prefix == "Torch":
        return _torch(api_name, name)
    elif prefix == "Aten":
        found, why = allowlist.aten_operator(name)
    elif prefix == "NPU":
        return _npu(api_name, name)
    elif prefix == "MindSpeed":
        return _mindspeed(api_name, name)
    else:
        return _unsupported(api_name, f"unknown prefix {prefix!r}: expected Functional, Tensor, Torch, Aten, NPU or Custom")

    if found is None:
        return _unsupported(api_name, f"not a known operator: {why or f'no such op {name!r} in this torch {torch.__version__}'}")
    return _callable(api_name, name, found, kind)
