"""torch_npu's matmuls fused with a collective, judged as collectives from every rank of their group:

- ``npu_mm_reduce_scatter_base(input, x2, hcom, world_size)``: each rank's ``input @ x2``, summed over the
  group and scattered by rows (rank i keeps rows i·m/N to (i + 1)·m/N);
- ``npu_all_gather_base_mm(input, x2, hcom, world_size)``: the ranks' ``input`` gathered by rows
  (``gather_out``, exact), then ``@ x2`` with this rank's ``x2`` (``output``);
- ``npu_mm_all_reduce_base(x1, x2, hcom)``: each rank's ``x1 @ x2``, summed over the group, on every rank.

The group is named by ``hcom``, the HCCL communicator's name: the ranks whose entry of the same key records
the same name, in rank order (``world_size`` of them where the call says). Quantised modes (any scale or
offset), a gather of x2 (gather_index 1), and a bias or an ``x3`` of the reducing ones (each rank's own, or
once: the docs do not say) skip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ...dump import MalformedDescriptor, TensorSpec, decode_value
from ...precision import Accumulation
from .calls import MAX_RANKS, CollectiveSkip
from .definitions import Expected, RanksDisagree

FUSED = frozenset({"npu_mm_reduce_scatter_base", "npu_all_gather_base_mm", "npu_mm_all_reduce_base"})
_PARAMS = {"npu_mm_all_reduce_base": ("input", "x2", "hcom")}  # the others: ("input", "x2", "hcom", "world_size")
_QUANTISED = ("x1_scale", "x2_scale", "antiquant_scale", "antiquant_offset", "dequant_scale", "pertoken_scale",
              "comm_quant_scale_1", "comm_quant_scale_2")


@dataclass(frozen=True)
class FusedCall:
    api: str
    hcom: str
    world_size: int | None  # None where the call does not say (npu_mm_all_reduce_base)
    x1: TensorSpec
    x2: TensorSpec
    bias: TensorSpec | None
    outputs: tuple[Any, ...]  # the recorded results: (output,) or (output, gather_out)


def decode_fused(api: str, entry: Any) -> FusedCall:
    """One rank's entry of a fused matmul-collective (raises CollectiveSkip or MalformedDescriptor)."""
    if not isinstance(entry, dict):
        raise MalformedDescriptor("the entry", f"is {type(entry).__name__}, expected an object")
    params = _PARAMS.get(api, ("input", "x2", "hcom", "world_size"))
    args, kwargs = entry.get("input_args", []), entry.get("input_kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict) or len(args) > len(params):
        raise MalformedDescriptor("input_args", f"are not the ({', '.join(params)}) of {api}")
    named = {**dict(zip(params, args)), **kwargs}
    values = {name: decode_value(named.get(name), f"input {name}") for name in
              ("input", "x2", "hcom", "world_size", "bias", "x3", "gather_index", "reduce_op", *_QUANTISED)}
    for name in _QUANTISED:
        if values[name] is not None:
            raise CollectiveSkip("no-reference", f"{api}'s quantised mode ({name}) has no golden here")
    if values["gather_index"] not in (None, 0):
        raise CollectiveSkip("no-reference", f"{api} with gather_index {values['gather_index']!r} (x2 gathered) has "
                                             f"no golden here")
    if values["reduce_op"] not in (None, "sum"):
        raise CollectiveSkip("no-reference", f"{api} with reduce_op {values['reduce_op']!r}: torch_npu defines 'sum'")
    if api != "npu_all_gather_base_mm" and (values["bias"] is not None or values["x3"] is not None):
        raise CollectiveSkip("no-reference", f"{api} with a bias or x3: whether each rank adds its own before the "
                                             f"sum is not documented, so no golden is defined")
    x1, x2, hcom, world = values["input"], values["x2"], values["hcom"], values["world_size"]
    if not (isinstance(x1, TensorSpec) and isinstance(x2, TensorSpec) and len(x1.shape) in (2, 3)
            and len(x2.shape) == 2):
        raise MalformedDescriptor("input", f"and x2 of {api} are not a 2-D or 3-D tensor and a 2-D one")
    if not isinstance(hcom, str):
        raise MalformedDescriptor("input hcom", f"is {hcom!r:.40}, not a communicator's name")
    if (world is not None or api != "npu_mm_all_reduce_base") and not (type(world) is int and 1 <= world <= MAX_RANKS):
        raise MalformedDescriptor("input world_size", f"is {world!r:.20}, not a rank count")
    output = decode_value(entry.get("output"), "output")
    outputs = tuple(output) if isinstance(output, list) else (output,)
    return FusedCall(api, hcom, world, x1, x2, values["bias"], outputs)


def fused_expected(call: FusedCall, at: int, x1s: list[torch.Tensor], x2s: list[torch.Tensor],
                   bias: torch.Tensor | None, received: list[Any]) -> list[Expected]:
    """This rank's results with their goldens: ``x1s`` and ``x2s`` are the group's, in group order."""
    size = len(x1s)
    wide1 = [x.to(torch.float64) for x in x1s]
    wide2 = [x.to(torch.float64) for x in x2s]
    if call.api == "npu_all_gather_base_mm":
        gathered = torch.cat(wide1)
        golden = gathered @ wide2[at]
        norm = ((gathered * gathered) @ (wide2[at] * wide2[at])).sqrt()
        if bias is not None:
            golden = golden + bias.to(torch.float64)
        found = [_output("output.0", received, 0, golden, "error_bound",
                         Accumulation(length=call.x1.shape[-1], term_norm=norm, roundings=int(bias is not None)))]
        if len(received) > 1 and received[1] is not None:
            found.append(_output("output.1", received, 1, gathered, "binary", Accumulation()))
        return found
    partials = [a @ b for a, b in zip(wide1, wide2)]
    rows = partials[0].shape[0]
    if call.api == "npu_mm_all_reduce_base":
        share = slice(None)
    elif rows % size:
        raise RanksDisagree(f"input's {rows} rows do not split among the group's {size} ranks")
    else:
        share = slice(at * rows // size, (at + 1) * rows // size)
    golden = torch.stack(partials).sum(0)[share]
    # Each rank's partial is K products summed in the accumulator and rounded once, then N - 1 additions in
    # the dtype: N roundings of values within the ranks' Σ|partial|, the accumulations' error within the
    # products' norm (which a partial that cancels leaves larger than itself).
    norm = sum(((a * a) @ (b * b)) for a, b in zip(wide1, wide2)).sqrt()[share]
    spread = torch.stack(partials).abs().sum(0)[share]
    return [_output("output.0", received, 0, golden, "error_bound",
                    Accumulation(length=call.x1.shape[-1], term_norm=torch.maximum(norm, spread), roundings=size))]


def _output(name: str, received: list[Any], index: int, golden: torch.Tensor, standard: str,
            accumulation: Accumulation) -> Expected:
    actual = received[index] if index < len(received) else None
    if not isinstance(actual, torch.Tensor):
        raise RanksDisagree(f"{name} is not recorded as a tensor")
    if tuple(actual.shape) != tuple(golden.shape):
        raise RanksDisagree(f"{name} is {list(actual.shape)}, but the group's inputs make {list(golden.shape)}")
    return Expected(name, actual, golden, standard, accumulation)
