"""The live default's study (``idt-desk reproduce cheetah-live``): trials, judgement, classes."""

from __future__ import annotations

import math

import numpy as np
from idt_desk_sources.gym import GymSource
from idt_desk_sources.gym import live_study as study

from idt_desk.metrics.presets import PRESETS, Preset


def test_every_trial_has_a_seed_of_its_own_and_every_perturbation_a_declared_class():
    plan = study.trial_plan("held-out", 20, 2)
    seeds = [study.trial_seed(split, k, j) for split in study.SPLITS
             for k, j in study.trial_plan(split, 20, 2)]
    assert len(plan) == 20 + 2 * len(GymSource.perturbations)
    assert len(set(seeds)) == len(seeds)
    classes = {p.name: study.change_class(p) for p in GymSource.perturbations}
    # From the declarations: the target, a force parameter, else a change of the physics.
    assert {classes[n] for n in GymSource.SENSOR_NOISE} == {"sensor"}
    assert {classes[n] for n in GymSource.ACTION_NOISE} == {"actuator"}
    assert {classes[n] for n in GymSource.FORCES} == {"force"}
    assert classes["gravity_110"] == "dynamics"


def test_trials_stepped_together_are_each_what_they_would_be_alone(tmp_path):
    from idt_desk.plugin import assets

    policy = str(assets.path("policies", "halfcheetah-v5-sac-seed3.zip"))
    plan = [("control", 0), ("act_noise_4", 0)]
    both = study.roll_trials(policy, "HalfCheetah-v5", "choice", plan, n=600, onset=300,
                             progress=lambda m: None)
    alone = study.roll_trials(policy, "HalfCheetah-v5", "choice", plan[1:], n=600, onset=300,
                              progress=lambda m: None)
    np.testing.assert_array_equal(both[1]["s"], alone[0]["s"])
    assert both[1]["onset"] == 300 and both[0]["onset"] == -1
    assert both[0]["s"].dtype == np.float32 and both[0]["episode"].shape == (600,)


def _trial(shift: float, n: int = 20_000, onset: int = 14_000, seed: int = 0):
    """A toy loop: S' follows (S, A); from ``onset`` the action is noisier by ``shift``."""
    rng = np.random.default_rng(seed)
    s = np.zeros((n + 1, 2))
    a = np.zeros((n, 1))
    for t in range(n):
        noise = 0.3 + (shift if t >= onset else 0.0)
        a[t, 0] = np.tanh(-s[t, 0]) + rng.normal(0, noise)
        s[t + 1] = 0.9 * s[t] + [0.1 * a[t, 0], 0.05 * s[t, 0]] + rng.normal(0, 0.05, 2)
    return {"s": s[:-1], "a": a, "s_next": s[1:], "reward": -np.abs(s[1:, 0])}


def test_a_trial_is_judged_as_a_live_session_judges_it():
    preset = Preset("toy-parts", "", bins=2, window=500, stride=50,
                    state_groups=((0,), (1,)), parts=("x", "v"), detector="ewma")
    kw = dict(calibration_windows=4, baseline_windows=150, budget="1/1000windows",
              ewma_lambda=0.05, rate=100.0)
    control = study.judge_trial(study.trial_table(_trial(0.0), preset, 4), 14_000, preset, **kw)
    hit = study.judge_trial(study.trial_table(_trial(1.5), preset, 4), 14_000, preset, **kw)
    assert control["armed_s"] == (500 + (4 + 150 - 1) * 50) / 100.0
    assert math.isnan(control["latency"]) and "attribution" not in control
    assert 0 <= hit["latency"] < 100  # within the horizon of a live session's verdict
    # A toy loop kept without an env: no twin, no class; a kept trial of a MuJoCo env that is
    # not its state (Reacher) is judged and says why it has no class.
    run = {**_trial(1.5), "env_id": np.array("Reacher-v5")}
    named = study.judge_trial(study.trial_table(run, preset, 4), 14_000, preset, **kw, run=run)
    assert named["attribution"] == "unknown" and "not its state" in named["evidence"]
    rows = [{**control, "agent": "toy", "split": "held-out", "trial": "control"},
            {**hit, "agent": "toy", "split": "held-out", "trial": "act_noise_4"}]
    (s,) = study.summarize(rows).values()
    assert s["controls_alarmed"] == [0, 1] and s["all_eight"] == [1, 1]
    assert s["paper_four"] == [1, 1]


def test_the_gym_source_offers_the_live_cheetah_preset_beside_its_default():
    assert GymSource.presets[:2] == ("cheetah", "cheetah-live")  # the paper's the default
    live = PRESETS["cheetah-live"]
    assert live.parts == ("torso", "back_leg", "front_leg")
    assert (live.bins, live.window, live.stride, live.detector) == (2, 1000, 50, "ewma")


def test_the_study_counts_the_twins_class_against_the_declared_class_per_split():
    rows = [{"agent": "a", "split": "held-out", "trial": "act_noise_1", "cls": "actuator",
             "attribution": "actuator"},
            {"agent": "a", "split": "held-out", "trial": "gravity_110", "cls": "dynamics",
             "attribution": "unknown"},
            {"agent": "b", "split": "held-out", "trial": "obs_noise_3", "cls": "sensor",
             "attribution": "sensor"},
            {"agent": "b", "split": "held-out", "trial": "obs_noise_1", "cls": "sensor"},
            {"agent": "a", "split": "held-out", "trial": "control", "cls": "control",
             "attribution": "actuator"},
            {"agent": "a", "split": "choice", "trial": "act_noise_1", "cls": "actuator",
             "attribution": "force"}]
    got = study.attribution_study(rows)
    held = got["held-out"]
    assert (held["right"], held["judged"]) == (2, 3)  # undetected: not judged; unknown: wrong
    assert held["per_agent"] == {"a": [1, 2], "b": [1, 1]}
    assert held["confusion"]["dynamics"]["unknown"] == 1
    assert held["controls_named"] == {"actuator": 1}
    assert got["choice"]["confusion"]["actuator"]["force"] == 1
