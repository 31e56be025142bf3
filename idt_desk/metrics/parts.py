"""One IDT per part of the state (``Preset.parts``).

The parts' tables as one, and the components a detector watches.

A preset with parts gives each named group of state variables an IDT of its own (S and S'
that group's composite symbol, A the whole action). The pipeline runs one engine per part;
:func:`part_windows` joins their tables, :func:`part_metrics` names what the alarm watches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from idt_desk.metrics.presets import Preset

__all__ = ["part_metrics", "part_windows"]


def part_windows(parts: Sequence[str], tables: Sequence[Mapping[str, np.ndarray]]
                 ) -> dict[str, np.ndarray]:
    """One table from the parts' engine tables (``Preset.parts``).

    Each part's columns as ``<column>@<part>``, ``start`` once, and under each plain name the
    mean over the parts (a count's mean is a float): what the plots show of the whole body.
    """
    first = tables[0]
    out: dict[str, np.ndarray] = {"start": first["start"]}
    for key in first:
        if key == "start":
            continue
        cols = [np.asarray(t[key]) for t in tables]
        for part, col in zip(parts, cols, strict=True):
            out[f"{key}@{part}"] = col
        out[key] = np.mean(cols, axis=0)
    return out


def part_metrics(preset: Preset, metrics: Sequence[str]) -> tuple[str, ...]:
    """The components a detector watches: ``metrics``, or each part's of a preset with parts."""
    if not preset.parts:
        return tuple(metrics)
    return tuple(f"{m}@{p}" for p in preset.parts for m in metrics)
