"""The second look: an output that fails is judged again, against what the op's conditioning allows.

The standards bound a kernel's error by the rounding it does itself, scaled by |golden| or by the
norms of the terms it sums. That misses how much the op amplifies rounding at these very inputs:
x - mean(x) where the mean nearly cancels x, a loss that is a mean of cancelling terms, asin near 1,
a polygamma near a pole. There a fair kernel errs far more than the bound says, and the standard
would cry wolf. So a failing output gets a second look. The golden is run again on inputs moved by
a random share of their own dtype's rounding (replay/perturbed.py), and each element's spread is how far
the exact result moves. An element whose error is within ``MULTIPLE`` times its spread is excused:
its golden becomes the device's value, and every standard's checks run again, unchanged. An element
past that keeps its whole error: a spread never shaves a little off every element, which would loosen
the bound of a fair reduction (whose input spread grows like its rounding error) and hide noise. A NaN or an inf is never excused. A real defect is too: a float16
accumulation, a bias or one wrong element errs by many times what a half-ulp move of the inputs does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .metrics import element_index

# How many spreads an element may err by. A kernel that is backward stable computes the exact
# result of inputs moved by a few units of roundoff; the draws move them by at most one, and the
# largest of three draws comes close to, but below, the worst move of that size.
MULTIPLE = 3.0


@dataclass(frozen=True)
class Excused:
    """What the second look excused in one output."""

    count: int  # elements whose whole error is within MULTIPLE spreads
    numel: int
    index: tuple[int, ...]  # the excused element with the largest error
    error: float
    spread: float

    def describe(self) -> str:
        where = f"[{', '.join(map(str, self.index))}]" if self.index else "the scalar"
        text = (f"second look: {self.count} of {self.numel} elements excused by the op's conditioning at these "
                f"inputs: each errs by at most {MULTIPLE:g}x how far the float64 result moves when the inputs "
                f"move by their dtype's rounding; the largest excused error is {self.error:.3g} at {where}, "
                f"{self.error / self.spread:.2g}x its spread {self.spread:.3g}")
        return text


def widened(actual: torch.Tensor, golden: torch.Tensor, spread: torch.Tensor) -> tuple[torch.Tensor, Excused | None]:
    """The golden with every element whose error is within MULTIPLE spreads replaced by ``actual``'s
    value, and what that excused; (golden, None) when nothing is. An inf or NaN on either side stays."""
    a = actual.detach().to(device=golden.device, dtype=golden.dtype)
    error = (a - golden).abs()
    reach = MULTIPLE * spread.to(device=golden.device, dtype=golden.dtype)
    excused = (error <= reach) & (error > 0) & torch.isfinite(error)
    count = int(excused.sum())
    if not count:
        return golden, None
    error = torch.where(excused, error, 0)
    flat = int(torch.argmax(error.reshape(-1)))
    index = element_index(flat, golden.shape)
    excuse = Excused(count, golden.numel(), index, float(error.reshape(-1)[flat]), float(spread.reshape(-1)[flat]))
    return torch.where(excused, a, golden), excuse
