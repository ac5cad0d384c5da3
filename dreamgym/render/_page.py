"""The page shell every report shares, and its tables.

A page is one self-contained HTML file: inline CSS, inline SVG, no script,
and a Content-Security-Policy (:data:`CSP`) that forbids loading anything, so
it opens offline, from any directory, and cannot reach the network.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["CSP", "NA", "charts", "page", "table"]

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
"""The page's Content-Security-Policy: inline styles and data: images, nothing fetched."""

_CSS = """
body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1400px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
.num { text-align: right; }
th { background: #f4f4f4; }
.na { color: #888; font-style: italic; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
.charts svg { max-width: 100%; height: auto; }
.case { border: 1px solid #ccc; padding: 8px; margin: 12px 0; }
.episode { border: 2px solid #bbb; padding: 8px 12px; margin: 16px 0; }
.episode > .case { border-color: #e3e3e3; }
.episode h3 { margin: 4px 0 6px; }
.side { display: grid; grid-template-columns: 1fr 1fr; gap: 8px; }
.side > div { min-width: 0; }
pre { font-size: 12px; background: #fafafa; padding: 6px; overflow-x: auto; margin: 0;
      white-space: pre-wrap; overflow-wrap: anywhere; }
code { white-space: pre-wrap; overflow-wrap: anywhere; }
.only { background: #fde2e2; } .added { background: #e0f5e0; }
.muted { color: #666; font-size: 13px; }
.banner { padding: 10px 14px; margin: 12px 0 20px; border-radius: 4px; font-size: 16px; }
.good { background: #e0f5e0; border-left: 6px solid #27ae60; }
.bad { background: #fde2e2; border-left: 6px solid #c0392b; }
.neutral { background: #f4f4f4; border-left: 6px solid #7f8c8d; }
"""


def page(title: str, body: Iterable[str]) -> str:
    """A whole HTML document: ``title`` (text) and ``body`` (HTML fragments, joined as they are).

    Example:
        >>> page("dreamgym demo", ["<h1>dreamgym demo</h1>", table(["figure", "value"], [["n", 3]])])
    """
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )


@dataclass(frozen=True, slots=True)
class NA:
    """A table cell with no figure: shown as "n/a", with ``reason`` as its tooltip."""

    reason: str


def table(header: Sequence[object], rows: Iterable[Sequence[object]]) -> str:
    """An HTML table; floats show three decimals, :class:`NA` shows "n/a", anything else its text (escaped).

    Numbers are right-aligned, text left-aligned; a column's heading aligns with its first row.
    """
    rows = list(rows)
    first = rows[0] if rows else ()
    right = [n < len(first) and _numeric(first[n]) for n in range(len(header))]
    head = "".join(f"<th{_NUM if r else ''}>{escape(str(h))}</th>" for h, r in zip(header, right, strict=True))
    lines = ["<table><tr>" + head + "</tr>"]
    for row in rows:
        lines.append("<tr>" + "".join(_cell(v) for v in row) + "</tr>")
    lines.append("</table>")
    return "".join(lines)


_NUM = ' class="num"'


def _numeric(value: object) -> bool:
    return isinstance(value, int | float | NA) and not isinstance(value, bool)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f'<td class="num">{value:.3f}</td>'
    if isinstance(value, NA):
        return f'<td class="num na" title="{escape(value.reason)}">n/a</td>'
    if _numeric(value):
        return f'<td class="num">{value}</td>'
    return f"<td>{escape(str(value))}</td>"


def charts(svgs: Iterable[str]) -> str:
    """Charts side by side, wrapping onto the next line where the page is too narrow."""
    return f'<div class="charts">{"".join(svgs)}</div>'
