"""Line charts of a run's series as standalone SVG, drawn without any plotting library, and the trend check.

Each chart has both axes with round tick values (1, 2 or 5 times a power of ten; whole steps on the x axis), an
x label ("step") and a y label with the unit the series is in (`unit_of`: a cross-entropy loss in nats per
token, GRPO's surrogate objective and DPO's pair loss named as what they are, a reward or a match rate as a
fraction of 1), and the title kept inside the drawing. A noisy series (SMOOTH_POINTS points or more) is drawn
raw in a light line with its running mean over it. `chart_order` puts rewards first, then held-out scores, then
losses, then the rest; `constant` names a series that never moved (GRPO's kl with kl_beta 0), which gets a line
in the report instead of a flat chart. `wrong_way` says, in plain words, when a curve of at least MIN_POINTS
points moved against its goal over the run (a loss that rose, a reward or a score that fell); the chart then
carries that note in red, and the report lists it (tt_host.reports.report).
"""

from __future__ import annotations

import html
import math
from typing import Optional

WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 72, 24, 34, 52  # room for the y tick labels, the title and the x label
TICKS = 5
RISING = ("reward", "accuracy", "exact_match", "token_f1", "match", "score", "pass_rate")  # higher is better
MIN_POINTS = 10  # fewer points than this say nothing about a trend (4 points of a noisy reward did not)
SMOOTH_POINTS = 12  # from this many points a series is drawn raw (light) with its running mean over it
TOLERANCE = 0.05  # a change smaller than 5% of the curve's range is noise, not a direction


def unit_of(name: str) -> str:
    """The y axis label of a series: its last name part with the unit it is measured in."""
    stage, leaf = (name.rsplit(".", 1) if "." in name else ("", name))
    if stage.endswith("reinforce") and leaf == "loss":
        return "loss (GRPO's surrogate objective, no unit)"
    if stage.endswith("preference") and leaf == "loss":
        return "loss (DPO, nats per pair)"
    if "loss" in leaf:
        return f"{leaf} (nats/token)"
    if any(word in leaf for word in RISING):
        return f"{leaf} (fraction, 0–1)"
    if leaf in ("lr", "learning_rate"):
        return f"{leaf} (per step)"
    if "bpb" in leaf:
        return f"{leaf} (bits/byte)"
    return leaf


def chart_order(name: str) -> tuple[int, str]:
    """Rewards first, then held-out scores, then losses, then the rest (by name within each)."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf.startswith("reward") and leaf != "reward_std" or leaf.endswith("_reward"):
        return 0, name
    if any(word in leaf for word in RISING):
        return 1, name
    return (2 if "loss" in leaf else 3), name


def constant(points: list) -> Optional[float]:
    """The one value a series of two or more points holds at every step, else None."""
    ys = {y for _, y in finite_points(points)}
    return ys.pop() if len(ys) == 1 and len(finite_points(points)) > 1 else None


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
    if unit_of(name).startswith("loss (GRPO"):  # its surrogate objective need not fall as the reward rises
        return None
    k = max(1, len(pts) // 5)
    first = sum(y for _, y in pts[:k]) / k
    last = sum(y for _, y in pts[-k:]) / k
    ys = [y for _, y in pts]
    span = (max(ys) - min(ys)) or abs(first) or 1.0
    change = last - first
    if abs(change) <= TOLERANCE * span:
        return None
    said = (f"{first:.3g} on average over its first fifth, {last:.3g} over its last ({len(pts)} points)")
    if falling_is_good and change > 0:
        return (f"{name} rose over the run: {said}; a loss should fall, so the learning rate may be too high or "
                "the data may not fit the task")
    if not falling_is_good and change < 0:
        return (f"{name} fell over the run: {said}; it should rise, so the model got worse at the task (try a "
                "lower learning rate or fewer steps)")
    return None


def nice_ticks(low: float, high: float, whole: bool = False) -> list[float]:
    """About TICKS round values (1, 2 or 5 times a power of ten; whole numbers when `whole`) from the last one at
    or below `low` to the first one at or above `high`: the axis's ends."""
    raw = (high - low) / (TICKS - 1) or 1.0
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw * 0.999)
    if whole:
        step = max(1.0, float(round(step)))
    first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
    return [round(n * step, 12) for n in range(first, max(last, first + 1) + 1)]


def running_mean(pts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Each point's mean over the window ending there (a tenth of the series, at least 3 points)."""
    window = max(3, len(pts) // 10)
    ys = [y for _, y in pts]
    return [(x, sum(ys[max(0, i - window + 1):i + 1]) / len(ys[max(0, i - window + 1):i + 1]))
            for i, (x, _) in enumerate(pts)]


def tick_labels(ticks: list[float]) -> list[str]:
    """The ticks as text with the decimals their spacing needs (0.4 0.5 0.6; 0 5 10), scientific when tiny."""
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else 1.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    if decimals > 5 or max(abs(t) for t in ticks) >= 1e6:
        return [f"{t:.3g}" for t in ticks]
    return [f"{t:.{decimals}f}" for t in ticks]


def svg_chart(name: str, points: list, note: Optional[str] = None, x_label: str = "step",
              markers: bool = False) -> str:
    """One series as an SVG line chart with axes, tick values, units and (when given) a note in red;
    `markers`: the points as dots, unjoined (a sweep's score against one setting)."""
    pts = finite_points(points) or [(0.0, 0.0)]
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    x_ticks = nice_ticks(min(xs), (max(xs) if max(xs) > min(xs) else min(xs) + 1),
                         whole=all(x.is_integer() for x in xs))
    y_ticks = nice_ticks(min(ys), (max(ys) if max(ys) > min(ys) else min(ys) + 1))
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]
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
    for x, label in zip(x_ticks, tick_labels(x_ticks)):
        parts.append(f'<line x1="{sx(x):.1f}" y1="{TOP}" x2="{sx(x):.1f}" y2="{TOP + plot_h}" stroke="#eee"/>')
        parts.append(f'<text x="{sx(x):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle" {font} '
                     f'font-size="11">{label}</text>')
    for y, label in zip(y_ticks, tick_labels(y_ticks)):
        parts.append(f'<line x1="{LEFT}" y1="{sy(y):.1f}" x2="{LEFT + plot_w}" y2="{sy(y):.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{sy(y) + 4:.1f}" text-anchor="end" {font} font-size="11">{label}</text>')
    parts += [
        f'<line class="axis" x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" stroke="#333"/>',
        f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="#333"/>',
        f'<text x="{LEFT + plot_w / 2:.0f}" y="{HEIGHT - 18}" text-anchor="middle" {font} '
        f'font-size="12">{html.escape(x_label)}</text>',
        f'<text transform="translate(16,{TOP + plot_h / 2:.0f}) rotate(-90)" text-anchor="middle" {font} '
        f'font-size="12">{html.escape(unit_of(name))}</text>',
    ]

    def line(points: list[tuple[float, float]]) -> str:
        return " ".join(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for i, (x, y) in enumerate(points))

    if markers:
        parts += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4" fill="#1f77b4"/>' for x, y in pts]
    elif len(pts) >= SMOOTH_POINTS:  # raw, light; its running mean over it
        parts.append(f'<path class="raw" d="{line(pts)}" fill="none" stroke="#9ecae1" stroke-width="1"/>')
        parts.append(f'<path class="smoothed" d="{line(running_mean(pts))}" fill="none" stroke="#1f77b4" '
                     'stroke-width="2"/>')
        parts.append(f'<text x="{LEFT + plot_w:.0f}" y="{TOP - 6}" text-anchor="end" {font} font-size="10" '
                     f'fill="#555">light: each step · dark: running mean of {max(3, len(pts) // 10)}</text>')
    else:
        parts.append(f'<path d="{line(pts)}" fill="none" stroke="#1f77b4" stroke-width="1.8"/>')
    if note:
        short = note.split(":", 1)[0]
        parts.append(f'<text class="wrong-way" x="{WIDTH / 2:.0f}" y="{HEIGHT - 4}" text-anchor="middle" {font} '
                     f'font-size="11" fill="#c00">⚠ {html.escape(short)}</text>')
    parts.append("</svg>\n")
    return "".join(parts)
