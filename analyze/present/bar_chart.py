"""The geometry of the report's inline SVG bar charts (templates/report.html.j2 draws them)."""

from __future__ import annotations


def series(title: str, bars: list[tuple[str, float, str]], height: int = 150) -> dict:
    """An inline SVG bar chart's geometry: one bar per (label, value, hover text)."""
    top = max([v for _, v, _ in bars] + [0.0]) or 1.0
    width, gap, plot = 26, 6, height - 22
    shapes = [{"x": 8 + i * (width + gap), "width": width, "height": round(plot * v / top, 1),
               "y": round(4 + plot - plot * v / top, 1), "label": label, "tip": tip}
              for i, (label, v, tip) in enumerate(bars)]
    return {"title": title, "bars": shapes, "width": max(240, 16 + len(bars) * (width + gap)), "height": height}
