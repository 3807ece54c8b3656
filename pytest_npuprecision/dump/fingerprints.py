"""Fingerprints of a case's inputs: what makes a metric recorded on one machine comparable on another.

A recorded baseline is only worth comparing with when both runs fed the op the same bits. The
fingerprint hashes every tensor's dtype, shape and bytes and every other argument's repr, in order,
so a different torch (whose random generators drew other synthetic inputs), another dump or a
changed synthesis seed shows up as a mismatch instead of as a wrong verdict. Each input also gets a
short fingerprint of its own, so that a mismatch can name the input that differs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from .arguments import CallInputs


def update_with_tensor(digest: "hashlib._Hash", t: torch.Tensor) -> None:
    """Feed a tensor's dtype, shape and bytes (little-endian, as laid out in memory) to ``digest``."""
    # resolve_conj/resolve_neg: a lazily conjugated or negated view has no bytes of its own to view as uint8
    t = t.detach().cpu().resolve_conj().resolve_neg()
    digest.update(f"{t.dtype}{tuple(t.shape)}".encode())
    # An expanded input (stride 0) repeats one slice: hash that slice once and say along which
    # dimensions it repeats, rather than materializing every copy. A size-1 dimension repeats nothing.
    expanded = tuple(d for d in range(t.dim()) if t.stride(d) == 0 and t.shape[d] > 1)
    for d in expanded:
        t = t.narrow(d, 0, 1)
    if expanded:
        digest.update(f" expanded along {expanded}".encode())
    flat = t.contiguous().reshape(-1)
    if flat.numel() == 1 and flat.stride(0) != 1:  # one element of stride 0 counts as contiguous, yet has no bytes to view
        flat = flat.clone(memory_format=torch.contiguous_format)
    if flat.numel():
        digest.update(flat.view(torch.uint8).numpy().tobytes())


@dataclass(frozen=True)
class InputFingerprint:
    digest: str  # of everything, in order
    inputs: tuple[tuple[str, str], ...]  # ("input_args[0]", "float16[4, 8] 3f2a..."), one per leaf value

    def as_dict(self) -> dict[str, Any]:
        return {"digest": self.digest, "inputs": dict(self.inputs)}

    def difference(self, recorded: dict[str, Any]) -> str:
        """Which input differs from a recorded fingerprint, in words (empty when the digests agree)."""
        if recorded.get("digest") == self.digest:
            return ""
        theirs: dict[str, str] = recorded.get("inputs", {})
        ours = dict(self.inputs)
        for path in list(ours) + [p for p in theirs if p not in ours]:
            if ours.get(path) != theirs.get(path):
                return f"{path} is {ours.get(path, 'absent')} here but was {theirs.get(path, 'absent')} when recorded"
        return "the inputs hash differently although each input agrees (argument order changed)"


def fingerprint(inputs: CallInputs) -> InputFingerprint:
    total = hashlib.blake2b(digest_size=16)
    parts = []
    for path, value in _leaves(inputs):
        one = hashlib.blake2b(digest_size=8)
        if isinstance(value, torch.Tensor):
            update_with_tensor(one, value)
            shown = f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)} {one.hexdigest()}"
            if path in inputs.requires_grad:  # hashed below, shown here so that a mismatch can name it
                shown += " requires grad"
        else:
            one.update(repr(value).encode())
            shown = f"{_short(repr(value))} {one.hexdigest()}"
        total.update(path.encode())
        total.update(one.digest())
        parts.append((path, shown))
    total.update(repr(sorted(inputs.requires_grad)).encode())
    return InputFingerprint(total.hexdigest(), tuple(parts))


def _leaves(inputs: CallInputs) -> Iterator[tuple[str, Any]]:
    yield from _walk(inputs.args, "input_args")
    yield from _walk(inputs.kwargs, "input_kwargs")
    yield from _walk(inputs.grad_outputs, "grad_outputs")


def _walk(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            yield from _walk(value[key], f"{path}[{key!r}]")
    elif isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        for i, item in enumerate(value):
            yield from _walk(item, f"{path}[{i}]")
    else:
        yield path, value


def _short(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."
