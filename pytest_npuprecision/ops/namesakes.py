"""msprobe's ``Torch.<name>``: which torch function a dump entry recorded, where two share the name.

msprobe hooks 32 functions of ``torch.linalg`` and names each by its last part only: a call of
``torch.linalg.svd`` is ``Torch.svd``, as a call of ``torch.svd`` is. So ``Torch.inv`` and ``Torch.cond``
are ``torch.linalg``'s (msprobe hooks no ``torch.cond``; that one is control flow), and for the names
torch has in both namespaces the recorded arguments decide. These tables are msprobe 26.2.0's own
(``support_wrap_ops.yaml``, section ``torch``), copied here: msprobe is never read at run time.
"""

from __future__ import annotations

import ast
import inspect
import warnings
from functools import lru_cache
from typing import Any, Callable

import torch

from ..common import testing_overrides

# The torch.linalg functions msprobe hooks, which it names Torch.<name>.
LINALG = frozenset({
    "norm", "vector_norm", "matrix_norm", "diagonal", "det", "slogdet", "cond", "matrix_rank", "qr", "lu",
    "lu_factor", "svd", "svdvals", "solve", "lstsq", "inv", "pinv", "matrix_exp", "matrix_power", "cross",
    "matmul", "vecdot", "multi_dot", "householder_product", "tensorsolve", "vander", "cholesky_ex", "inv_ex",
    "solve_ex", "lu_factor_ex", "ldl_factor", "ldl_factor_ex",
})
# Of those, the names msprobe hooks in torch too: a Torch.<name> entry may be either function.
ALSO_TORCH = frozenset({
    "norm", "diagonal", "det", "slogdet", "matrix_rank", "qr", "svd", "solve", "lstsq", "matrix_exp",
    "matrix_power", "cross", "matmul", "vander",
})
# torch.<name> only raises "removed, use torch.linalg.<name>": the entry can only be torch.linalg's.
REMOVED_FROM_TORCH = frozenset({"matrix_rank", "solve", "lstsq"})
# The same computation under both names, whatever the arguments: nothing to choose.
SAME_FUNCTION = frozenset({"det", "slogdet", "matrix_exp", "matrix_power", "matmul"})


def candidates(name: str) -> tuple[str, ...]:
    """The qualified torch names ``Torch.<name>`` may stand for, torch.linalg's first."""
    if name not in LINALG:
        return (name,)
    if name in SAME_FUNCTION:
        return (name,)
    if name not in ALSO_TORCH or name in REMOVED_FROM_TORCH:
        return (f"linalg.{name}",)
    return (f"linalg.{name}", name)


def binds(func: Callable[..., Any], args: tuple, kwargs: dict) -> bool:
    """Whether the recorded arguments fit ``func``'s signature (unknown signature: they do)."""
    signature = _signature(func)
    if signature is None:
        return True
    try:
        signature.bind(*args, **kwargs)
    except TypeError:
        return False
    return True


def unknown_keywords(func: Callable[..., Any], kwargs: dict) -> list[str]:
    """The recorded keywords ``func``'s signature has no parameter for (none where it is unknown or
    takes ``**kwargs``)."""
    signature = _signature(func)
    if signature is None or any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        return []
    return sorted(k for k in kwargs if k not in signature.parameters)


@lru_cache(maxsize=None)
def _signature(func: Callable[..., Any]) -> inspect.Signature | None:
    """Python functions have their own; torch's C functions state theirs on the first line of their
    docstring (with ``*`` where keywords start), and torch's testing overrides have one for nearly all."""
    try:
        return inspect.signature(func)
    except (TypeError, ValueError):
        pass
    documented = _documented(func)
    if documented is not None:
        return documented
    override = testing_overrides().get(func)
    return None if override is None else inspect.signature(override)


def _documented(func: Callable[..., Any]) -> inspect.Signature | None:
    lines = (getattr(func, "__doc__", None) or "").strip().splitlines()
    first = lines[0] if lines else ""
    head, _, rest = first.partition("(")
    name = getattr(func, "__name__", "")
    if not rest or not head.strip().split(".")[-1] in (name, name.removeprefix("linalg_")):
        return None
    depth, end = 1, 0
    for end, char in enumerate(rest):
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(char, 0)
        if depth == 0:
            break
    try:  # parsed, never run: torch's docstring is data here
        tree = ast.parse(f"def f({rest[:end]}): pass")
    except SyntaxError:
        return None
    spec = tree.body[0].args  # type: ignore[attr-defined]
    kinds = [(a.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD) for a in spec.posonlyargs + spec.args]
    if spec.vararg is not None:
        kinds.append((spec.vararg.arg, inspect.Parameter.VAR_POSITIONAL))
    kinds += [(a.arg, inspect.Parameter.KEYWORD_ONLY) for a in spec.kwonlyargs]
    if spec.kwarg is not None:
        kinds.append((spec.kwarg.arg, inspect.Parameter.VAR_KEYWORD))
    required = len(spec.posonlyargs + spec.args) - len(spec.defaults)
    parameters = []
    for index, (arg, kind) in enumerate(kinds):
        optional = (kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and index >= required) or (
            kind is inspect.Parameter.KEYWORD_ONLY)
        parameters.append(inspect.Parameter(arg, kind, default=None if optional else inspect.Parameter.empty))
    try:
        return inspect.Signature(parameters)
    except ValueError:
        return None


class NoSingleNamesake(Exception):
    """The recorded call fits none of the functions its name stands for, or several that disagree."""


Option = tuple[str, Callable[..., Any]]  # ("linalg.svd", torch.linalg.svd)


def choose(api_name: str, options: tuple[Option, ...], args: tuple, kwargs: dict,
           recorded_shapes: tuple[tuple[int, ...], ...] | None,
           recorded: Callable[[], tuple[torch.Tensor, ...]]) -> Option:
    """The one function of ``options`` that made this recorded call: the only one its arguments bind,
    else the only one whose results (run here in float64) have the recorded output shapes or values.
    Where the fitting ones agree at these arguments, the first (torch.linalg's). Never a guess:
    raises NoSingleNamesake otherwise."""
    names = " or ".join(f"torch.{q}" for q, _ in options)
    fitting = [o for o in options if binds(o[1], args, kwargs)]
    if not fitting:
        raise NoSingleNamesake(f"{api_name} is {names} to msprobe, and its recorded arguments "
                               f"(keywords {sorted(kwargs)}) fit neither signature")
    if len(fitting) == 1:
        return fitting[0]
    results = {q: _run(f, args, kwargs) for q, f in fitting}
    fitting = [o for o in fitting if results[o[0]] is not None]
    if len(fitting) <= 1:
        if fitting:
            return fitting[0]
        raise NoSingleNamesake(f"{api_name} is {names} to msprobe, and both raise on its recorded arguments")
    first = results[fitting[0][0]]
    if all(_agree(first, results[q]) for q, _ in fitting[1:]):
        return fitting[0]
    if recorded_shapes is not None:
        shaped = [o for o in fitting if tuple(tuple(t.shape) for t in results[o[0]]) == recorded_shapes]
        if len(shaped) == 1:
            return shaped[0]
        fitting = shaped or fitting
    tensors = recorded()
    if tensors:
        close = [o for o in fitting if _near(results[o[0]], tensors)]
        if len(close) == 1:
            return close[0]
    raise NoSingleNamesake(f"{api_name} is {names} to msprobe: both fit its recorded arguments and give "
                           f"different results, and the recorded outputs do not tell which ran")


def _float64(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.detach()
        return value.to(torch.float64) if value.is_floating_point() else value
    if isinstance(value, (list, tuple)):
        return type(value)(_float64(v) for v in value)
    if isinstance(value, dict):
        return {k: _float64(v) for k, v in value.items()}
    return value


def _run(func: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[torch.Tensor, ...] | None:
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.cross's and torch.qr's deprecation notes
            return _tensors(func(*_float64(args), **_float64(kwargs)))
    except Exception:  # noqa: BLE001 - a candidate that cannot take these arguments did not make the call
        return None


def _tensors(value: Any) -> tuple[torch.Tensor, ...]:
    if isinstance(value, torch.Tensor):
        return (value,)
    if isinstance(value, (list, tuple)):
        return tuple(t for item in value for t in _tensors(item))
    return ()


def _agree(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and torch.allclose(x, y, rtol=1e-9, atol=0, equal_nan=True)
                                    for x, y in zip(a, b))


def _near(ours: tuple[torch.Tensor, ...], recorded: tuple[torch.Tensor, ...]) -> bool:
    """Values as the dump's: compared in magnitude (a factorization's vectors may flip sign between
    kernels) and loosely (the device ran in a low precision dtype)."""
    if len(ours) != len(recorded):
        return False
    for x, y in zip(ours, recorded):
        if x.shape != y.shape:
            return False
        if x.is_floating_point() and y.is_floating_point():
            x, y = x.abs(), y.to(torch.float64).abs()
            scale = float(y[torch.isfinite(y)].max()) if bool(torch.isfinite(y).any()) else 1.0
            if not torch.allclose(x, y, rtol=1e-2, atol=1e-2 * scale, equal_nan=True):
                return False
    return True
