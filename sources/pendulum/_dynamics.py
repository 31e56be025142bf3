"""Fast, Qt-free integrator for the planar double pendulum.

Model
-----
Two point masses ``m1``, ``m2`` hang on massless rigid rods of lengths ``l1``, ``l2``; the first
rod swings about a fixed pivot, the second about the first mass. Gravity ``g`` points down.
Angles ``θ1``, ``θ2`` are *absolute* angles of each rod measured from the downward vertical
(counter-clockwise positive, so ``θ = 0`` hangs straight down and ``θ = ±π`` points straight
up). The state is ``y = (θ1, θ2, ω1, ω2)`` with ``ωi = dθi/dt``. Angles are never wrapped: a
rod that goes over the top keeps counting past ``π``.

The equations of motion are the Lagrangian ones, ``M(θ) α = f(θ, ω)``::

    M11 = (m1 + m2) l1²        M12 = M21 = m2 l1 l2 cos(θ1 − θ2)        M22 = m2 l2²
    f1  = −m2 l1 l2 ω2² sin(θ1 − θ2) − (m1 + m2) g l1 sin θ1 + Q1
    f2  = +m2 l1 l2 ω1² sin(θ1 − θ2) − m2 g l2 sin θ2 + Q2

solved in closed form (``det M = m2 l1² l2² (m1 + m2 sin²(θ1 − θ2)) > 0``). They are the same
equations as myphysicslab's double pendulum, written through the mass matrix so that the
damping forces enter cleanly. Damping is viscous *joint* friction from the Rayleigh function
``D = ½ c1 ω1² + ½ c2 (ω2 − ω1)²``: a torque ``−c1 ω1`` at the pivot and ``−c2 (ω2 − ω1)`` at
the elbow (equal and opposite on the two rods), i.e. ``Q1 = −c1 ω1 + c2 (ω2 − ω1)``,
``Q2 = −c2 (ω2 − ω1)``. Then ``dE/dt = −c1 ω1² − c2 (ω2 − ω1)² ≤ 0``. :class:`PendulumParams`
has one coefficient, used for both joints (``c1 = c2 = damping``).

Integrator
----------
The paper integrated with MATLAB's ``ode45`` (Dormand–Prince RK5(4)) at ``RelTol = AbsTol =
1e-9``, maximum step 1 ms, sampled at 1 kHz, and kept runs whose relative energy drift stayed
below 0.05 %. :func:`integrate` and :class:`Stepper` use the same pair: Dormand–Prince 5(4),
first-same-as-last, local extrapolation (the 5th-order solution is propagated), the error of
each step measured as the RMS over components of ``err_i / (atol + rtol·max(|y_i|, |y_new_i|))``
(Hairer's / scipy's norm; ``ode45`` instead takes the max over components of
``err_i / max(|y_i|, |y_new_i|, atol/rtol)`` against ``rtol``), and scipy's I step-size
controller ``h_new = h·min(10, max(0.2, 0.9·err^(−1/5)))`` with no growth right after a
rejection (``ode45``: safety 0.8, growth at most 5). Steps are clipped so that each sample time
``k / sample_rate`` is landed on exactly, where ``ode45`` given a ``tspan`` vector interpolates
its 4th-order continuous extension instead. When the next sample is less than two steps away,
the remaining interval is split in two equal steps rather than leaving a sliver; a step that
reaches a sample within a relative ``1e-7`` of the allowed step is stretched to land on it (so
``max_step`` can be exceeded by that much rather than taking a second, tiny step).

All numeric kernels are ``numba.njit(cache=True)`` and also run as plain Python under
``NUMBA_DISABLE_JIT=1``.

One file: the model's equations (above) sit beside the compiled kernels that implement
them (right-hand side, adaptive step, FTLE), which call each other inside numba.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import numba
import numpy as np

__all__ = [
    "VALID_DRIFT",
    "PendulumParams",
    "Stepper",
    "Trajectory",
    "energy",
    "ftle",
    "integrate",
    "predict_states",
    "random_initial_condition",
]

#: Largest relative energy drift ``|ΔE / E(0)|`` of a valid conservative run (0.05 %).
VALID_DRIFT = 5e-4

# ---------------------------------------------------------------------------------------------
# Dormand–Prince 5(4) tableau (the ode45 pair)
# ---------------------------------------------------------------------------------------------

_A21 = 1.0 / 5.0
_A31 = 3.0 / 40.0
_A32 = 9.0 / 40.0
_A41 = 44.0 / 45.0
_A42 = -56.0 / 15.0
_A43 = 32.0 / 9.0
_A51 = 19372.0 / 6561.0
_A52 = -25360.0 / 2187.0
_A53 = 64448.0 / 6561.0
_A54 = -212.0 / 729.0
_A61 = 9017.0 / 3168.0
_A62 = -355.0 / 33.0
_A63 = 46732.0 / 5247.0
_A64 = 49.0 / 176.0
_A65 = -5103.0 / 18656.0
# 5th-order weights (also the 7th stage's coefficients: FSAL).
_B1 = 35.0 / 384.0
_B3 = 500.0 / 1113.0
_B4 = 125.0 / 192.0
_B5 = -2187.0 / 6784.0
_B6 = 11.0 / 84.0
# Error weights: 5th-order minus embedded 4th-order weights.
_E1 = 71.0 / 57600.0
_E3 = -71.0 / 16695.0
_E4 = 71.0 / 1920.0
_E5 = -17253.0 / 339200.0
_E6 = 22.0 / 525.0
_E7 = -1.0 / 40.0

_SAFETY = 0.9
_MIN_FACTOR = 0.2
_MAX_FACTOR = 10.0
_HIT_TOL = 1e-7
_EPS = 2.220446049250313e-16


# ---------------------------------------------------------------------------------------------
# Parameters and energy
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PendulumParams:
    """Physical parameters of the double pendulum (SI units).

    Attributes
    ----------
    m1, m2 : float
        Point masses at the end of the first and second rod (kg), > 0.
    l1, l2 : float
        Rod lengths (m), > 0.
    g : float
        Gravitational acceleration (m/s²), >= 0.
    damping : float
        Viscous joint friction coefficient (N·m·s/rad), >= 0, applied at both joints: a torque
        ``−damping·ω1`` at the pivot and ``−damping·(ω2 − ω1)`` at the elbow. 0 = conservative.

    """

    m1: float = 1.0
    m2: float = 1.0
    l1: float = 1.0
    l2: float = 1.0
    g: float = 9.81
    damping: float = 0.0

    def __post_init__(self) -> None:
        for name in ("m1", "m2", "l1", "l2", "g", "damping"):
            value = getattr(self, name)
            if not math.isfinite(value):
                raise ValueError(f"PendulumParams.{name} must be finite, got {value!r}")
        for name in ("m1", "m2", "l1", "l2"):
            if getattr(self, name) <= 0.0:
                raise ValueError(f"PendulumParams.{name} must be > 0, got {getattr(self, name)!r}")
        if self.g < 0.0:
            raise ValueError(f"PendulumParams.g must be >= 0, got {self.g!r}")
        if self.damping < 0.0:
            raise ValueError(f"PendulumParams.damping must be >= 0, got {self.damping!r}")

    def as_array(self) -> np.ndarray:
        """Return the parameters as a float64 array for the numba kernels.

        Returns
        -------
        numpy.ndarray
            ``[m1, m2, l1, l2, g, c1, c2]`` with ``c1 = c2 = damping``.

        """
        return np.array(
            [self.m1, self.m2, self.l1, self.l2, self.g, self.damping, self.damping],
            dtype=np.float64,
        )


def energy(y: np.ndarray, params: PendulumParams) -> np.ndarray:
    """Total mechanical energy (kinetic + potential) of one state or of many.

    The potential energy is zero with both rods hanging straight down at rest, the convention
    of the paper authors' released trajectory (its ``PE1 = m1 g l1 (1 − cos θ1)``), so
    ``E >= 0`` and is 0 only at rest at the bottom: the relative drift ``|ΔE / E(0)|`` is well
    defined for every released, displaced start.

    Parameters
    ----------
    y : numpy.ndarray
        A state ``(θ1, θ2, ω1, ω2)`` of shape ``(4,)`` or states of shape ``(n, 4)``.
    params : PendulumParams
        Masses, lengths and gravity (damping is irrelevant here).

    Returns
    -------
    numpy.ndarray
        Energy in joules: a 0-d array for a single state, shape ``(n,)`` otherwise.

    """
    y = np.asarray(y, dtype=np.float64)
    if y.shape[-1] != 4 or y.ndim not in (1, 2):
        raise ValueError(f"energy: expected shape (4,) or (n, 4), got {y.shape}")
    th1, th2, w1, w2 = y[..., 0], y[..., 1], y[..., 2], y[..., 3]
    m1, m2, l1, l2, g = params.m1, params.m2, params.l1, params.l2, params.g
    kinetic = (
        0.5 * (m1 + m2) * l1 * l1 * w1 * w1
        + 0.5 * m2 * l2 * l2 * w2 * w2
        + m2 * l1 * l2 * w1 * w2 * np.cos(th1 - th2)
    )
    potential = (m1 + m2) * g * l1 * (1.0 - np.cos(th1)) + m2 * g * l2 * (1.0 - np.cos(th2))
    return np.asarray(kinetic + potential)


def random_initial_condition(rng: np.random.Generator) -> np.ndarray:
    """Draw a random initial condition released from rest.

    ``θ1`` and ``θ2`` are independent and uniform on ``(−π, π]``; ``ω1 = ω2 = 0``. (The paper's
    released sample starts from rest at ``θ1 ≈ −1.62``, ``θ2 ≈ −2.14`` rad.)

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of randomness.

    Returns
    -------
    numpy.ndarray
        State ``(θ1, θ2, 0, 0)``, float64, shape ``(4,)``.

    """
    # uniform on [0, 2π) maps to (−π, π].
    theta = np.pi - rng.uniform(0.0, 2.0 * np.pi, size=2)
    return np.array([theta[0], theta[1], 0.0, 0.0], dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# numba kernels
# ---------------------------------------------------------------------------------------------


@numba.njit(cache=True)
def _rhs(y, m1, m2, l1, l2, g, c1, c2):
    """Time derivative of the state ``y = (θ1, θ2, ω1, ω2)``.

    Parameters
    ----------
    y : array_like
        Indexable state of length 4.
    m1, m2, l1, l2, g : float
        Masses, rod lengths and gravity.
    c1, c2 : float
        Viscous damping on ``ω1`` at the pivot and on the relative rate ``ω2 − ω1`` at the
        elbow (see the module docstring).

    Returns
    -------
    tuple of float
        ``(ω1, ω2, α1, α2)``.

    """
    th1 = y[0]
    th2 = y[1]
    w1 = y[2]
    w2 = y[3]
    d = th1 - th2
    sd = math.sin(d)
    cd = math.cos(d)
    m12 = m1 + m2
    c = m2 * l1 * l2
    mass11 = m12 * l1 * l1
    mass12 = c * cd
    mass22 = m2 * l2 * l2
    rel = w2 - w1
    f1 = -c * w2 * w2 * sd - m12 * g * l1 * math.sin(th1) - c1 * w1 + c2 * rel
    f2 = c * w1 * w1 * sd - m2 * g * l2 * math.sin(th2) - c2 * rel
    det = m2 * l1 * l1 * l2 * l2 * (m1 + m2 * sd * sd)
    a1 = (mass22 * f1 - mass12 * f2) / det
    a2 = (mass11 * f2 - mass12 * f1) / det
    return w1, w2, a1, a2


@numba.njit(cache=True)
def _rhs_into(out, y, p):
    """Evaluate :func:`_rhs` at ``y`` into ``out`` (a row of a stage array, length 4).

    The row is passed rather than (array, row index): numba would compile one variant per
    literal index.
    """
    d0, d1, d2, d3 = _rhs(y, p[0], p[1], p[2], p[3], p[4], p[5], p[6])
    out[0] = d0
    out[1] = d1
    out[2] = d2
    out[3] = d3


@numba.njit(cache=True)
def _step1(y, k, ys, ynew, h, p, rtol, atol):
    """One Dormand–Prince step of size ``h`` for one state; return the scaled error norm.

    ``k[0]`` must hold ``f(y)``. Fills ``k[1:7]`` (``k[6] = f(ynew)``, the FSAL stage) and
    ``ynew``; ``ys`` is scratch. Nothing is allocated.
    """
    for i in range(4):
        ys[i] = y[i] + h * (_A21 * k[0, i])
    _rhs_into(k[1], ys, p)
    for i in range(4):
        ys[i] = y[i] + h * (_A31 * k[0, i] + _A32 * k[1, i])
    _rhs_into(k[2], ys, p)
    for i in range(4):
        ys[i] = y[i] + h * (_A41 * k[0, i] + _A42 * k[1, i] + _A43 * k[2, i])
    _rhs_into(k[3], ys, p)
    for i in range(4):
        ys[i] = y[i] + h * (_A51 * k[0, i] + _A52 * k[1, i] + _A53 * k[2, i] + _A54 * k[3, i])
    _rhs_into(k[4], ys, p)
    for i in range(4):
        ys[i] = y[i] + h * (
            _A61 * k[0, i] + _A62 * k[1, i] + _A63 * k[2, i] + _A64 * k[3, i] + _A65 * k[4, i]
        )
    _rhs_into(k[5], ys, p)
    for i in range(4):
        ynew[i] = y[i] + h * (
            _B1 * k[0, i] + _B3 * k[2, i] + _B4 * k[3, i] + _B5 * k[4, i] + _B6 * k[5, i]
        )
    _rhs_into(k[6], ynew, p)
    acc = 0.0
    for i in range(4):
        e = h * (
            _E1 * k[0, i]
            + _E3 * k[2, i]
            + _E4 * k[3, i]
            + _E5 * k[4, i]
            + _E6 * k[5, i]
            + _E7 * k[6, i]
        )
        sc = atol + rtol * max(abs(y[i]), abs(ynew[i]))
        acc += (e / sc) * (e / sc)
    return math.sqrt(acc / 4.0)


@numba.njit(cache=True)
def _initial_step(y, f, p, rtol, atol, max_step):
    """Choose a starting step size (Hairer's heuristic, as in scipy), capped at ``max_step``."""
    ys = np.empty(4)
    k = np.empty((7, 4))
    d0 = 0.0
    d1 = 0.0
    for i in range(4):
        sc = atol + rtol * abs(y[i])
        d0 += (y[i] / sc) ** 2
        d1 += (f[i] / sc) ** 2
    d0 = math.sqrt(d0 / 4.0)
    d1 = math.sqrt(d1 / 4.0)
    if d0 < 1e-5 or d1 < 1e-5:
        h0 = 1e-6
    else:
        h0 = 0.01 * d0 / d1
    h0 = min(h0, max_step)
    for i in range(4):
        ys[i] = y[i] + h0 * f[i]
    _rhs_into(k[0], ys, p)
    d2 = 0.0
    for i in range(4):
        sc = atol + rtol * abs(y[i])
        d2 += ((k[0, i] - f[i]) / sc) ** 2
    d2 = math.sqrt(d2 / 4.0) / h0
    if d1 <= 1e-15 and d2 <= 1e-15:
        h1 = max(1e-6, h0 * 1e-3)
    else:
        h1 = (0.01 / max(d1, d2)) ** 0.2
    return min(100.0 * h0, h1, max_step)


@numba.njit(cache=True, nogil=True)
def _run(y, k, ys, ynew, h, k0, n, rate, p, rtol, atol, max_step, out):
    """Advance a bundle of states over ``n`` sample intervals with a shared step sequence.

    Parameters
    ----------
    y : numpy.ndarray
        States, shape ``(m, 4)``, updated in place. All ``m`` states take the same steps; a
        step is accepted when the largest of their error norms is below 1.
    k : numpy.ndarray
        Stage array, shape ``(m, 7, 4)``; ``k[:, 0]`` must hold ``f(y)`` on entry and holds it
        on exit (FSAL).
    ys, ynew : numpy.ndarray
        Scratch, shapes ``(4,)`` and ``(m, 4)``.
    h : float
        Proposed step size.
    k0 : int
        Index of the sample the states are at (time ``k0 / rate``).
    n : int
        Number of samples to advance.
    rate : float
        Sample rate (Hz); samples are at times ``k / rate``, hit exactly.
    p : numpy.ndarray
        Parameters from :meth:`PendulumParams.as_array`.
    rtol, atol, max_step : float
        Tolerances and largest step.
    out : numpy.ndarray
        Shape ``(n, 4)``: receives ``y[0]`` at samples ``k0 + 1 … k0 + n``.

    Returns
    -------
    tuple
        ``(h, accepted, rejected)``: the next proposed step and the step counts.

    """
    m = y.shape[0]
    t = k0 / rate
    accepted = 0
    rejected = 0
    for j in range(n):
        t_target = (k0 + j + 1) / rate
        just_rejected = False
        while True:
            dist = t_target - t
            hh = min(h, max_step)
            hit = False
            if hh * (1.0 + _HIT_TOL) >= dist:
                hh = dist
                hit = True
            elif 2.0 * hh > dist:
                hh = 0.5 * dist
            if hh <= 16.0 * _EPS * max(1.0, abs(t)):
                raise FloatingPointError("double pendulum: step size underflow")
            err = 0.0
            for b in range(m):
                e = _step1(y[b], k[b], ys, ynew[b], hh, p, rtol, atol)
                if not (e <= err):  # also catches NaN
                    err = e
            if err < 1.0:
                if err == 0.0:
                    fac = _MAX_FACTOR
                else:
                    fac = min(_MAX_FACTOR, _SAFETY * err**-0.2)
                if just_rejected:
                    fac = min(1.0, fac)
                h = min(hh * fac, max_step)
                for b in range(m):
                    for i in range(4):
                        y[b, i] = ynew[b, i]
                        k[b, 0, i] = k[b, 6, i]
                accepted += 1
                if hit:
                    t = t_target
                    break
                t = t + hh
                just_rejected = False
            else:
                if err != err or err == np.inf:
                    fac = _MIN_FACTOR
                else:
                    fac = max(_MIN_FACTOR, _SAFETY * err**-0.2)
                h = hh * fac
                rejected += 1
                just_rejected = True
        for i in range(4):
            out[j, i] = y[0, i]
    return h, accepted, rejected


@numba.njit(cache=True)
def _ftle_kernel(y0, direction, d0, n_intervals, rate, p, rtol, atol, max_step):
    """Benettin two-trajectory estimate; return ``(sum of log(d_i / d0), accepted, rejected)``."""
    y = np.empty((2, 4))
    k = np.zeros((2, 7, 4))
    ys = np.empty(4)
    ynew = np.empty((2, 4))
    out = np.empty((1, 4))
    for i in range(4):
        y[0, i] = y0[i]
        y[1, i] = y0[i] + d0 * direction[i]
    _rhs_into(k[0][0], y[0], p)
    _rhs_into(k[1][0], y[1], p)
    h = _initial_step(y[0], k[0, 0], p, rtol, atol, max_step)
    total = 0.0
    accepted = 0
    rejected = 0
    for j in range(n_intervals):
        h, acc, rej = _run(y, k, ys, ynew, h, j, 1, rate, p, rtol, atol, max_step, out)
        accepted += acc
        rejected += rej
        d = 0.0
        for i in range(4):
            d += (y[1, i] - y[0, i]) ** 2
        d = math.sqrt(d)
        if not d > 0.0:
            raise FloatingPointError("ftle: the two trajectories coincided or diverged to NaN")
        total += math.log(d / d0)
        scale = d0 / d
        for i in range(4):
            y[1, i] = y[0, i] + scale * (y[1, i] - y[0, i])
        _rhs_into(k[1][0], y[1], p)
    return total, accepted, rejected


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def _as_state(y0: np.ndarray, name: str = "y0") -> np.ndarray:
    y = np.array(y0, dtype=np.float64, copy=True).reshape(-1)
    if y.shape != (4,):
        raise ValueError(f"{name}: expected 4 values (θ1, θ2, ω1, ω2), got shape {np.shape(y0)}")
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{name}: state must be finite, got {y}")
    return y


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if not (math.isfinite(value) and value > 0.0):
            raise ValueError(f"{name} must be finite and > 0, got {value!r}")


def _count_intervals(seconds: float, rate: float, what: str) -> int:
    """Whole sample intervals in ``seconds`` at ``rate`` (tolerating float rounding)."""
    if not (math.isfinite(seconds) and seconds >= 0.0):
        raise ValueError(f"{what} must be finite and >= 0, got {seconds!r}")
    return math.floor(seconds * rate + 1e-9)


class Stepper:
    """Streaming form for a live source: holds the state, time, and last step size between calls.

    ``advance(a)`` followed by ``advance(b)`` gives bit-identical samples to one
    ``advance(a + b)`` and to :func:`integrate` (the state, the step-size proposal and the FSAL
    derivative are all carried across calls), unless :attr:`y` or :attr:`params` is changed in
    between.

    Parameters
    ----------
    y0 : numpy.ndarray
        Initial state ``(θ1, θ2, ω1, ω2)`` (rad, rad/s).
    params : PendulumParams
        Physical parameters.
    sample_rate : float, optional
        Samples per second; samples are taken at exactly ``k / sample_rate``.
    rtol, atol : float, optional
        Relative and absolute local error tolerances.
    max_step : float, optional
        Largest step size (s).

    Attributes
    ----------
    steps : int
        Accepted steps so far.
    rejected : int
        Rejected steps so far.

    """

    def __init__(
        self,
        y0: np.ndarray,
        params: PendulumParams,
        *,
        sample_rate: float = 1000.0,
        rtol: float = 1e-9,
        atol: float = 1e-9,
        max_step: float = 1e-3,
    ) -> None:
        _check_positive(sample_rate=sample_rate, rtol=rtol, atol=atol, max_step=max_step)
        self._rate = float(sample_rate)
        self._rtol = float(rtol)
        self._atol = float(atol)
        self._max_step = float(max_step)
        self._y = _as_state(y0).reshape(1, 4)
        self._k = np.zeros((1, 7, 4))
        self._ys = np.empty(4)
        self._ynew = np.empty((1, 4))
        self._h = math.nan
        self._index = 0
        self._fsal_valid = False
        self._params = params
        self._p = params.as_array()
        self.steps = 0
        self.rejected = 0

    @property
    def params(self) -> PendulumParams:
        """Physical parameters; a new value takes effect at the next :meth:`advance`."""
        return self._params

    @params.setter
    def params(self, value: PendulumParams) -> None:
        if not isinstance(value, PendulumParams):
            raise TypeError(f"params must be PendulumParams, got {type(value).__name__}")
        self._params = value
        self._p = value.as_array()
        self._fsal_valid = False

    @property
    def y(self) -> np.ndarray:
        """Current state ``(θ1, θ2, ω1, ω2)`` (a copy); assign to kick the pendulum."""
        return self._y[0].copy()

    @y.setter
    def y(self, value: np.ndarray) -> None:
        self._y[0] = _as_state(value, "y")
        self._fsal_valid = False

    @property
    def t(self) -> float:
        """Current time (s): ``samples advanced / sample_rate``."""
        return self._index / self._rate

    @property
    def sample_rate(self) -> float:
        """Samples per second."""
        return self._rate

    def advance(self, n_samples: int) -> np.ndarray:
        """Integrate forward by ``n_samples`` sample intervals.

        Parameters
        ----------
        n_samples : int
            Number of samples to produce, >= 0.

        Returns
        -------
        numpy.ndarray
            States at the next ``n_samples`` sample times (excluding the current one), shape
            ``(n_samples, 4)``.

        """
        n = operator.index(n_samples)
        if n < 0:
            raise ValueError(f"n_samples must be >= 0, got {n}")
        out = np.empty((n, 4))
        if n == 0:
            return out
        if not self._fsal_valid:
            _rhs_into(self._k[0][0], self._y[0], self._p)
            self._fsal_valid = True
        if not math.isfinite(self._h):
            self._h = float(
                _initial_step(
                    self._y[0], self._k[0, 0], self._p, self._rtol, self._atol, self._max_step
                )
            )
        h, accepted, rejected = _run(
            self._y,
            self._k,
            self._ys,
            self._ynew,
            self._h,
            self._index,
            n,
            self._rate,
            self._p,
            self._rtol,
            self._atol,
            self._max_step,
            out,
        )
        self._h = float(h)
        self._index += n
        self.steps += int(accepted)
        self.rejected += int(rejected)
        return out


@numba.njit(cache=True, nogil=True)
def _predict(s, dt, substeps, p, out):
    """Each row of ``s`` advanced by ``dt`` in ``substeps`` classical Runge–Kutta steps."""
    h = dt / substeps
    y = np.empty(4)
    ys = np.empty(4)
    k = np.empty((4, 4))
    for r in range(s.shape[0]):
        for i in range(4):
            y[i] = s[r, i]
        for _ in range(substeps):
            _rhs_into(k[0], y, p)
            for i in range(4):
                ys[i] = y[i] + 0.5 * h * k[0, i]
            _rhs_into(k[1], ys, p)
            for i in range(4):
                ys[i] = y[i] + 0.5 * h * k[1, i]
            _rhs_into(k[2], ys, p)
            for i in range(4):
                ys[i] = y[i] + h * k[2, i]
            _rhs_into(k[3], ys, p)
            for i in range(4):
                y[i] += h / 6.0 * (k[0, i] + 2.0 * k[1, i] + 2.0 * k[2, i] + k[3, i])
        for i in range(4):
            out[r, i] = y[i]


def predict_states(s: np.ndarray, params: PendulumParams, dt: float, substeps: int = 2
                   ) -> np.ndarray:
    """Each state of ``s`` (rows of θ1, θ2, ω1, ω2) ``dt`` seconds later: the loop's twin.

    Classical Runge–Kutta in ``substeps`` steps (2 of 0.5 ms at the live 1 kHz: at most
    1.3e-10 from the live integrator's samples on the default pendulum, within its tolerance
    of 1e-9; 1.4 µs a row), compiled and releasing the GIL.
    """
    s = np.ascontiguousarray(s, dtype=np.float64)
    out = np.empty_like(s)
    _predict(s, float(dt), np.int64(substeps), params.as_array(), out)
    return out


@dataclass
class Trajectory:
    """Sampled solution returned by :func:`integrate`.

    Attributes
    ----------
    t : numpy.ndarray
        Sample times (s), shape ``(n,)``, exactly ``k / sample_rate``.
    y : numpy.ndarray
        States ``(θ1, θ2, ω1, ω2)`` at those times, shape ``(n, 4)``; angles unwrapped.
    energy_drift : float
        ``max_k |E(t_k) − E(0)| / |E(0)|`` (``inf`` if ``E(0) = 0`` and the energy moved).
    valid : bool
        ``energy_drift <= 5e-4`` (0.05 %), the paper's criterion; only meaningful for
        conservative runs (``damping == 0``).
    steps : int
        Accepted integration steps.
    rejected : int
        Rejected integration steps.

    """

    t: np.ndarray
    y: np.ndarray
    energy_drift: float
    valid: bool
    steps: int
    rejected: int


def integrate(
    y0: np.ndarray,
    params: PendulumParams,
    seconds: float,
    *,
    sample_rate: float = 1000.0,
    rtol: float = 1e-9,
    atol: float = 1e-9,
    max_step: float = 1e-3,
) -> Trajectory:
    """Integrate the double pendulum and sample it on a regular grid.

    Adaptive Dormand–Prince 5(4) (the ``ode45`` pair) with steps clipped to land exactly on
    every sample time; see the module docstring for the controller.

    Parameters
    ----------
    y0 : numpy.ndarray
        Initial state ``(θ1, θ2, ω1, ω2)`` (rad, rad/s), angles from the downward vertical.
    params : PendulumParams
        Physical parameters.
    seconds : float
        Duration (s). The samples are ``t = 0, 1/fs, …, seconds`` inclusive when ``seconds`` is
        a multiple of ``1/fs`` (20 s at 1 kHz gives 20001 rows); otherwise the last sample is
        the last grid time not after ``seconds``.
    sample_rate : float, optional
        Samples per second ``fs``.
    rtol, atol : float, optional
        Relative and absolute local error tolerances.
    max_step : float, optional
        Largest step size (s).

    Returns
    -------
    Trajectory
        Samples, energy drift and step counts.

    """
    stepper = Stepper(y0, params, sample_rate=sample_rate, rtol=rtol, atol=atol, max_step=max_step)
    n = _count_intervals(seconds, stepper.sample_rate, "seconds")
    y = np.empty((n + 1, 4))
    y[0] = stepper.y
    y[1:] = stepper.advance(n)
    t = np.arange(n + 1) / stepper.sample_rate
    e = energy(y, params)
    e0 = float(e[0])
    dev = float(np.max(np.abs(e - e0)))
    if e0 != 0.0:
        drift = dev / abs(e0)
    else:
        drift = 0.0 if dev == 0.0 else math.inf
    return Trajectory(
        t=t,
        y=y,
        energy_drift=drift,
        valid=bool(drift <= VALID_DRIFT),
        steps=stepper.steps,
        rejected=stepper.rejected,
    )


def ftle(
    y0: np.ndarray,
    params: PendulumParams,
    seconds: float,
    *,
    d0: float = 1e-8,
    renorm_every: float = 0.01,
    direction: np.ndarray | None = None,
    rtol: float = 1e-9,
    atol: float = 1e-9,
    max_step: float = 1e-3,
) -> float:
    """Finite-time largest Lyapunov exponent by Benettin's two-trajectory method.

    A reference trajectory from ``y0`` and a neighbour from ``y0 + d0·u`` (``u`` a unit vector)
    are integrated together with one shared, adaptively chosen step sequence (the step is
    accepted only when both states meet the tolerance), so both see the same numerical flow map
    and the separation is not polluted by differing truncation errors. Every ``renorm_every``
    seconds (hit exactly) the separation ``d_i`` is measured, ``log(d_i / d0)`` is accumulated
    and the neighbour is pulled back along the separation to distance ``d0``. The result is
    ``Σ log(d_i / d0) / T`` with ``T`` the total time. The separation is the plain Euclidean
    norm on ``(θ1, θ2, ω1, ω2)``, mixing rad and rad/s; the asymptotic exponent does not depend
    on the metric, finite-time values do a little.

    Parameters
    ----------
    y0 : numpy.ndarray
        Initial state of the reference trajectory.
    params : PendulumParams
        Physical parameters.
    seconds : float
        Total time ``T`` (s); rounded down to a whole number of ``renorm_every`` intervals.
    d0 : float, optional
        Initial and renormalised separation; small enough to stay linear, large enough to
        stay well above the integration error (the default suits ``rtol = atol = 1e-9``).
    renorm_every : float, optional
        Renormalisation interval (s).
    direction : numpy.ndarray, optional
        Initial separation direction (normalised here); default ``(1, 1, 1, 1) / 2``.
    rtol, atol, max_step : float, optional
        Integrator settings, as in :func:`integrate`.

    Returns
    -------
    float
        The finite-time largest Lyapunov exponent (1/s).

    """
    y = _as_state(y0)
    _check_positive(d0=d0, renorm_every=renorm_every, rtol=rtol, atol=atol, max_step=max_step)
    u = np.ones(4) if direction is None else _as_state(direction, "direction")
    norm = float(np.linalg.norm(u))
    if norm == 0.0:
        raise ValueError("direction must be non-zero")
    u = u / norm
    rate = 1.0 / renorm_every
    n = _count_intervals(seconds, rate, "seconds")
    if n < 1:
        raise ValueError(f"seconds ({seconds!r}) must cover at least one renorm_every interval")
    total, _, _ = _ftle_kernel(
        y, u, float(d0), n, rate, params.as_array(), float(rtol), float(atol), float(max_step)
    )
    return float(total) / (n / rate)
