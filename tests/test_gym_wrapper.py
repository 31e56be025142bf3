"""idt_desk.gym: the IDTMonitor wrapper and the SB3 IDTCallback on non-MuJoCo envs."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest
from gymnasium import spaces

from idt_desk import WINDOW_KEYS, Symbolizer, sliding_metrics, window_means
from idt_desk.gym import IDT_COLUMNS, IDTMonitor


def _drive(env: gym.Env, steps: int, seed: int) -> SimpleNamespace:
    """Run seeded random actions, logging (S, A, S') ourselves, and each step's info["idt"]."""
    env.action_space.seed(seed)
    log: dict[str, list] = {k: [] for k in ("s", "a", "n", "r", "ep", "idt", "done")}
    obs, _ = env.reset(seed=seed)
    ep = 0
    for _ in range(steps):
        a = env.action_space.sample()
        nxt, r, term, trunc, info = env.step(a)
        for key, v in (("s", obs), ("a", a), ("n", nxt), ("r", r), ("ep", ep),
                       ("idt", info.get("idt")), ("done", term or trunc)):
            log[key].append(v)
        obs = nxt
        if term or trunc:
            obs, _ = env.reset()
            ep += 1
    out = {k: np.array(v) for k, v in log.items() if k != "idt"}
    return SimpleNamespace(**out, idt=log["idt"])


def _offline(log: SimpleNamespace, need: int, window: int, stride: int, bins: int,
             discrete_action: bool, correction: str | None = None) -> dict[str, np.ndarray]:
    """The windows computed offline from the logged transitions (as `idt-desk analyze`)."""
    s_rows = log.s.reshape(len(log.s), -1)
    n_rows = log.n.reshape(len(log.n), -1)
    sym = Symbolizer(s_rows.shape[1], bins).fit(s_rows[:need])
    s, out_s = sym.symbolize(s_rows)
    n, out_n = sym.symbolize(n_rows)
    out = out_s | out_n
    if discrete_action:
        a = log.a.astype(np.int64)  # each action its own symbol
    else:
        a_rows = log.a.reshape(len(log.a), -1)
        a, out_a = Symbolizer(a_rows.shape[1], bins).fit(a_rows[:need]).symbolize(a_rows)
        out |= out_a
    ref = sliding_metrics(s, n, a, window=window, stride=stride, correction=correction)
    ref["end"] = ref["start"] + window
    ref["episode"] = log.ep[ref["end"] - 1]
    ref["reward"] = window_means(log.r, ref["start"], window)
    ref["out_of_range"] = window_means(out, ref["start"], window)
    return ref


def _assert_windows_equal(got: pd.DataFrame, ref: dict[str, np.ndarray]) -> None:
    assert list(got.columns) == list(IDT_COLUMNS)
    assert len(got) == len(ref["start"]) > 0
    for key in (*WINDOW_KEYS, "end", "episode"):
        np.testing.assert_array_equal(got[key].to_numpy(), ref[key], err_msg=key)
    for key in ("reward", "out_of_range"):
        np.testing.assert_allclose(got[key].to_numpy(), ref[key], rtol=1e-12, atol=1e-12,
                                   err_msg=key)


def test_import_is_light():
    code = (
        "import sys, idt_desk\n"
        "assert 'idt_desk.gym' not in sys.modules\n"
        "import idt_desk.gym\n"
        "heavy = [m for m in ('torch', 'stable_baselines3') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cartpole_windows_equal_offline_and_info_after_calibration():
    W, stride, cw = 300, 50, 20  # the generic preset's window and stride, the default cw
    need = W + (cw - 1) * stride
    env = IDTMonitor(gym.make("CartPole-v1"))
    assert (env.preset.window, env.preset.stride) == (W, stride)
    assert env.monitor.spec.kind == "mewma"  # the gym source's default alarm and budget
    assert str(env.monitor.budget) == "≤ 1 false alarm / 10 hours"
    log = _drive(env, 3000, seed=1)
    assert log.done.sum() > 50  # many episode boundaries inside the windows
    _assert_windows_equal(env.windows, _offline(log, need, W, stride, env.preset.bins,
                                                discrete_action=True))

    # info["idt"]: absent before calibration, then the latest finished window, every step.
    first = next(i for i, v in enumerate(log.idt) if v is not None)
    assert first == need - 1 and all(v is None for v in log.idt[:first])
    assert log.idt[first]["end"] == need
    for i in range(first, len(log.idt)):
        info = log.idt[i]
        n_done = i + 1
        assert info["end"] == need + (n_done - need) // stride * stride
        assert {"P", "H_f", "H_b", "dH", "unique_frac", "start", "episode"} <= set(info)
        assert all(isinstance(info[k], float) for k in ("P", "H_f", "H_b", "dH"))
        assert isinstance(info["end"], int)
    last = env.windows.iloc[-1]
    assert log.idt[-1]["P"] == last["P"] and env.latest["end"] == last["end"]
    assert env.n_transitions == 3000


@pytest.mark.parametrize("block", [None, 500])
def test_pendulum_box_action_overrides_equal_offline(block):
    W, stride, cw, bins = 200, 40, 3, 6
    env = IDTMonitor(gym.make("Pendulum-v1"), bins=bins, window=W, stride=stride,
                     calibration_windows=cw, correction="miller-madow", block=block)
    log = _drive(env, 1500, seed=2)
    assert log.done.sum() == 1500 // 200  # truncated episodes of 200 steps
    ref = _offline(log, W + (cw - 1) * stride, W, stride, bins, discrete_action=False,
                   correction="miller-madow")
    _assert_windows_equal(env.windows, ref)
    ends = {v["end"] for v in log.idt if v is not None}
    if block is None:
        assert ends == set(ref["end"][cw - 1:].tolist())  # every window, on its last step
    else:
        # Blocks of >= 500 transitions: info["idt"] changes less often and lags; `windows`
        # (flushing what is buffered) still has every window.
        assert len(ends) < len(ref["end"]) - cw + 1 and ends <= set(ref["end"].tolist())
        assert log.idt[-1]["end"] < ref["end"][-1]


def _spy(env: IDTMonitor) -> list[tuple]:
    seen: list[tuple] = []
    add = env._stream.add

    def record(s, a, s_next, reward, episode):
        seen.append((np.array(s), a, np.array(s_next), episode))
        return add(s, a, s_next, reward, episode)

    env._stream.add = record
    return seen


def test_episode_boundaries_terminal_obs_is_s_next():
    env = IDTMonitor(gym.make("CartPole-v1"), window=50, stride=25, calibration_windows=1)
    seen = _spy(env)
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    ends = 0
    for _ in range(400):
        nxt, _, term, trunc, _ = env.step(env.action_space.sample())
        s, _, s_next, ep = seen[-1]
        np.testing.assert_array_equal(s, obs)
        np.testing.assert_array_equal(s_next, nxt)  # at an episode end: the terminal obs
        assert ep == env.episode
        obs = nxt
        if term or trunc:
            ends += 1
            obs, _ = env.reset()
            assert env.episode == ends
    assert ends > 5 and len(seen) == 400
    # Never across episodes: within an episode each S is the previous S'.
    for (_, _, prev_next, ep0), (s, _, _, ep1) in itertools.pairwise(seen):
        if ep0 == ep1:
            np.testing.assert_array_equal(s, prev_next)


def test_env_that_resets_itself_mixes_no_episodes():
    # Gymnasium's next-step autoreset: the step after an episode end returns a reset obs.
    env = IDTMonitor(gym.wrappers.Autoreset(gym.make("CartPole-v1")), window=50, stride=25,
                     calibration_windows=1)
    seen = _spy(env)
    env.action_space.seed(3)
    env.reset(seed=3)
    dones = 0
    for _ in range(300):
        *_, term, trunc, _ = env.step(env.action_space.sample())
        dones += term or trunc
    assert dones > 3
    assert env.n_transitions == len(seen) == 300 - dones + (1 if term or trunc else 0)
    assert env.episode == dones - (1 if term or trunc else 0)
    for (_, _, prev_next, ep0), (s, _, _, ep1) in itertools.pairwise(seen):
        if ep0 == ep1:
            np.testing.assert_array_equal(s, prev_next)
        else:
            assert ep1 == ep0 + 1


def test_discrete_action_values_are_their_own_symbols():
    env = IDTMonitor(gym.make("Acrobot-v1"), bins=2, window=100, stride=100,
                     calibration_windows=1)
    _drive(env, 500, seed=4)
    w = env.windows
    assert len(w) == 5
    assert (w["K_A"] == 3).all()  # three actions, three symbols, although bins=2
    assert env.symbolizers[1].bins.tolist() == [3]
    # bins=1 is refused, as the command line and the window refuse it.
    with pytest.raises(ValueError, match="bins 1: must be an integer from 2 to 65,536"):
        IDTMonitor(gym.make("CartPole-v1"), bins=1)


def test_preset_mismatch_and_bad_spaces_raise():
    with pytest.raises(ValueError, match=r"expects 17 state variables and 6 action.*"
                                         r"4 observation variables.*1 action variables"):
        IDTMonitor(gym.make("CartPole-v1"), preset="cheetah")
    with pytest.raises(ValueError, match="unknown preset 'nope'"):
        IDTMonitor(gym.make("CartPole-v1"), preset="nope")
    with pytest.raises(ValueError, match="window 1: must be an integer from 2 to 100,000"):
        IDTMonitor(gym.make("CartPole-v1"), window=1)
    with pytest.raises(ValueError, match="calibration_windows"):
        IDTMonitor(gym.make("CartPole-v1"), calibration_windows=0)

    class Toy(gym.Env):
        def __init__(self, obs, act):
            self.observation_space, self.action_space = obs, act

    box = spaces.Box(-1.0, 1.0, (2,))
    with pytest.raises(ValueError, match=r"Box or Discrete observation space.*Dict"):
        IDTMonitor(Toy(spaces.Dict({"x": box}), spaces.Discrete(2)))
    with pytest.raises(ValueError, match=r"Box or Discrete action space.*MultiDiscrete"):
        IDTMonitor(Toy(box, spaces.MultiDiscrete([2, 3])))
    with pytest.raises(gym.error.ResetNeeded):
        IDTMonitor(Toy(box, spaces.Discrete(2))).step(0)


def test_sb3_callback_logs_idt_and_matches_the_wrapper(tmp_path):
    torch = pytest.importorskip("torch")
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure

    from idt_desk.gym import IDTCallback

    opts = {"window": 200, "stride": 50, "calibration_windows": 5}
    # Each training env also wrapped in an IDTMonitor: the callback, reading SB3's locals,
    # must see exactly the transitions the wrapper sees inside the env.
    venv = make_vec_env("CartPole-v1", n_envs=2, seed=0, wrapper_class=IDTMonitor,
                        wrapper_kwargs=opts)
    callback = IDTCallback(every=1024, **opts)
    assert isinstance(callback, BaseCallback)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        # One epoch of one batch per rollout: the test is about the rollouts, not learning.
        model = PPO("MlpPolicy", venv, n_steps=256, batch_size=512, n_epochs=1, seed=0,
                    device="cpu")
        model.set_logger(configure(str(tmp_path), ["csv"]))
        model.learn(total_timesteps=3072, callback=callback)
    finally:
        torch.set_num_threads(threads)

    assert callback.n_envs == 2
    for i in range(2):
        monitor = venv.envs[i]
        assert isinstance(monitor, IDTMonitor)
        got, want = callback.windows(i), monitor.windows
        assert len(got) >= 20
        pd.testing.assert_frame_equal(got, want, check_exact=True)

    progress = pd.read_csv(tmp_path / "progress.csv")
    for key in ("idt/P", "idt/H_f", "idt/H_b", "idt/dH", "idt/unique_frac"):
        values = progress[key].dropna()
        assert len(values) >= 3 and np.isfinite(values).all(), key
    p = progress["idt/P"].dropna()
    assert ((p > 0) & (p < 1)).all()
    # every=1024: the callback's own dumps (rows without PPO's time/iterations) carry idt/*.
    own = progress[progress["time/iterations"].isna()]
    assert len(own) >= 1 and own["idt/P"].notna().all()
    venv.close()


def test_the_wrapper_judges_against_the_episode_phase_when_asked(tmp_path):
    """``phase_baseline=True``: the monitor has one baseline per phase of Pendulum-v1's
    200-step episodes (20 strides of 10), and its recording replays with the same phased
    monitor; an env without a time limit is refused in one line."""
    env = IDTMonitor(gym.make("Pendulum-v1"), window=40, stride=10, calibration_windows=2,
                     baseline_windows=200, phase_baseline=True, record=tmp_path / "rec")
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(3000):
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            env.reset(seed=int(rng.integers(1 << 30)))
    env.close()
    mon = env.monitor
    assert mon.phased and mon.phase_baseline is not None
    assert sorted(mon.phase_baseline.count) == list(range(20))
    config = json.loads((tmp_path / "rec" / "config.json").read_text())
    assert config["session"]["phase_baseline"] is True
    assert config["source"]["episode_steps"] == 200
    default = IDTMonitor(gym.make("Pendulum-v1"))
    assert not default.monitor.phased  # off unless asked
    default.close()
    with pytest.raises(ValueError, match="no episodes of a set length"):
        IDTMonitor(gym.make("Pendulum-v1", max_episode_steps=None).unwrapped,
                   phase_baseline=True)
