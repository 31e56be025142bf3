"""Tests for the double-pendulum integrator (idt_desk_sources.pendulum._dynamics)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from idt_desk_sources.pendulum._dynamics import (
    VALID_DRIFT,
    PendulumParams,
    Stepper,
    Trajectory,
    energy,
    ftle,
    integrate,
    random_initial_condition,
)
from scipy.integrate import solve_ivp

CHAOTIC = np.array([2.0, 2.5, 0.0, 0.0])
PAPER_SAMPLE = np.array([-1.62, -2.14, 0.0, 0.0])


# ---------------------------------------------------------------------------------------------
# Independent references (plain numpy, not importing the module's kernels)
# ---------------------------------------------------------------------------------------------


def myphysicslab_rhs(t, y, m1, m2, l1, l2, g):
    """myphysicslab's closed form, conservative; angles from the downward vertical."""
    th1, th2, w1, w2 = y
    d = th1 - th2
    den = 2.0 * m1 + m2 - m2 * np.cos(2.0 * th1 - 2.0 * th2)
    a1 = (
        -g * (2.0 * m1 + m2) * np.sin(th1)
        - m2 * g * np.sin(th1 - 2.0 * th2)
        - 2.0 * np.sin(d) * m2 * (w2 * w2 * l2 + w1 * w1 * l1 * np.cos(d))
    ) / (l1 * den)
    a2 = (
        2.0
        * np.sin(d)
        * (w1 * w1 * l1 * (m1 + m2) + g * (m1 + m2) * np.cos(th1) + w2 * w2 * l2 * m2 * np.cos(d))
    ) / (l2 * den)
    return np.array([w1, w2, a1, a2])


def damped_rhs(t, y, m1, m2, l1, l2, g, c):
    """Lagrange's equations with joint friction, solved numerically with np.linalg.solve."""
    th1, th2, w1, w2 = y
    d = th1 - th2
    mass = np.array(
        [[(m1 + m2) * l1**2, m2 * l1 * l2 * np.cos(d)], [m2 * l1 * l2 * np.cos(d), m2 * l2**2]]
    )
    # Pivot torque -c*w1 on rod 1; elbow torque -c*(w2 - w1) on rod 2 and its reaction on rod 1.
    q = np.array([-c * w1 + c * (w2 - w1), -c * (w2 - w1)])
    f = np.array(
        [
            -m2 * l1 * l2 * w2**2 * np.sin(d) - (m1 + m2) * g * l1 * np.sin(th1),
            m2 * l1 * l2 * w1**2 * np.sin(d) - m2 * g * l2 * np.sin(th2),
        ]
    )
    f = f + q
    acc = np.linalg.solve(mass, f)
    return np.array([w1, w2, acc[0], acc[1]])


def reference(rhs, y0, t_eval, *args):
    sol = solve_ivp(
        rhs,
        (0.0, t_eval[-1]),
        y0,
        method="DOP853",
        rtol=1e-12,
        atol=1e-12,
        t_eval=t_eval,
        args=args,
    )
    assert sol.success
    return sol.y.T


def zero_crossing_period(t, x):
    """Mean period from upward zero crossings, linearly interpolated."""
    idx = np.nonzero((x[:-1] < 0.0) & (x[1:] >= 0.0))[0]
    crossings = t[idx] - x[idx] * (t[idx + 1] - t[idx]) / (x[idx + 1] - x[idx])
    assert len(crossings) >= 3
    return float(np.mean(np.diff(crossings)))


# ---------------------------------------------------------------------------------------------
# 1. Accuracy against an independent high-accuracy solution
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        PendulumParams(),
        PendulumParams(m1=1.3, m2=0.7, l1=0.9, l2=1.2, g=9.81),
    ],
    ids=["equal", "unequal"],
)
def test_matches_dop853_reference(params):
    traj = integrate(CHAOTIC, params, 2.0)
    ref = reference(
        myphysicslab_rhs, CHAOTIC, traj.t, params.m1, params.m2, params.l1, params.l2, params.g
    )
    assert traj.y.shape == ref.shape == (2001, 4)
    assert np.max(np.abs(traj.y - ref)) < 1e-6


def test_damped_matches_independent_reference():
    params = PendulumParams(m1=1.0, m2=0.6, l1=1.0, l2=0.8, damping=0.3)
    traj = integrate(CHAOTIC, params, 2.0)
    ref = reference(
        damped_rhs,
        CHAOTIC,
        traj.t,
        params.m1,
        params.m2,
        params.l1,
        params.l2,
        params.g,
        params.damping,
    )
    assert np.max(np.abs(traj.y - ref)) < 1e-6


# ---------------------------------------------------------------------------------------------
# 2. Energy conservation and output layout
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("y0", "params"),
    [
        (CHAOTIC, PendulumParams()),
        (CHAOTIC, PendulumParams(m1=1.0, m2=0.5)),
        (PAPER_SAMPLE, PendulumParams()),
    ],
    ids=["chaotic-equal", "chaotic-m2-half", "paper-sample"],
)
def test_energy_drift_20s(y0, params):
    traj = integrate(y0, params, 20.0)
    assert isinstance(traj, Trajectory)
    assert traj.y.shape == (20001, 4)
    assert traj.t.shape == (20001,)
    assert traj.t[0] == 0.0
    assert traj.t[-1] == 20.0
    np.testing.assert_array_equal(traj.t, np.arange(20001) / 1000.0)
    np.testing.assert_array_equal(traj.y[0], y0)
    e = energy(traj.y, params)
    drift = np.max(np.abs(e - e[0])) / abs(e[0])
    assert traj.energy_drift == pytest.approx(drift)
    assert traj.energy_drift < VALID_DRIFT
    assert traj.valid
    assert traj.steps >= 20000
    assert traj.rejected >= 0


def test_energy_formula_and_shapes():
    params = PendulumParams(m1=2.0, m2=0.5, l1=1.5, l2=0.5, g=9.81)
    # Hanging at rest: E = 0 (potential zero at the bottom, as in the authors' data).
    assert float(energy(np.zeros(4), params)) == 0.0
    # Both rods straight up at rest: each mass raised by twice its height below the pivot.
    assert float(energy(np.array([np.pi, np.pi, 0, 0]), params)) == pytest.approx(
        2 * (2.5 * 9.81 * 1.5 + 0.5 * 9.81 * 0.5)
    )
    # Kinetic energy from the mass velocities directly.
    y = np.array([0.3, -1.1, 2.0, -0.7])
    v1 = params.l1 * y[2] * np.array([np.cos(y[0]), np.sin(y[0])])
    v2 = v1 + params.l2 * y[3] * np.array([np.cos(y[1]), np.sin(y[1])])
    kin = 0.5 * params.m1 * v1 @ v1 + 0.5 * params.m2 * v2 @ v2
    # Heights above the lowest point of each mass.
    h1 = params.l1 * (1 - np.cos(y[0]))
    h2 = h1 + params.l2 * (1 - np.cos(y[1]))
    pot = params.g * (params.m1 * h1 + params.m2 * h2)
    assert float(energy(y, params)) == pytest.approx(kin + pot, rel=1e-13)
    assert energy(np.tile(y, (5, 1)), params).shape == (5,)
    with pytest.raises(ValueError):
        energy(np.zeros(3), params)


def test_angles_are_not_wrapped():
    # A strong push makes the first rod go over the top repeatedly.
    traj = integrate([0.0, 0.0, 12.0, 12.0], PendulumParams(), 3.0)
    assert traj.valid
    assert np.max(np.abs(traj.y[:, 0])) > 2.0 * np.pi
    assert np.max(np.abs(np.diff(traj.y[:, 0]))) < 0.1


def test_non_multiple_duration_and_sample_rate():
    traj = integrate(CHAOTIC, PendulumParams(), 0.1234, sample_rate=100.0)
    np.testing.assert_array_equal(traj.t, np.arange(13) / 100.0)
    fine = integrate(CHAOTIC, PendulumParams(), 0.12)
    np.testing.assert_allclose(traj.y[-1], fine.y[-1], atol=1e-9)


# ---------------------------------------------------------------------------------------------
# 3. Physics checks and the streaming stepper
# ---------------------------------------------------------------------------------------------


def test_damping_dissipates_energy_monotonically():
    params = PendulumParams(damping=0.2)
    traj = integrate(CHAOTIC, params, 10.0)
    e = energy(traj.y, params)
    assert np.all(np.diff(e) <= 1e-10)
    assert e[-1] < e[0] - 1.0
    # The energy lost equals the work done by friction: dE/dt = -c w1² - c (w2 - w1)².
    w1, w2 = traj.y[:, 2], traj.y[:, 3]
    power = -params.damping * (w1**2 + (w2 - w1) ** 2)
    dt = np.diff(traj.t)
    work = np.concatenate([[0.0], np.cumsum(0.5 * (power[1:] + power[:-1]) * dt)])
    np.testing.assert_allclose(e - e[0], work, atol=1e-4 * abs(e[0] - e[-1]))


def _slow_mode_period(params, amplitude=0.01, seconds=12.0):
    """Return the simulated and linearised periods of the slow normal mode."""
    m1, m2, l1, l2, g = params.m1, params.m2, params.l1, params.l2, params.g
    mass = np.array([[(m1 + m2) * l1**2, m2 * l1 * l2], [m2 * l1 * l2, m2 * l2**2]])
    stiffness = np.diag([(m1 + m2) * g * l1, m2 * g * l2])
    w2, vecs = np.linalg.eig(np.linalg.solve(mass, stiffness))
    slow = int(np.argmin(w2.real))
    mode = vecs[:, slow].real
    mode = mode / np.max(np.abs(mode))
    y0 = np.array([amplitude * mode[0], amplitude * mode[1], 0.0, 0.0])
    traj = integrate(y0, params, seconds)
    return zero_crossing_period(traj.t, traj.y[:, 0]), 2.0 * np.pi / math.sqrt(w2[slow].real)


def test_gravity_scales_small_oscillation_period():
    earth = PendulumParams(g=9.81)
    mars = PendulumParams(g=3.71)
    t_earth, lin_earth = _slow_mode_period(earth)
    t_mars, lin_mars = _slow_mode_period(mars)
    # Equal masses and lengths: omega² = (2 - sqrt 2) g / l.
    assert lin_earth == pytest.approx(2 * np.pi / math.sqrt((2 - math.sqrt(2)) * 9.81), rel=1e-12)
    assert t_earth == pytest.approx(lin_earth, rel=0.01)
    assert t_mars == pytest.approx(lin_mars, rel=0.01)
    assert t_mars / t_earth == pytest.approx(math.sqrt(9.81 / 3.71), rel=0.01)
    # Longer rods: the period scales as sqrt(l / g).
    long_rods = PendulumParams(l1=2.0, l2=2.0)
    t_long, _ = _slow_mode_period(long_rods, seconds=16.0)
    assert t_long / t_earth == pytest.approx(math.sqrt(2.0), rel=0.01)


def test_stepper_chunks_match_integrate_bitwise():
    params = PendulumParams()
    traj = integrate(CHAOTIC, params, 1.0)
    stepper = Stepper(CHAOTIC, params)
    a = stepper.advance(137)
    b = stepper.advance(863)
    assert a.shape == (137, 4)
    assert b.shape == (863, 4)
    np.testing.assert_array_equal(np.vstack([a, b]), traj.y[1:])
    assert stepper.t == 1.0
    assert stepper.steps == traj.steps
    assert stepper.rejected == traj.rejected
    np.testing.assert_array_equal(stepper.y, traj.y[-1])
    assert stepper.advance(0).shape == (0, 4)
    with pytest.raises(ValueError):
        stepper.advance(-1)


def test_stepper_many_small_chunks_match_integrate():
    params = PendulumParams(m1=1.0, m2=0.5, damping=0.05)
    traj = integrate(PAPER_SAMPLE, params, 0.5, sample_rate=1000.0)
    stepper = Stepper(PAPER_SAMPLE, params)
    chunks = [stepper.advance(n) for n in (1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 125)]
    np.testing.assert_array_equal(np.vstack(chunks), traj.y[1:])


def test_stepper_parameter_change_and_kick():
    params = PendulumParams()
    stepper = Stepper(CHAOTIC, params)
    stepper.advance(300)
    t_before = stepper.t
    # Gravity change takes effect at the next call: compare with a fresh run from that state.
    moon = PendulumParams(g=1.62)
    stepper.params = moon
    assert stepper.params is moon
    y_mid = stepper.y
    cont = stepper.advance(200)
    fresh = integrate(y_mid, moon, 0.2)
    np.testing.assert_allclose(cont, fresh.y[1:], atol=1e-8)
    assert stepper.t == pytest.approx(t_before + 0.2, abs=1e-15)
    # A kick adds angular velocity between calls; the energy jumps accordingly.
    y = stepper.y
    e_before = float(energy(y, moon))
    stepper.y = y + np.array([0.0, 0.0, 1.5, -0.5])
    np.testing.assert_array_equal(stepper.y, y + np.array([0.0, 0.0, 1.5, -0.5]))
    e_after = float(energy(stepper.y, moon))
    assert e_after != pytest.approx(e_before)
    out = stepper.advance(500)
    e_out = energy(out, moon)
    assert np.max(np.abs(e_out - e_after)) < 1e-6 * abs(e_after)
    # The returned state is a copy; t is read-only.
    stepper.y[0] = 100.0
    assert stepper.y[0] != 100.0
    with pytest.raises(AttributeError):
        stepper.t = 0.0  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------
# 4. Lyapunov exponent
# ---------------------------------------------------------------------------------------------


def test_ftle_chaotic_is_positive_and_consistent():
    params = PendulumParams()
    lam = ftle(CHAOTIC, params, 10.0)
    assert lam > 0.5
    # The linear regime: the estimate barely depends on d0 along the same direction.
    lam_small_d0 = ftle(CHAOTIC, params, 10.0, d0=1e-9)
    assert lam_small_d0 == pytest.approx(lam, rel=0.02)
    # A second, independent estimate: another initial direction and separation.
    lam_other = ftle(CHAOTIC, params, 10.0, d0=1e-7, direction=np.array([1.0, -1.0, 0.5, 2.0]))
    assert lam_other == pytest.approx(lam, rel=0.15)


def test_ftle_small_amplitude_is_near_zero():
    lam = ftle([0.05, 0.05, 0.0, 0.0], PendulumParams(), 10.0)
    assert abs(lam) < 0.5


def test_ftle_renormalisation_interval_invariant():
    # Renormalising more or less often estimates the same exponent.
    params = PendulumParams()
    a = ftle(CHAOTIC, params, 5.0, renorm_every=0.01)
    b = ftle(CHAOTIC, params, 5.0, renorm_every=0.05)
    assert b == pytest.approx(a, rel=0.05)


# ---------------------------------------------------------------------------------------------
# Inputs and initial conditions
# ---------------------------------------------------------------------------------------------


def test_random_initial_condition():
    rng = np.random.default_rng(7)
    ys = np.array([random_initial_condition(rng) for _ in range(2000)])
    assert ys.shape == (2000, 4)
    assert np.all(ys[:, :2] > -np.pi)
    assert np.all(ys[:, :2] <= np.pi)
    assert np.all(ys[:, 2:] == 0.0)
    assert np.min(ys[:, :2]) < -3.0
    assert np.max(ys[:, :2]) > 3.0
    again = random_initial_condition(np.random.default_rng(7))
    np.testing.assert_array_equal(again, ys[0])


def test_params_validation_and_array():
    p = PendulumParams(m1=1.5, m2=0.5, l1=2.0, l2=0.25, g=3.0, damping=0.1)
    np.testing.assert_array_equal(p.as_array(), [1.5, 0.5, 2.0, 0.25, 3.0, 0.1, 0.1])
    assert p.as_array().dtype == np.float64
    for bad in ({"m1": 0.0}, {"l2": -1.0}, {"damping": -0.1}, {"g": math.nan}, {"g": -1.0}):
        with pytest.raises(ValueError):
            PendulumParams(**bad)
    with pytest.raises(ValueError):
        integrate([0.0, 0.0, 0.0], PendulumParams(), 1.0)
    with pytest.raises(ValueError):
        integrate([0.0, math.nan, 0.0, 0.0], PendulumParams(), 1.0)
    with pytest.raises(ValueError):
        Stepper(CHAOTIC, PendulumParams(), max_step=0.0)


def test_energy_matches_the_authors_sample_trajectory():
    # The paper authors' ode45 trajectory carries its own energy columns (m = l = 1, g = 9.81).
    import pandas as pd

    path = Path(__file__).parent.parent / "assets" / "data" / "DP_Sample.csv.gz"
    df = pd.read_csv(path, nrows=2000)
    y = df[["theta1", "theta2", "omega1", "omega2"]].to_numpy()
    np.testing.assert_allclose(energy(y, PendulumParams()), df["TotalE"], rtol=1e-7)
    # ...and our integrator follows their trajectory from the same start for the first second.
    ours = integrate(y[0], PendulumParams(), 1.0)
    np.testing.assert_allclose(ours.y, y[:1001], atol=1e-5)
