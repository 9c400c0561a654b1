"""The audit timeline's chart: versions per day, stacked by actor or by session, as SVG geometry.

The page draws it with plain ``<rect>`` elements (no script, no inline style: colours come from the
stylesheet's ``s0``...``s7`` classes), so it works offline and under the console's CSP.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

MAX_SERIES = 7  # the rest are summed as "other"
MAX_DAYS = 90
WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 720, 220, 40, 30, 10


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    series: int
    title: str


@dataclass(frozen=True)
class Chart:
    group: str
    bars: list[Bar] = field(default_factory=list)
    legend: list[tuple[int, str, int]] = field(default_factory=list)  # (series, label, versions)
    ticks: list[tuple[float, str]] = field(default_factory=list)  # x, day label
    y_ticks: list[tuple[float, int]] = field(default_factory=list)
    days: int = 0
    clipped: bool = False
    width: int = WIDTH
    height: int = HEIGHT


def build(points: Iterable[tuple[dt.datetime, str]], group: str) -> Chart:
    """``points``: (time, key) per version; one bar per day from the first to the last day."""
    per_day: dict[dt.date, Counter[str]] = {}
    totals: Counter[str] = Counter()
    for at, key in points:
        per_day.setdefault(at.astimezone(dt.UTC).date(), Counter())[key] += 1
        totals[key] += 1
    if not per_day:
        return Chart(group)
    last = max(per_day)
    first = max(min(per_day), last - dt.timedelta(days=MAX_DAYS - 1))
    clipped = min(per_day) < first
    days = [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]
    top = [k for k, _n in totals.most_common(MAX_SERIES)]
    series = {k: i for i, k in enumerate(top)}
    other = len(top) if len(totals) > len(top) else None
    peak = max(sum(per_day.get(d, Counter()).values()) for d in days) or 1
    plot_w, plot_h = WIDTH - LEFT - 10, HEIGHT - BOTTOM - TOP
    step = plot_w / len(days)
    bars: list[Bar] = []
    for i, day in enumerate(days):
        counts = per_day.get(day, Counter())
        stacked: Counter[int] = Counter()
        for key, n in counts.items():
            stacked[series.get(key, other if other is not None else 0)] += n
        y = float(TOP + plot_h)
        for s in sorted(stacked):
            h = plot_h * stacked[s] / peak
            y -= h
            label = top[s] if s < len(top) else "other"
            bars.append(
                Bar(LEFT + i * step + step * 0.1, y, step * 0.8, h, s, f"{day}: {label}: {stacked[s]}")
            )
    every = max(1, len(days) // 8)
    ticks = [(LEFT + i * step + step / 2, d.isoformat()[5:]) for i, d in enumerate(days) if i % every == 0]
    y_ticks = [(TOP + plot_h - plot_h * f, round(peak * f)) for f in (0.0, 0.5, 1.0)]
    legend = [(series[k], k, totals[k]) for k in top]
    if other is not None:
        legend.append((other, "other", sum(n for k, n in totals.items() if k not in series)))
    return Chart(group, bars, legend, ticks, y_ticks, len(days), clipped)
