"""Small inline SVG plots, drawn from plain numbers: a bar chart and a scatter plot.

No plotting library and nothing loaded from anywhere: each function returns one <svg> element
as a string, to be embedded in an HTML page.
"""

from __future__ import annotations

import math
from html import escape
from typing import Sequence

WIDTH, HEIGHT = 360, 230
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 26, 44
BLUE, RED, GREY = "#3b6ea5", "#c0392b", "#888"


def _frame(title: str, x_label: str, y_label: str, body: list[str]) -> str:
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    return "\n".join([
        f'<svg class="plot" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
        f'<title>{escape(title)}</title>',
        f'<text x="{WIDTH / 2}" y="15" text-anchor="middle" class="plot-title">{escape(title)}</text>',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#ccc"/>',
        *body,
        f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 6}" text-anchor="middle">{escape(x_label)}</text>',
        f'<text transform="translate(11 {TOP + plot_h / 2}) rotate(-90)" text-anchor="middle">{escape(y_label)}</text>',
        "</svg>",
    ])


def histogram(counts: Sequence[int], labels: Sequence[str], *, title: str, x_label: str,
              highlight_from: int | None = None) -> str:
    """Bars on a log scale (counts span orders of magnitude); bars from ``highlight_from`` on are red."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    top = math.log10(max(counts, default=0) + 1) or 1.0
    width = plot_w / max(len(counts), 1)
    every = max(1, math.ceil(len(counts) / 9))  # at most about nine x labels
    body = []
    for decade in range(int(top) + 1):
        y = TOP + plot_h - plot_h * math.log10(10 ** decade + 1) / top
        body.append(f'<line x1="{LEFT - 4}" x2="{LEFT}" y1="{y:.1f}" y2="{y:.1f}" stroke="{GREY}"/>'
                    f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{10 ** decade:g}</text>')
    for i, (count, label) in enumerate(zip(counts, labels)):
        height = plot_h * math.log10(count + 1) / top
        x = LEFT + i * width
        colour = RED if highlight_from is not None and i >= highlight_from else BLUE
        body.append(f'<rect x="{x + 1:.1f}" y="{TOP + plot_h - height:.1f}" width="{max(width - 2, 1):.1f}" '
                    f'height="{height:.1f}" fill="{colour}"><title>{escape(label)}: {count}</title></rect>')
        if i % every == 0:
            body.append(f'<text x="{x + width / 2:.1f}" y="{TOP + plot_h + 14}" text-anchor="middle">'
                        f'{escape(label)}</text>')
    return _frame(title, x_label, "elements (log scale)", body)


def _ticks(low: float, high: float, count: int = 4) -> list[float]:
    """Round values (1, 2, 2.5 or 5 times a power of ten apart) between low and high."""
    raw = (high - low) / count
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.ceil(low / step)
    return [i * step for i in range(first, math.floor(high / step) + 1)]


def _labelled_ticks(low: float, high: float) -> list[tuple[float, str]]:
    ticks = _ticks(low, high)
    step = ticks[1] - ticks[0] if len(ticks) > 1 else abs(high - low) or 1.0
    # Enough significant digits to tell neighbouring ticks apart.
    digits = max(4, math.ceil(math.log10(max(abs(low), abs(high)) / step)) + 1)
    return [(t, f"{t:.{digits}g}") for t in ticks]


def _range(values: Sequence[float]) -> tuple[float, float]:
    low, high = min(values), max(values)
    pad = (high - low) * 0.05 or abs(high) * 0.05 or 1.0
    return low - pad, high + pad


def scatter(points: Sequence[tuple[float, float]], *, title: str, x_label: str, y_label: str,
            highlight: int = 0, diagonal: bool = False) -> str:
    """One dot per point; the first ``highlight`` points are red; ``diagonal`` draws y = x."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    if not points:
        return _frame(title, x_label, y_label, [f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" '
                                                f'text-anchor="middle">no finite elements to show</text>'])
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1 = _range(xs + ys if diagonal else xs)
    y0, y1 = (x0, x1) if diagonal else _range(ys)

    def px(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        return TOP + plot_h - (y - y0) / (y1 - y0) * plot_h

    body = []
    for tick, label in _labelled_ticks(x0, x1):
        body.append(f'<text x="{px(tick):.1f}" y="{TOP + plot_h + 14}" text-anchor="middle">{label}</text>')
    for tick, label in _labelled_ticks(y0, y1):
        body.append(f'<text x="{LEFT - 6}" y="{py(tick) + 4:.1f}" text-anchor="end">{label}</text>')
    if diagonal:
        body.append(f'<line x1="{px(x0):.1f}" y1="{py(x0):.1f}" x2="{px(x1):.1f}" y2="{py(x1):.1f}" '
                    f'stroke="{GREY}" stroke-dasharray="4 3"/>')
    elif y0 < 0 < y1:
        body.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{py(0):.1f}" y2="{py(0):.1f}" stroke="{GREY}" '
                    f'stroke-dasharray="4 3"/>')
    # The highlighted points last, so that they are drawn on top.
    for i in list(range(highlight, len(points))) + list(range(min(highlight, len(points)))):
        x, y = points[i]
        colour = RED if i < highlight else BLUE
        body.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}" fill-opacity="0.75">'
                    f'<title>{x:.8g}, {y:.8g}</title></circle>')
    return _frame(title, x_label, y_label, body)
