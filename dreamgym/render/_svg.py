"""Small inline-SVG charts for the reports: grouped bars, lines, a 2×2 heat map.

Drawn by hand so a report stays one offline file (no plotting library, no
script, no fetched asset). Values are fractions in [0, 1] unless a chart says
otherwise; every bar and point carries a ``<title>`` with its exact value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

__all__ = ["COLOURS", "bar_chart", "confusion_chart", "line_chart"]

COLOURS = ("#3366cc", "#dc7633", "#7f8c8d", "#27ae60", "#8e44ad", "#c0392b")
"""Series colours, in series order (the model first, then the baselines)."""

_FONT = 'font-family="sans-serif" font-size="11"'


def _open(width: float, height: float) -> str:
    """An ``<svg>`` start tag of this size whose drawing scales with it (the ``viewBox``): a page narrower than
    the chart shrinks the whole chart instead of cutting off its right end."""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" role="img">')  # fmt: skip


def _text_width(text: str) -> float:
    """A generous estimate of the width of ``text`` at 11 px sans-serif."""
    return 6.5 * len(text)


def _legend_width(names: Sequence[str]) -> float:
    return sum(_text_width(name) + 26 for name in names)


def _legend(names: Sequence[str], x: float, y: float) -> list[str]:
    parts = []
    dx = x
    for n, name in enumerate(names):
        parts.append(f'<rect x="{dx:.1f}" y="{y - 9}" width="10" height="10" fill="{COLOURS[n % len(COLOURS)]}"/>')
        parts.append(f'<text x="{dx + 14:.1f}" y="{y}" {_FONT}>{escape(name)}</text>')
        dx += _text_width(name) + 26
    return parts


def _y_axis(left: float, top: float, height: float, width: float) -> list[str]:
    parts = []
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = top + height * (1 - tick)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + width}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" {_FONT}>{tick:g}</text>')
    return parts


def bar_chart(title: str, categories: Sequence[str], series: Mapping[str, Sequence[float]]) -> str:
    """Grouped bars: one group per category, one bar per series (values in [0, 1]).

    Groups share the plot's width evenly; category labels run at a slant below it.

    Example:
        >>> bar_chart("F1 by site", ["shop", "wiki"], {"model": [0.8, 0.6], "unchanged": [0.5, 0.4]})
    """
    names = list(series)
    gap, left, top, height = 10, 44, 34, 180
    width = max((11 * len(names) + gap) * len(categories), _legend_width(names), 280)
    slot = width / max(1, len(categories))
    bar = max(11.0, min(22.0, (slot - gap) / max(1, len(names))))
    longest = _text_width(max(categories, key=len, default=""))
    below = min(150.0, 0.66 * longest + 16)  # a label slanted at 40 degrees
    right = max(10.0, min(150.0, 0.77 * longest + 8 - slot / 2))
    parts = [
        _open(left + width + right, top + height + below),
        f"<title>{escape(title)}</title>",
        f'<text x="{left}" y="14" {_FONT} font-weight="bold">{escape(title)}</text>',
        *_legend(names, left, 28),
        *_y_axis(left, top, height, width),
    ]
    for c, category in enumerate(categories):
        x0 = left + c * slot + (slot - bar * len(names)) / 2
        for s, name in enumerate(names):
            value = max(0.0, min(1.0, float(series[name][c])))
            h = max(1.5, height * value)  # a sliver for 0, so a zero reads as a figure, not as a missing bar
            colour = COLOURS[s % len(COLOURS)]
            parts.append(
                f'<rect x="{x0 + s * bar:.1f}" y="{top + height - h:.1f}" width="{bar - 1:.1f}" height="{h:.1f}" '
                f'fill="{colour}"><title>{escape(category)} · {escape(name)}: {value:.3f}</title></rect>'
            )
        cx, cy = left + (c + 0.5) * slot, top + height + 10
        parts.append(
            f'<text x="{cx:.1f}" y="{cy:.1f}" transform="rotate(40 {cx:.1f} {cy:.1f})" {_FONT}>'
            f"{escape(category)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def line_chart(
    title: str,
    xs: Sequence[int | str],
    series: Mapping[str, Sequence[float | None]],
    *,
    x_label: str = "k",
) -> str:
    """Lines over the x values ``xs`` (values in [0, 1]).

    A series may be shorter than ``xs``, and ``None`` leaves a gap: points are
    joined only to their neighbours, so a series of two separate points (say,
    a figure before and after training) stays two points.

    Example:
        >>> line_chart("drift", [1, 2, 3], {"model": [0.9, 0.7, 0.6], "unchanged": [0.5, None, 0.4]})
    """
    names = list(series)
    left, top, height = 44, 34, 180
    width = float(max(60 * len(xs), _legend_width(names), 300))
    parts = [
        _open(left + width + 30, top + height + 40),
        f"<title>{escape(title)}</title>",
        f'<text x="{left}" y="14" {_FONT} font-weight="bold">{escape(title)}</text>',
        *_legend(names, left, 28),
        *_y_axis(left, top, height, width),
    ]

    def px(n: int) -> float:
        return left + (width * (n + 0.5) / len(xs) if xs else 0)

    for n, x in enumerate(xs):
        parts.append(
            f'<text x="{px(n):.1f}" y="{top + height + 16}" text-anchor="middle" {_FONT}>{escape(str(x))}</text>'
        )
    middle = left + width / 2
    parts.append(
        f'<text x="{middle:.1f}" y="{top + height + 32}" text-anchor="middle" {_FONT}>{escape(x_label)}</text>'
    )
    for s, name in enumerate(names):
        colour = COLOURS[s % len(COLOURS)]
        values = list(series[name][: len(xs)])
        points = [None if v is None else (px(n), _y(v, top, height)) for n, v in enumerate(values)]
        for run in _runs(points):
            if len(run) > 1:
                path = " ".join(f"{cx:.1f},{cy:.1f}" for cx, cy in run)
                parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for point, value, x in zip(points, values, xs, strict=False):
            if point is None or value is None:
                continue
            parts.append(
                f'<circle cx="{point[0]:.1f}" cy="{point[1]:.1f}" r="3.5" fill="{colour}">'
                f"<title>{escape(name)} at {escape(x_label)}={escape(str(x))}: {value:.3f}</title></circle>"
            )
    parts.append("</svg>")
    return "".join(parts)


def _y(value: float, top: float, height: float) -> float:
    return top + height * (1 - max(0.0, min(1.0, value)))


def _runs(points: Sequence[tuple[float, float] | None]) -> list[list[tuple[float, float]]]:
    """The points cut into runs of neighbours, at each gap (``None``)."""
    runs: list[list[tuple[float, float]]] = [[]]
    for point in points:
        if point is None:
            runs.append([])
        else:
            runs[-1].append(point)
    return [run for run in runs if run]


def confusion_chart(
    title: str, cells: Sequence[Sequence[int]], *, rows: str = "real", columns: str = "predicted"
) -> str:
    """A 2×2 heat map of counts: ``cells[real][predicted]`` with index 1 for reward 1."""
    size, left, top = 70, 80, 44
    peak = max((v for row in cells for v in row), default=0) or 1
    parts = [
        _open(left + 2 * size + 20, top + 2 * size + 16),
        f"<title>{escape(title)}</title>",
        f'<text x="4" y="14" {_FONT} font-weight="bold">{escape(title)}</text>',
        f'<text x="{left + size}" y="30" text-anchor="middle" {_FONT}>{escape(columns)} 1 · 0</text>',
    ]
    for r, real in enumerate((1, 0)):
        parts.append(f'<text x="{left - 6}" y="{top + r * size + size / 2 + 4}" text-anchor="end" {_FONT}>'
                     f"{escape(rows)} {real}</text>")  # fmt: skip
        for c, predicted in enumerate((1, 0)):
            value = cells[real][predicted]
            shade = int(245 - 170 * value / peak)
            fill = f"rgb({shade},{shade},255)" if real == predicted else f"rgb(255,{shade},{shade})"
            x, y = left + c * size, top + r * size
            parts.append(
                f'<rect x="{x}" y="{y}" width="{size - 2}" height="{size - 2}" fill="{fill}">'
                f"<title>{escape(rows)} {real}, {escape(columns)} {predicted}: {value}</title></rect>"
                f'<text x="{x + size / 2 - 1}" y="{y + size / 2 + 4}" text-anchor="middle" {_FONT}>{value}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)
