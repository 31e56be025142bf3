"""Which class of change an alarm saw: sensor, actuator, force or dynamics (paper §10, §12).

The paper decomposes predictive power into the environment's passive predictability and the
agent's causal contribution, MI(S,A;S') = MI(S;S') + MI(A;S'|S), and reads where the
coupling breaks from ΔH. The classes of change touch these terms differently: actuator noise
changes the applied action given the state (the choice H(A|S)) and leaves the physics alone;
sensor noise changes what the policy sees and how well S' follows from (S, A); a force or a
heavier gravity changes the physics itself. An alarm's **evidence** is the alarm window's
value of each term of :data:`TERMS` (per part, for a preset with parts) in standard
deviations of the baseline's windows; the **attribution** is the class whose centroid of such
evidence, fitted on finished runs, is nearest in direction (cosine), with a confidence: the
softmax of the cosines at a temperature fitted on the same runs. Evidence too weak to point
anywhere (no centroid within :attr:`Attributor.min_cosine`) is ``unknown``.

An :class:`Attributor` is fitted by a command on finished runs (for HalfCheetah,
``idt-desk reproduce cheetah-live``) and shipped as a small JSON file stating how it was made;
a source names it (``Source.attribution``), and the live session attributes each detection.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CLASSES", "TERMS", "AttributionWatch", "Attributor", "attribution_watch", "evidence",
           "term_columns"]

#: The classes of change, and ``unknown`` for evidence that points nowhere.
CLASSES = ("sensor", "actuator", "force", "dynamics")
#: The terms of the evidence: the four metrics, the choice H(A|S) and the two parts of
#: predictive power, MI(S;S') and MI(A;S'|S).
TERMS = ("P", "H_f", "H_b", "dH", "H_A_given_S", "MI_S_S_next", "MI_A_S_next_given_S")


def term_columns(table: Mapping[str, np.ndarray], parts: Sequence[str] = ()
                 ) -> dict[str, np.ndarray]:
    """Every term of :data:`TERMS` (per part: ``<term>@<part>``) from a window table.

    MI(S;S') = H(S) + H(S') − H(S,S'); the others are the engine's own columns.
    """
    out = {}
    for suffix in [f"@{p}" for p in parts] or [""]:
        for t in TERMS:
            if t == "MI_S_S_next":
                out[t + suffix] = (np.asarray(table["H_S" + suffix], dtype=np.float64)
                                   + np.asarray(table["H_S_next" + suffix], dtype=np.float64)
                                   - np.asarray(table["H_SS_next" + suffix], dtype=np.float64))
            else:
                out[t + suffix] = np.asarray(table[t + suffix], dtype=np.float64)
    return out


def _stats(x: np.ndarray) -> tuple[float, float]:
    """Mean and σ (ddof 1) of a term's finite baseline values (0 where too few)."""
    x = x[np.isfinite(x)]
    return (float(x.mean()) if x.size else 0.0, float(x.std(ddof=1)) if x.size > 1 else 0.0)


def _z(v: float, stats: tuple[float, float]) -> float:
    """``v`` in σ of the baseline (0 where σ is 0 or ``v`` undefined)."""
    mu, sd = stats
    return (v - mu) / sd if sd > 0 and math.isfinite(v) else 0.0


def evidence(terms: Mapping[str, np.ndarray], baseline: slice | np.ndarray,
             at: int | slice) -> dict[str, float]:
    """Each term at window(s) ``at`` (a slice: their mean) in σ of its ``baseline`` windows."""
    return {name: _z(float(np.nanmean(x[at])) if isinstance(at, slice) else float(x[at]),
                     _stats(x[baseline]))
            for name, x in terms.items()}


def _unit(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


@dataclass
class Attributor:
    """Nearest-centroid attribution of evidence (:func:`evidence`) to a class of change.

    Attributes
    ----------
    features
        The evidence's names, in the centroids' order (``H_A_given_S@torso`` …).
    centroids
        Per class, the mean direction of its fitted evidence (unit vectors).
    temperature
        The softmax's scale of the cosines (fitted: the most likely on the fitted runs).
    min_cosine
        Below this cosine to every centroid the evidence is ``unknown``.
    made
        How it was made: the command, the runs and seeds, the accuracy judged out of sample.

    """

    features: tuple[str, ...]
    centroids: dict[str, np.ndarray]
    temperature: float = 5.0
    min_cosine: float = 0.2
    made: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def fit(cls, samples: Sequence[tuple[str, Mapping[str, float]]], features: Sequence[str],
            *, min_cosine: float = 0.2, made: Mapping[str, Any] | None = None) -> Attributor:
        """Centroids and temperature from (class, evidence) pairs.

        Raises
        ------
        ValueError
            An unknown class, or no sample at all.

        """
        if not samples:
            raise ValueError("no evidence to fit an attribution on")
        feats = tuple(features)
        by: dict[str, list[np.ndarray]] = {}
        for c, ev in samples:
            if c not in CLASSES:
                raise ValueError(f"unknown class {c!r}; known: {', '.join(CLASSES)}")
            by.setdefault(c, []).append(_unit(np.array([ev.get(f, 0.0) for f in feats])))
        cents = {c: _unit(np.mean(v, axis=0)) for c, v in by.items()}
        model = cls(feats, cents, 5.0, float(min_cosine), dict(made or {}))
        # The temperature that makes the fitted samples' own classes most likely.
        cos = [(c, model._cosines(ev)) for c, ev in samples]
        names = list(cents)

        def loglik(t: float) -> float:
            total = 0.0
            for c, cs in cos:
                z = t * np.array([cs[k] for k in names])
                total += z[names.index(c)] - float(np.log(np.exp(z - z.max()).sum()) + z.max())
            return total

        model.temperature = max(np.geomspace(0.5, 50.0, 41), key=loglik)
        return model

    def _cosines(self, ev: Mapping[str, float]) -> dict[str, float]:
        x = _unit(np.array([ev.get(f, 0.0) for f in self.features]))
        return {c: float(x @ v) for c, v in self.centroids.items()}

    def classify(self, ev: Mapping[str, float], top: int = 4) -> dict[str, Any]:
        """``{"attribution", "confidence", "probabilities", "evidence"}`` of one alarm.

        ``evidence``: the ``top`` terms that moved most, signed, in baseline σ.
        """
        cos = self._cosines(ev)
        names = list(cos)
        z = self.temperature * np.array([cos[c] for c in names])
        p = np.exp(z - z.max())
        p /= p.sum()
        best = names[int(np.argmax(p))]
        moved = sorted(((f, float(ev.get(f, 0.0))) for f in self.features),
                       key=lambda kv: -abs(kv[1]))[:top]
        if max(cos.values()) < self.min_cosine:
            best = "unknown"
        return {"attribution": best, "confidence": round(float(p.max()), 3),
                "probabilities": {c: round(float(v), 3) for c, v in zip(names, p, strict=True)},
                "evidence": {f: round(v, 2) for f, v in moved}}

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (the shipped file's)."""
        return {"features": list(self.features),
                "centroids": {c: [round(float(x), 6) for x in v]
                              for c, v in self.centroids.items()},
                "temperature": float(self.temperature), "min_cosine": self.min_cosine,
                "made": self.made}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Attributor:
        """Rebuild from :meth:`to_dict`'s form."""
        feats = tuple(d["features"])
        cents = {c: np.asarray(v, dtype=np.float64) for c, v in d["centroids"].items()}
        bad = [c for c, v in cents.items() if c not in CLASSES or v.shape != (len(feats),)]
        if bad:
            raise ValueError(f"attribution: centroid {bad[0]!r} is not a class of "
                             f"{', '.join(CLASSES)} with {len(feats)} features")
        return cls(feats, cents, float(d.get("temperature", 5.0)),
                   float(d.get("min_cosine", 0.2)), dict(d.get("made", {})))

    @classmethod
    def load(cls, path: str | Path) -> Attributor:
        """Read a file written with :meth:`to_dict` (one-line errors)."""
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"attribution file {path}: {exc}") from None


class AttributionWatch:
    """A live session's attribution of its alarms.

    The baseline's terms are gathered as its windows pass, and each alarm's evidence is
    measured against them.

    :meth:`take` every block of windows (all the pipeline's columns); the ``baseline_windows``
    windows up to the monitor's baseline row are the reference. Calling the watch with a row
    of the latest block gives that window's attribution (:meth:`Attributor.classify`), or
    None before a baseline; the block's terms are read only then (alarms are rare).
    """

    def __init__(self, attributor: Attributor, parts: Sequence[str],
                 baseline_windows: int) -> None:
        self.attributor = attributor
        self.parts = tuple(parts)
        self.n = int(baseline_windows)
        self._gathered: dict[str, np.ndarray] | None = None
        self._stats: dict[str, tuple[float, float]] | None = None
        self._windows: Mapping[str, np.ndarray] | None = None
        self._block: dict[str, np.ndarray] | None = None

    def take(self, windows: Mapping[str, np.ndarray], baseline_row: int | None,
             gathering: bool) -> None:
        """A new block; ``gathering``: the monitor's baseline is not set (or set in it)."""
        self._windows, self._block = windows, None
        if not gathering:
            return
        if self._stats is not None:  # a new baseline is being gathered
            self._stats, self._gathered = None, None
        upto = None if baseline_row is None else baseline_row + 1
        terms = term_columns(windows, self.parts)
        old = self._gathered
        self._gathered = {k: (v[:upto] if old is None else
                              np.concatenate([old[k], v[:upto]]))[-self.n:]
                          for k, v in terms.items()}
        if baseline_row is not None:
            self._stats = {k: _stats(x) for k, x in self._gathered.items()}

    def __call__(self, row: int) -> dict[str, Any] | None:
        """The attribution of the alarm at ``row`` of the latest block (None: no baseline)."""
        if self._stats is None or self._windows is None:
            return None
        if self._block is None:
            self._block = term_columns(self._windows, self.parts)
        return self.attributor.classify(
            {k: _z(float(self._block[k][row]), st) for k, st in self._stats.items()})


def attribution_watch(source: Any, preset: Any, baseline_windows: int
                      ) -> AttributionWatch | None:
    """The live attribution of ``source`` under ``preset``, or None.

    The source names its fitted file (``attribution``: a path, or a file in the shipped
    ``assets/data``); it applies to a preset with parts whose terms it was fitted on.
    """
    name = source.attribution
    if not name or not preset.parts:
        return None
    from idt_desk import assets

    path = Path(name) if Path(name).is_absolute() else assets.path("data", name)
    model = Attributor.load(path)
    if set(model.features) != {f"{t}@{p}" for p in preset.parts for t in TERMS}:
        return None  # fitted on another view of the loop
    return AttributionWatch(model, preset.parts, baseline_windows)
