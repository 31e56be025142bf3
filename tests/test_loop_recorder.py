"""``idt_desk.Recorder``: any Python loop writes an ordinary recording."""

from __future__ import annotations

import json

import numpy as np
import pytest
from idt_desk_sources.replay import ReplaySource

import idt_desk
from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.recordings import load_recording

from .polling import rows_on_disk, until
from .toy_source import ToySource

PIPE = dict(window=100, stride=20, calibration_windows=20, baseline_windows=300)
METRICS = ("start", "end", "P", "H_f", "H_b", "dH", "out_of_range", "x_P", "x_H_f", "x_H_b",
           "x_dH", "x_IDT")


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """The dashboard's own recording of a toy loop, with a perturbation from 9,000 on."""
    path = tmp_path_factory.mktemp("live") / "rec"
    session = Session(SessionConfig(speed=None, **PIPE), source=ToySource(), record=path)
    session.schedule(9000, "perturb", name="obs_noise", params={"sigma": 3.0})
    run_headless(session, steps=12_000)
    return load_recording(path)


def _columns(rec):
    tr = rec.transitions
    return (tr[["s_0", "s_1"]].to_numpy(), tr[["a_0"]].to_numpy(),
            tr[["s_next_0", "s_next_1"]].to_numpy(), tr["reward"].to_numpy(),
            tr["t"].to_numpy())


def _same_windows(a, b):
    assert len(a) == len(b) > 400
    for c in METRICS:
        np.testing.assert_array_equal(a[c].to_numpy(np.float64), b[c].to_numpy(np.float64),
                                      err_msg=c)
    np.testing.assert_allclose(a["reward"], b["reward"], rtol=1e-12, atol=1e-12)


def test_package_root_exports_the_recorder():
    assert idt_desk.Recorder is idt_desk.live.recorder.Recorder and "Recorder" in idt_desk.__all__


@pytest.mark.parametrize("batch", [1, 37, 5000])
def test_a_loop_recorded_one_transition_or_a_batch_at_a_time_equals_the_dashboards_recording(
        live, tmp_path, batch):
    s, a, s2, r, t = _columns(live)
    path = tmp_path / "loop"
    with idt_desk.Recorder(path, state_names=["x", "v"], action_names=["u"],
                           rate=ToySource.rate, reward=True, chunk=500, **PIPE) as rec:
        for lo in range(0, len(s), batch):
            hi = min(lo + batch, len(s))
            if lo <= 9000 < hi or (batch == 1 and lo == 9000):
                # The loop's own perturbation: marked at the transition it acts on.
                k = 9000 - lo
                if k:
                    rec.add(s[lo:lo + k], a[lo:lo + k], s2[lo:lo + k], reward=r[lo:lo + k])
                rec.perturb("obs_noise", sigma=3.0)
                lo += k
            if batch == 1:
                rec.add(s[lo], a[lo], s2[lo], reward=r[lo])  # vectors, not rows
            elif lo < hi:
                rec.add(s[lo:hi], a[lo:hi], s2[lo:hi], reward=r[lo:hi])
        rec.note("done")
    mine = load_recording(path)
    assert mine.complete, mine.warnings
    assert mine.state_names == ["x", "v"] and mine.action_names == ["u"]
    np.testing.assert_array_equal(mine.transitions[["s_0", "s_1"]].to_numpy(), s)
    np.testing.assert_allclose(mine.transitions["t"].to_numpy(), t, rtol=1e-12)
    _same_windows(mine.windows, live.windows)
    ev = mine.events
    on = ev[ev["kind"] == "perturbation_on"].iloc[0]
    assert on["name"] == "obs_noise" and int(on["i"]) == 9000
    assert on["params"] == {"sigma": 3.0}
    assert ev[ev["kind"] == "note"].iloc[0]["text"] == "done"
    assert ev["kind"].iloc[-1] == "session_end"
    assert np.nansum(mine.windows["x_IDT"]) > 0  # the perturbation is alarmed


def test_a_recorders_recording_replays_to_the_same_windows(live, tmp_path):
    s, a, s2, r, _t = _columns(live)
    path = tmp_path / "loop"
    with idt_desk.Recorder(path, ["x", "v"], ["u"], rate=100.0, reward=True, **PIPE) as rec:
        rec.add(s, a, s2, reward=r)
    replay = Session(SessionConfig(speed=None), source=ReplaySource(path=str(path)),
                     record=tmp_path / "again")
    run_headless(replay)
    _same_windows(load_recording(tmp_path / "again").windows, load_recording(path).windows)


def test_a_passive_loop_without_a_rate_counts_steps_and_budgets_windows(tmp_path):
    rng = np.random.default_rng(0)
    x = np.cumsum(rng.normal(size=(3001, 2)), axis=0)
    with idt_desk.Recorder(tmp_path / "p", ["a", "b"], window=100, stride=20,
                           calibration_windows=10, baseline_windows=50) as rec:
        rec.add(x[:-1], None, x[1:])
    got = load_recording(tmp_path / "p")
    assert got.complete and got.action_names == []
    assert got.transitions["t"].iloc[-1] == 3000.0  # the step count
    cfg = json.loads((tmp_path / "p" / "config.json").read_text())
    # The one budget of a loop without a rate, the wrapper's as the Recorder's (it was
    # 1/1000windows here and 1/10000windows there).
    from idt_desk.detection.spec import NO_RATE_BUDGET

    assert cfg["session"]["false_alarms"] == NO_RATE_BUDGET == "1/10000windows"


def test_bad_input_is_refused_with_what_was_expected(tmp_path):
    rec = idt_desk.Recorder(tmp_path / "r", ["x", "v"], ["u"])
    with pytest.raises(ValueError, match="s_next: expected 2 value"):
        rec.add([0.0, 1.0], [0.5], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="s has 2 row"):
        rec.add(np.zeros((2, 2)), np.zeros((3, 1)), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="action variable"):
        rec.add([0.0, 1.0], None, [1.0, 2.0])
    rec.close()
    with pytest.raises(ValueError, match="closed"):
        rec.add([0.0, 1.0], [0.5], [1.0, 2.0])
    with pytest.raises(ValueError, match="at least one state variable"):
        idt_desk.Recorder(tmp_path / "q", [])
    with pytest.raises(ValueError, match="rate"):
        idt_desk.Recorder(tmp_path / "q", ["x"], rate=-1)


def test_an_exception_in_the_loop_closes_the_recording_as_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="boom"), \
            idt_desk.Recorder(tmp_path / "e", ["x"]) as rec:
        rec.add(np.zeros((10, 1)), None, np.ones((10, 1)))
        raise RuntimeError("boom")
    got = load_recording(tmp_path / "e")
    end = got.events[got.events["kind"] == "session_end"].iloc[0]
    assert end["state"] == "error" and "boom" in end["error"]
    assert len(got.transitions) == 10
    # Said by the reader too: a recording that ended in error is not complete.
    assert not got.complete and got.error is not None and "boom" in got.error
    assert any("ended in error: RuntimeError: boom" in w for w in got.warnings)


def _stream(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = np.cumsum(rng.normal(size=(n + 1, 2)), axis=0)
    return x[:-1], rng.normal(size=(n, 1)), x[1:]






def test_what_add_accepted_reaches_the_disk_while_the_loop_does_something_else(tmp_path):
    """3,000 rows added, then the loop trains (never calls the recorder): all on disk."""
    s, a, s2 = _stream(3000)
    with idt_desk.Recorder(tmp_path / "r", ["x", "v"], ["u"], **PIPE) as rec:
        for lo in range(0, 3000, 250):
            rec.add(s[lo:lo + 250], a[lo:lo + 250], s2[lo:lo + 250])
        assert until(lambda: rows_on_disk(tmp_path / "r") == 3000)
        rec.note("evaluating")
        assert until(lambda: b"evaluating" in (tmp_path / "r" / "events.jsonl").read_bytes())
    assert load_recording(tmp_path / "r").complete


def test_a_failure_in_the_pipeline_never_leaves_a_recording_that_says_complete(
        tmp_path, monkeypatch):
    """Ctrl-C (or any exception) inside the pipeline: every accepted row is kept, or the
    recording says it ended in error and why."""
    real = Session.advance
    calls = []

    def advance(self, b):
        calls.append(len(b))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, b)

    monkeypatch.setattr(Session, "advance", advance)
    s, a, s2 = _stream(5000)
    accepted = 0
    # Leaving the block closes the recording, which says the pipeline failed.
    with pytest.raises(idt_desk.RecordingError, match=r"closed as an error.*KeyboardInterrupt"), \
            idt_desk.Recorder(tmp_path / "r", ["x", "v"], ["u"], chunk=500, **PIPE) as rec:
        for lo in range(0, 5000, 500):
            try:
                rec.add(s[lo:lo + 500], a[lo:lo + 500], s2[lo:lo + 500])
                rec.flush()
            except (KeyboardInterrupt, idt_desk.RecordingError):
                break
            accepted += 500
    got = load_recording(tmp_path / "r")
    assert len(got.transitions) == accepted or (
        not got.complete and "KeyboardInterrupt" in (got.error or "")), got.warnings
    assert not got.complete


def test_a_mark_json_cannot_hold_is_refused_at_once(tmp_path):
    s, a, s2 = _stream(1000)
    with idt_desk.Recorder(tmp_path / "r", ["x", "v"], ["u"], **PIPE) as rec:
        rec.add(s[:500], a[:500], s2[:500])
        with pytest.raises(TypeError, match=r"perturbation_on wind: not JSON.*set"):
            rec.perturb("wind", levels={1, 2})
        rec.add(s[500:], a[500:], s2[500:])  # the loop goes on; nothing was dropped
    got = load_recording(tmp_path / "r")
    assert got.complete and len(got.transitions) == 1000
    assert "perturbation_on" not in set(got.events["kind"])


def test_a_bad_value_is_refused_at_the_row_that_carries_it(tmp_path):
    s, a, s2 = _stream(2000)
    bad = s2[1000:1500].copy()
    bad[7, 1] = np.nan
    with idt_desk.Recorder(tmp_path / "r", ["x", "v"], ["u"], **PIPE) as rec:
        rec.add(s[:1000], a[:1000], s2[:1000])
        with pytest.raises(ValueError, match=r"s_next of transition 1,007 \(row 7 of this "
                                             r"batch\): v is nan"):
            rec.add(s[1000:1500], a[1000:1500], bad)
        with pytest.raises(ValueError, match=r"episode.*whole numbers"):
            rec.add(s[1000:1500], a[1000:1500], s2[1000:1500], episode=1.5)
        assert rec.n_added == 1000  # nothing of the refused calls is kept
        rec.add(s[1000:], a[1000:], s2[1000:])
    got = load_recording(tmp_path / "r")
    assert got.complete and len(got.transitions) == 2000
    np.testing.assert_array_equal(got.transitions[["s_next_0", "s_next_1"]], s2)


def test_a_full_disk_refuses_rows_until_there_is_room_and_tears_nothing(tmp_path, monkeypatch):
    """The loop catches the error and goes on: every row it got accepted is recorded once."""
    import errno
    import os

    from idt_desk.recordings import files

    real = os.write

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    s, a, s2 = _stream(6000)
    kept = []
    with idt_desk.Recorder(tmp_path / "r", ["x", "v"], ["u"], chunk=200, **PIPE) as rec:
        for lo in range(0, 6000, 200):
            if lo == 2000:
                monkeypatch.setattr(files.os, "write", full)
            if lo == 4000:
                monkeypatch.setattr(files.os, "write", real)  # room again
                assert until(lambda: rec.session.sink.error is None)
            try:
                rec.add(s[lo:lo + 200], a[lo:lo + 200], s2[lo:lo + 200])
                kept.append(lo)
                if lo >= 2000 and lo < 4000:
                    rec.flush()
            except idt_desk.RecordingError as exc:
                assert "disk is full" in str(exc)
    assert len(kept) < 30  # some were refused while the disk was full
    got = load_recording(tmp_path / "r")
    assert got.complete, got.warnings
    want = np.concatenate([s[lo:lo + 200] for lo in kept])
    np.testing.assert_array_equal(got.transitions[["s_0", "s_1"]].to_numpy(), want)


def test_a_nan_observation_is_refused_at_its_step(tmp_path):
    import gymnasium as gym

    from idt_desk.gym import IDTMonitor

    env = IDTMonitor(gym.make("Pendulum-v1"), window=50, stride=10, calibration_windows=2)
    env.reset(seed=0)
    for _ in range(30):
        env.step(env.action_space.sample())
    with pytest.raises(ValueError, match=r"a of transition 30 .*act_0 is nan"):
        env.step(np.array([np.nan], dtype=np.float32))
    env.close()
