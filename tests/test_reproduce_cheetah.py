"""``idt-desk reproduce cheetah``: tiny end-to-end runs (local processes and Dask), the
statistics against hand-computed values, lockstep stepping against stepping alone."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("mujoco")

from idt_desk_sources.gym import GymSource
from idt_desk_sources.gym._source import POLICY_DIR
from idt_desk_sources.gym.reproduce import (
    DETECTORS,
    CheetahConfig,
    Trial,
    TrialGroup,
    analyze_trial,
    control_seed,
    reproduce,
    run_group,
    summarize_trials,
)
from idt_desk_sources.gym.reproduce.lockstep import _engagements

from idt_desk.cli import main
from idt_desk.detection.detectors import CONTROL_BUDGET
from idt_desk.errors import InputError
from idt_desk.metrics.presets import PRESETS
from idt_desk.metrics.reference import reference_metrics
from idt_desk.metrics.symbolize import Symbolizer
from idt_desk.metrics.views import LADDER
from idt_desk.pipeline import Pipeline
from idt_desk.stats import paired_t_test

POLICY = str(POLICY_DIR / "halfcheetah-v5-ppo-seed0.zip")
#: One policy, one perturbation and two controls, 3 episodes, the perturbation from the 2nd.
#: In this process (``workers=0``): a tiny run's rollouts take less time than a worker's start.
TINY = CheetahConfig(policies=(POLICY,), perturbations=("force_torso_10N",), episodes=3,
                     onset=2, workers=0, control_seeds=2)
_WALL = ("group_wall_seconds",)


def make_tiny(out):
    """The tiny reproduction's run in ``out`` (made once per test run: ``once_per_run``), on
    the default process pool (one worker process): what Dask's results are compared with."""
    reproduce(replace(TINY, out=out, workers=1), progress=False)


@pytest.fixture(scope="module")
def tiny_run(once_per_run):
    out = once_per_run("tiny-cheetah", make_tiny)
    # Its finished groups are read back and judged again (the trials, not rolled out).
    return reproduce(replace(TINY, out=out), progress=False), out


def test_tiny_reproduction_writes_every_output(tiny_run):
    result, out = tiny_run
    trials = pd.read_csv(out / "trials.csv", keep_default_na=False, na_values=[""])
    assert list(trials["perturbation"]) == ["none", "none", "force_torso_10N"]
    # The first control is the paired one; the others' seeds are spawned from the run's.
    assert list(trials["env_seed"]) == [0, control_seed(0, 1), 0]
    assert (trials["actions"] == "deterministic").all()
    assert (trials["steps"] == 3000).all() and (trials["onset_step"] == 1000).all()
    assert (trials["windows"] == 55).all() and (trials["baseline_windows"] == 15).all()
    # The perturbed trial shares its pre-onset steps exactly with the first control (same
    # seed, stepped together), so their baselines are the same numbers; after the onset the
    # push changes the run. The second control is another run from the start.
    a, other, b = (result.trials.iloc[j] for j in range(3))
    assert a["baseline_P"] == b["baseline_P"] and a["return_pre"] == b["return_pre"]
    assert a["return_post"] != b["return_post"]
    assert other["return_pre"] != a["return_pre"]
    # Every episode's return is kept (for intervals over episodes), and the means are theirs.
    for _, row in trials.iterrows():
        pre, post = json.loads(row["returns_pre"]), json.loads(row["returns_post"])
        assert len(pre) == 1 and len(post) == 2  # episode 1 before the onset, 2 and 3 after
        assert np.mean(post) == pytest.approx(row["return_post"], abs=1e-5)
        assert np.mean(pre) == pytest.approx(row["return_pre"], abs=1e-5)
    summary = json.loads((out / "summary.json").read_text())
    for key in ("baseline_P", "baseline_dH", "detection_rate", "median_latency",
                "t_test_IDT_vs_reward", "cohens_d", "exclusions", "config"):
        assert key in summary
    assert summary["actions"] == "deterministic"
    assert summary["config"]["actions"] == ["deterministic"]
    assert summary["config"]["control_seeds"] == 2
    # A seed's baseline: the mean over its distinct pre-onset runs (its two controls).
    assert summary["baseline_P"]["mean"] == pytest.approx((a["baseline_P"]
                                                           + other["baseline_P"]) / 2)
    assert 0.0 < summary["baseline_P"]["mean"] < 1.0
    fa = summary["all_seeds"]["false_alarm_rate"]["IDT"]  # one pre-onset episode: no CV
    assert fa["trials"] == 2 and fa["alarms"] == int(a["detected_IDT"]) + int(other["detected_IDT"])
    table = (out / "table.md").read_text()
    assert "0.33 ± 0.02" in table and "| IDT | 42 |" in table and "Rewards" in table
    assert "**Actions: deterministic**" in table and "2 control trials" in table
    assert f"{fa['alarms']} of 2 (" in table
    assert table.startswith("# HalfCheetah: reproduction of the paper's §5.1")
    # Another env's run names its env, its baseline row too; the paper's rows stay beside.
    from idt_desk_sources.gym.reproduce.report import format_tables

    s = result.summary
    hopper = format_tables({**s, "config": {**s["config"], "env_id": "Hopper-v5"}})
    assert hopper.startswith("# Hopper-v5: the paper's §5.1 protocol")
    assert "| Hopper-v5 baseline (this run, " in hopper
    assert "| Half-Cheetah baseline (paper) |" in hopper
    # Any threshold can be applied afterwards: the paper rule's records at 3σ give its verdict.
    for m in DETECTORS:
        recs = json.loads(a[f"records_paper_{m}"])
        first = next((j for j, v in recs if v > 3.0), None)
        assert (first is not None) == bool(a[f"detected_{m}"])
        if first is not None:
            assert first == a[f"latency_{m}"]
    assert summary["matched_false_alarm"]["control_trials"] == 2
    assert {"paper", "persistence", "ewma", "mewma"} <= set(summary["matched_false_alarm"])
    assert "matched false-alarm rate" in table and (out / "roc.png").stat().st_size > 10_000
    # The live-calibrated block: each trial's own monitor, false alarms on the controls.
    live = summary["live_calibrated"]
    # At the RL source's own budget by default (what a live session of it calibrates to).
    assert live["budget"] == CONTROL_BUDGET == "1/10h" and live["control_trials"] == 2
    for kind in ("persistence", "ewma", "mewma"):
        fa = live[kind]["IDT"]["false_alarms"]
        assert fa == {"alarms": int(np.isfinite(trials[trials["perturbation"] == "none"]
                                                [f"live_{kind}_IDT"]).sum()), "trials": 2}
    assert "Live-calibrated detectors" in table and "| mewma |" in table
    # What the budget lets the controls alarm, from their own loop time after the onset.
    chance = live["by_chance"]
    control = trials[trials["perturbation"] == "none"]
    seconds = (control["steps"] - control["onset_step"]) * 0.05  # HalfCheetah: dt 0.05 s
    assert chance["minutes_after_onset"] == pytest.approx(seconds.mean() / 60)
    assert chance["expected"] == pytest.approx(np.sum(1 - np.exp(-seconds / 36_000)))  # 1/10h
    assert f"{chance['expected']:.1f} of 2 controls expected" in table
    assert (out / "detection.png").stat().st_size > 10_000


def test_both_protocols_run_and_are_reported_side_by_side(tmp_path):
    cfg = replace(TINY, actions=("deterministic", "stochastic"), control_seeds=1, out=tmp_path)
    result = reproduce(cfg, progress=False)
    t = result.trials
    assert list(t["actions"]) == ["deterministic"] * 2 + ["stochastic"] * 2
    det, sto = t[t["actions"] == "deterministic"], t[t["actions"] == "stochastic"]
    # Same seeds, other actions: a sampled policy makes another run from the first step.
    assert det["return_pre"].iloc[0] != sto["return_pre"].iloc[0]
    s = result.summary
    assert s["actions"] == "deterministic" and list(s["protocols"]) == ["deterministic",
                                                                        "stochastic"]
    assert s["protocols"]["stochastic"]["baseline_P"]["mean"] == pytest.approx(
        sto["baseline_P"].iloc[0])
    assert s["baseline_P"] == s["protocols"]["deterministic"]["baseline_P"]
    table = (tmp_path / "table.md").read_text()
    assert "Both protocols side by side" in table and "stochastic: detection" in table


def test_dask_local_cluster_gives_the_process_pool_results(tiny_run):
    distributed = pytest.importorskip("distributed")
    result, _ = tiny_run
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        # One group of two trials (the paired control and the push) where the pool ran
        # three: a group's trials are stepped together and judged each on its own.
        dask = reproduce(replace(TINY, control_seeds=1), executor=client, progress=False)
    pd.testing.assert_frame_equal(
        dask.trials.drop(columns=list(_WALL)).reset_index(drop=True),
        result.trials.drop(columns=list(_WALL)).iloc[[0, 2]].reset_index(drop=True))


def test_bad_settings_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="has no perturbation 'wind'"):
        reproduce(replace(TINY, perturbations=("wind",)), progress=False)
    with pytest.raises(InputError, match="percent=300: must be"):
        reproduce(replace(TINY, perturbations=("obs_noise_3:percent=300",)), progress=False)
    with pytest.raises(InputError, match="--manual"):
        reproduce(replace(TINY, manual=("brake",)), progress=False)
    with pytest.raises(InputError, match="--auto-false-alarms"):
        reproduce(replace(TINY, auto_false_alarms="often"), progress=False)
    with pytest.raises(InputError, match="no such file"):
        reproduce(replace(TINY, policies=(str(tmp_path / "x.zip"),)), progress=False)
    with pytest.raises(InputError, match="--onset"):
        reproduce(replace(TINY, onset=5), progress=False)
    with pytest.raises(InputError, match="--actions: sideways"):
        reproduce(replace(TINY, actions=("sideways",)), progress=False)
    with pytest.raises(InputError, match="--control-seeds"):
        reproduce(replace(TINY, control_seeds=-1), progress=False)
    with pytest.raises(InputError, match="no modulation"):
        reproduce(replace(TINY, auto=("brake",)), progress=False)
    with pytest.raises(InputError, match="groups to freeze"):  # freezing nothing: no trial
        reproduce(replace(TINY, auto=("dim_reduction:drop=",)), progress=False)
    with pytest.raises(InputError, match="unknown group"):
        reproduce(replace(TINY, auto=("dim_reduction:drop=tail",)), progress=False)
    assert main(["reproduce", "cheetah", "--episodes", "1", "--out", str(tmp_path)]) == 2


def test_auto_engages_the_modulation_and_it_shows_in_the_actions():
    # k = 0.5: the Auto controller's alarm is on nearly all the time, so Hold engages.
    cfg = replace(TINY, perturbations=("act_noise_4",), control_seeds=0, k=0.5,
                  auto=("hold:mode=scale,scale=0.25,persist=1,release=50",),
                  auto_detector="paper")
    result = reproduce(cfg, progress=False)
    open_loop, closed = result.trials.iloc[0], result.trials.iloc[1]
    assert closed["auto"].startswith("hold") and open_loop["auto"] == ""
    assert closed["engaged_fraction_post"] > 0.5
    assert open_loop["engaged_fraction_post"] == 0.0
    (row,) = result.summary["closed_loop"]
    assert row["perturbation"] == "act_noise_4" and row["trials"] == 1
    assert row["return_post_open"] == pytest.approx(open_loop["return_post"])
    assert row["return_post_auto"] == pytest.approx(closed["return_post"])
    # Torques scaled to a quarter: the cheetah gains far less than the open-loop one.
    assert closed["return_post"] < open_loop["return_post"]


def test_auto_may_follow_every_calibrated_detector_from_the_command_line(monkeypatch, tmp_path):
    # Auto follows whichever detector is named; the RL source's live default (MEWMA) too.
    import idt_desk_sources.gym.reproduce.command as rc

    seen = []
    monkeypatch.setattr(rc, "reproduce", lambda config, progress: seen.append(config) or
                        (_ for _ in ()).throw(InputError("stop here")))
    for kind in ("ewma", "mewma"):
        assert main(["reproduce", "cheetah", "--auto", "hold", "--auto-detector", kind,
                     "--out", str(tmp_path)]) == 2
        assert seen.pop().auto_detector == kind
    assert main(["reproduce", "cheetah", "--out", str(tmp_path)]) == 2
    assert seen.pop().auto_detector == "persistence"  # the documented tables' alarm
    with pytest.raises(SystemExit):
        main(["reproduce", "cheetah", "--auto-detector", "loudest", "--out", str(tmp_path)])


def _sources(seeds):
    sources = [GymSource(policy=POLICY, deterministic=False) for _ in seeds]
    for src, seed in zip(sources, seeds, strict=True):
        src.policy = sources[0].policy
        src.reset(seed=seed)
    return sources


def test_lockstep_steps_each_source_as_it_would_step_alone():
    (src,) = _sources([3])
    alone = src.step(300)
    src.close()
    # Sources in the same state act exactly as one stepped alone, each drawing its own noise.
    same = _sources([3, 3])
    b = GymSource.step_together(same, 300)
    for s in same:
        s.close()
    for j in (0, 1):
        np.testing.assert_array_equal(b[j].a, alone.a)
        np.testing.assert_array_equal(b[j].s_next, alone.s_next)


def test_a_control_is_bit_identical_alone_and_beside_eight_perturbed_trials():
    """Each row goes through the network on its own: a trial's trajectory does not depend on
    which other trials step beside it (a batched pass moved actions by up to 1e-5)."""
    policy = str(POLICY_DIR / "halfcheetah-v5-sac-seed3.zip")
    names = ["act_noise_1", "act_noise_4", "obs_noise_1", "obs_noise_3", "force_torso_5N",
             "force_torso_10N", "gravity_110", "act_noise_3"]

    def control(seed: int) -> GymSource:
        src = GymSource(policy=policy)
        src.reset(seed=seed)
        return src

    (alone,) = GymSource.step_together([solo := control(5)], 400)
    group = [control(5)]
    for k, name in enumerate(names):
        src = GymSource(policy=policy)
        src.policy = group[0].policy  # one policy object: one act_many call for all nine
        src.reset(seed=100 + k)
        src.set_perturbation(name, {})
        group.append(src)
    together = GymSource.step_together(group, 400)
    for src in (solo, *group):
        src.close()
    for col in ("s", "a", "s_next", "reward"):
        np.testing.assert_array_equal(getattr(together[0], col), getattr(alone, col))
    # The perturbed trials did go elsewhere (they were not all the control's copies).
    assert not np.array_equal(together[2].a, together[0].a)


def test_control_seeds_never_repeat_across_runs_and_shared_ones_are_warned_of(tmp_path):
    from idt_desk_sources.gym.reproduce import control_seed, pool_runs, shared_controls

    seeds = {s: {s} | {control_seed(s, j) for j in range(1, 10)} for s in (300, 301, 0, 1)}
    for a in seeds:
        assert len(seeds[a]) == 10
        for b in seeds:
            if a != b:
                assert not seeds[a] & seeds[b], (a, b)
    assert control_seed(300, 1) == control_seed(300, 1) < 2**63

    def run(seed: int, alarms: list[float]) -> pd.DataFrame:
        rows = [{"policy": "p", "actions": "deterministic", "perturbation": "none", "auto": "",
                 "error": "", "env_seed": seed + j, "live_mewma_IDT": x, "steps": 2000,
                 "onset_step": 1000, "loop_seconds_per_step": 0.05}
                for j, x in enumerate(alarms)]
        rows.append({**rows[0], "perturbation": "act_noise_1", "live_mewma_IDT": 4.0})
        return pd.DataFrame(rows)

    # seed + j controls, as runs before this release made them: 300 and 301 share 2 of 3.
    a, b = run(300, [np.nan, 7.0, np.nan]), run(301, [7.0, np.nan, np.nan])
    (line,) = shared_controls({"A": a, "B": b})
    assert "share 2 control trial(s)" in line and "301, 302" in line
    pooled = pool_runs({"A": a, "B": b})
    assert pooled["controls_counted"] == 4 and pooled["controls_shared"] == 2
    live = pooled["all"]["mewma"]["IDT"]
    # Control 301 alarmed in both runs (7.0): one distinct alarmed control, not two.
    assert live["false_alarms"] == {"alarms": 1, "trials": 4}
    assert live["detection"]["detected"] == 2
    assert shared_controls({"A": a, "C": run(400, [np.nan] * 3)}) == []


def test_analyze_trial_matches_a_hand_count():
    """Detection, latency and Cohen's d against np.unique recounts (idt_desk.metrics.reference)."""
    rng = np.random.default_rng(0)
    n, onset = 3000, 1500
    s = rng.normal(size=(n, 17))
    a = rng.normal(size=(n, 6))
    s_next = np.roll(s, -1, axis=0) + 0.1 * rng.normal(size=(n, 17))
    a[onset:] += 0.8 * s[onset:, :6]  # after the onset, actions couple to the state
    reward = rng.normal(size=n)
    reward[onset + 400:] += 3.0
    preset = PRESETS["cheetah"]
    row = analyze_trial(s, a, s_next, reward, onset, preset, k=3.0)
    sym_s = Symbolizer(17, 3, preset.state_groups).fit(s[:onset])
    sym_a = Symbolizer(6, 3, preset.action_groups).fit(a[:onset])
    ref = reference_metrics(sym_s.transform(s), sym_s.transform(s_next), sym_a.transform(a),
                            300, 50)
    starts = ref["start"]
    ref["reward"] = np.array([reward[i:i + 300].mean() for i in starts])
    j0 = int(np.argmax(starts + 300 > onset))
    assert row["baseline_windows"] == j0 == 25
    idt_hits = np.zeros(len(starts), dtype=bool)
    for m in ("P", "H_f", "H_b", "dH", "reward"):
        x = ref[m]
        mu, sd = x[:j0].mean(), x[:j0].std(ddof=1)
        hits = np.abs(x - mu) > 3 * sd
        if m != "reward":
            idt_hits |= hits
        post = np.flatnonzero(hits[j0:])
        assert row[f"latency_{m}"] == (post[0] if post.size else pytest.approx(math.nan,
                                                                             nan_ok=True))
        assert row[f"d_{m}"] == pytest.approx((x[j0:].mean() - mu) / sd, rel=1e-9)
        assert row[f"excursion_frac_{m}"] == pytest.approx(hits[j0:].mean())
    post = np.flatnonzero(idt_hits[j0:])
    assert row["detected_IDT"] and row["latency_IDT"] == post[0]
    assert row["detected_reward"] and row["latency_reward"] <= 8  # a step of 3σ in reward


def test_an_auto_preset_judges_each_trial_through_the_view_the_wrappers_choose():
    """``--preset auto``: the view a session chooses on the trial's first 20 windows, its
    symbols then fitted on every pre-onset row as the protocol's are."""
    rng = np.random.default_rng(1)
    n, onset = 3000, 2000
    phase = 2 * np.pi * np.arange(n + 1) / 40  # a cycle seen through 17 noisy variables
    x = np.stack([np.cos(phase + j) for j in range(17)], 1) + 0.3 * rng.normal(size=(n + 1, 17))
    a = np.stack([np.sin(phase[:-1] + j) for j in range(6)], 1) + 0.3 * rng.normal(size=(n, 6))
    row = analyze_trial(x[:-1], a, x[1:], np.zeros(n), onset, PRESETS["auto"], k=3.0)
    pipe = Pipeline(PRESETS["auto"], None, state_names=[f"s{j}" for j in range(17)],
                    action_names=[f"a{j}" for j in range(6)], calibration_windows=20)
    pipe.push(x[:1250], a[:1250], x[1:1251], {"reward": np.zeros(1250), "t": np.zeros(1250)})
    assert row["view"] == pipe.view and "principal components" in row["view"]
    view = next(v for v in LADDER if v.name == row["view"])
    sym_s = Symbolizer(17, view.bins, components=view.state_components).fit(x[:onset])
    sym_a = Symbolizer(6, view.bins, components=view.action_components).fit(a[:onset])
    ref = reference_metrics(sym_s.transform(x[:-1]), sym_s.transform(x[1:]),
                            sym_a.transform(a), 300, 50)
    j0 = row["baseline_windows"]
    d = (ref["P"][j0:].mean() - ref["P"][:j0].mean()) / ref["P"][:j0].std(ddof=1)
    assert row["d_P"] == pytest.approx(d, rel=1e-9)
    with pytest.raises(InputError, match="--preset nope: choose from"):
        replace(TINY, preset="nope").resolved()
    assert replace(TINY, env_id="Hopper-v5").to_dict()["preset"] == "auto"
    assert replace(TINY, preset="gym").to_dict()["preset"] == "gym"


def _rows(detect: dict[str, list[tuple[bool, float]]], cv: dict[str, float],
          controls: dict[str, list[tuple[bool, bool]]] | None = None) -> pd.DataFrame:
    """Synthetic per-trial rows: per seed its control trials and perturbation trials."""
    rows = []
    for seed, trials in detect.items():
        ctl = (controls or {}).get(seed, [(False, False)])
        for j, (idt, rew) in enumerate([*ctl[:1], *trials]):
            r = {"policy": seed, "perturbation": "none" if j == 0 else f"p{j}", "auto": "",
                 "error": "", "return_pre_cv": cv[seed], "baseline_P": 0.3 + 0.01 * j,
                 "baseline_dH": -0.5, "return_post": 1000.0, "post_P": 0.3,
                 "engagements_pre": 0, "engagements_post": 0, "engage_latency": math.nan,
                 "engaged_fraction_post": 0.0}
            for m in DETECTORS:
                hit = idt if m in ("IDT", "P") else (rew if m == "reward" else False)
                r[f"detected_{m}"] = hit
                r[f"excursion_frac_{m}"] = 0.1 * j
                r[f"latency_{m}"] = 10.0 * j if hit else math.nan
                r[f"d_{m}"] = float(j)
            rows.append(r)
        first = rows[-len(trials) - 1]
        for c, (idt, rew) in enumerate(ctl[1:], 1):  # further controls: other env seeds
            r = {**first, "env_seed": c, "baseline_P": 0.3 + 0.02 * c}
            for m in DETECTORS:
                r[f"detected_{m}"] = idt if m in ("IDT", "P") else (rew if m == "reward"
                                                                      else False)
            rows.append(r)
    return pd.DataFrame(rows)


def test_summary_statistics_match_hand_computed_values():
    scipy_stats = pytest.importorskip("scipy.stats")
    T, F = True, False
    detect = {
        "a": [(T, F), (T, T), (T, F), (F, F)],   # IDT 3/4, reward 1/4
        "b": [(T, T), (T, T), (F, F), (T, F)],   # 3/4, 2/4
        "c": [(T, F), (T, F), (T, F), (T, F)],   # 4/4, 0/4
        "d": [(F, F), (F, F), (F, F), (F, F)],   # unstable: excluded by the CV rule
    }
    # Seed a has three controls (env seeds 0, 1, 2), one of them a false IDT alarm.
    controls = {"a": [(False, False), (True, False), (False, False)]}
    rows = _rows(detect, {"a": 0.05, "b": 0.1, "c": 0.25, "d": 0.4}, controls)
    s = summarize_trials(rows, CheetahConfig(max_baseline_cv=0.25), wall=1.0)
    assert s["included_seeds"] == ["a", "b", "c"]
    assert s["exclusions"] == [{"policy": "d", "return_pre_cv": 0.4,
                                "rule": "return_pre_cv > 0.25"}]
    idt, rew = np.array([0.75, 0.75, 1.0]), np.array([0.25, 0.5, 0.0])
    assert s["detection_rate"]["IDT"]["mean"] == pytest.approx(idt.mean())
    assert s["detection_rate"]["IDT"]["std"] == pytest.approx(idt.std(ddof=1))
    assert s["detection_rate"]["reward"]["mean"] == pytest.approx(rew.mean())
    ref = scipy_stats.ttest_rel(idt, rew)
    assert s["t_test_IDT_vs_reward"]["t"] == pytest.approx(ref.statistic)
    assert s["t_test_IDT_vs_reward"]["p"] == pytest.approx(ref.pvalue)
    # Latency 10·j for a trial j that is detected; the median over detected trials only.
    lat = [10.0 * j for seed in "abc" for j, (hit, _) in enumerate(detect[seed], 1) if hit]
    assert s["median_latency"]["IDT"]["median"] == pytest.approx(np.median(lat))
    assert s["median_latency"]["IDT"]["never_detected_trials"] == 2
    assert s["median_latency"]["reward"]["detected_trials"] == 3
    assert s["cohens_d"]["P"]["mean"] == pytest.approx(2.5)  # d = j over j = 1..4
    # Controls of the included seeds: a's three and one each for b and c; one alarm.
    assert s["false_alarm_rate"]["IDT"] == {"rate": pytest.approx(1 / 5), "alarms": 1,
                                            "trials": 5}
    assert s["false_alarm_rate"]["reward"]["alarms"] == 0
    assert s["all_seeds"]["false_alarm_rate"]["IDT"]["trials"] == 6
    assert s["excursion_fraction"]["IDT"] == {"perturbed": pytest.approx(0.25),
                                              "control": 0.0}  # 0.1·j over j = 1..4
    # Seed a's baseline P: the mean over its three pre-onset runs (0.30, 0.32, 0.34).
    assert s["baseline_P"]["mean"] == pytest.approx(np.mean([0.32, 0.3, 0.3, 0.3]))
    assert s["trials"] == 12
    assert s["actions"] == "deterministic" and list(s["protocols"]) == ["deterministic"]


def test_detection_at_a_matched_false_alarm_rate_against_hand_counts():
    from idt_desk_sources.gym.reproduce.judge import matched_false_alarm

    def row(pert, score, first):
        recs = json.dumps([[0, score / 2], [first, score]])
        return {"perturbation": pert, **{f"records_{n}_{m}": recs for n in ("paper",
                                                                           "persistence")
                                         for m in DETECTORS}}

    # 20 controls scoring 0.0 .. 1.9: at most 1 (5 %) may exceed θ, so θ = 1.8.
    rows = [row("none", 0.1 * i, 3) for i in range(20)]
    # Perturbed: scores 1.0 (missed), 1.85 (from window 7), 3.0 (from window 2).
    rows += [row("p1", 1.0, 5), row("p2", 1.85, 7), row("p3", 3.0, 2)]
    got = matched_false_alarm(pd.DataFrame(rows))
    assert got["allowed_false_alarms"] == 1
    b = got["persistence"]["IDT"]
    assert b["threshold_sigma"] == pytest.approx(1.8)
    assert b["false_alarms"] == {"alarms": 1, "trials": 20}
    assert b["detection"] == {"detected": 2, "trials": 3, "rate": pytest.approx(2 / 3)}
    # Latency: the first record above θ (p3's first record, 1.5, is not: window 2).
    assert b["median_latency"] == pytest.approx(np.median([7, 2]))
    # The drift detectors at the same rate: MMD over the trials it ran on (one control
    # skipped: 19 counted, none allowed above θ), LSDD skipped everywhere: no row.
    for r, (mmd, why) in zip(rows, [*((0.05 * i, "") for i in range(19)),
                                    (9.0, "too few reference instances"),
                                    (0.5, ""), (0.95, ""), (2.0, "")], strict=True):
        r["records_mmd_drift"] = json.dumps([[1, mmd]])
        r["drift_mmd_skipped"] = why
        r["records_lsdd_drift"], r["drift_lsdd_skipped"] = "[]", "needs at least 81"
    got = matched_false_alarm(pd.DataFrame(rows))
    assert set(got["drift"]) == {"mmd"}
    m = got["drift"]["mmd"]
    assert m["false_alarms"] == {"alarms": 0, "trials": 19}  # θ = 0.9, the top control
    assert m["threshold_sigma"] == pytest.approx(0.9)
    assert m["detection"]["detected"] == 2 and m["detection"]["trials"] == 3


def test_paired_t_test_against_scipy_and_edge_cases():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(4)
    for n in (2, 3, 7, 40):
        x, y = rng.random(n), rng.random(n)
        ref = scipy_stats.ttest_rel(x, y)
        got = paired_t_test(x, y)
        assert got["t"] == pytest.approx(ref.statistic, rel=1e-10)
        assert got["p"] == pytest.approx(ref.pvalue, rel=1e-8)
    assert paired_t_test([1.0], [0.0])["t"] is None
    assert paired_t_test([1, 2, 3], [0, 1, 2])["t"] == math.inf
    assert paired_t_test([1, 2], [1, 2])["p"] == 1.0
    assert paired_t_test([1, 2, np.nan], [0, 0, 5])["n"] == 2


def test_engagement_accounting():
    log = [{"kind": "modulation_on", "i": 800, "auto": True},
           {"kind": "modulation_off", "i": 1200, "auto": True},
           {"kind": "modulation_on", "i": 1300, "auto": True},
           {"kind": "modulation_on", "i": 900, "auto": False}]
    e = _engagements(log, onset=1000, total=2000, window=300, stride=50)
    assert e["engagements_pre"] == 1 and e["engagements_post"] == 1
    assert e["engage_latency"] == (1300 - 1000) / 50 - 1
    assert e["engaged_fraction_post"] == pytest.approx((200 + 700) / 1000)


def test_a_group_that_fails_is_reported_not_raised(monkeypatch):
    real, calls = GymSource.step_together, []

    def unstable(sources, n, info=True):
        calls.append(n)
        if len(calls) == 2:
            raise FloatingPointError("MuJoCo went unstable")
        return real(sources, n, info)

    monkeypatch.setattr(GymSource, "step_together", staticmethod(unstable))
    group = TrialGroup(POLICY, (Trial("none"), Trial("act_noise_4")), "HalfCheetah-v5", 3, 2,
                       0, 3.0)
    rows = run_group(group)
    assert [r["error"] for r in rows] == ["FloatingPointError: MuJoCo went unstable"] * 2
    assert [r["steps"] for r in rows] == [calls[0]] * 2  # what was stepped before it failed
    good = _rows({"a": [(True, False)]}, {"a": 0.1})
    s = summarize_trials(pd.concat([good, pd.DataFrame(rows)], ignore_index=True),
                         CheetahConfig(), wall=1.0)
    assert s["seeds"] == ["a"] and s["trials"] == 1
    assert s["errors"] == [f"halfcheetah-v5-ppo-seed0 {p} : FloatingPointError: MuJoCo went "
                           "unstable" for p in ("none", "act_noise_4")]


def test_an_interrupted_run_resumes_from_its_finished_groups(tiny_run, monkeypatch):
    result, out = tiny_run
    assert len(list((out / "groups").glob("*.pkl"))) == 1  # one policy, open loop: one group
    import idt_desk_sources.gym.reproduce.runner as module

    def must_not_run(group):
        raise AssertionError("a finished group was run again")

    monkeypatch.setattr(module, "run_group", must_not_run)
    again = reproduce(replace(TINY, out=out), progress=False, executor=None)
    pd.testing.assert_frame_equal(again.trials, result.trials)


def test_a_modulation_by_hand_at_the_onset_and_a_stronger_noise():
    cfg = replace(TINY, perturbations=("act_noise_4:percent=30",), control_seeds=0,
                  manual=("hold:mode=scale,scale=0.25",))
    result = reproduce(cfg, progress=False)
    rows = result.trials
    assert list(rows["auto"]) == ["", "by hand: hold:mode=scale,scale=0.25"]
    assert list(rows["perturbation"]) == ["act_noise_4:percent=30"] * 2
    hand = rows.iloc[1]
    # Switched on at the onset and never off: engaged for every post-onset step.
    assert hand["engagements_post"] == 1 and hand["engagements_pre"] == 0
    assert hand["engaged_fraction_post"] == 1.0
    closed = result.summary["closed_loop"]
    assert closed[0]["auto"].startswith("by hand") and closed[0]["trials"] == 1


def test_rate_error_bars_stay_between_0_and_1():
    from idt_desk_sources.gym.reproduce import rate_errors

    err = rate_errors([0.893, 0.1, 0.5], [0.151, 0.3, 0.2])
    np.testing.assert_allclose(err, [[0.151, 0.1, 0.2], [0.107, 0.3, 0.2]])
    lo, hi = np.array([0.893, 0.1, 0.5]) - err[0], np.array([0.893, 0.1, 0.5]) + err[1]
    assert lo.min() >= 0 and hi.max() <= 1


def test_the_live_block_judges_a_trial_as_a_live_monitor_would():
    from idt_desk_sources.gym.reproduce.judge import LIVE_DETECTORS, _live

    from idt_desk.metrics.presets import PRESETS

    rng = np.random.default_rng(3)
    n, j0 = 700, 300
    w = {m: 1.0 + 0.01 * np.convolve(rng.standard_normal(n + 5), np.ones(6) / 6, "valid")
         for m in ("P", "H_f", "H_b", "reward")}
    w["dH"] = w["H_f"] - w["H_b"]
    quiet = _live(w, j0, PRESETS["cheetah"], "1/1000windows", None)
    assert all(np.isnan(quiet[f"live_{k}_{g}"]) for k in LIVE_DETECTORS
               for g in ("IDT", "reward")), quiet
    shifted = {m: v.copy() for m, v in w.items()}
    shifted["P"][j0 + 50:] += 0.05  # about 10 window-σ from window 50 after the onset
    got = _live(shifted, j0, PRESETS["cheetah"], "1/1000windows", None)
    for k in LIVE_DETECTORS:
        assert 50 <= got[f"live_{k}_IDT"] <= 80, (k, got)
        assert np.isnan(got[f"live_{k}_reward"])


def test_out_of_sample_thresholds_and_choice_against_hand_counts():
    from idt_desk_sources.gym.reproduce import out_of_sample

    def row(pert, scores):
        """scores: name -> (IDT score, first window); reward scores 0."""
        out = {"perturbation": pert, "error": "", "auto": "", "actions": "deterministic"}
        for name in ("paper", "persistence", "ewma", "mewma"):
            sc, first = scores.get(name, (0.0, 1))
            for m in DETECTORS:
                v = sc if m == "IDT" else 0.0
                out[f"records_{name}_{m}"] = json.dumps([[0, v / 2], [first, v]])
        return out

    # Batch A: 20 controls scoring 0.0 .. 1.9 in every detector (θ_A = 1.8); perturbed:
    # ewma detects both (3.0 at window 4, 2.5 at 6), persistence one (2.0 at 9).
    a = [row("none", {n: (0.1 * i, 2) for n in ("paper", "persistence", "ewma", "mewma")})
         for i in range(20)]
    a += [row("p1", {"ewma": (3.0, 4), "persistence": (2.0, 9)}),
          row("p2", {"ewma": (2.5, 6), "persistence": (1.0, 9)})]
    # Batch B: controls up to 2.1 (two above θ_A = 1.8), perturbed: ewma 1.9 (above θ_A).
    b = [row("none", {n: (0.11 * i, 3) for n in ("paper", "persistence", "ewma", "mewma")})
         for i in range(20)]
    b += [row("p1", {"ewma": (1.9, 5)}), row("p2", {"ewma": (0.5, 5)})]
    got = out_of_sample(pd.DataFrame(a), pd.DataFrame(b))
    ab = got["a_to_b"]
    assert ab["chosen_IDT"] == "ewma" and ab["fit_controls"] == 20
    e = ab["detectors"]["ewma"]["IDT"]
    assert e["threshold_sigma"] == pytest.approx(1.8)
    # B's controls above 1.8: 0.11·i for i = 17, 18, 19 (1.87, 1.98, 2.09).
    assert e["false_alarms"] == {"alarms": 3, "trials": 20}
    assert e["detection"]["detected"] == 1 and e["median_latency"] == 5
    # The other way: θ_B = 0.11·18 = 1.98; A's ewma perturbed (3.0, 2.5) both above it.
    ba = got["b_to_a"]["detectors"]["ewma"]["IDT"]
    assert ba["threshold_sigma"] == pytest.approx(1.98)
    assert ba["detection"]["detected"] == 2 and ba["false_alarms"]["alarms"] == 0


def test_out_of_sample_from_two_runs_on_the_command_line(tiny_run, tmp_path):
    from idt_desk.cli import main

    _, out = tiny_run
    import pandas as pd

    other = tmp_path / "other"  # a second run: the same trials at other environment seeds
    shutil.copytree(out, other)
    rows = pd.read_csv(other / "trials.csv", dtype=str, keep_default_na=False)
    rows["env_seed"] = [str(int(v) + 10**6) for v in rows["env_seed"]]
    rows.to_csv(other / "trials.csv", index=False)
    assert main(["reproduce", "cheetah", "--out-of-sample", str(out), str(other),
                 "--out", str(tmp_path / "oos")]) == 0
    got = json.loads((tmp_path / "oos" / "out_of_sample.json").read_text())
    assert got["a_to_b"]["test_controls"] == 2 and got["a_to_b"]["test_perturbed"] == 1
    assert "Chosen on" in (tmp_path / "oos" / "out_of_sample.md").read_text()
    assert main(["reproduce", "cheetah", "--out-of-sample", str(tmp_path), str(out),
                 "--out", str(tmp_path / "x")]) == 2  # no trials.csv there


def test_the_budget_says_how_many_alarmed_controls_are_chance():
    """The Poisson-binomial count of alarmed controls, against a brute-force enumeration."""
    import itertools

    import pandas as pd
    from idt_desk_sources.gym.reproduce.summary import _by_chance

    def controls(post_steps):
        return pd.DataFrame({"steps": [14_000 + n for n in post_steps], "onset_step": 14_000,
                             "loop_seconds_per_step": 0.05})

    post = [36_000, 36_000, 72_000, 18_000, 36_000]  # 30, 30, 60, 15, 30 min after the onset
    got = _by_chance(controls(post), "1/h")
    p = [1 - math.exp(-n * 0.05 / 3600) for n in post]
    dist = [0.0] * 6
    for hits in itertools.product((0, 1), repeat=5):
        dist[sum(hits)] += math.prod(q if h else 1 - q for q, h in zip(p, hits, strict=True))
    tail = [sum(dist[k:]) for k in range(6)]
    assert got["expected"] == pytest.approx(sum(p))
    assert got["p_control"] == pytest.approx(np.mean(p))
    assert got["minutes_after_onset"] == pytest.approx(33.0)
    assert got["over"] == next(k for k in range(6) if tail[k] < 0.05)
    assert tail[got["over"] - 1] >= 0.05
    # At 4/h even all five alarmed is no surprise: no count says the budget was broken.
    assert _by_chance(controls(post), "4/h")["over"] is None
    # 20 half-hour controls at 1/h: binomial, p = 1 - e^-0.5; 12 or more is the 5 % tail.
    twenty = _by_chance(controls([36_000] * 20), "1/h")
    assert twenty["expected"] == pytest.approx(20 * (1 - math.exp(-0.5)))
    assert twenty["over"] == 12
    # At the RL source's 1/10h: p = 1 - e^-0.05, 1 of 20 expected; 4 or more is the 5 % tail
    # (P(>= 3) = 0.071, P(>= 4) = 0.015), so 2 of 20 controls alarmed is within budget.
    strict = _by_chance(controls([36_000] * 20), CONTROL_BUDGET)
    assert strict["expected"] == pytest.approx(20 * (1 - math.exp(-0.05)))
    assert strict["over"] == 4
    # Budgets not in loop time, and runs without their loop time, say nothing.
    assert _by_chance(controls(post), "1/1000windows") is None
    assert _by_chance(controls(post).drop(columns="loop_seconds_per_step"), "1/h") is None


def test_pooling_runs_refuses_a_run_given_twice_and_counts_shared_controls_once(tiny_run, tmp_path,
                                                                       capsys):
    from idt_desk.cli import main

    _, out = tiny_run
    assert main(["reproduce", "cheetah", "--pool", str(out), str(out),
                 "--out", str(tmp_path / "pool")]) == 2  # the same run twice: refused
    assert "given twice" in capsys.readouterr().err
    import pandas as pd

    other = tmp_path / "other"  # a copy in another folder: refused (its trials count twice)
    shutil.copytree(out, other)
    assert main(["reproduce", "cheetah", "--pool", str(out), str(other),
                 "--out", str(tmp_path / "pool")]) == 2
    assert "a copy of that run?" in capsys.readouterr().err
    # A second run that shares its controls: its perturbed trial at another seed.
    rows = pd.read_csv(other / "trials.csv", dtype=str, keep_default_na=False)
    moved = rows["perturbation"] != "none"
    rows.loc[moved, "env_seed"] = [str(int(v) + 10**6) for v in rows.loc[moved, "env_seed"]]
    rows.to_csv(other / "trials.csv", index=False)
    assert main(["reproduce", "cheetah", "--pool", str(out), str(other),
                 "--out", str(tmp_path / "pool")]) == 0
    said = capsys.readouterr().out
    assert "warning:" in said and "share 2 control trial(s)" in said
    got = json.loads((tmp_path / "pool" / "pooled.json").read_text())
    # Two runs of 2 controls each, the same two: counted once.
    assert got["controls_counted"] == 2 and got["controls_shared"] == 2
    assert got["all"]["perturbed_trials"] == 2 and got["perturbed_shared"] == 0
    assert "## Signatures" in (tmp_path / "pool" / "pooled.md").read_text()
    assert main(["reproduce", "cheetah", "--pool", str(tmp_path), "--out",
                 str(tmp_path / "x")]) == 2  # no trials.csv there


def test_the_drift_detectors_judge_a_trial_on_its_transitions_at_the_budget():
    """The generic drift detectors' columns: quiet without a change, alarmed soon after a
    shift of two state variables, their records those of statistic / threshold."""
    from idt_desk_sources.gym.reproduce.judge import DRIFT_ROWS, _drift

    from idt_desk.metrics.presets import PRESETS

    preset = PRESETS["cheetah"]
    rng = np.random.default_rng(8)
    n, onset = 20_000, 15_000  # about 100 windows after the onset: ERT 5,000 leaves them quiet
    s = rng.standard_normal((n + 1, 4))
    a = rng.standard_normal((n, 2))
    w = {"start": np.arange(0, n - preset.window + 1, preset.stride)}
    j0 = int(np.searchsorted(w["start"] + preset.window, onset, side="right"))
    quiet = _drift(w, s[:-1], a, s[1:], j0, preset, "1/5000windows", None)
    shifted = s.copy()
    shifted[onset:, :2] += 1.5
    got = _drift(w, shifted[:-1], a, shifted[1:], j0, preset, "1/5000windows", None)
    for name in DRIFT_ROWS:
        assert quiet[f"drift_{name}_skipped"] == "" and np.isnan(quiet[f"live_{name}_drift"])
        lat = got[f"live_{name}_drift"]
        assert 0 <= lat <= 20, (name, got)
        recs = json.loads(got[f"records_{name}_drift"])
        first_above = next(j for j, v in recs if v > 1.0)
        assert first_above == lat
    # Too short a reference for the test window: skipped, and said.
    short = _drift({"start": w["start"][:60]}, s[:-1], a, s[1:], 30, preset, "1/1000windows",
                   None)
    assert all("needs at least" in short[f"drift_{n}_skipped"] for n in DRIFT_ROWS)
    assert all(np.isnan(short[f"live_{n}_drift"]) for n in DRIFT_ROWS)
