"""Baseline profiles: fitted once (a session, ``idt-desk fit``), every later session armed at
its first window; refused in one line where they do not fit; replayed identically."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import idt_desk
from idt_desk.live.fit import fit_profile
from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.recordings import load_recording
from idt_desk.recordings.profile import MAX_BYTES, Profile, ProfileError

from .cli_call import call

PIPE = dict(window=100, stride=50, calibration_windows=2)
N = 3000  # rows a run: 59 windows


def _loop(seed: int, n: int = N, gain: float = 0.9, noise: float = 0.0, act: float = 1.0):
    """A toy loop x' = gain·x + act·u + ε (two state variables), seen with ``noise`` added."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n + 1, 2))
    u = rng.normal(size=(n, 1))
    for t in range(n):
        x[t + 1] = gain * x[t] + act * np.array([u[t, 0], -0.5 * u[t, 0]]) + \
            0.3 * rng.normal(size=2)
    seen = x + noise * rng.normal(size=x.shape)
    return seen[:-1], u, seen[1:]


def _record(path, seed, *, baseline=None, n=N, gain=0.9, noise=0.0, act=1.0, **options):
    s, u, s_next = _loop(seed, n, gain, noise, act)
    settings = {**PIPE, "baseline_windows": 40, **options}
    if baseline is not None:
        settings.pop("baseline_windows")
    with idt_desk.Recorder(path, ["x", "v"], ["u"], baseline=baseline, **settings) as rec:
        rec.add(s, u, s_next)
        return rec


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A recorder's run, its baseline saved as a profile, and a second run armed by it."""
    root = tmp_path_factory.mktemp("profile")
    s, u, s_next = _loop(1)
    with idt_desk.Recorder(root / "a", ["x", "v"], ["u"], baseline_windows=40, **PIPE) as rec:
        rec.add(s, u, s_next)
        profile = rec.save_baseline(root / "a.json")
        thresholds = {g: c.threshold for g, c in rec.session.monitor.calibrations.items()}
        symbols = rec.session.pipeline.sym_s.to_dict()
    b = _record(root / "b", 2, baseline=root / "a.json")
    return {"root": root, "profile": profile, "thresholds": thresholds, "symbols": symbols,
            "b": b}


def test_a_saved_profile_arms_the_next_session_at_its_first_window(fitted):
    b = load_recording(fitted["root"] / "b")
    assert b.complete, b.warnings
    flags = b.windows["x_IDT"].to_numpy()
    # Judged from the first window on: no calibration, no baseline to gather.
    assert np.isfinite(flags).all() and len(flags) == 1 + (N - 100) // 50
    # What judged them is the first run's: its symbols and thresholds, to the bit.
    mon = fitted["b"].session.monitor
    assert {g: c.threshold for g, c in mon.calibrations.items()} == fitted["thresholds"]
    assert fitted["b"].session.pipeline.sym_s.to_dict() == fitted["symbols"]
    ev = b.events
    cal = ev[ev["kind"] == "calibrated"].iloc[0]
    base = ev[ev["kind"] == "baseline"].iloc[0]
    assert cal["i"] == 0 and base["i"] == 0
    assert base["profile"]["digest"] == fitted["profile"].digest
    assert base["profile"]["path"] == str(fitted["root"] / "a.json")
    # Without a profile the same run is blind for its calibration and its 40-window baseline.
    own = _record(fitted["root"] / "own", 2)
    own_flags = load_recording(own.path).windows["x_IDT"].to_numpy()
    assert np.isnan(own_flags[:42]).all() and np.isfinite(own_flags[42:]).all()


def test_a_profiled_recording_replays_identically_without_the_file(fitted, tmp_path):
    import shutil

    moved = tmp_path / "a.json"
    shutil.move(fitted["root"] / "a.json", moved)  # the recording holds it by value
    try:
        rec = load_recording(fitted["root"] / "b")
        session = Session(SessionConfig(source="replay", speed=None,
                                        settings={"path": str(fitted["root"] / "b")}))
        run_headless(session)
        got = session.snapshot(limit=100).windows
        for c in ("P", "H_f", "H_b", "dH", "x_IDT", "x_P"):
            want = rec.windows[c].to_numpy()
            np.testing.assert_array_equal(np.asarray(got[c])[-len(want):], want, err_msg=c)
        assert session.profile is not None and \
            session.profile.digest == fitted["profile"].digest
    finally:
        shutil.move(moved, fitted["root"] / "a.json")


def test_fit_on_several_runs_is_one_baseline_over_all_their_windows(tmp_path):
    runs = [_record(tmp_path / f"r{j}", 10 + j).path for j in range(3)]
    profile = fit_profile(runs, tmp_path / "p.json")
    # The independent reference: one session fed the three runs' rows in turn, its baseline
    # every window after the symbols' two, and numpy's mean and std of those windows.
    windows = 1 + (3 * N - 100) // 50
    assert profile.n_windows == windows - 2
    rows = [_loop(10 + j) for j in range(3)]
    s, u, s_next = (np.concatenate([r[k] for r in rows]) for k in range(3))
    with idt_desk.Recorder(tmp_path / "ref", ["x", "v"], ["u"], baseline_windows=windows - 2,
                           **PIPE) as ref:
        ref.add(s, u, s_next)
        ref.flush()
        want = ref.session.monitor.fitted()
    got = profile.fitted["monitor"]
    assert got["calibrations"]["IDT"]["threshold"] == want["calibrations"]["IDT"]["threshold"]
    table = load_recording(tmp_path / "ref").windows
    for m in ("P", "H_f", "H_b", "dH"):
        x = table[m].to_numpy()[2:]
        assert got["mean"][m] == pytest.approx(np.nanmean(x), rel=1e-12)
        assert got["std"][m] == pytest.approx(np.nanstd(x, ddof=1), rel=1e-12)
    assert [r["run"] for r in profile.document["fitted_on"]] == [str(p) for p in runs]
    # The command line's fit writes the same profile.
    rc, _, err = call(["fit", *map(str, runs), "--out", str(tmp_path / "cli.json")])
    assert rc == 0, err
    assert Profile.read(tmp_path / "cli.json").fitted == profile.fitted


def test_a_loop_broken_from_its_first_step_alarms_with_a_profile_and_not_without(fitted,
                                                                                  tmp_path):
    # Its actuator at a fifth of its gain from the first step: A explains less of S'.
    broken = _record(tmp_path / "broken", 7, baseline=fitted["root"] / "a.json", act=0.0)
    flags = load_recording(broken.path).windows["x_IDT"].to_numpy()
    first = int(np.flatnonzero(flags == 1.0)[0])
    assert first < 20
    assert broken.profile_check is not None and not broken.profile_check["fits"]
    assert "outside the profile's spread" in broken.profile_check["said"]
    # Without one the broken loop is its own baseline: never an alarm once armed.
    own = _record(tmp_path / "own", 7, act=0.0)
    own_flags = load_recording(own.path).windows["x_IDT"].to_numpy()
    assert np.nansum(own_flags) == 0 and np.isfinite(own_flags[42:]).all()
    # A clean loop of the profile's kind sits in its spread.
    assert fitted["b"].profile_check["fits"]


def _damaged(root):
    text = (root / "a.json").read_text()
    doc = json.loads(text)
    cases = {}
    (root / "cut.json").write_text(text[: len(text) // 2])
    cases["damaged"] = (root / "cut.json", "damaged JSON")
    other = {**doc, "version": 99}
    (root / "v99.json").write_text(json.dumps(other))
    cases["version"] = (root / "v99.json", "version 99")
    foreign = {"format": "something else"}
    (root / "foreign.json").write_text(json.dumps(foreign))
    cases["foreign"] = (root / "foreign.json", "not a baseline profile")
    broken = json.loads(text)
    del broken["fitted"]["monitor"]["calibrations"]["IDT"]["threshold"]
    (root / "field.json").write_text(json.dumps(broken))
    cases["field"] = (root / "field.json", "damaged profile")
    return cases


def test_a_damaged_foreign_or_other_version_file_is_refused_in_one_line_everywhere(fitted):
    import gymnasium as gym

    from idt_desk.gym import IDTMonitor

    for name, (path, said) in _damaged(fitted["root"]).items():
        with pytest.raises(ProfileError) as exc:
            idt_desk.Recorder(fitted["root"] / f"x-{name}", ["x", "v"], ["u"], baseline=path)
        assert said in str(exc.value) and "\n" not in str(exc.value), name
        assert not (fitted["root"] / f"x-{name}").exists()  # nothing made
        with pytest.raises(ProfileError, match=said):
            IDTMonitor(gym.make("CartPole-v1"), baseline=path)
        rc, _, err = call(["run", "--source", "pendulum", "--steps", "10", "--baseline",
                           str(path)])
        assert rc == 2 and said in err and err.count("\n") == 1, (name, err)
        rc, _, err = call(["fit", str(fitted["root"] / "a"), "--out", str(path) + ".x",
                           "--detector", "cusum"])
        assert rc == 0, err  # fit itself takes recordings, not profiles


def test_another_loop_is_refused_in_one_line_naming_the_difference(fitted, tmp_path):
    path = fitted["root"] / "a.json"
    with pytest.raises(ProfileError, match=r"fitted on state variables 2 \(x, v\); this loop "
                                           r"has 2 \(x, w\)"):
        idt_desk.Recorder(tmp_path / "r1", ["x", "w"], ["u"], baseline=path)
    with pytest.raises(ProfileError, match="fitted on action variables"):
        idt_desk.Recorder(tmp_path / "r2", ["x", "v"], ["u", "u2"], baseline=path)
    with pytest.raises(ProfileError, match="fitted at 1 transitions a second; this loop runs "
                                           "at 50"):
        idt_desk.Recorder(tmp_path / "r3", ["x", "v"], ["u"], rate=50.0, baseline=path)
    with pytest.raises(ProfileError, match="fitted with detector 'persistence'; this session "
                                           "asks for 'cusum'"):
        idt_desk.Recorder(tmp_path / "r4", ["x", "v"], ["u"], detector="cusum", baseline=path)
    with pytest.raises(ProfileError, match="preset window 100; this session's has window 200"):
        idt_desk.Recorder(tmp_path / "r5", ["x", "v"], ["u"], window=200, baseline=path)
    rc, _, err = call(["run", "--source", "pendulum", "--steps", "10", "--baseline", str(path)])
    assert rc == 2 and "fitted on state variables 2 (x, v); this loop has 4" in err


def test_the_wrapper_saves_and_takes_a_profile_and_refuses_another_env(tmp_path):
    import gymnasium as gym

    from idt_desk.gym import IDTMonitor

    def steps(env, n, seed):
        env.reset(seed=seed)
        env.action_space.seed(seed)
        for _ in range(n):
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            if term or trunc:
                env.reset()

    env = IDTMonitor(gym.make("CartPole-v1"), window=100, stride=50, calibration_windows=2,
                     baseline_windows=30)
    with pytest.raises(ProfileError, match="not calibrated yet: 0 of 150 transitions"):
        env.save_baseline(tmp_path / "early.json")
    steps(env, 400, 0)
    with pytest.raises(ProfileError, match="baseline is not complete: 5 of 30 windows"):
        env.save_baseline(tmp_path / "early.json")
    steps(env, 1600, 0)
    profile = env.save_baseline(tmp_path / "cp.json")
    env.close()
    assert profile.loop["env_id"] == "CartPole-v1" and profile.n_windows == 30
    env = IDTMonitor(gym.make("CartPole-v1"), window=100, stride=50, baseline=tmp_path / "cp.json")
    steps(env, 400, 1)
    w = env.windows
    assert len(w) == 7 and np.isfinite(w["x_IDT"]).all()
    assert env.profile.digest == profile.digest
    env.refit_baseline()  # a loop the profile does not fit: its own baseline from here
    steps(env, 2000, 2)
    w = env.windows
    assert np.isnan(w["x_IDT"][7:37]).all() and np.isfinite(w["x_IDT"][37:]).all()
    env.close()
    with pytest.raises(ProfileError, match="fitted on CartPole-v1; this loop is Acrobot-v1"):
        IDTMonitor(gym.make("Acrobot-v1"), baseline=tmp_path / "cp.json")


def test_reading_a_profile_opens_only_a_regular_file_of_bounded_size(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # a reader that opened it would wait for ever
    with pytest.raises(ProfileError, match="not a regular file"):
        Profile.read(fifo)
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(MAX_BYTES + 1)  # sparse: no disk used
    with pytest.raises(ProfileError, match="more than the"):
        Profile.read(big)
    with pytest.raises(ProfileError, match="not text"):
        (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00")
        Profile.read(tmp_path / "bin.json")


def test_saving_replaces_a_planted_link_instead_of_writing_through_it(fitted, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    link = tmp_path / "p.json"
    link.symlink_to(victim)
    saved = fitted["profile"].save(link)
    assert victim.read_text() == "keep me"
    assert not link.is_symlink() and Profile.read(link).digest == saved.digest
    with pytest.raises(ProfileError, match="a folder"):
        fitted["profile"].save(tmp_path)


def test_the_profile_setting_is_checked_against_its_digest(fitted):
    setting = fitted["profile"].setting()
    doc = json.loads(json.dumps(setting["document"]))
    doc["fitted"]["monitor"]["mean"]["P"] += 0.1  # altered after it was digested
    with pytest.raises(ProfileError, match="digest"):
        Profile.of({**setting, "document": doc})


def test_another_loop_is_said_not_to_fit_and_can_be_refit(fitted, tmp_path):
    other = _record(tmp_path / "other", 3, baseline=fitted["root"] / "a.json", gain=0.2)
    check = other.profile_check
    assert check is not None and not check["fits"]
    assert "refit the baseline" in check["said"]
    events = load_recording(other.path).events
    assert (events["kind"] == "profile_check").sum() == 1
    # Refit on the loop itself: the next 40 windows become its baseline.
    s, u, s_next = _loop(4, 5000, 0.2)
    with idt_desk.Recorder(tmp_path / "refit", ["x", "v"], ["u"],
                           baseline=fitted["root"] / "a.json") as rec:
        rec.add(s[:1000], u[:1000], s_next[:1000])
        rec.refit_baseline(40)
        rec.add(s[1000:], u[1000:], s_next[1000:])
    w = load_recording(tmp_path / "refit").windows["x_IDT"].to_numpy()
    assert np.isnan(w).sum() == 40 and np.nansum(w[-30:]) == 0


def test_the_window_loads_a_profile_starts_armed_and_saves_its_own(qtbot, window, tmp_path):
    from PySide6.QtCore import Qt

    # The pendulum's own baseline, saved headless (short, so the test is quick).
    made = Session(SessionConfig(speed=None, baseline_windows=40, calibration_windows=5))
    run_headless(made, steps=6000)
    profile = made.save_baseline(tmp_path / "pendulum.json")
    made.close()
    panel = window.pipeline_panel
    # A damaged file: one line in the banner, nothing taken.
    (tmp_path / "cut.json").write_text((tmp_path / "pendulum.json").read_text()[:300])
    assert not window.load_profile(tmp_path / "cut.json")
    assert "damaged JSON" in window.banner.text() and window.profile is None
    assert "each session fits its own" in panel.profile_label.text()
    assert window.load_profile(tmp_path / "pendulum.json")
    assert panel.profile_label.text().startswith("pendulum.json · 40 windows")
    assert panel.profile_clear_button.isEnabled()
    qtbot.mouseClick(window.source_panel.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.session is not None and window.session.running,
                    timeout=60_000)
    qtbot.waitUntil(lambda: window.session.snapshot(1).n_windows > 3, timeout=60_000)
    snap = window.session.snapshot(200)
    assert np.isfinite(snap.windows["x_IDT"]).all()  # judged from the first window
    assert window.session.pipeline_settings()["profile"]["digest"] == profile.digest
    # Its baseline is the profile's: saving it again writes the same fit.
    assert window.save_profile(tmp_path / "again.json")
    assert Profile.read(tmp_path / "again.json").fitted == profile.fitted
    window.stop_session()
    qtbot.mouseClick(panel.profile_clear_button, Qt.MouseButton.LeftButton)
    assert window.profile is None and not panel.profile_clear_button.isEnabled()


def test_a_sweep_is_judged_against_one_profile_by_runs_and_by_a_replay(fitted, tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    for name, act in (("clean-1", 1.0), ("clean-2", 1.0), ("dead-actuator", 0.0)):
        _record(sweep / name, 20 + len(name), act=act)  # each with its own baseline
    profile = str(fitted["root"] / "a.json")
    rc, out, err = call(["runs", str(sweep), "--json", "--baseline", profile])
    assert rc == 0, err
    rows = {r["path"]: r for r in json.loads(out)}
    # Judged by its own beginning the broken run never alarmed; against the profile it does.
    assert rows["dead-actuator"]["alarms"] == 0
    assert rows["dead-actuator"]["profile"]["alarms"] >= 1
    assert rows["dead-actuator"]["profile"]["fits"] is False
    for name in ("clean-1", "clean-2"):
        assert rows[name]["profile"]["alarms"] == 0 and rows[name]["profile"]["fits"], name
    rc, out, _ = call(["runs", str(sweep), "--baseline", profile])
    assert rc == 0 and "vs profile: 0 alarms; fits" in out
    # One run replayed by the command line against it says the same.
    rc, out, err = call(["run", "--source", "replay", "--set",
                         f"path={sweep / 'dead-actuator'}", "--baseline", profile])
    assert rc == 0, err
    assert f"{rows['dead-actuator']['profile']['alarms']} alarm" in out
    assert "sit outside the profile's spread" in out


def test_a_dialogue_profile_judges_from_the_first_turn_and_names_its_pair(tmp_path):
    from idt_desk_sources.dialogue import DialogueSource

    from tests.fake_ollama import FakeOllama

    pair = {"student_model": "student:1b", "teacher_model": "teacher:1b"}
    with FakeOllama() as srv:
        made = Session(SessionConfig(source="dialogue", speed=None, baseline_windows=5,
                                     detector="persistence"),
                       source=DialogueSource(host=srv.host, **pair))
        run_headless(made, steps=8)
        profile = made.save_baseline(tmp_path / "dialogue.json")
        made.close()
        assert profile.fitted["symbols"] is None and profile.n_windows == 5
        assert profile.loop["env_id"] == "student:1b <- teacher:1b"
        used = Session(SessionConfig(source="dialogue", speed=None,
                                     profile=profile.setting()),
                       source=DialogueSource(host=srv.host, **pair))
        run_headless(used, steps=3)
        flags = used.snapshot(10).windows["x_IDT"]
        used.close()
        assert len(flags) == 3 and np.isfinite(flags).all()  # the first turn judged
        with pytest.raises(ProfileError, match="fitted on student:1b <- teacher:1b; this "
                                               "loop is other:1b <- teacher:1b"):
            Session(SessionConfig(source="dialogue", speed=None, profile=profile.setting()),
                    source=DialogueSource(host=srv.host, **{**pair,
                                                            "student_model": "other:1b"}))
