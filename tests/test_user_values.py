"""Every value a user hands the Recorder, the Gymnasium wrapper or a phase-judged replay is
checked before it is used, and refused in one line naming where it is."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest
from gymnasium import spaces
from idt_desk_sources.replay import ReplaySource

import idt_desk
from idt_desk.errors import InputError
from idt_desk.gym import IDTMonitor
from tests.layouts import csv_layout, transitions_path

PIPE = dict(window=40, stride=10, calibration_windows=5, baseline_windows=50)


@pytest.fixture
def recorder(tmp_path):
    rec = idt_desk.Recorder(tmp_path / "r", ["x", "v"], **PIPE)
    yield rec
    rec.close()


@pytest.mark.parametrize("bad, said", [
    ([10**400, 1.0], "s at index 0: 1000000000000000000000000000000000000... is not a number"),
    ([[1.0, 2.0], [3.0, 10**400]], "s at row 1, column 1:"),
    (np.array(["1.0", "2.0"]), "s: text ('1.0'); the IDT takes numbers"),
    ([True, False], "s: booleans (True); the IDT takes numbers"),
    ([{"a": 1}, 1.0], "s at index 0: {'a': 1} is not a number"),
])
def test_a_state_that_is_not_numbers_is_refused_naming_where(recorder, bad, said):
    with pytest.raises(ValueError) as err:
        recorder.add(bad, None, np.zeros(np.shape(bad)) if np.ndim(bad) == 2 else [1.0, 2.0])
    assert said in str(err.value) and "\n" not in str(err.value)
    recorder.add([1.0, 2.0], None, [1.5, 2.5])  # nothing of the refused call was kept
    assert recorder.n_added == 1


def test_the_wrapper_names_an_observation_of_the_wrong_shape():
    class Grows(gym.Env):
        observation_space = spaces.Box(-1, 1, (3,))
        action_space = spaces.Box(-1, 1, (1,))

        def reset(self, seed=None, options=None):
            return np.zeros(3, np.float32), {}

        def step(self, action):
            return np.zeros(4, np.float32), 0.0, False, False, {}

    env = IDTMonitor(Grows(), window=10, stride=5, calibration_windows=1)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"^next observation of transition 0: 4 value\(s\), "
                                         r"shape \(4,\); the space has 3 variable\(s\)$"):
        env.step(np.zeros(1))


def _phased(path, n=3000, steps=200):
    rng = np.random.default_rng(3)
    t_in = np.arange(n) % steps
    x = np.column_stack([np.sin(t_in / 30.0), rng.standard_normal(n)])
    with csv_layout(), idt_desk.Recorder(path, ["x", "y"], rate=20.0, episode_steps=steps,
                                         phase_baseline=True, **PIPE) as rec:
        rec.add(x[:-1], None, x[1:], episode=(np.arange(n) // steps)[:-1])
    return path  # format 1: its cells are edited as text


def _damage(path, lines, value):
    rows = pd.read_csv(path / "transitions.csv", dtype=str, keep_default_na=False)
    rows.loc[lines.start - 2:lines.stop - 2, "episode"] = value
    rows.to_csv(path / "transitions.csv", index=False)


@pytest.mark.parametrize("lines, value, said", [
    (slice(500, 500), "", "line 500: episode blank"),
    (slice(700, 700), "-1", "line 700: episode -1"),
    (slice(900, 900), "0", "line 900: episode goes back to 0"),
    (slice(202, 401), "0", "line 202: episode 0 runs past its 200 steps"),  # never ends
])
def test_a_phase_judged_replay_needs_every_transition_s_episode(tmp_path, lines, value, said):
    path = _phased(tmp_path / "rec")
    assert idt_desk.load_recording(path).complete
    ReplaySource(path=str(path))  # the undamaged recording replays
    _damage(path, lines, value)
    with pytest.raises(InputError) as err:
        ReplaySource(path=str(path))
    assert said in str(err.value) and "phase_baseline" in str(err.value)


def test_a_recording_without_an_episode_column_replays_without_episodes(tmp_path):
    path = tmp_path / "plain"
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1200, 2))
    with csv_layout(), idt_desk.Recorder(path, ["x", "y"], **PIPE) as rec:
        rec.add(x[:-1], None, x[1:])
    rows = pd.read_csv(path / "transitions.csv")
    rows.drop(columns="episode").to_csv(path / "transitions.csv", index=False)
    source = ReplaySource(path=str(path))
    assert len(source.step(100)) == 100
    source.close()


def _write_in_chunks(path, episodes, chunk=300):
    """A phase-judged loop writing its recording ``chunk`` transitions at a time."""
    import time

    n = len(episodes) + 1
    rng = np.random.default_rng(3)
    x = np.column_stack([np.sin(np.arange(n) / 30.0), rng.standard_normal(n)])
    with idt_desk.Recorder(path, ["x", "y"], rate=20.0, episode_steps=200,
                           phase_baseline=True, flush_seconds=0.05, **PIPE) as rec:
        for lo in range(0, n - 1, chunk):
            hi = min(lo + chunk, n - 1)
            rec.add(x[lo:hi], None, x[lo + 1:hi + 1], episode=episodes[lo:hi])
            rec.flush()
            time.sleep(0.2)


@pytest.mark.parametrize("damaged", [False, True])
def test_a_followed_phase_judged_run_is_checked_across_polls(tmp_path, damaged):
    """Following, the rows arrive a poll at a time: an episode that began in an earlier poll
    is carried over, and the line named is the one a replay of the finished file names."""
    import threading

    from idt_desk.live.session import Session, SessionConfig, run_headless

    episodes = np.arange(3000) // 200
    if damaged:  # episode 10 runs 2,000 to 2,399: past its 200 steps in the next poll
        episodes[2100:] -= episodes[2100:] > 10
    path = tmp_path / "run"
    writer = threading.Thread(target=_write_in_chunks, args=(path, episodes))
    writer.start()
    try:
        while not transitions_path(path).exists():
            threading.Event().wait(0.05)
        source = ReplaySource(path=str(path), follow=True, silence=10, wait=30)
        session = Session(SessionConfig(speed=None), source=source)
        run_headless(session)
    finally:
        writer.join()
    if not damaged:
        assert session.error is None and session.n_transitions == 3000
        return
    said = "transitions.arrows row 2,201: episode 10 runs past its 200 steps"
    assert said in str(session.error), session.error
    with pytest.raises(InputError, match=said):  # the finished file: the same line
        ReplaySource(path=str(path))
