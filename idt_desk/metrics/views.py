"""The view an ``auto`` preset symbolises through, chosen on its calibration windows.

Three bins of every variable (the paper's HalfCheetah numbers with each variable its own
group) resolve some loops and not others: a window of W = 300 on a wide, chaotic one holds
mostly distinct (S, A, S') (**saturated** or **sparse**, :mod:`idt_desk.metrics.regime`),
and a settled agent's window repeats an exact gait **cycle**. Measured on the six shipped
HalfCheetah agents (the training env of this rule; ``assets/docs/rl-beyond.md``), the median window
of 3 bins a variable holds 83 % distinct triples on SAC seed 2, 73 % on PPO seed 0 and 95 %
on PPO seed 1, and SAC seed 3 repeats 6 triples in 300.

An ``auto`` preset (``Preset.auto_view``) therefore tries the views of :data:`LADDER` in
order on the calibration rows and keeps the first that resolves at least 90 % of its
calibration windows: all variables at 3 bins, then at 2, then the top principal components
of the state's and the action's z-scores (``Symbolizer(components=...)``) at fewer bins;
last, the same kinds of view with bins at the calibration rows' quantiles
(``Symbolizer(quantile=True)``), which split where a balancing agent sits still. A loop the
first view resolves keeps it (the pendulum and Reacher agents do); where none resolves most
windows, the view with the most resolved windows is kept and the readout says what the
windows are. The choice is made once, on the rows the symbols are fitted on, so a replay of
the same rows makes it again. A discrete space keeps its own values as bins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from idt_desk.metrics.engine import sliding_metrics
from idt_desk.metrics.regime import regime
from idt_desk.metrics.symbolize import Symbolizer

__all__ = ["LADDER", "View", "choose_view", "view_ladder", "view_scores", "view_symbolizers"]


@dataclass(frozen=True)
class View:
    """How a space is binned: ``bins`` a column, of the variables or of their top components.

    ``state_components`` / ``action_components``: the top this-many principal components of
    that side's z-scores (None: every variable; a space with no more variables than that
    keeps its variables).
    """

    bins: int
    state_components: int | None = None
    action_components: int | None = None
    #: Bins cut at the calibration rows' quantiles (``Symbolizer(quantile=True)``), not at
    #: equal widths of their range.
    quantile: bool = False

    @property
    def name(self) -> str:
        """The view in words (``3 bins a variable``, ``S 4 / A 2 components, 3 bins``)."""
        bins = f"{self.bins} quantile bins" if self.quantile else f"{self.bins} bins"
        if self.state_components is None and self.action_components is None:
            return f"{bins} a variable"
        s = "all" if self.state_components is None else self.state_components
        a = "all" if self.action_components is None else self.action_components
        return f"S {s} / A {a} principal components, {bins}"


#: The views an ``auto`` preset tries, in order (its ``bins`` replace the first's): equal
#: widths (fixed on the HalfCheetah agents), then the same kinds of view with quantile bins,
#: for a loop that sits at a fixed point most of the time (its range is a transient's, and
#: equal widths put everything it does while settled in one bin: a *cycle*; fixed on the
#: balancing InvertedPendulum-v5 agent at seed 101, ``assets/docs/rl-beyond.md``).
LADDER = (View(3), View(2), View(3, 4, 2), View(3, 3, 2), View(2, 4, 2), View(3, 3, 1),
          View(3, 2, 1), View(2, 2, 1), View(3, quantile=True), View(2, quantile=True),
          View(3, 4, 2, quantile=True), View(3, 2, 1, quantile=True),
          View(2, 2, 1, quantile=True))


def view_ladder(bins: int) -> tuple[View, ...]:
    """The views an ``auto`` preset of ``bins`` tries: :data:`LADDER`, its first at ``bins``."""
    return (View(int(bins)), *LADDER[1:])


def view_symbolizers(
    view: View,
    state_names: Sequence[str],
    action_names: Sequence[str] | None,
    *,
    state_bins: int | None = None,
    action_bins: int | None = None,
    circular: Sequence[int] = (),
) -> tuple[Symbolizer, Symbolizer | None]:
    """The view's state and action symbolisers, not fitted (``action_names`` None: none).

    ``state_bins`` / ``action_bins`` given (a discrete space's values) fix that side: its
    bins are not the view's and it is never projected. A side with no more variables than
    the view's components keeps its variables.
    """

    def one(names: Sequence[str], fixed: int | None, k: int | None,
            wrap: Sequence[int] = ()) -> Symbolizer:
        k = None if fixed is not None or k is None or k >= len(names) else k
        return Symbolizer(len(names), fixed or view.bins, circular=wrap, names=list(names),
                          components=k, quantile=view.quantile and fixed is None)

    sym_s = one(state_names, state_bins, view.state_components, circular)
    sym_a = None if action_names is None else one(action_names, action_bins,
                                                  view.action_components)
    return sym_s, sym_a


#: A view is kept when at least this share of the calibration windows is resolved (a margin:
#: a view that barely resolves the first windows drifts out of it later).
RESOLVED_SHARE = 0.9


def view_scores(windows: dict[str, np.ndarray]) -> dict[str, float]:
    """The share of each regime among windows (``unique_frac`` and ``H_f`` columns)."""
    names = [regime(u, h) for u, h in zip(windows["unique_frac"], windows["H_f"], strict=True)]
    n = max(len(names), 1)
    return {r: sum(x == r for x in names) / n for r in ("resolved", "sparse", "saturated",
                                                          "cycle")}


def choose_view(
    s: np.ndarray,
    a: np.ndarray | None,
    s_next: np.ndarray,
    window: int,
    stride: int,
    make: Callable[[View], tuple[Symbolizer, Symbolizer | None]],
    ladder: Sequence[View] = LADDER,
) -> tuple[int, list[dict[str, object]]]:
    """The index in ``ladder`` of the view that resolves these rows' windows, and each score.

    ``make(view)`` gives the view's symbolisers, fitted on ``s`` (and ``a``); every window of
    the rows is scored by :func:`view_scores`. The first view with at least
    :data:`RESOLVED_SHARE` of its windows resolved is chosen (views after it are not tried);
    if none, the one with the most resolved windows (the earliest of equals).
    """
    scores: list[dict[str, object]] = []
    for view in ladder:
        sym_s, sym_a = make(view)
        both = sym_s.transform(np.concatenate([s, s_next]))
        k = len(s)
        w = sliding_metrics(both[:k], both[k:], None if sym_a is None else sym_a.transform(a),
                            window, stride)
        score = view_scores(w)
        scores.append({"view": view.name, "median_unique_frac": float(np.median(
            w["unique_frac"])) if len(w["unique_frac"]) else float("nan"), **score})
        if score["resolved"] >= RESOLVED_SHARE:
            return len(scores) - 1, scores
    best = max(range(len(scores)), key=lambda i: (scores[i]["resolved"], -i))
    return best, scores
