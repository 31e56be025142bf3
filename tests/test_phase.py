"""Phase-conditioned baselines (``idt_desk.detection.phase``): steps within episodes, the
per-phase table against hand computations, and what it changes for a monitor and a session."""

from __future__ import annotations

import math

import numpy as np
import pytest

from idt_desk.detection.monitor import IDT_METRICS
from idt_desk.detection.phase import PhaseBaseline, episode_steps, window_phase
from idt_desk.pipeline import build_monitor


def test_episode_steps_count_from_each_reset_whatever_the_batches():
    ep = np.repeat([0, 1, 2, 2, 5], [3, 4, 1, 0, 2]).astype(float)
    ep = np.concatenate([ep, [5, 6]])
    whole, _ = episode_steps(ep)
    assert whole.tolist() == [0, 1, 2, 0, 1, 2, 3, 0, 0, 1, 2, 0]
    for cuts in ([1, 5], [3], [7, 8, 9], list(range(1, len(ep)))):
        parts, carry = [], None
        for chunk in np.split(ep, cuts):
            got, carry = episode_steps(chunk, carry)
            parts.append(got)
        assert np.concatenate(parts).tolist() == whole.tolist(), cuts
    # No episodes known (NaN): every row is its own step 0, so every window is phase 0.
    assert episode_steps(np.full(4, np.nan))[0].tolist() == [0, 0, 0, 0]
    assert window_phase(np.array([0, 49, 50, 999]), 50).tolist() == [0, 0, 1, 19]


def test_the_phase_table_against_a_hand_computation():
    rng = np.random.default_rng(1)
    phase = np.tile(np.arange(4), 10)                   # 10 windows in each of 4 phases
    cycle = np.array([5.0, 1.0, 0.0, 0.0])[phase]       # the episode's own cycle
    noise = np.where(phase == 0, 2.0, 0.5) * rng.standard_normal(phase.size)
    x = cycle + noise
    x[phase == 3] = 0.0                                 # a phase that never varies
    pb = PhaseBaseline.fit({"P": x}, phase, pessimistic=False)
    for p in range(4):
        xp = x[phase == p]
        assert pb.mean["P"][p] == pytest.approx(xp.mean())
    within = sum(((x[phase == p] - x[phase == p].mean()) ** 2).sum() for p in range(4))
    s_pool = math.sqrt(within / (40 - 4))
    for p in range(4):
        s_p = x[phase == p].std(ddof=1)
        assert pb.scale["P"][p] == pytest.approx(max(s_p, s_pool) * math.sqrt(1 + 1 / 10))
    # Phase 0's large spread is its own; phase 3 (σ 0) gets the pooled floor, not 0.
    assert pb.scale["P"][0] > pb.scale["P"][3] > 0
    # Pessimistic (the default): each scale at its σ's 97.7 % bound, χ² with 9 df.
    from scipy.stats import chi2

    sure = PhaseBaseline.fit({"P": x}, phase)
    gamma = math.sqrt(9 / chi2.ppf(0.0228, 9))
    for p in range(4):
        assert sure.scale["P"][p] == pytest.approx(pb.scale["P"][p] * gamma, rel=1e-4)
    z = pb.residuals("P", np.array([5.0, 0.0, 7.0]), np.array([0, 3, 9]))
    assert z[0] == pytest.approx((5.0 - pb.mean["P"][0]) / pb.scale["P"][0])
    assert z[1] == 0.0
    # A phase the baseline never saw is judged against the pooled baseline.
    assert z[2] == pytest.approx((7.0 - x.mean()) / x.std(ddof=1))


def test_a_rare_phase_falls_back_to_the_pooled_baseline():
    phase = np.array([0] * 6 + [1] * 6 + [2] * 2)
    x = np.arange(14, dtype=float)
    pb = PhaseBaseline.fit({"P": x}, phase, min_count=5)
    assert set(pb.mean["P"]) == {0, 1}
    assert pb.residuals("P", np.array([3.0]), np.array([2]))[0] == pytest.approx(
        (3.0 - x.mean()) / x.std(ddof=1))


def _episodic(n_episodes: int, rng: np.random.Generator, shift: float = 0.0,
              from_episode: int = 0) -> dict[str, np.ndarray]:
    """Windows of an episodic loop: 20 a episode, a big run-up cycle, small noise after."""
    phase = np.tile(np.arange(20), n_episodes)
    cycle = np.where(phase < 8, 3.0 * np.sin(phase / 8 * np.pi), 0.0)
    spread = np.where(phase < 8, 0.5, 0.05)
    out = {}
    for j, m in enumerate(("P", "H_f", "H_b")):
        ar = np.convolve(rng.standard_normal(phase.size + 5), np.ones(6) / 6, "valid")
        out[m] = 1.0 + (j + 1) * cycle + spread * ar * np.sqrt(6)
    out["dH"] = out["H_f"] - out["H_b"]
    steady = (phase >= 8) & (np.arange(phase.size) >= from_episode * 20)
    out["P"] = out["P"] + shift * steady
    out["phase"] = phase
    return out


def test_a_phased_monitor_sees_a_shift_the_episode_cycle_hides_from_a_pooled_one():
    """A shift of the steady phases by 1.5 is a fraction of the cycle's spread (the pooled
    σ) but several of the phases' own: persistence against the phase sees it within the
    first episode's steady phases, against the pooled baseline never."""
    got = {False: [], True: []}
    for seed in range(5):
        w = _episodic(70, np.random.default_rng(seed + 7), shift=1.5, from_episode=40)
        for phased in (False, True):
            mon = build_monitor(IDT_METRICS, baseline_windows=800, detector="persistence",
                                false_alarms="1/20000windows", phased=phased)
            hits = np.flatnonzero(mon.update(w)["IDT"][800:])
            got[phased].append(int(hits[0]) if hits.size else None)
    assert got[False] == [None] * 5, got
    assert all(h is not None and h <= 60 for h in got[True]), got


@pytest.mark.parametrize("detector", ["persistence", "mewma"])
def test_a_phased_monitor_keeps_its_budget_on_unperturbed_episodes(detector):
    """40 unperturbed streams of 400 windows after an 800-window baseline, 1 alarm per 20,000
    windows allowed: about 0.8 alarmed streams expected; at most 4 (under 1 % by chance).
    Before the joint detector whitened the correlation only, 7 of 40 alarmed."""
    alarmed = 0  # 40 streams: seeds 100-139
    for seed in range(40):
        rng = np.random.default_rng(100 + seed)
        w = _episodic(60, rng)
        mon = build_monitor(IDT_METRICS, baseline_windows=800, detector=detector,
                            false_alarms="1/20000windows", phased=True)
        alarmed += bool(mon.update(w)["IDT"][800:].any())
    assert alarmed <= 4


def test_a_phased_mewma_whitens_the_correlation_and_keeps_unit_variance():
    """Quiet phases make the residuals' sample variance small; the joint detector must not
    scale them up to unit variance (that made the loud phases alarm: 7 of 40 streams)."""
    rng = np.random.default_rng(5)
    w = _episodic(40, rng)
    mon = build_monitor(IDT_METRICS, baseline_windows=800, detector="mewma",
                        false_alarms="1/20000windows", phased=True)
    mon.update(w)
    z = mon.zscores(w)
    zs = np.column_stack([z[m] for m in mon.calibration.components])
    u = zs @ np.asarray(mon.calibration.joint["whitening"])
    # Uncorrelated, and their variance is the residuals' own (below 1), not scaled to 1.
    cov = np.cov(u[np.isfinite(u).all(axis=1)].T)
    assert np.allclose(cov - np.diag(np.diag(cov)), 0, atol=0.05)
    assert np.diag(cov).max() < 0.8


def test_a_recorder_given_episodes_judges_each_window_against_its_phase(tmp_path):
    """``Recorder(..., episode_steps=N, phase_baseline=True)``: the windows carry their phase
    and the baseline is one table per phase; by default it pools every phase, as before."""
    import idt_desk

    rng = np.random.default_rng(2)
    n, steps = 6000, 200
    ep = np.arange(n) // steps
    t_in = np.arange(n) % steps
    x = np.column_stack([np.sin(t_in / 30.0), rng.standard_normal(n)])
    u = np.sin(t_in / 15.0)[:, None] + 0.1 * rng.standard_normal((n, 1))
    pipe = dict(window=40, stride=10, calibration_windows=5, baseline_windows=300)
    got = {}
    for phased in (False, True):
        kw = {"phase_baseline": True} if phased else {}
        with idt_desk.Recorder(tmp_path / str(phased), ["x", "y"], ["u"], rate=20.0,
                               reward=True, episode_steps=steps, **pipe, **kw) as rec:
            rec.add(x[:-1], u[:-1], x[1:], reward=x[:-1, 0], episode=ep[:-1])
        got[phased] = rec.session.monitor
    assert not got[False].phased and got[False].phase_baseline is None
    mon = got[True]
    assert mon.phased and "against the episode's phase" in mon.describe()
    pb = mon.phase_baseline
    # 20 phases of 10 steps in a 200-step episode; 300 baseline windows: 15 in each.
    assert sorted(pb.count) == list(range(20)) and set(pb.count.values()) == {15}
    assert set(pb.mean["reward"]) == set(range(20))
    with pytest.raises(ValueError, match="episode_steps"):
        idt_desk.Recorder(tmp_path / "bad", ["x"], episode_steps=0)
    # Phases need episodes: a loop without a time limit is told so, in one line.
    with pytest.raises(ValueError, match="phase_baseline: loop has no episodes"):
        idt_desk.Recorder(tmp_path / "bad2", ["x"], phase_baseline=True)


def test_the_phase_baseline_is_a_setting_of_the_run_command(tmp_path):
    from idt_desk.cli import main

    assert main(["run", "--source", "pendulum", "--steps", "10", "--phase-baseline",
                 "--quiet"]) == 2  # the pendulum has no episodes: an input error
