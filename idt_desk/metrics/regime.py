"""The estimator's regime: whether a window resolves the loop or the estimator is blind.

The plug-in entropies of a window of W transitions see a loop only through how often each
(S, A, S') recurs in it. Two regimes leave them little to say, and the readout names them
wherever a window is shown (``info["idt"]``, the dashboard's alarm panel, a run's status):

- **saturated**: nearly every (S, A, S') of the window is distinct (``unique_frac`` =
  K_SAS / W ≥ :data:`SATURATED`): each (S, A) is followed by one S' because it occurs once,
  the entropies sit at their ceiling given W, and P says more about the estimator than the
  loop (i.i.d. noise gives P near 1/2). **sparse** is the way there (≥ :data:`SPARSE`: most
  triples occur once or twice; the plug-in bias, about (K − 1) / (2 W ln 2) bits per
  entropy, is large). Fewer bins, a grouped preset or a longer window resolve it.
- **cycle**: the window is an exact cycle (H_f = 0, at most :data:`CYCLE` of W distinct: the
  settled HalfCheetah agent repeats 6 triples in 300). The entropies are 0 while the cycle
  holds and the IDT sees a change as the loop leaving it; variation inside the cycle is
  below the bins (more bins show it).

- **still**: the state moved less than one bin in every binned variable over the window
  (``motion`` < :data:`STILL`): the loop is at rest, or moves below the bins. The entropies
  see a constant or a jitter across one edge (P is undefined where S never leaves its bin):
  no change of coupling can show until it moves again. For a passive loop that has lost its
  energy (a pendulum after friction) this is the news; for an agent holding a balance it
  may be its task, and the IDT is blind to it all the same.

Everything else is **resolved**. The measurements behind the thresholds (shipped agents,
the wrappers' default of 3 bins a variable, W = 300): HalfCheetah SAC seed 2 (chaotic) has a
median ``unique_frac`` of 0.84, PPO seed 0 0.65, SAC seed 3 (settled) 0.027 with H_f = 0 in
half its windows; Reacher SAC 0.34; Pendulum-v1 SAC 0.08 (assets/docs/rl-beyond.md).
"""

from __future__ import annotations

import math

__all__ = ["CYCLE", "REGIMES", "SATURATED", "SPARSE", "STILL", "regime", "regime_text"]

#: At least this share of distinct (S, A, S') in a window: saturated.
SATURATED = 0.9
#: At least this share: sparse (the estimates are biased and weak; on the way to saturated).
SPARSE = 0.6
#: At most this share of distinct triples, with H_f = 0: an exact cycle.
CYCLE = 0.1
#: A window whose S spread less than this many bins in every binned variable: still (one
#: bin is what the symbols resolve).
STILL = 1.0
#: The regimes, and what each means for the IDT and what to do (the readout's words).
REGIMES = {
    "resolved": "the window resolves the loop: its (S, A, S') recur often enough for the "
                "entropies to measure it",
    "sparse": "most (S, A, S') occur once or twice in the window: the entropies are biased "
              "low and changes show weakly; fewer bins, a grouped preset or a longer window "
              "resolve it",
    "saturated": "nearly every (S, A, S') in the window is distinct: the entropies sit at "
                 "their ceiling and P measures the estimator, not the loop (blind); use fewer "
                 "bins, a grouped preset or a longer window",
    "still": "the state moved less than one bin in every variable: the loop is at rest (or "
             "moves below the bins), the entropies see no motion and no change of coupling can "
             "show until it moves again",
    "cycle": "the loop repeats an exact cycle: H_f and H_b are 0 while it holds, and the IDT "
             "sees a change as the loop leaving its cycle; variation inside the cycle is "
             "below the bins (more bins show it)",
}


def regime(unique_frac: float, h_f: float, motion: float = math.nan) -> str:
    """The regime of one window (``""``: unknown, a window without these numbers).

    ``motion``: how far S spread over the window, in bins (the window's ``motion``; NaN:
    not measured, as on a dialogue's turns).

    >>> regime(0.84, 0.52), regime(0.65, 1.1), regime(0.02, 0.0), regime(0.34, 0.3)
    ('sparse', 'sparse', 'cycle', 'resolved')
    >>> regime(0.95, 0.0), regime(0.0033, 0.0, motion=0.2), regime(0.02, 0.0, motion=2.5)
    ('saturated', 'still', 'cycle')
    """
    try:
        u, hf, moved = float(unique_frac), float(h_f), float(motion)
    except (TypeError, ValueError):
        return ""
    if not math.isfinite(u):
        return ""
    if moved < STILL:
        return "still"
    if u >= SATURATED:
        return "saturated"
    if u >= SPARSE:
        return "sparse"
    if u <= CYCLE and hf == 0.0:
        return "cycle"
    return "resolved"


def regime_text(name: str, unique_frac: float | None = None, window: int | None = None
                ) -> str:
    """The regime in a sentence: its name, the window's distinct triples, what it means."""
    if name not in REGIMES:
        return ""
    count = ""
    if unique_frac is not None and window and math.isfinite(float(unique_frac)):
        count = f" ({round(float(unique_frac) * window):,} distinct (S, A, S') of {window:,})"
    return f"estimator {name}{count}: {REGIMES[name]}"
