"""Detectors calibrated to a false-alarm budget: hand-computed statistics, budgets parsed, and
the budget honoured on simulated null streams windowed like the engine's (overlapping)."""

from __future__ import annotations

import numpy as np
import pytest

from idt_desk.detection.detectors import (
    Budget,
    DetectorSpec,
    alarm_episodes,
    calibrate,
    detector_statistic,
    parse_budget,
)


@pytest.mark.parametrize(("text", "budget"), [
    ("1/h", Budget(1, 3600, "s")),
    ("2/30min", Budget(2, 1800, "s")),
    ("1 per hour", Budget(1, 3600, "s")),
    ("1/100 turns", Budget(1, 100, "turns")),
    ("1/10episodes", Budget(1, 10, "episodes")),
    ("0.5/1000 windows", Budget(0.5, 1000, "windows")),
])
def test_budgets_parse(text, budget):
    assert parse_budget(text) == budget


@pytest.mark.parametrize("text", ["", "h", "1/fortnight", "0/h", "-1/h", "1/0h", "x/h"])
def test_bad_budgets_say_how_to_write_one(text):
    with pytest.raises(ValueError, match="false-alarm budget"):
        parse_budget(text)


def test_budget_in_windows_and_in_words():
    b = parse_budget("1/h")
    assert b.windows_per_alarm(1000 / 75) == pytest.approx(48_000)  # pendulum: 1 kHz, stride 75
    assert str(b) == "≤ 1 false alarm / hour"
    assert str(parse_budget("2/30min")) == "≤ 2 false alarms / 30 mins"
    assert str(parse_budget("1/100turns")) == "≤ 1 false alarm / 100 turns"
    assert parse_budget("1/100turns").windows_per_alarm(1.0) == 100


def test_statistics_against_hand_computed_sequences():
    z = np.array([0.0, 4.0, 4.0, 4.0, -4.0, 0.0, np.nan])
    assert list(detector_statistic(DetectorSpec("paper"), z)[0]) == [0, 4, 4, 4, 4, 0, 0]
    # Persistence, m = 3: the smallest |z| of the last three (none before the first: 0).
    s, _ = detector_statistic(DetectorSpec("persistence", m=3), z)
    assert list(s) == [0, 0, 0, 4, 4, 0, 0]
    # Two-sided CUSUM, d = 0.5: S+ 0.5, 1.0, 0, 0; S- 0, 0, 2.5, 2.0.
    s, state = detector_statistic(DetectorSpec("cusum", drift=0.5),
                                  np.array([1.0, 1.0, -3.0, 0.0]))
    np.testing.assert_allclose(s, [0.5, 1.0, 2.5, 2.0])
    np.testing.assert_allclose(state, [0.0, 2.0])


@pytest.mark.parametrize("spec", [DetectorSpec("persistence", m=4), DetectorSpec("cusum")])
def test_a_stream_in_batches_gives_the_statistic_of_the_whole(spec):
    z = np.random.default_rng(1).normal(size=500)
    whole, _ = detector_statistic(spec, z)
    parts, state = [], None
    for chunk in np.array_split(z, 7):
        s, state = detector_statistic(spec, chunk, state)
        parts.append(s)
    np.testing.assert_array_equal(np.concatenate(parts), whole)


def test_alarm_episodes_count_up_crossings():
    s = np.array([0, 2, 2, 0, 2, 3, 0])
    assert alarm_episodes(s, 1.0) == 2
    assert alarm_episodes(s[1:], 1.0) == 2
    assert alarm_episodes(s[1:], 1.0, above=True) == 1  # the first one was already on
    assert alarm_episodes(s, 5.0) == 0


def _overlapping_windows(n_windows: int, rng: np.random.Generator, phi: float = 0.0,
                         window: int = 300, stride: int = 50) -> np.ndarray:
    """A metric per window as the engine makes them: the mean over W transitions every stride
    (neighbours share 5/6 of their transitions), of an AR(1) transition stream."""
    n = (n_windows - 1) * stride + window
    e = rng.normal(size=n)
    if phi:
        from scipy.signal import lfilter

        e = lfilter([1.0], [1.0, -phi], e)
    c = np.concatenate([[0.0], np.cumsum(e)])
    starts = np.arange(n_windows) * stride
    return (c[starts + window] - c[starts]) / window


@pytest.mark.parametrize("phi", [0.0, 0.9])
@pytest.mark.parametrize("kind", ["persistence", "cusum"])
def test_the_budget_holds_on_null_streams_of_overlapping_windows(kind, phi):
    """Four independent components, budget 1 alarm per 2,000 windows, 60,000 windows after a
    300-window baseline: the union's alarms stay within the budget (30) and its Poisson
    tolerance, while the paper's 3σ rule on the same stream raises many times more."""
    rng = np.random.default_rng(11 if phi else 12)
    comps = ("P", "H_f", "H_b", "dH")
    n_base, n_test, arl = 300, 60_000, 2_000.0
    series = {c: _overlapping_windows(n_base + n_test, rng, phi) for c in comps}
    base = {c: x[:n_base] for c, x in series.items()}
    budget = n_test / arl
    counts = {}
    for spec in (DetectorSpec(kind), DetectorSpec("paper")):
        cal = calibrate(spec, base, arl, overlap=300 / 50)
        on = np.zeros(n_test, dtype=bool)
        for c in comps:
            s, _ = detector_statistic(spec, cal.standardise(c, series[c][n_base:]))
            on |= s > cal.threshold[c]
        counts[spec.kind] = alarm_episodes(on.astype(float), 0.5)
    assert counts[kind] <= budget + 3 * np.sqrt(budget), counts
    assert counts["paper"] > 3 * budget, counts


def test_a_short_baseline_is_reported_with_the_length_that_would_do():
    rng = np.random.default_rng(3)
    x = _overlapping_windows(2_000, rng, 0.9)
    short = calibrate(DetectorSpec("persistence"), {"P": x[:30]}, 50_000.0)
    assert short.too_short and short.needed_windows > 30
    assert short.n_eff["P"] < 30  # overlapping windows: fewer independent ones than windows
    long = calibrate(DetectorSpec("persistence"), {"P": x[:short.needed_windows + 200]},
                     50_000.0)
    assert long.inflation["P"] < short.inflation["P"]
    again = calibrate(DetectorSpec("persistence"), {"P": x[:30]}, 50_000.0)
    assert again.threshold == short.threshold  # deterministic: the null paths are seeded


def test_calibration_needs_a_budget_and_defined_windows():
    x = {"P": np.arange(10.0)}
    with pytest.raises(ValueError, match="budget"):
        calibrate(DetectorSpec("cusum"), x, None)
    with pytest.raises(ValueError, match="at least 3 defined windows"):
        calibrate(DetectorSpec("paper"), {"P": np.array([1.0, np.nan, np.nan])}, None)
    assert calibrate(DetectorSpec("paper", k=3.0), x, None).threshold == {"P": 3.0}
    with pytest.raises(ValueError, match="unknown detector"):
        DetectorSpec("ewma")
