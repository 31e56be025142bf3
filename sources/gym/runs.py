"""A training run as its folder stands: ``idt-desk train --progress``, and what to keep.

A run's folder (``--checkpoint-dir``) holds ``state.json``: its steps, training time, target,
and a history with one probe a checkpoint (the deterministic return of one episode, its
share of steps upside down, and the closed loop's answer to a tiny push,
:func:`idt_desk_sources.gym.cards.nudge_growth`). A checkpoint whose loop settled while the
cheetah ran is copied to ``settled/<steps>/`` beside it, since the next checkpoint
overwrites the run's own.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from idt_desk_sources.gym.cards import settled, upside_down

__all__ = ["KEPT", "progress", "settled_running"]

#: Where a run keeps its settled checkpoints: ``settled/<steps>/`` inside its folder.
KEPT = "settled"


def settled_running(history: list[dict[str, Any]]) -> bool:
    """Whether the last probe of ``history`` found a settled loop in a running cheetah.

    Running means what the gym source's default policy asks of a card: upright (upside down
    under ``UPSIDE_DOWN_LIMIT`` of the steps) and a positive return at least
    ``SETTLED_MIN_SHARE`` of the best upright return probed so far. A body that stands
    still, crawls or lies on its back settles too, and is not one to keep.
    """
    from idt_desk_sources.gym._source import SETTLED_MIN_SHARE, UPSIDE_DOWN_LIMIT

    def upright(h: dict[str, Any]) -> bool:
        return (upside_down(h) or 0.0) < UPSIDE_DOWN_LIMIT

    probe = history[-1]
    push, score = probe.get("nudge_log10"), probe.get("return_deterministic")
    if push is None or not settled(push) or not upright(probe) or score is None or score <= 0:
        return False
    best = max(h["return_deterministic"] for h in history if upright(h)
               and isinstance(h.get("return_deterministic"), int | float))
    return score >= SETTLED_MIN_SHARE * best


def _evaluation(copy: Path) -> str:
    """A kept checkpoint's ``evaluation.json`` in words (empty if it has none)."""
    try:
        card = json.loads((copy / "evaluation.json").read_text())
        d, loop = card["return_deterministic"], card.get("closed_loop") or {}
        share, n = float(loop.get("stable_share", 0.0)), len(loop.get("log10_distance", []))
        upside = upside_down(card)
        return (f" ({d['mean']:,.0f} ± {d['std']:,.0f} deterministic, "
                + ("" if upside is None else f"{upside:.0%} upside down, ")
                + f"settled in {round(share * n)} of {n} episodes)")
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60.0)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def progress(folder: Path, now: float | None = None) -> list[str]:
    """Where each training run under ``folder`` stands, one line a run, from its checkpoint.

    A run is a sub-folder (or ``folder`` itself) holding ``state.json``: how it trains, its
    steps (of the ``--steps`` it was started or last resumed with, and the time that leaves at
    its average pace so far) and training time, how long ago its last checkpoint was written
    (a run still going writes one every few minutes), its learning curve's last and best
    deterministic episodes, at how many checkpoints its closed loop was settled while it ran
    (:func:`settled_running`; those settled otherwise are counted apart), and the copies
    kept of those checkpoints (``settled/<steps>``).
    """
    now = time.time() if now is None else now
    runs = sorted(p.parent for p in [folder / "state.json", *folder.glob("*/state.json")]
                  if p.is_file())
    lines = []
    for run in runs:
        try:
            state = json.loads((run / "state.json").read_text())
            steps, wall = int(state["steps"]), float(state["wall_seconds"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            lines.append(f"{run.name}: unreadable state.json ({exc})")
            continue
        cont = state.get("continued_from")
        how = ", ".join(x for x in ("VecNormalize" if state.get("normalize") else "",
                                    f"{int(state.get('n_envs', 1))} envs"
                                    if int(state.get("n_envs", 1)) > 1 else "",
                                    f"continued from {Path(cont['checkpoint']).name} at "
                                    f"{int(cont['steps']):,} steps"
                                    if isinstance(cont, dict) else "") if x)
        age = now - (run / "state.json").stat().st_mtime
        target, of, left = state.get("target_steps"), "", ""
        if isinstance(target, int) and target > steps > 0 and wall > 0:
            of = f" of {target:,}"
            left = f", about {_duration((target - steps) * wall / steps)} to go at its pace so far"
        line = (f"{run.name}{f' ({how})' if how else ''}: {steps:,}{of} steps in "
                f"{_duration(wall)}{left}; last checkpoint {_duration(age)} ago")
        history = [h for h in state.get("history", []) if isinstance(h, dict)
                   and isinstance(h.get("return_deterministic"), int | float)]
        if history:
            last = history[-1]
            best = max(history, key=lambda h: h["return_deterministic"])
            push = last.get("nudge_log10")
            upside = upside_down(last)
            said = ", ".join(
                ([] if upside is None else [f"{upside:.0%} upside down"])
                + ([] if push is None else
                   [f"push log10 {push:+.1f}: {'settled' if settled(push) else 'chaotic'}"]))
            probed = [i for i, h in enumerate(history) if h.get("nudge_log10") is not None]
            running = sum(settled_running(history[:i + 1]) for i in probed)
            still = sum(settled(history[i]["nudge_log10"]) for i in probed) - running
            line += (f"; episode at {last['steps']:,}: {last['return_deterministic']:,.0f}"
                     + (f" ({said})" if said else "")
                     + f"; best {best['return_deterministic']:,.0f} at {best['steps']:,}; "
                     f"settled at {running} of {len(probed)} checkpoints"
                     + (f" ({still} more standing, crawling or upside down)" if still else ""))
        kept = sorted((int(d.parent.name), d.parent) for d in
                      run.glob(f"{KEPT}/*/state.json") if d.parent.name.isdigit())
        if kept:
            line += "; kept: " + ", ".join(str(d.relative_to(run)) + _evaluation(d)
                                           for _n, d in kept)
        lines.append(line)
    return lines
