"""The gradient flowing into each output of a backward replay: the dump's, matched to the outputs msprobe
recorded them for, or drawn from the case's seed when there is none.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch


def output_gradients(outputs: list[tuple[str, Any]], grad_outputs: Sequence[torch.Tensor | None] | None,
                     seed: int, notes: list[str]) -> tuple[dict[str, torch.Tensor], str | None]:
    """The gradient flowing into each differentiable output, on the CPU, plus a structure error if any."""
    tensors = [(n, t) for n, t in outputs if isinstance(t, torch.Tensor)]
    wanted = {n for n, t in tensors if t.requires_grad}
    if grad_outputs is None:
        generator = torch.Generator().manual_seed(seed)
        cotangents = {}
        for name, t in tensors:
            if name in wanted:  # drawn in float64 and rounded once, so both sides get the same values
                dtype = torch.complex128 if t.is_complex() else torch.float64
                cotangents[name] = torch.randn(t.shape, generator=generator, dtype=dtype).to(t.dtype)
        return cotangents, None
    if len(grad_outputs) == len(outputs) > len(tensors) and all(
            g is None for (_, o), g in zip(outputs, grad_outputs) if not isinstance(o, torch.Tensor)):
        # One entry per output, null for the ints (msprobe's backward input for seed, offset, numels).
        grad_outputs = [g for (_, o), g in zip(outputs, grad_outputs) if isinstance(o, torch.Tensor)]
    if len(grad_outputs) > len(tensors) and all(g is None for g in grad_outputs[len(tensors):]):
        # msprobe records the gradients of the autograd node's outputs, and an op such as group_norm
        # returns one tensor from a node with three (out, mean, rstd): the extras are null.
        notes.append(f"grad_outputs has {len(grad_outputs)} entries for {len(tensors)} tensor outputs; "
                     f"the last {len(grad_outputs) - len(tensors)} are null and carry no gradient")
        grad_outputs = grad_outputs[:len(tensors)]
    present = [g for g in grad_outputs if g is not None]
    if len(grad_outputs) > len(tensors) and len(present) == len(tensors) and all(
            tuple(g.shape) == tuple(t.shape) for g, (_, t) in zip(present, tensors)):
        # msprobe records the autograd node's outputs: svdvals' node is the SVD's (U, S, Vh), and only
        # S, the op's one output, has a gradient.
        notes.append(f"grad_outputs has {len(grad_outputs)} entries for {len(tensors)} tensor outputs; the "
                     f"{len(present)} not null, in order and of the outputs' shapes, are theirs")
        grad_outputs = present
    if len(grad_outputs) > len(tensors):
        return {}, (f"grad_outputs has {len(grad_outputs)} entries but the op returned {len(tensors)} "
                    f"tensor outputs: pass one gradient (or None) per tensor output")
    if len(grad_outputs) < len(tensors):
        notes.append(f"grad_outputs has {len(grad_outputs)} entries for {len(tensors)} tensor outputs; "
                     f"the rest get no gradient")
    cotangents = {}
    for (name, t), grad in zip(tensors, grad_outputs):
        if grad is None or name not in wanted:
            continue
        if tuple(grad.shape) != tuple(t.shape):
            return {}, (f"the gradient for {name} has shape {tuple(grad.shape)} but {name} has shape "
                        f"{tuple(t.shape)}: pass a gradient of the output's shape")
        cotangents[name] = grad.detach().cpu()
    return cotangents, None
