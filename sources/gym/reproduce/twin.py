"""What the twin saw in one trial: its channels, its alarm, and the class of each detection.

The env's twin (``idt_desk.plugin.MujocoTwin``: an unperturbed copy, stepped from each
recorded S with the recorded A) gives every window its residual channels
(``idt_desk.metrics.twin``), scaled on the trial's pre-onset transitions (as the symbols
are) with the pre-onset windows as their baseline. Judged as a live session would:

- ``live_mewma_twin_IDT``: the twin's channels alone, a MEWMA calibrated to the trial's
  budget on the pre-onset windows (first post-onset alarm, windows after the onset);
- ``live_mewma_union_IDT``: the alarm of a live session with a twin, the IDT's MEWMA or the
  twin's, each calibrated to half the budget (so the union keeps it), whichever alarms first;
- ``live_mewma_union_off_IDT``: the same union with the twin 10 % off;
- ``attribution``, ``evidence``, ``twin_evidence``: the class the rule names
  (``idt_desk.plugin.attribute``) at the default alarm's first post-onset alarm
  (``live_mewma_IDT``; a control's false alarm too), with a twin ``_off`` by 10 % (masses
  and inertias ×1.1, friction ×0.9) beside it; ``attribution_union`` at the union's first
  alarm, and ``attribution_union_off`` at the union's with the twin that is off.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

#: The twins a trial is judged with: the exact copy, and one off by this (``_off``).
MISMATCH = 0.1
#: The live block's rows the twin adds: its alarm alone, its union with the IDT's, and the
#: union with the twin that is off.
TWIN_ROWS = ("mewma_twin", "mewma_union", "mewma_union_off")
#: The classes an attribution can name, ``unknown`` last.
NAMED = ("sensor", "actuator", "force", "dynamics", "unknown")
#: Which detection each attribution column classifies: (column, alarm, twin).
ATTRIBUTIONS = (("attribution", "the default (IDT, MEWMA)", "exact"),
                ("attribution_off", "the default (IDT, MEWMA)", "10 % off"),
                ("attribution_union", "IDT or twin (half the budget each)", "exact"),
                ("attribution_union_off", "IDT or twin (half the budget each)", "10 % off"))


def _named(rows: Any, col: str) -> Any:
    """Each row's class in ``col``, named afresh from its recorded evidence where it has it.

    A trial keeps what the twin saw (``twin_evidence*``), so the rule in force
    (``idt_desk.detection.attribution.RULE``) judges finished runs without a rollout; a row
    without it keeps the class its run named ("" where it detected nothing).
    """
    import json

    from idt_desk.plugin import TwinEvidence, attribute

    named = rows[col].fillna("").astype(str)
    key = col.replace("attribution", "twin_evidence", 1)
    if key not in rows:
        return named
    out = []
    for k, (was, js) in enumerate(zip(named, rows[key], strict=True)):
        try:
            ev = json.loads(js) if isinstance(js, str) and js.strip() else None
            out.append(attribute(TwinEvidence.from_dict(ev))["attribution"] if ev else was)
        except (ValueError, RecursionError, KeyError, TypeError, IndexError):
            from idt_desk.plugin import InputError

            raise InputError(f"trials.csv, line {k + 2}, {key}: not a twin's evidence (JSON "
                             "of z, ratio, bias, t)") from None
    return type(named)(out, index=named.index)


def attribution_summary(open_loop: Any) -> dict[str, Any] | None:
    """Per attribution column: the confusion (true class × named class) and accuracy.

    Over the perturbed trials it names (the detected ones), per policy and pooled; the
    true class comes from the perturbation's declaration
    (:func:`~idt_desk_sources.gym.live_study.change_class`); ``unknown`` counts as wrong. A
    control's false alarm is named too: what each was called, counted. The class is named
    by the rule in force from each trial's recorded evidence (:func:`_named`). None: no twin.
    """
    from idt_desk_sources.gym._source import GymSource
    from idt_desk_sources.gym.live_study import change_class

    if "attribution" not in open_loop:
        return None
    classes = NAMED[:-1]
    perturbed = open_loop[open_loop["perturbation"] != "none"]
    control = open_loop[open_loop["perturbation"] == "none"]
    truth = perturbed["perturbation"].map(
        lambda p: change_class(GymSource.perturbation(str(p).split(":", 1)[0])))
    out: dict[str, Any] = {}
    for col, alarm, twin in ATTRIBUTIONS:
        if col not in open_loop:
            continue
        named = _named(perturbed, col)
        block: dict[str, Any] = {"alarm": alarm, "twin": twin, "per_policy": {}}
        for policy in dict.fromkeys(perturbed["policy"]):
            mine = (perturbed["policy"] == policy) & (named != "")
            block["per_policy"][policy] = [int((named[mine] == truth[mine]).sum()),
                                           int(mine.sum())]
        judged = named != ""
        block["confusion"] = {c: {n: int(((truth == c) & (named == n)).sum()) for n in NAMED}
                              for c in classes}
        block["right"] = int((named[judged] == truth[judged]).sum())
        block["judged"] = int(judged.sum())
        ctrl = _named(control, col)
        block["controls_named"] = {n: int((ctrl == n).sum()) for n in NAMED if (ctrl == n).any()}
        out[col] = block
    return out


def judge_twin(w: Mapping[str, Any], s: np.ndarray, a: np.ndarray, s_next: np.ndarray,
               onset: int, j0: int, preset: Any, twins: Sequence[tuple[str, Any]],
               names: Sequence[str], budget: str, rate: float | None,
               detected: Mapping[str, float]) -> dict[str, Any]:
    """The twin's columns of one trial (see the module docstring).

    ``twins``: (suffix, twin) pairs, the exact one's suffix ``""`` first; ``detected``: the
    latency (NaN: none) of the alarms whose windows are attributed, by column suffix
    (``""``: the default's, ``"_union"``).
    """
    from idt_desk.plugin import attribute, twin_over

    out: dict[str, Any] = {}
    ends = np.asarray(w["start"]) + preset.window
    for suffix, twin in twins:
        stage, channels = twin_over(twin, preset.window, names, s, a, s_next, ends,
                                    fit=slice(0, onset), baseline=slice(0, j0))
        alarms = _alarms(w, channels, j0, preset, budget, rate)
        if suffix == "":
            out.update(alarms)
        else:  # how much the union's detection owes to an exact model
            out[f"live_mewma_union{suffix}_IDT"] = alarms["live_mewma_union_IDT"]
        # Each twin's union is attributed at its own detection, as a session with that twin.
        for which, lat in {**detected, "_union": alarms["live_mewma_union_IDT"]}.items():
            key = f"{which}{suffix}"
            if lat is None or math.isnan(lat):
                out[f"attribution{key}"], out[f"evidence{key}"] = "", ""
                continue
            # Named as a session names it: a window length after the alarm.
            after = -(-preset.window // preset.stride)
            ev = stage.evidence(min(j0 + int(lat) + after, len(ends) - 1))
            got = attribute(ev)
            out[f"attribution{key}"], out[f"evidence{key}"] = got["attribution"], got["evidence"]
            # Everything the rule read, so a rule can be judged afresh without a rollout.
            out[f"twin_evidence{key}"] = json.dumps(None if ev is None else ev.to_dict())
    return out


def _alarms(w: Mapping[str, Any], channels: Mapping[str, np.ndarray], j0: int, preset: Any,
            budget: str, rate: float | None) -> dict[str, float]:
    """The twin's MEWMA alone, and the alarm a live session with a twin raises.

    The union: the monitor of the IDT's components and the twin's channels, each group
    calibrated to half the budget (``idt_desk.detection.monitor.JOINS``).
    """
    from idt_desk.plugin import IDT_METRICS, TWIN_METRICS, build_monitor

    table = {**w, **channels}

    def first(metrics: Sequence[str], group: str) -> float:
        mon = build_monitor(metrics, baseline_windows=j0, detector="mewma", false_alarms=budget,
                            rate=rate, stride=preset.stride, window=preset.window,
                            what="this trial")
        flags = mon.update({m: np.asarray(table[m], dtype=np.float64) for m in metrics})
        hits = np.flatnonzero(flags[group][j0:])
        return float(hits[0]) if hits.size else math.nan

    return {"live_mewma_twin_IDT": first(TWIN_METRICS, "twin"),
            "live_mewma_union_IDT": first((*IDT_METRICS, *TWIN_METRICS), "IDT")}

