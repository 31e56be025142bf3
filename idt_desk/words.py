"""Durations in words, one way everywhere: waits, estimates and "active 3 min ago".

>>> duration_text(42), duration_text(130), duration_text(3_900), duration_text(200_000)
('42 s', '2 min 10 s', '1 h 05 min', '2 d 8 h')
>>> ago_text(130), eta_text(12_000, 2_400.0), eta_text(100, 0.0)
('2 min ago', 'about 5 s', '')
"""

from __future__ import annotations

import math

__all__ = ["ago_text", "duration_text", "eta_text"]


def duration_text(seconds: float) -> str:
    """``seconds`` as people say it: two units at most (``2 min 10 s``, ``1 h 05 min``)."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        m, s = divmod(s, 60)
        return f"{m} min {s} s" if s else f"{m} min"
    if s < 86400:
        h, m = divmod(round(s / 60), 60)
        return f"{h} h {m:02d} min"
    d, h = divmod(round(s / 3600), 24)
    return f"{d} d {h} h" if h else f"{d} d"


def ago_text(seconds: float) -> str:
    """How long ago, in its largest unit only (``3 min ago``): a table's column."""
    s = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:.0f} {unit} ago"
    return f"{s:.0f} s ago"


def eta_text(transitions: float, per_s: float) -> str:
    """How long ``transitions`` take at ``per_s`` a second (``about 2 min``; "" unknown)."""
    if not per_s or not math.isfinite(per_s) or per_s <= 0 or not math.isfinite(transitions):
        return ""
    return f"about {duration_text(max(0.0, transitions) / per_s)}"
