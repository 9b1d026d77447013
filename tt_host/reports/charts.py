"""Line charts of a run's series as standalone SVG, drawn without any plotting library, and the trend check.

Each chart has both axes with tick values, an x label ("step") and a y label with the unit the series is in
(`unit_of`: a loss in nats per token, a reward or a match rate as a fraction of 1), and the title kept inside
the drawing. `wrong_way` says when a curve moved against its goal over the run (a loss that rose, a reward or a
score that fell); the chart then carries that note in red, and the report lists it (tt_host.reports.report).
"""

from __future__ import annotations

import html
import math
from typing import Optional

WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 72, 24, 34, 52  # room for the y tick labels, the title and the x label
TICKS = 5
RISING = ("reward", "accuracy", "exact_match", "token_f1", "match", "score", "pass_rate")  # higher is better
MIN_POINTS = 4  # fewer points than this say nothing about a trend
TOLERANCE = 0.05  # a change smaller than 5% of the curve's range is noise, not a direction


def unit_of(name: str) -> str:
    """The y axis label of a series: its last name part with the unit it is measured in."""
    leaf = name.rsplit(".", 1)[-1]
    if "loss" in leaf:
        return f"{leaf} (nats/token)"
    if any(word in leaf for word in RISING):
        return f"{leaf} (fraction, 0–1)"
    if leaf in ("lr", "learning_rate"):
        return f"{leaf} (per step)"
    if "bpb" in leaf:
        return f"{leaf} (bits/byte)"
    return leaf


def finite_points(points: list) -> list[tuple[float, float]]:
    out = []
    for point in points:
        try:
            x, y = float(point[0]), float(point[1])
        except (TypeError, ValueError, IndexError):
            continue
        if math.isfinite(x) and math.isfinite(y):
            out.append((x, y))
    return out


def wrong_way(name: str, points: list) -> Optional[str]:
    """A sentence when the curve went against its goal (the mean of its last fifth against its first fifth),
    else None. Only losses (should fall) and rewards, accuracies and scores (should rise) are judged."""
    pts = finite_points(points)
    leaf = name.rsplit(".", 1)[-1]
    falling_is_good = "loss" in leaf or "bpb" in leaf
    if len(pts) < MIN_POINTS or not (falling_is_good or any(word in leaf for word in RISING)):
        return None
    k = max(1, len(pts) // 5)
    first = sum(y for _, y in pts[:k]) / k
    last = sum(y for _, y in pts[-k:]) / k
    ys = [y for _, y in pts]
    span = (max(ys) - min(ys)) or abs(first) or 1.0
    change = last - first
    if abs(change) <= TOLERANCE * span:
        return None
    if falling_is_good and change > 0:
        return (f"{name} rose from {first:.4g} to {last:.4g} (first to last fifth of its {len(pts)} points): a loss "
                "should fall; the learning rate may be too high or the data may not fit the task")
    if not falling_is_good and change < 0:
        return (f"{name} fell from {first:.4g} to {last:.4g} (first to last fifth of its {len(pts)} points): it "
                "should rise; the policy got worse at the task (try a lower learning rate or fewer steps)")
    return None


def _ticks(low: float, high: float) -> list[float]:
    return [low + (high - low) * i / (TICKS - 1) for i in range(TICKS)]


def svg_chart(name: str, points: list, note: Optional[str] = None, x_label: str = "step",
              markers: bool = False) -> str:
    """One series as an SVG line chart with axes, tick values, units and (when given) a note in red;
    `markers`: the points as dots, unjoined (a sweep's score against one setting)."""
    pts = finite_points(points) or [(0.0, 0.0)]
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    x0, x1 = min(xs), (max(xs) if max(xs) > min(xs) else min(xs) + 1)
    y0, y1 = min(ys), (max(ys) if max(ys) > min(ys) else min(ys) + 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return TOP + plot_h - (y - y0) / (y1 - y0) * plot_h

    font = 'font-family="sans-serif"'
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{html.escape(name)}">',
             '<rect width="100%" height="100%" fill="white"/>',
             f'<text x="{WIDTH / 2:.0f}" y="20" text-anchor="middle" {font} font-size="14">{html.escape(name)}</text>']
    for x in _ticks(x0, x1):
        parts.append(f'<line x1="{sx(x):.1f}" y1="{TOP}" x2="{sx(x):.1f}" y2="{TOP + plot_h}" stroke="#eee"/>')
        parts.append(f'<text x="{sx(x):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle" {font} '
                     f'font-size="11">{x:.4g}</text>')
    for y in _ticks(y0, y1):
        parts.append(f'<line x1="{LEFT}" y1="{sy(y):.1f}" x2="{LEFT + plot_w}" y2="{sy(y):.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{sy(y) + 4:.1f}" text-anchor="end" {font} font-size="11">{y:.4g}</text>')
    parts += [
        f'<line class="axis" x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" stroke="#333"/>',
        f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="#333"/>',
        f'<text x="{LEFT + plot_w / 2:.0f}" y="{HEIGHT - 18}" text-anchor="middle" {font} '
        f'font-size="12">{html.escape(x_label)}</text>',
        f'<text transform="translate(16,{TOP + plot_h / 2:.0f}) rotate(-90)" text-anchor="middle" {font} '
        f'font-size="12">{html.escape(unit_of(name))}</text>',
    ]
    path = " ".join(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for i, (x, y) in enumerate(pts))
    if markers:
        parts += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4" fill="#1f77b4"/>' for x, y in pts]
    else:
        parts.append(f'<path d="{path}" fill="none" stroke="#1f77b4" stroke-width="1.8"/>')
    if note:
        short = note.split(":", 1)[0]
        parts.append(f'<text class="wrong-way" x="{WIDTH / 2:.0f}" y="{HEIGHT - 4}" text-anchor="middle" {font} '
                     f'font-size="11" fill="#c00">⚠ {html.escape(short)}</text>')
    parts.append("</svg>\n")
    return "".join(parts)
