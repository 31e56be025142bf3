"""The null models' crossing rates (idt_desk.detection.nulls) against independent references:
brute-force counts, scipy's bivariate normal, long simulated paths, the reference fit, and the
budget on hundreds of simulated null hours generated without the module's own simulator."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from scipy.signal import lfilter

from idt_desk.detection import nulls
from idt_desk.detection.detectors import (
    DetectorSpec,
    alarm_episodes,
    calibrate,
    detector_statistic,
    joint_statistic,
)
from idt_desk.detection.reference import _bisected_threshold, reference_calibrate

#: The pendulum's windows per hour of loop time (1 kHz, stride 75): the 1/h budget in windows.
PER_HOUR = 48_000
#: Triangular autocorrelation: a window's mean over 4 blocks, sliding one block at a time (the
#: overlap W / stride = 4 of white transitions); the exact null of :func:`_windows`.
TRIANGLE = np.array([1.0, 0.75, 0.5, 0.25])


def _windows(n: int, rng: np.random.Generator, phi: float = 0.0) -> np.ndarray:
    """Unit-variance overlapping-window means of a stream of blocks (AR(1) with ``phi``),
    made with numpy's convolution, not the module's circulant simulator."""
    e = rng.standard_normal(n + 3)
    if phi:
        e = lfilter([1.0], [1.0, -phi], e) * math.sqrt(1.0 - phi * phi)
    x = np.convolve(e, np.ones(4), "valid")
    return x / x.std()


def test_one_sorted_pass_finds_the_threshold_a_brute_force_count_does():
    rng = np.random.default_rng(0)
    s = np.abs(lfilter([0.05], [1.0, -0.95], rng.standard_normal(300_000)))
    for count in (3.0, 20.0, 200.0):
        h = nulls.crossing_threshold(s, count)
        assert alarm_episodes(s, h) <= count < alarm_episodes(s, np.nextafter(h, -np.inf))
        # Above it never more than ``count``; the reference's bisection lands on the same level.
        for level in np.linspace(h, s.max(), 50):
            assert alarm_episodes(s, level) <= count
        assert _bisected_threshold(s, count) == pytest.approx(h, abs=1e-9)


def test_the_ewma_crossing_rate_is_owens_closed_form_of_the_bivariate_normal():
    """P(|X| <= h < |Y|) of two consecutive values, against scipy's rectangle probabilities
    (Genz's integration), mean 0 and shifted; at c = 0 (independent windows) in closed form."""
    for h, mean, c in ((0.5, 0.0, 0.3), (1.0, 0.0, 0.9), (1.5, 0.4, 0.99), (2.0, 0.3, 0.6)):
        mvn = stats.multivariate_normal([mean, mean], [[1, c], [c, 1]])
        inside = stats.norm.cdf(h - mean) - stats.norm.cdf(-h - mean)
        both = mvn.cdf([h, h], lower_limit=[-h, -h])
        assert nulls.ewma_crossing_rate(h, mean, 1.0, c) == pytest.approx(inside - both,
                                                                          rel=2e-3, abs=1e-7)
    inside = stats.norm.cdf(1.3) - stats.norm.cdf(-1.3)
    assert nulls.ewma_crossing_rate(1.3, 0.0, 1.0, 0.0) == pytest.approx(inside * (1 - inside))


def test_the_ewma_moments_and_rate_against_a_long_simulated_ewma():
    rng = np.random.default_rng(1)
    z = _windows(4_000_000, rng)
    lam = 0.05
    e = lfilter([lam], [1.0, lam - 1.0], z)[1000:]
    var, corr = nulls.ewma_moments(TRIANGLE, lam)
    assert e.var() == pytest.approx(var, rel=0.03)
    assert np.corrcoef(e[:-1], e[1:])[0, 1] == pytest.approx(corr, abs=2e-4)
    for sigmas in (2.0, 3.0):
        h = sigmas * math.sqrt(var)
        expected = nulls.ewma_crossing_rate(h, 0.0, math.sqrt(var), corr) * e.size
        got = alarm_episodes(np.abs(e), h)
        # Crossings of a smooth process cluster: allow five times the Poisson spread.
        assert abs(got - expected) < 5 * math.sqrt(expected), (sigmas, got, expected)


def test_the_cusum_crossing_rate_falls_exactly_exponentially_at_the_long_run_variance():
    """log N(h) + θh is flat over the levels a 4 M path crosses 100-20,000 times, θ = 2d/τ."""
    rng = np.random.default_rng(2)
    z = _windows(4_000_000, rng, phi=0.5)
    rho = np.array([1.0] + [float(np.corrcoef(z[:-k], z[k:])[0, 1]) for k in range(1, 11)])
    tau = float(nulls.null_spectrum(rho, 4096)[0])
    theta = 2 * 0.5 / tau
    up, _ = nulls._cusum_counts(z, 0.5, 0.0, 1.0, 0.25 / theta, 100)
    levels = np.arange(1, 101) * 0.25 / theta
    use = (up >= 100) & (up <= 20_000)
    flat = np.log(up[use]) + theta * levels[use]
    assert use.sum() >= 10 and np.ptp(flat) < 0.35, flat


def _known_thresholds(arl: float, seed: int) -> dict[str, float]:
    var, corr = nulls.ewma_moments(TRIANGLE, 0.05)
    return {
        "persistence": nulls.persistence_thresholds(TRIANGLE, 5, arl, [(0.0, 1.0)], seed)[0],
        "cusum": nulls.cusum_thresholds(TRIANGLE, 0.5, arl, [(0.0, 1.0)], seed)[0],
        "ewma": nulls.ewma_threshold(var, corr, arl),
        "mewma": nulls.joint_thresholds(np.full(3, var), np.full(3, corr), arl, [(0.0, 1.0)],
                                        seed)[0],
    }


def test_each_method_gives_the_budget_itself_on_an_exact_null():
    """The thresholds for a perfectly known null (no pessimism), 1 false alarm per hour of the
    pendulum's windows, on six independent 200-hour runs of that null made by convolution:
    their mean count is within its 95 % interval of the budget, 200 (measured: 192-215)."""
    counts: dict[str, list[int]] = {k: [] for k in ("persistence", "cusum", "ewma", "mewma")}
    n = 200 * PER_HOUR
    for run in range(6):
        rng = np.random.default_rng(100 + run)
        h = _known_thresholds(float(PER_HOUR), run)
        z = _windows(n, rng)
        for kind in ("persistence", "cusum", "ewma"):
            s, _ = detector_statistic(DetectorSpec(kind), z)
            counts[kind].append(alarm_episodes(s, h[kind]))
        u = np.column_stack([z, _windows(n, rng), _windows(n, rng)])
        counts["mewma"].append(alarm_episodes(joint_statistic(0.05, u)[0], h["mewma"]))
    for kind, c in counts.items():
        mean, sem = np.mean(c), np.std(c, ddof=1) / math.sqrt(len(c))
        half = stats.t.ppf(0.975, len(c) - 1) * max(sem, math.sqrt(200 / len(c)))
        assert abs(mean - 200) <= half, (kind, c)


@pytest.mark.parametrize("kind", ["persistence", "cusum", "ewma", "mewma"])
def test_calibrated_thresholds_keep_the_budget_on_200_simulated_null_hours(kind):
    """calibrate() on an 800-window baseline (the pendulum's default) of IDT-like components
    (P correlated with H_b, ΔH = H_f − H_b; blocks AR(0.5), so the autocorrelation runs past
    the overlap), 1/h, then 200 hours of the same null: the IDT alarm's episodes stay inside
    the budget's 95 % interval (at most 228, Poisson's for 200)."""
    rng = np.random.default_rng(7)
    n = 200 * PER_HOUR

    def comp(m):
        return _windows(m, rng, phi=0.5)

    hf, hb, x = comp(800 + n), comp(800 + n), comp(800 + n)
    series = {"P": 0.6 * hb + 0.8 * x, "H_f": hf, "H_b": hb, "dH": hf - hb}
    spec = DetectorSpec(kind)
    cal = calibrate(spec, {c: v[:800] for c, v in series.items()}, float(PER_HOUR), overlap=4.0)
    z = np.column_stack([cal.standardise(c, series[c][800:]) for c in cal.components])
    if kind == "mewma":
        on = joint_statistic(spec.lam, z @ np.asarray(cal.joint["whitening"]))[0] \
            > cal.joint["threshold"]
    else:
        on = np.zeros(n, dtype=bool)
        for j, c in enumerate(cal.components):
            on |= detector_statistic(spec, z[:, j])[0] > cal.threshold[c]
    assert alarm_episodes(on.astype(float), 0.5) <= stats.poisson.ppf(0.975, 200)


@pytest.mark.parametrize("kind", ["persistence", "ewma", "mewma"])
def test_the_fast_fit_agrees_with_the_reference(kind):
    """The same baseline, the same budget: thresholds within the reference's own precision
    (its 20 simulated crossings: a few per cent), and the same verdict on its length."""
    rng = np.random.default_rng(9)
    hf, hb, x = (_windows(600, rng, phi=0.5) for _ in range(3))
    base = {"P": 0.6 * hb + 0.8 * x, "H_f": hf, "H_b": hb, "dH": hf - hb}
    fast = calibrate(DetectorSpec(kind), base, 20_000.0, overlap=4.0)
    ref = reference_calibrate(DetectorSpec(kind), base, 20_000.0, overlap=4.0)
    for c in base:
        assert fast.threshold[c] == pytest.approx(ref.threshold[c], rel=0.05)
    if kind == "mewma":
        assert fast.joint["threshold"] == pytest.approx(ref.joint["threshold"], rel=0.05)
    assert fast.too_short == ref.too_short


def test_the_cusum_threshold_against_a_long_path():
    """A CUSUM's crossings cluster, so the reference's 20 are noisy (±10 %); against a 16 M
    path's 80 crossings, known and pessimistic thresholds agree to a few per cent."""
    rho = np.array([1.0, 0.82, 0.65, 0.45, 0.26, 0.09])
    arl = 4 * float(PER_HOUR)
    targets = [(0.0, 1.0), nulls.pessimism(145.0)]
    fast = nulls.cusum_thresholds(rho, 0.5, arl, targets, 0)
    path = nulls.simulate(rho, 16_000_000, 1)
    for (delta, gamma), h in zip(targets, fast, strict=True):
        long = nulls.crossing_threshold(nulls._cusum(path, 0.5, delta, gamma), path.size / arl)
        assert h == pytest.approx(long, rel=0.05)
