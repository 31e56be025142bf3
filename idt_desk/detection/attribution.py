"""Which class of change an alarm saw: sensor, actuator, force or dynamics, from the twin.

The IDT's terms say how far the loop's coupling moved, not what moved it: on a settled agent
every class of change moves every term alike. The loop's own nominal model does separate them
(:mod:`idt_desk.metrics.twin`; model-based fault isolation with structured residuals): at an
alarm, :func:`attribute` reads what the twin saw in the alarm's window against its baseline
windows (:class:`~idt_desk.metrics.twin.TwinEvidence`) and names one class by a fixed rule
(:class:`Rule`; its thresholds were chosen on training seeds and judged on seeds never used:
``assets/docs/rl-twin.md``):

1. a **bias** — some variable's mean residual at least ``bias`` σ from its baseline and
   ``t`` standard errors out of the window's own scatter — that one of the twin's hypotheses
   explains (|cosine| at least ``match`` between the bias and the change the hypothesis
   predicts over the same rows): that hypothesis's class, **force** (an external push) or
   **dynamics** (gravity, a payload), with the size that explains the bias (a least-squares
   fit along the hypothesis's effect: "+9.8 N", "×1.52");
2. else the positions' residual **spreads** (its spread ``spread`` σ above its baseline):
   **sensor** — zero-mean noise in what is measured, which an error in the physics barely
   puts on the positions;
3. else a bias of ``unexplained`` σ or more that no hypothesis explains: **unknown**, a change
   the twin cannot simulate;
4. else **actuator**: the physics is intact (or only the velocities' residual moved, as a
   twin that is off gives when the gait changes) and what changed is the action given the
   state (A is recorded as applied); in a passive loop (no action), something pushes it:
   **force**.

A loop without a twin gets ``unknown``, and the reason (``Source.twin_note``). Every
attribution comes with its evidence in words ("a bias on vx (+41 sd) that an external force
on torso along x (+9.8 N) explains (cos 0.98): an external force").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from idt_desk.metrics.twin import TwinEvidence

__all__ = ["CLASSES", "RULE", "UNKNOWN", "Rule", "attribute", "twin_attribution"]

#: The classes of change.
CLASSES = ("sensor", "actuator", "force", "dynamics")
#: What an alarm is attributed to when the evidence does not decide (or there is no twin).
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Rule:
    """The attribution's thresholds.

    Attributes
    ----------
    bias
        σ (of the baseline windows' mean residual) from which a variable's mean residual is
        a bias.
    t
        Its change in standard errors of the window's own residual from which a bias stands
        out of the window's scatter (zero-mean noise leaves it near 1).
    match
        |cosine| from which a hypothesis explains a bias.
    spread
        σ (of the baseline windows' spread) from which a residual spreads.
    unexplained
        σ from which a bias no hypothesis explains is a change the twin cannot name.

    """

    bias: float = 5.0
    t: float = 5.0
    match: float = 0.8
    spread: float = 3.0
    unexplained: float = 25.0


#: The rule in force: its thresholds chosen on training seeds (HalfCheetah, seeds 1 and 100)
#: and fixed before it was judged on seeds never used (how often it is right: the RL pages of
#: the documentation, which the study regenerates; never said in an alarm's text).
RULE = Rule()


def _cosine(u: np.ndarray, v: np.ndarray) -> float:
    nu, nv = float(np.linalg.norm(u)), float(np.linalg.norm(v))
    return float(u @ v) / (nu * nv) if nu > 0 and nv > 0 else 0.0


def _sd(x: float) -> str:
    """σ in words: "+41.2 sd", or "+≫1000 sd" against a baseline at rounding."""
    return f"{x:+.1f} sd" if abs(x) < 1000 else f"{'+' if x > 0 else '−'}≫1000 sd"


def attribute(ev: TwinEvidence | None, *, passive: bool = False, note: str = "",
              rule: Rule = RULE) -> dict[str, Any]:
    """The class of change of one alarm: ``{"attribution", "evidence", "twin"}``.

    ``attribution`` is one of :data:`CLASSES` or ``unknown``; ``evidence`` says why in
    words; ``twin`` holds the numbers the rule read (absent without evidence). ``ev`` None:
    no twin (``note`` says why) or no baseline yet. ``passive``: the loop has no action.
    """
    if ev is None:
        return {"attribution": UNKNOWN,
                "evidence": note or "the twin has no baseline yet: no class of change"}
    # A bias is a mean that moved from the baseline's and stands out of the window's scatter.
    stands = np.isfinite(ev.bias) & (np.abs(np.nan_to_num(ev.t)) >= rule.t)
    bias = np.where(stands, ev.bias, 0.0)
    top = int(np.argmax(np.abs(bias))) if bias.size else 0
    b = float(bias[top]) if bias.size else 0.0
    name = ev.names[top] if top < len(ev.names) else f"variable {top}"
    fits = [(abs(_cosine(d, bias)), _cosine(d, bias), h, d) for h, d in ev.hypotheses]
    fit, cos, hyp, d = max(fits, key=lambda f: f[0]) if fits else (0.0, 0.0, None, None)
    sp_pos = ev.z.get("R_spread_pos", 0.0)
    sp_vel = ev.z.get("R_spread_vel", 0.0)
    numbers = {"bias": round(b, 2), "bias_on": name, "spread_pos": round(sp_pos, 2),
               "spread_vel": round(sp_vel, 2), "match": round(cos, 3),
               "hypothesis": None if hyp is None else hyp.name}
    # The size along the hypothesis's effect that best explains every variable's bias.
    raw = np.nan_to_num(np.asarray(ev.bias, dtype=np.float64))
    k = float(d @ raw) / float(d @ d) if d is not None and float(d @ d) > 0 else float("nan")
    moved = f"a bias on {name} ({_sd(b)})"
    intact = abs(b) < rule.bias and max(sp_pos, sp_vel, ev.z.get("R_shift_pos", 0.0),
                                        ev.z.get("R_shift_vel", 0.0)) < rule.spread
    iso = ev.isolation
    if iso is not None and iso.best is not None and not intact and (
            iso.named or abs(b) >= rule.bias or sp_pos < rule.spread):
        return _isolated(iso, numbers)
    if iso is not None:
        # No hypothesis named, and the positions' residual spreads with no bias: noise in
        # what is measured, spread over the variables alike (no structure for the bank).
        numbers["isolation"] = iso.to_dict()
    if abs(b) >= rule.bias and hyp is not None and fit >= rule.match:
        what = "an external force" if hyp.cls == "force" else "the dynamics changed"
        size = f" ({hyp.value(k)})" if np.isfinite(k) else ""
        numbers["size"] = None if not np.isfinite(k) else float(f"{hyp.base + k * hyp.size:.4g}")
        cls, words = hyp.cls, (f"{moved} that {hyp.words}{size} explains (cos {cos:+.2f}): "
                               f"{what}")
    elif sp_pos >= rule.spread:
        ratio = ev.ratio.get("R_spread_pos", float("nan"))
        by = f"×{ratio:.2g}" if ratio < 1000 else "from rounding"
        cls, words = "sensor", (f"the positions' residual spreads {by} ({_sd(sp_pos)}) with no "
                                "physical bias: noise in what is measured")
    elif abs(b) >= rule.unexplained:
        cls, words = UNKNOWN, f"{moved} that no change the twin can simulate explains"
    else:
        if abs(b) < rule.bias and sp_vel < rule.spread:
            seen = "physics intact (the twin's residual within its baseline)"
        else:
            seen = (f"the velocities' residual moved ({_sd(max(sp_vel, abs(b)))}), the "
                    "positions' did not spread")
        if passive:
            cls, words = "force", f"{seen}: something pushes the loop"
        else:
            cls, words = "actuator", f"{seen}: the action given the state changed"
    return {"attribution": cls, "evidence": words, "twin": numbers}


def _isolated(iso: Any, numbers: dict[str, Any]) -> dict[str, Any]:
    """The class, the component and the size the bank of fault hypotheses named.

    "unknown" where its best explains under :data:`~idt_desk.detection.isolation.MIN_SHARE`
    of the twin's residual.
    """
    best, runner = iso.best, iso.runner_up
    numbers = {**numbers, "isolation": iso.to_dict()}
    next_ = f"; next: {runner.words()} ({runner.share:.0%})" if runner is not None else ""
    if iso.named:
        h = best.hypothesis
        numbers.update(size=float(f"{best.size:.4g}"), component=h.component,
                       hypothesis=h.name)
        return {"attribution": h.cls, "component": h.component,
                "evidence": f"{best.words()}, which explains {best.share:.0%} of the twin's "
                            f"residual{next_}", "twin": numbers}
    return {"attribution": UNKNOWN,
            "evidence": f"no change the twin can simulate explains its residual (the best, "
                        f"{best.words()}, {max(best.share, 0.0):.0%}{next_})",
            "twin": numbers}


def twin_attribution(evidence: Callable[[int], TwinEvidence | None], *, passive: bool,
                     note: str) -> Callable[[int], dict[str, Any]]:
    """An alarm's attribution by window row (the session's ``Alarms.attribute``).

    ``evidence(row)`` gives what the twin saw in that window of the latest block
    (``Pipeline.evidence``).
    """
    def at(row: int) -> dict[str, Any]:
        return attribute(evidence(row), passive=passive, note=note)

    return at
