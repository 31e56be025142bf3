"""Isolation by a bank of fault hypotheses: which change, on which part, how large.

At an alarm the twin's residual over the alarm window's rows, ``r_t = S'_t − twin(S_t, A_t)``
(A the action the loop *commanded*: what a user's monitor sees), is explained in turn by each
hypothesis of a bank, and the one that explains it best by likelihood is named, with its
component and its fitted size: a generalized likelihood ratio over structured residuals
(Willsky & Jones 1976, "A generalized likelihood ratio approach to the detection and
estimation of jumps in linear systems"; Basseville & Nikiforov 1993, *Detection of Abrupt
Changes*, §7).

The bank (:func:`signal_hypotheses` and the twin's own ``hypotheses``):

- per observation variable j, a **sensor offset** (a mean: the reading of S and of S' both
  shifted, ``g_t = e_j − ∂twin/∂S_j``) and **sensor noise** (a spread along
  ``[e_j, ∂twin/∂S_j]``: what an offset that changes every row — noise, a stuck or a dropped
  reading — does);
- per actuator k, a **gain** (``g_t = a_k,t ∂twin/∂A_k``), an **offset** (``∂twin/∂A_k``) and
  **noise** (a spread along ``∂twin/∂A_k``: also what a stuck actuator does);
- the twin's physical hypotheses: a force on each body along each axis, each body's mass,
  friction, damping, gravity (:meth:`idt_desk.gym.twin.MujocoTwin.hypotheses`).

The derivatives are finite differences through the twin itself over a sample of the window's
rows (:data:`ROWS`), so the bank holds for any twin.

The likelihood. Residuals are read in the twin stage's units (each variable over its own
scale) less their baseline mean, whitened by the baseline's residual covariance
(:func:`whitener`); then with ``y_t`` a row and ``d`` variables, against an isotropic misfit
``s²`` that is fitted too:

- a **mean** hypothesis (a bias of size θ along ``g_t``): ``y_t ~ N(θ g_t, s² I)``, θ by
  least squares, ``ℓ = −(n d / 2) log s²``;
- a **spread** hypothesis (a zero-mean change along ``U_t``): ``y_t ~ N(0, s² I + σ² U_t
  U_t')``, (s², σ²) by maximum likelihood (a one-dimensional search on σ²/s²).

Each has two free parameters, so their log-likelihoods compare as they are; the share of the
residual it explains is ``1 − s²_h / s²_0`` (``s²_0``: no hypothesis). The best is named
where its share is at least :data:`MIN_SHARE`, else "unknown".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from idt_desk.metrics.twin import Hypothesis

__all__ = ["MIN_SHARE", "ROWS", "Fit", "Isolation", "evidence", "isolate", "isolate_window",
           "signal_hypotheses", "whitener"]

#: The rows of the alarm window the derivatives and the physical hypotheses are simulated on
#: (evenly spaced; a parameter: the cost of an alarm is about (d + m + hypotheses) × ROWS twin
#: steps, d variables and m actuators).
ROWS = 40
#: The share of the residual the best hypothesis must explain to be named (a parameter).
MIN_SHARE = 0.5
#: A finite difference's step, as a share of the variable's spread (of the action's range):
#: a secant at a fault's typical size, not a tangent (a height read 1e-5 off moves the
#: contacts' stiff forces, one read 0.05 off lifts a foot out of them).
_STEP = 0.05
#: The candidates (best by their linear effect) simulated exactly before the best is named.
REFINE = 8
#: And each class's best this many.
PER_CLASS = 3
#: Of those (each simulated once at its linear size), the best this many refined by
#: Gauss-Newton steps.
DEEP = 6
#: The refined leaders searched about their size when the best still explains under 90 %.
SEARCH = 3


@dataclass(frozen=True)
class Fit:
    """One hypothesis fitted to an alarm window's residual.

    Attributes
    ----------
    hypothesis
        The hypothesis.
    loglik
        Its log-likelihood, less the null's (no change): how much better it explains.
    share
        The share of the residual's power it explains (``1 − s²_h / s²_0``).
    k
        Its fitted size in units of the hypothesis's simulated change (mean) or the fitted σ
        (spread, in the component's own units).

    """

    hypothesis: Hypothesis
    loglik: float
    share: float
    k: float

    @property
    def size(self) -> float:
        """The parameter's value: ``base + k × size`` (a mean), σ (a spread)."""
        h = self.hypothesis
        return float(self.k) if h.spread else float(h.base + self.k * h.size)

    def words(self) -> str:
        """"actuator fshin: gain ×0.41", "force on bfoot along x: +7.8 N"."""
        return f"{self.hypothesis.words}: {self.hypothesis.unit.format(self.size)}"


@dataclass
class Isolation:
    """What the bank said of one alarm window: the fits, best first."""

    fits: list[Fit] = field(default_factory=list)
    rows: int = 0

    @property
    def best(self) -> Fit | None:
        """The best fit (None: an empty bank)."""
        return self.fits[0] if self.fits else None

    @property
    def runner_up(self) -> Fit | None:
        """The best fit of another component or class than the best's."""
        if not self.fits:
            return None
        b = self.fits[0].hypothesis
        for f in self.fits[1:]:
            h = f.hypothesis
            if (h.cls, h.component) != (b.cls, b.component):
                return f
        return None

    @property
    def named(self) -> bool:
        """Whether the best explains enough to be named (:data:`MIN_SHARE`)."""
        return self.best is not None and self.best.share >= MIN_SHARE

    def to_dict(self) -> dict[str, Any]:
        """The numbers, JSON-able (an event's, a trial's)."""
        def one(f: Fit | None) -> dict[str, Any] | None:
            if f is None:
                return None
            h = f.hypothesis
            return {"name": h.name, "class": h.cls, "component": h.component,
                    "size": float(f"{f.size:.4g}"), "share": round(f.share, 4),
                    "loglik": float(f"{f.loglik:.6g}"), "words": f.words()}
        return {"best": one(self.best), "runner_up": one(self.runner_up), "rows": self.rows,
                "named": self.named}


def sample_rows(n: int, rows: int = ROWS) -> np.ndarray:
    """``rows`` evenly spaced indices of ``n`` rows (all of them if fewer)."""
    return np.unique(np.linspace(0, n - 1, min(n, rows)).round().astype(np.int64))


def signal_hypotheses(twin: Any, s: np.ndarray, a: np.ndarray | None, base: np.ndarray,
                      names: Sequence[str], action_names: Sequence[str] = (),
                      spread: np.ndarray | None = None,
                      action_range: np.ndarray | None = None) -> list[Hypothesis]:
    """The sensor and actuator hypotheses over rows ``s``, ``a`` (the twin's prediction ``base``).

    Finite differences through ``twin.predict``: each variable's and each actuator's column
    of the twin's derivative at every row. ``spread``: each variable's spread (the step's
    scale; 1 where None); ``action_range``: each actuator's half range.
    """
    s = np.asarray(s, dtype=np.float64)
    d = s.shape[1]
    spread = np.ones(d) if spread is None else np.maximum(np.asarray(spread, float), 1e-3)
    out: list[Hypothesis] = []
    eye = np.eye(d)

    def predict(s_: np.ndarray, a_: np.ndarray | None) -> np.ndarray:
        return np.asarray(twin.predict(s_, a_), dtype=np.float64)

    # A reading n off on S_j: the twin starts from S_read = S + n, so r = n' e_j − (f(S_read) −
    # f(S_read − n)): each is simulated from the state as read, back to the true one.
    def sensor_offset(j: int) -> Any:
        def sim(k: float) -> np.ndarray:  # S and S' both read k too high
            moved = s.copy()
            moved[:, j] -= k
            return k * eye[j] + (predict(moved, a) - base)
        return sim

    def sensor_spread(j: int) -> Any:
        def sim(c: np.ndarray) -> np.ndarray:  # each row: S' read c0 off, S read −c1 off
            moved = s.copy()
            moved[:, j] += c[:, 1]
            return c[:, :1] * eye[j] + (predict(moved, a) - base)
        return sim

    near = []  # each variable's secant at a noise's size
    for j in range(d):
        name = names[j] if j < len(names) else f"obs_{j}"
        # Two secants back from the state as read: at a noise's size (the spread's columns)
        # and at an offset's, ten times larger (a position read off moves the contacts: a
        # tangent there says nothing of a reading 0.05 off).
        cols = []
        for h in (_STEP * spread[j], 10.0 * _STEP * spread[j]):
            moved = s.copy()
            moved[:, j] -= h
            cols.append((base - predict(moved, a)) / h)  # ∂S'/∂S_j, backwards
        near.append(cols[0])
        out.append(Hypothesis(f"sensor_offset:{name}", "sensor", f"sensor {name}: offset",
                              eye[j] - cols[1], unit="{:+.3g}", component=name,
                              simulate=sensor_offset(j)))
        out.append(Hypothesis(f"sensor_noise:{name}", "sensor", f"sensor {name}: noise σ",
                              np.stack([np.broadcast_to(eye[j], cols[0].shape), cols[0]],
                                       axis=2),
                              unit="{:.3g}", component=name, spread=True,
                              simulate=sensor_spread(j)))
    # Every sensor at once (an observation's noise on all its variables), σ a share of each
    # variable's spread: what a noisy bus or a shaken camera does.
    cols_all = [near[j] * spread[j] for j in range(d)]
    u_all = np.concatenate([np.broadcast_to(np.diag(spread), (len(s), d, d)),
                            np.stack(cols_all, axis=2)], axis=2)
    out.append(Hypothesis("sensor_noise:all", "sensor", "every sensor: noise, share of spread",
                          u_all, unit="{:.3g}", component=None, spread=True))
    if a is None:
        return out
    a = np.asarray(a, dtype=np.float64)
    m = a.shape[1]
    rng = np.ones(m) if action_range is None else np.maximum(np.asarray(action_range, float),
                                                              1e-6)

    def actuator(k: int, gain: bool) -> Any:
        def sim(x: float) -> np.ndarray:
            moved = a.copy()
            moved[:, k] = moved[:, k] * (1.0 + x) if gain else moved[:, k] + x
            return predict(s, moved) - base
        return sim

    def actuator_spread(k: int) -> Any:
        def sim(c: np.ndarray) -> np.ndarray:
            moved = a.copy()
            moved[:, k] += c[:, 0]
            return predict(s, moved) - base
        return sim

    act_cols = []
    for k in range(m):
        h = _STEP * rng[k]
        moved = a.copy()
        moved[:, k] += h
        col = (predict(s, moved) - base) / h  # ∂S'/∂A_k
        name = action_names[k] if k < len(action_names) else f"act_{k}"
        out.append(Hypothesis(f"actuator_gain:{name}", "actuator", f"actuator {name}: gain",
                              a[:, k:k + 1] * col, base=1.0, unit="×{:.3g}", component=name,
                              simulate=actuator(k, True)))
        out.append(Hypothesis(f"actuator_offset:{name}", "actuator",
                              f"actuator {name}: offset", col, unit="{:+.3g}", component=name,
                              simulate=actuator(k, False)))
        out.append(Hypothesis(f"actuator_noise:{name}", "actuator",
                              f"actuator {name}: noise σ", col[:, :, None], unit="{:.3g}",
                              component=name, spread=True, simulate=actuator_spread(k)))
        act_cols.append(col * rng[k])
    # Every actuator at once (an action's noise on all its torques), σ a share of each one's
    # scale.
    out.append(Hypothesis("actuator_noise:all", "actuator",
                          "every actuator: noise, share of scale", np.stack(act_cols, axis=2),
                          unit="{:.3g}", component=None, spread=True))
    return out


def whitener(cov: np.ndarray, floor: float = 1e-12) -> np.ndarray:
    """``L⁻¹`` of the baseline's residual covariance (Cholesky), ridged so it inverts.

    The ridge is ``1e-6`` of its mean variance and at least ``floor``: a twin exact to
    rounding has a covariance at rounding, whose directions mean nothing.
    """
    cov = np.asarray(cov, dtype=np.float64)
    d = cov.shape[0]
    ridge = max(1e-6 * float(np.trace(cov)) / max(d, 1), floor)
    return np.linalg.inv(np.linalg.cholesky(cov + ridge * np.eye(d)))


def _mean_fit(y: np.ndarray, g: np.ndarray, rss0: float) -> tuple[float, float]:
    """(θ, RSS) of ``y ≈ θ g`` by least squares."""
    gg = float(np.sum(g * g))
    if not np.isfinite(gg) or gg <= 0:
        return 0.0, rss0
    theta = float(np.sum(g * y)) / gg
    return theta, float(np.sum((y - theta * g) ** 2))


def _spread_fit(y: np.ndarray, u: np.ndarray) -> tuple[float, float, float]:
    """(ℓ less the null's, s², σ²) of ``y_t ~ N(0, s² I + σ² U_t U_t')``, by a search on ρ.

    ``y``: (n, d); ``u``: (n, d, k). For a fixed ρ = σ²/s², s² has its maximum in closed form;
    ℓ(ρ) is searched on a grid of log ρ and refined by golden section.
    """
    n, d = y.shape
    q = np.einsum("ndk,ndl->nkl", u, u)  # U'U per row
    b = np.einsum("ndk,nd->nk", u, y)  # U'y per row
    yy = float(np.sum(y * y))
    eig, vec = np.linalg.eigh(q)  # per row: Q = V diag(eig) V'
    bv = np.einsum("nkl,nk->nl", vec, b) ** 2  # (V'b)² per row
    # A direction U does not span (a zero column, two collinear ones) explains nothing: its
    # V'b is rounding, which ρ would blow up.
    null = eig <= 1e-10 * np.maximum(eig.max(axis=1, keepdims=True), 1e-300)
    eig = np.where(null, 0.0, eig)
    bv = np.where(null, 0.0, bv)

    def ll(log_rho: float) -> tuple[float, float]:
        rho = 10.0 ** log_rho
        # y'(I + ρUU')⁻¹y = y'y − ρ b'(I + ρQ)⁻¹b; log det(I + ρUU') = Σ log(1 + ρ eig).
        quad = yy - float(np.sum(rho * bv / (1.0 + rho * eig)))
        s2 = _floored(quad, yy) / (n * d)
        return -0.5 * n * d * np.log(s2) - 0.5 * float(np.sum(np.log1p(rho * eig))), s2

    # ρ's scale is the units' (a whitened twin exact to rounding: 1e-25): searched ten decades
    # either side of the ρ at which the spread's variance along U equals the misfit's.
    typical = float(np.median(eig.sum(axis=1)))
    centre = -np.log10(typical) if typical > 0 else 0.0
    grid = centre + np.arange(-10.0, 10.01, 1.0)
    vals = [ll(g)[0] for g in grid]
    i = int(np.argmax(vals))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    phi = (np.sqrt(5.0) - 1.0) / 2.0
    x1, x2 = hi - phi * (hi - lo), lo + phi * (hi - lo)
    f1, f2 = ll(x1)[0], ll(x2)[0]
    for _ in range(40):
        if f1 > f2:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - phi * (hi - lo)
            f1 = ll(x1)[0]
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + phi * (hi - lo)
            f2 = ll(x2)[0]
    best = max(((f1, x1), (f2, x2), (vals[i], grid[i])))
    value, s2 = ll(best[1])
    base = -0.5 * n * d * np.log(max(yy, 1e-300) / (n * d))
    return value - base, s2, 10.0 ** best[1] * s2


def isolate(y: np.ndarray, hypotheses: Sequence[Hypothesis],
            whiten: np.ndarray | None = None, scale: np.ndarray | None = None,
            always: Sequence[str] | None = None) -> Isolation:
    """Fit every hypothesis to the residual rows ``y`` (already less the baseline's mean).

    ``y``: (n, d), in the twin stage's units; each hypothesis's ``delta`` over the same rows
    (a mean: (n, d); a spread: (n, d, k)) in S' units, turned into the same units by
    ``scale`` (each variable's) and both whitened by ``whiten`` (:func:`whitener`). A
    spread's σ is said in the component's own units (its factor is per unit of it).
    ``always``: the hypotheses simulated exactly whatever their linear fit (default: every
    sensor's offset; :func:`isolate_window` names the positions' only).
    """
    y = np.asarray(y, dtype=np.float64)
    n, d = y.shape
    # The rows every hypothesis can be simulated on (a twin gives NaN where it cannot read
    # the state: a velocity at the observation's clip).
    ok = np.all(np.isfinite(y), axis=1)
    for h in hypotheses:
        delta = np.asarray(h.delta, dtype=np.float64)
        if len(delta) == n:
            ok &= np.all(np.isfinite(delta.reshape(n, -1)), axis=1)
    if ok.sum() < 2:
        return Isolation([], n)
    keep = None if ok.all() else ok
    if keep is not None:
        y = y[keep]
    sc = np.ones(d) if scale is None else np.asarray(scale, dtype=np.float64)
    w = np.eye(d) if whiten is None else np.asarray(whiten, dtype=np.float64)
    yw = y @ w.T
    rss0 = float(np.sum(yw * yw))
    if not np.isfinite(rss0) or rss0 <= 0:
        return Isolation([], n)
    fits = []
    for h in hypotheses:
        delta = np.asarray(h.delta, dtype=np.float64)
        if len(delta) != n:
            raise ValueError(f"hypothesis {h.name}: {len(delta)} rows for a residual of {n}")
        if keep is not None:
            delta = delta[keep]
        if h.spread:
            u = np.einsum("ed,ndk->nek", w, delta / sc[None, :, None])
            if not np.all(np.isfinite(u)):
                continue
            gain, s2, sigma2 = _spread_fit(yw, u)
            share = _share(s2 * n * d, rss0, n, d)
            fits.append(Fit(h, float(gain), float(share), float(np.sqrt(sigma2))))
        else:
            g = (delta / sc) @ w.T
            if not np.all(np.isfinite(g)):
                continue
            theta, rss = _mean_fit(yw, g, rss0)
            gain = -0.5 * n * d * np.log(_floored(rss, rss0) / rss0)
            fits.append(Fit(h, float(gain), _share(rss, rss0, n, d), theta))
    fits.sort(key=lambda f: -f.loglik)
    # The best candidates by their linear effect, refined by simulating them exactly: a
    # stuck sensor's or a heavy body's effect is far from linear, and the sizes said are the
    # simulated ones.
    # Each class's best few too, and every sensor's offset: a position read off moves the
    # contacts (a foot read into the floor is pushed out of it), so its linear fit says
    # little, and can rank below every other class's.
    always_ = set(always) if always is not None else {
        h.name for h in hypotheses if h.name.startswith("sensor_offset:")}
    top = [f for k, f in enumerate(fits) if
           k < REFINE or f.hypothesis.name in always_
           or sum(g.hypothesis.cls == f.hypothesis.cls for g in fits[:k]) < PER_CLASS]
    # Each simulated once at its linear size first; the best few of those then refined.
    # Every simulation of one alarm's fits kept by (hypothesis, size): a deep candidate's
    # first Gauss-Newton step, a search's best multiple, are simulated once.
    memo: dict[tuple[int, bytes], np.ndarray] = {}
    quick = sorted((_refine(f, yw, w, sc, rss0, keep, steps=0, memo=memo)
                    if f.hypothesis.simulate is not None
                    else f for f in top), key=lambda f: -f.loglik)
    deep = {f.hypothesis.name for f in quick[:DEEP]}
    refined = sorted((_refine(f, yw, w, sc, rss0, keep, memo=memo) for f in top
                      if f.hypothesis.name in deep
                      and f.hypothesis.simulate is not None), key=lambda f: -f.loglik)
    done = {f.hypothesis.name for f in refined}
    refined = sorted(refined + [f for f in quick if f.hypothesis.name not in done],
                     key=lambda f: -f.loglik)
    # The leaders still far from their residual searched about their size (a contact made or
    # lost puts the linear size off by a factor).
    # (None where the best already explains 90 %: no other can pass it by much.)
    far = bool(refined) and refined[0].share < 0.9
    lead = [_refine(f, yw, w, sc, rss0, keep, search=True, memo=memo)
            if far and f.share < 0.9 and f.hypothesis.simulate is not None else f
            for f in refined[:SEARCH]]
    refined = sorted(lead + refined[SEARCH:], key=lambda f: -f.loglik)
    rest = [f for f in fits if f not in top]
    return Isolation(refined + rest, n)


def _refine(fit: Fit, yw: np.ndarray, w: np.ndarray, sc: np.ndarray, rss0: float,
            keep: np.ndarray | None = None, search: bool = False, steps: int = 2,
            memo: dict[tuple[int, bytes], np.ndarray] | None = None) -> Fit:
    """``fit`` with its change simulated exactly at its size, by ``steps`` Gauss-Newton steps.

    ``steps`` 0: simulated at its linear size only; ``keep``: which rows are fitted (a mask;
    None: all); ``search``: a mean's also at multiples of its size first; ``memo``: the
    simulations already run, by (hypothesis, size), shared by one alarm's calls.
    """
    h = fit.hypothesis
    n, d = yw.shape
    memo = {} if memo is None else memo

    def simulate(x: Any) -> np.ndarray:  # a twin prediction over every row: run once each
        key = (id(h), np.asarray(x, dtype=np.float64).tobytes())
        got = memo.get(key)
        if got is None:
            got = memo[key] = h.simulate(x)
        return got

    def rows(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return x if keep is None else x[keep]

    def seen(delta: np.ndarray) -> np.ndarray:  # a change of S' in the residual's units
        return (rows(delta) / sc) @ w.T

    def every(c: np.ndarray) -> np.ndarray:  # a spread's coefficients on every sampled row
        if keep is None:
            return c
        out = np.zeros((len(keep), c.shape[1]))
        out[keep] = c
        return out

    try:
        if not h.spread:
            def newton(k: float, steps: int) -> tuple[float, float]:
                for _ in range(steps):
                    if k == 0.0 or not np.isfinite(k):
                        break
                    g = seen(simulate(k))
                    gg = float(np.sum(g * g))
                    if gg <= 0:
                        break
                    k *= float(np.sum(g * yw)) / gg  # along the simulated change, re-scaled
                return k, float(np.sum((yw - seen(simulate(k))) ** 2))

            k, rss = newton(fit.k, steps)
            if search and np.isfinite(rss) and k != 0.0:
                # Still far: the linear size may be off by a factor (a contact made or lost);
                # the simulated change at a few multiples of it, then Newton again.
                def at(x: float) -> float:
                    r = float(np.sum((yw - seen(simulate(x))) ** 2))
                    return r if np.isfinite(r) else np.inf

                best_rss, best_k = min([(rss, k), *((at(m * k), m * k)
                                                    for m in (-1.0, 0.25, 0.5, 2.0, 4.0, 10.0))])
                for step in (1.4, 1.15, 1.05):  # a pattern search about the best multiple
                    best_rss, best_k = min((best_rss, best_k), *((at(best_k * m), best_k * m)
                                                                 for m in (1 / step, step)))
                k, rss = best_k, best_rss
                for _ in range(4):  # Gauss-Newton on the size, its derivative by a secant
                    if k == 0.0:
                        break
                    now = seen(simulate(k))
                    jac = (seen(simulate(k * (1.0 + 1e-4))) - now) / (k * 1e-4)
                    jj = float(np.sum(jac * jac))
                    if not jj > 0:
                        break
                    k_new = k + float(np.sum(jac * (yw - now))) / jj
                    r_new = at(k_new)
                    if not r_new < rss:
                        break
                    k, rss = k_new, r_new
            if not np.isfinite(rss):
                return fit
            return Fit(h, float(-0.5 * n * d * np.log(_floored(rss, rss0) / rss0)),
                       _share(rss, rss0, n, d), float(k))
        u = np.einsum("ed,ndk->nek", w, rows(h.delta) / sc[None, :, None])
        c = _coefficients(u, yw)
        for _ in range(steps):
            left = yw - seen(simulate(every(c)))
            c = c + _coefficients(u, left)
        left = yw - seen(simulate(every(c)))
        rss = float(np.sum(left ** 2))
        if not np.isfinite(rss):
            return fit
        # Each row's coefficients are a draw of the spread (σ² fitted from them): free
        # coefficients on every row would explain anything, so they cost their likelihood
        # (Laplace's approximation of the marginal: −nk/2 − ½ Σ log det(I + σ²/s² U'U)).
        kk = c.shape[1]
        sigma2 = max(float(np.mean(np.sum(c * c, axis=1))) / kk, 1e-300)
        s2 = _floored(rss, rss0) / (n * d)
        q = np.einsum("ndk,ndl->nkl", u, u)
        logdet = float(np.sum(np.linalg.slogdet(np.eye(kk)[None] + (sigma2 / s2) * q)[1]))
        ll = -0.5 * n * d * np.log(s2 * n * d / rss0) - 0.5 * n * kk - 0.5 * logdet
        return Fit(h, float(ll), _share(rss, rss0, n, d), float(np.sqrt(sigma2)))
    except (FloatingPointError, ValueError, np.linalg.LinAlgError):
        return fit


def _coefficients(u: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Each row's least-squares coefficients of ``y_t`` along ``U_t``'s columns (n × k)."""
    q = np.einsum("ndk,ndl->nkl", u, u)
    b = np.einsum("ndk,nd->nk", u, y)
    return np.stack([np.linalg.lstsq(q[t], b[t], rcond=1e-10)[0] for t in range(len(q))])


def _share(rss: float, rss0: float, n: int, d: int) -> float:
    """The share of the residual's excess over the baseline a fit explains.

    Whitened by the baseline, a window's rows hold ``n d`` of power with no change at all:
    the excess is what a change put there, and it counts only above its own sampling spread
    (three standard deviations of a χ² of ``n d`` degrees of freedom). A twin exact to
    rounding has no such floor worth the name: the share is then ``1 − rss / rss0``.
    """
    excess = max(rss0 - n * d, 3.0 * np.sqrt(2.0 * n * d))
    return float(min((rss0 - rss) / excess, 1.0))


def _floored(rss: float, rss0: float) -> float:
    """A misfit never below 1e-12 of the residual's power: its rounding.

    For every hypothesis alike: an exact fit would otherwise be infinitely likely.
    """
    return max(rss, 1e-12 * rss0)


def isolate_window(stage: Any, row: int) -> Isolation | None:
    """The bank fitted to window ``row`` of a twin stage's latest block (None: no baseline rows).

    Over a sample of the window's rows (:data:`ROWS`), against the baseline rows' residual
    mean and covariance (``TwinStage.row_mean``, ``row_cov``); the bank: every sensor's and
    actuator's hypotheses (:func:`signal_hypotheses`) and the twin's own physical ones (its
    ``bank(s, a, base=)``, else its ``hypotheses``).
    """
    if stage.row_cov is None or stage.row_mean is None:
        return None
    z, s, a = stage.rows(stage.window_rows(row))
    pick = sample_rows(len(z))
    z, s = z[pick], s[pick]
    a = None if a is None else a[pick]
    keep = np.all(np.isfinite(z), axis=1) & np.all(np.isfinite(s), axis=1)
    if a is not None:
        keep &= np.all(np.isfinite(a), axis=1)
    z, s = z[keep], s[keep]
    a = None if a is None else a[keep]
    if len(z) < 2:
        return None
    twin = stage.twin
    base = np.asarray(twin.predict(s, a), dtype=np.float64)
    # The twin's own names where it has them (a MuJoCo model's joints and actuators), else
    # the loop's.
    names = tuple(getattr(twin, "state_names", None) or stage.names)
    acts = tuple(getattr(twin, "action_names", None) or stage.action_names)
    if len(names) != len(stage.names):
        names = stage.names
    bank = signal_hypotheses(twin, s, a, base, names, acts, spread=stage.spread,
                             action_range=stage.action_spread)
    own = getattr(twin, "bank", None)
    bank += list(own(s, a, base=base) if callable(own) else twin.hypotheses(s, a))
    # A position read off moves the contacts: its offset always simulated; a velocity's acts
    # through the integration, near linearly.
    pos = stage.kinds_of().get("pos", range(len(names)))
    always = [f"sensor_offset:{names[j]}" for j in pos]
    return isolate(z - stage.row_mean, bank, whiten=whitener(stage.row_cov), scale=stage.scale,
                   always=always)


def evidence(stage: Any, row: int) -> Any:
    """What the twin saw in window ``row`` (``TwinStage.evidence``), the bank's fit included."""
    ev = stage.evidence(row)
    if ev is not None:
        ev.isolation = isolate_window(stage, row)
    return ev
