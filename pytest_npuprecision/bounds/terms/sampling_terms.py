"""How far sampling ops move when a fair kernel rounds their sampling coordinates.

grid_sample turns each grid value g into a pixel coordinate ((g + 1) W - 1) / 2 (or (g + 1) / 2
(W - 1)), and interpolate computes each output's source point as scale (i + 0.5) - 0.5: a few
roundings of numbers as large as the coordinate, so a fair float32 kernel misplaces a sample by
about u times its distance from the origin, and the result moves by that times its slope there. On
a 20-pixel-wide float32 image that is already ten times the rounding of the result. Each output
element's slope along each coordinate is taken from the float64 golden by a central difference
(grid_sampler has no forward-mode derivative, and one grid point feeds a whole column of channels);
the sensitivity is that slope times COORDINATE_ROUNDINGS (|coordinate| + 1), in the units of the
coordinate, which replay/error_bounds.py scales by the compute dtype's unit roundoff (float32's for half types:
a half-precision kernel that computes coordinates in its own dtype still errs far past it).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F

from ..op_arguments import argument

# Roundings a fair kernel makes in one coordinate: the scale, the product and the offset (grid_sample:
# the shift by 1, the product by the size and the offset), each of up to (|coordinate| + 1) u.
COORDINATE_ROUNDINGS = 3.0
GRID_PATHS = frozenset({"input_args[1]", "input_kwargs['grid']"})
_STEP = 2.0 ** -24  # of a normalized coordinate in [-1, 1]: float64 differences stay exact to ~1e-9
_GRID_MODES = ("bilinear", "nearest", "bicubic")
# Taps each output reads per spatial dim, by mode (interpolate's and grid_sample's names).
TAPS = {"nearest": 1, "nearest-exact": 1, "linear": 2, "bilinear": 2, "trilinear": 2, "bicubic": 4}


@dataclass(frozen=True)
class _GridCall:
    """grid_sample(input, grid, mode, padding_mode, align_corners), and the grid_sampler ops, whose
    mode and padding are enums (0 bilinear, 1 nearest, 2 bicubic; 0 zeros, 1 border, 2 reflection)."""

    input: torch.Tensor
    grid: torch.Tensor  # float64
    mode: str
    padding: str
    align_corners: bool

    @classmethod
    def of(cls, args: Sequence[Any], kwargs: Mapping[str, Any]) -> "_GridCall":
        mode = argument(args, kwargs, 2, "mode", "interpolation_mode", default="bilinear")
        padding = argument(args, kwargs, 3, "padding_mode", default="zeros")
        return cls(argument(args, kwargs, 0, "input"), argument(args, kwargs, 1, "grid").detach().double(),
                   _GRID_MODES[mode] if isinstance(mode, int) else mode,
                   ("zeros", "border", "reflection")[padding] if isinstance(padding, int) else padding,
                   bool(argument(args, kwargs, 4, "align_corners", default=False)))



def grid_sample_sensitivity(args: Sequence[Any], kwargs: Mapping[str, Any]) -> torch.Tensor:
    """grid_sample and the grid_sampler ops: the slope along each grid axis times its misplacement."""
    call = _GridCall.of(args, kwargs)
    if call.mode == "nearest":  # the sample jumps, or does not move at all
        return torch.zeros((), dtype=torch.float64)
    x = call.input.detach().double()

    def sample(g: torch.Tensor) -> torch.Tensor:
        return F.grid_sample(x, g, mode=call.mode, padding_mode=call.padding, align_corners=call.align_corners)

    return _slopes_times(sample, call.grid, COORDINATE_ROUNDINGS * (call.grid.abs() + 1))


def grid_sample_input_terms(args: Sequence[Any], kwargs: Mapping[str, Any],
                            cotangent: torch.Tensor) -> dict[str, torch.Tensor]:
    """The input gradient scatters each sample's output gradient onto the taps around it. A fair
    kernel computes each tap's weight with an absolute error of a few u, even a weight near 0 (a
    bicubic tap near a zero of the cubic), so a pixel's gradient errs by u times the sum of |g| over
    every tap that lands on it, weighted or not: that sum is its term norm. Taps out of range drop
    (zeros) or land on the nearest pixel (border; reflection is approximated by it too)."""
    call = _GridCall.of(args, kwargs)
    x, grid, mode, padding, align_corners = call.input, call.grid, call.mode, call.padding, call.align_corners
    spatial = tuple(x.shape[2:])
    taps = TAPS[mode]
    batch, channels = x.shape[:2]
    g = cotangent.detach().double().abs().to(grid.device).reshape(batch, channels, -1)
    firsts = []  # per spatial dim, each sample's first tap
    for axis, size in enumerate(reversed(spatial)):  # the grid's last axis is x, along the last dim
        point = grid[..., axis].reshape(batch, -1)
        pixel = (point + 1) / 2 * (size - 1) if align_corners else ((point + 1) * size - 1) / 2
        if padding != "zeros" and mode != "bicubic":
            pixel = pixel.clamp(0, size - 1)
        first = torch.round(pixel) if mode == "nearest" else torch.floor(pixel) - int(taps == 4)
        firsts.insert(0, first.long())
    total = torch.zeros(batch, channels, math.prod(spatial), dtype=torch.float64, device=grid.device)
    for offsets in itertools.product(range(taps), repeat=len(spatial)):
        flat = torch.zeros_like(firsts[0])
        inside = torch.ones_like(firsts[0], dtype=torch.bool)
        for first, offset, size in zip(firsts, offsets, spatial):
            index = first + offset
            inside &= (index >= 0) & (index < size)
            flat = flat * size + index.clamp(0, size - 1)
        weight = g if padding != "zeros" else g * inside.unsqueeze(1)
        total.scatter_add_(2, flat.unsqueeze(1).expand(batch, channels, -1), weight)
    return {"input": total.reshape(x.shape)}


def _slopes_times(sample, grid: torch.Tensor, moved: torch.Tensor) -> torch.Tensor:
    """sum over the coordinate axes d of |d sample / d grid_d| * moved_d, per output element."""
    total = None
    for d in range(grid.shape[-1]):
        step = torch.zeros_like(grid)
        step[..., d] = _STEP
        slope = (sample(grid + step) - sample(grid - step)).abs_().div_(2 * _STEP)
        # moved is per grid point (N, *spatial); the output is (N, C, *spatial)
        term = slope * moved[..., d].unsqueeze(1)
        total = term if total is None else total.add_(term)
    return total


def _has_source_points(call: Mapping[str, Any]) -> bool:
    """interpolate's linear and cubic modes weigh taps by their distance from one source point per
    output; nearest jumps, and area and antialias average windows."""
    return call["mode"] in ("linear", "bilinear", "trilinear", "bicubic") and not call.get("antialias")


def _source_points(x: torch.Tensor, call: Mapping[str, Any], out_size: Sequence[int]) -> list[torch.Tensor]:
    """Per spatial dim, each output's source point in input pixels, as interpolate places it."""
    spatial = x.shape[2:]
    scale_factor = call.get("scale_factor")
    scales = scale_factor if isinstance(scale_factor, (list, tuple)) else [scale_factor] * len(spatial)
    points = []
    for size, out, given in zip(spatial, out_size, scales):
        index = torch.arange(out, dtype=torch.float64, device=x.device)
        if call.get("align_corners"):
            source = index * ((size - 1) / (out - 1) if out > 1 else 0.0)
        else:
            scale = 1 / given if given and not call.get("recompute_scale_factor") else size / out
            source = scale * (index + 0.5) - 0.5
            if call["mode"] != "bicubic":
                source = source.clamp(min=0)
        points.append(source)
    return points


def interpolate_taps_norm(args: Sequence[Any], kwargs: Mapping[str, Any], call: Mapping[str, Any],
                          out_size: Sequence[int]) -> torch.Tensor | None:
    """Per output of interpolate's linear and cubic modes, the L2 norm of the taps it reads,
    unweighted: a fair kernel computes each weight from the source point with an absolute error of a
    few u whatever the weight, so a tap errs by u |x| even where its weight is near 0 (a bicubic
    weight near a zero of the cubic). None for the other modes."""
    if not _has_source_points(call):
        return None
    squares = argument(args, kwargs, 0, "input").detach().double().square()
    taps = TAPS[call["mode"]]
    for dim, source in enumerate(_source_points(squares, call, out_size), start=2):
        first = torch.floor(source).long() - int(taps == 4)
        last = squares.shape[dim] - 1
        squares = sum(squares.index_select(dim, (first + k).clamp(0, last)) for k in range(taps))
    return squares.sqrt()


def interpolate_sensitivity(args: Sequence[Any], kwargs: Mapping[str, Any], call: Mapping[str, Any],
                            out_size: Sequence[int]) -> torch.Tensor | None:
    """interpolate's linear and cubic modes, sampled through grid_sample at interpolate's own source
    points (border padding, as interpolate clamps its taps), checked against interpolate itself.
    None for the modes without a source point to misplace (nearest's jump, area, antialias)."""
    mode = call["mode"]
    if not _has_source_points(call):
        return None
    x = argument(args, kwargs, 0, "input").detach().double()
    # per spatial dim: (source points in pixels, pixels per normalized unit)
    axes = [(source, max(size - 1, 1) / 2) for source, size in zip(_source_points(x, call, out_size), x.shape[2:])]
    image = x
    if len(axes) == 1:  # linear: a 1-pixel-high image, where y does not move the sample
        image = x.unsqueeze(-2)
        axes.insert(0, (torch.zeros(1, dtype=torch.float64, device=x.device), 0.5))
    # grid_sample takes (x, y[, z]): the last spatial dim first
    planes = torch.meshgrid(*[s / half - 1 for s, half in axes], indexing="ij")
    grid = torch.stack(planes[::-1], dim=-1).expand(x.shape[0], *planes[0].shape, len(axes)).contiguous()
    moved = torch.stack(torch.meshgrid(*[COORDINATE_ROUNDINGS * (s.abs() + 1) / half for s, half in axes],
                                       indexing="ij")[::-1], dim=-1).expand_as(grid)
    sample_mode = "bicubic" if mode == "bicubic" else "bilinear"

    def sample(g: torch.Tensor) -> torch.Tensor:
        return F.grid_sample(image, g, mode=sample_mode, padding_mode="border", align_corners=True)

    golden = F.interpolate(x, **call)
    same = sample(grid).reshape(golden.shape)
    if not torch.allclose(same, golden, rtol=1e-9, atol=1e-9 * float(golden.abs().max().clamp(min=1))):
        raise ValueError(f"interpolate's {mode} source points were not reproduced")
    return _slopes_times(sample, grid, moved).reshape(golden.shape)
