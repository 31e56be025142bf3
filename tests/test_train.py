"""Training the shipped policies: model card, checkpoints and resume (tiny runs)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from idt_desk_sources.gym.runs import progress
from idt_desk_sources.gym.train import policy_name, train

from tests.float32_bound import linear_layers, mlp_bound, squashed_action

#: A one-joint MuJoCo env (4 observations, 1 torque in [-3, 3]): an untrained agent's card
#: episodes end in dozens of steps. For what is the trainer's, not HalfCheetah's (exports,
#: checkpoints, statistics, envs stepped together); the HalfCheetah tests keep its gait.
SMALL_ENV = {"env_id": "InvertedPendulum-v5"}
#: SMALL_ENV's torque bounds are ±3: a tanh-squashed action is 3 tanh(mean).
SMALL_SCALE = 3.0


def exact_action(model, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An SB3 SAC/TQC actor's deterministic action computed exactly (float64) from its
    weights, and how far a float32 evaluation of it may lie (tests/float32_bound.py): JAX
    and torch, batched or row by row, each sum in their own order."""
    layers = linear_layers(model.actor.latent_pi) + linear_layers(model.actor.mu)
    return squashed_action(layers, obs, SMALL_SCALE)


def assert_within(actual, expected, tolerance) -> None:
    """|actual − expected| within a derived tolerance, element by element."""
    gap = np.abs(np.asarray(actual, np.float64) - np.asarray(expected, np.float64))
    worst = np.unravel_index(np.argmax(gap - tolerance), gap.shape)
    assert np.all(gap <= tolerance), (
        f"{gap[worst]:.3g} apart at {worst}, beyond the float32 bound {tolerance[worst]:.3g}")


def test_train_writes_policy_and_card_and_resumes(tmp_path):
    ckpt = tmp_path / "ckpt"
    out = tmp_path / "policies"
    env = SMALL_ENV
    path = train("ppo", 3, 2048, out, checkpoint_dir=ckpt, checkpoint_minutes=60.0,
                 eval_episodes=2, command="test", **env)
    assert path == out / f"{policy_name('InvertedPendulum-v5', 'ppo', 3)}.zip" and path.exists()
    card = json.loads(path.with_suffix(".json").read_text())
    assert card["algorithm"] == "PPO" and card["seed"] == 3 and card["steps"] == 2048
    assert card["return_stochastic"]["episodes"] == 2
    assert card["versions"]["stable_baselines3"] != "?" and card["command"] == "test"
    state = json.loads((ckpt / "state.json").read_text())
    assert state["steps"] == 2048 and (ckpt / "model.zip").exists()
    # A second run without --resume refuses to overwrite the checkpoint...
    with pytest.raises(FileExistsError):
        train("ppo", 3, 4096, out, checkpoint_dir=ckpt, eval_episodes=1, **env)
    # ...and with it continues from 2,048 steps rather than starting again.
    train("ppo", 3, 4096, out, checkpoint_dir=ckpt, resume=True, eval_episodes=1, **env)
    card2 = json.loads(path.with_suffix(".json").read_text())
    assert card2["steps"] == 4096 and card2["wall_seconds"] >= card["wall_seconds"]
    assert json.loads((ckpt / "state.json").read_text())["steps"] == 4096


def test_upside_down_share_reads_the_torso_pitch(monkeypatch):
    import gymnasium as gym
    from idt_desk_sources.gym.cards import rollouts

    class Still:
        def predict(self, obs, deterministic=False):
            return np.zeros(6, np.float32), None

    returns, flipped = rollouts(Still(), "HalfCheetah-v5", 1, seed=0, deterministic=True)
    assert len(returns) == 1 and flipped == 0.0
    # The same body laid on its back at reset (pitch π) stays there with zero torques.
    make = gym.make

    def on_its_back(env_id):
        env = make(env_id)
        reset = env.reset

        def flipped_reset(**kw):
            _, info = reset(**kw)
            u = env.unwrapped
            qpos, qvel = u.data.qpos.copy(), u.data.qvel.copy()
            qpos[1], qpos[2] = 0.3, np.pi
            u.set_state(qpos, qvel)
            return u._get_obs(), info

        env.reset = flipped_reset
        return env

    # Reacher's qpos[2] is its target's x, not a pitch: no share, and none said.
    class Still2(Still):
        def predict(self, obs, deterministic=False):
            return np.zeros(2, np.float32), None

    _, flipped = rollouts(Still2(), "Reacher-v5", 1, seed=0, deterministic=True)
    assert np.isnan(flipped)
    from idt_desk_sources.gym.cards import upside_down

    assert upside_down({"upside_down_share": flipped}) is None
    assert upside_down({"upside_down_share": 0.25}) == 0.25 and upside_down({}) is None
    monkeypatch.setattr(gym, "make", on_its_back)
    _, flipped = rollouts(Still(), "HalfCheetah-v5", 1, seed=0, deterministic=True)
    assert flipped > 0.9


def test_sbx_trains_resumes_and_exports_an_identical_sb3_sac(tmp_path):
    sbx = pytest.importorskip("sbx")
    import stable_baselines3 as sb3
    import torch

    ckpt, out = tmp_path / "ckpt", tmp_path / "policies"
    train("sac", 5, 400, out, checkpoint_dir=ckpt, checkpoint_steps=200,
          checkpoint_minutes=60.0, eval_episodes=1, trainer="sbx", train_freq=4, **SMALL_ENV)
    first = json.loads((ckpt / "state.json").read_text())
    assert first["steps"] == 400 and [h["steps"] for h in first["history"]] == [200, 400]
    assert first["target_steps"] == 400  # what --progress counts the time to go against
    path = train("sac", 5, 600, out, checkpoint_dir=ckpt, resume=True, eval_episodes=1,
                 trainer="sbx", train_freq=4, **SMALL_ENV)
    card = json.loads(path.with_suffix(".json").read_text())
    assert card["steps"] == 600 and card["algorithm"] == "SAC"
    # The learning curve: one deterministic episode a checkpoint, kept over the resume.
    resumed = json.loads((ckpt / "state.json").read_text())
    history = resumed["history"]
    assert [h["steps"] for h in history] == [200, 400, 600] and resumed["target_steps"] == 600
    # A one-joint cart has no torso pitch to be upside down by: NaN, not 0 (HalfCheetah's
    # share: test_upside_down_share_reads_the_torso_pitch).
    assert all(math.isnan(h["upside_down_share"]) and math.isfinite(h["return_deterministic"])
               for h in history)
    assert card["trainer"].startswith("SBX") and "train_freq=4" in card["hyperparameters"]
    assert math.isnan(card["upside_down_share"]) and "cv" in card["return_deterministic"]
    trained = sbx.SAC.load(ckpt / "model.zip")
    assert trained.num_timesteps == 600 and trained.train_freq.frequency == 4
    shipped = sb3.SAC.load(path, device="cpu")
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    a_jax, _ = trained.predict(obs, deterministic=True)
    a_torch, _ = shipped.predict(obs, deterministic=True)
    exact, bound = exact_action(shipped, obs)
    assert_within(a_torch, exact, bound)
    assert_within(a_jax, exact, bound)
    # The critics too: SB3's Q of (obs, action) equals SBX's for each of the two critics.
    act = np.random.default_rng(1).uniform(-1, 1, size=(64, 1)).astype(np.float32)
    q_jax = np.asarray(trained.policy.qf.apply(trained.policy.qf_state.params, obs, act))
    with torch.no_grad():
        q_torch = [q.numpy() for q in shipped.critic(torch.as_tensor(obs), torch.as_tensor(act))]
    for k, net in enumerate(shipped.critic.q_networks):
        _, d = mlp_bound(linear_layers(net), np.concatenate([obs, act], axis=1))
        assert_within(q_torch[k][..., 0], q_jax[k, :, 0], 2 * d[:, 0])
    assert shipped.log_ent_coef.item() == pytest.approx(
        float(trained.ent_coef_state.params["log_ent_coef"]), abs=1e-6)


def test_sbx_refuses_ppo(tmp_path):
    pytest.importorskip("sbx")
    with pytest.raises(ValueError, match="SAC and TQC only"):
        train("ppo", 0, 100, tmp_path, checkpoint_dir=tmp_path / "c", trainer="sbx")


def test_sbx_tqc_exports_an_identical_sb3_contrib_tqc_that_the_source_acts_with(tmp_path):
    sbx = pytest.importorskip("sbx")
    import sb3_contrib
    import torch
    from idt_desk_sources.gym._policy import FrozenPolicy, algorithm_of

    ckpt, out = tmp_path / "ckpt", tmp_path / "policies"
    path = train("tqc", 3, 400, out, checkpoint_dir=ckpt, checkpoint_minutes=60.0,
                 eval_episodes=1, trainer="sbx", train_freq=4, **SMALL_ENV)
    card = json.loads(path.with_suffix(".json").read_text())
    assert card["algorithm"] == "TQC" and card["hyperparameters"].startswith("sb3-contrib")
    assert algorithm_of(path) == "TQC"
    trained = sbx.TQC.load(ckpt / "model.zip")
    shipped = sb3_contrib.TQC.load(path, device="cpu")
    assert shipped.top_quantiles_to_drop_per_net == trained.policy.top_quantiles_to_drop_per_net
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(64, 4)).astype(np.float32)
    act = rng.uniform(-1, 1, size=(64, 1)).astype(np.float32)
    a_jax, _ = trained.predict(obs, deterministic=True)
    a_torch, _ = shipped.predict(obs, deterministic=True)
    exact, bound = exact_action(shipped, obs)
    assert_within(a_torch, exact, bound)
    assert_within(a_jax, exact, bound)
    # Every critic's 25 quantiles, online and target, as SBX computes them.
    pol = trained.policy
    with torch.no_grad():
        q_torch = shipped.critic(torch.as_tensor(obs), torch.as_tensor(act)).numpy()
        t_torch = shipped.critic_target(torch.as_tensor(obs), torch.as_tensor(act)).numpy()
    rows = np.concatenate([obs, act], axis=1)
    for k, state in enumerate((pol.qf1_state, pol.qf2_state)):
        q_jax = np.asarray(pol.qf.apply(state.params, obs, act))
        t_jax = np.asarray(pol.qf.apply(state.target_params, obs, act))
        _, d = mlp_bound(linear_layers(shipped.critic.q_networks[k]), rows)
        assert_within(q_torch[:, k], q_jax, 2 * d)
        _, d = mlp_bound(linear_layers(shipped.critic_target.q_networks[k]), rows)
        assert_within(t_torch[:, k], t_jax, 2 * d)
    assert not np.allclose(q_torch[:, 0], q_torch[:, 1])  # two critics, not one copied
    # The frozen source loads the zip as TQC and acts as the policy does: row by row (its
    # act_many), where predict sums the batch's product in another order.
    frozen = FrozenPolicy(path, (4,), -3 * np.ones(1), 3 * np.ones(1))
    assert frozen.algorithm == "TQC"
    gen = [np.random.default_rng(0)] * len(obs)
    assert_within(frozen.act_many(obs, gen, deterministic=True), exact, bound)


def test_normalize_checkpoints_and_ships_the_vecnormalize_statistics(tmp_path):
    sbx = pytest.importorskip("sbx")
    import pickle

    from idt_desk_sources.gym._policy import FrozenPolicy, find_vecnormalize

    def load(path):
        with open(path, "rb") as f:
            return pickle.load(f)

    ckpt, out = tmp_path / "ckpt", tmp_path / "policies"
    train("sac", 6, 300, out, checkpoint_dir=ckpt, checkpoint_minutes=60.0, eval_episodes=1,
          trainer="sbx", train_freq=4, normalize=True, learning_starts=250, **SMALL_ENV)
    assert json.loads((ckpt / "state.json").read_text())["normalize"] is True
    first = load(ckpt / "vecnormalize.pkl")
    # Resumed the other way round, the run refuses rather than losing its statistics.
    with pytest.raises(ValueError, match="with --normalize"):
        train("sac", 6, 400, out, checkpoint_dir=ckpt, resume=True, eval_episodes=1,
              trainer="sbx", train_freq=4, **SMALL_ENV)
    path = train("sac", 6, 500, out, checkpoint_dir=ckpt, resume=True, eval_episodes=1,
                 trainer="sbx", train_freq=4, normalize=True, **SMALL_ENV)
    stats = load(ckpt / "vecnormalize.pkl")
    # The statistics carried over the resume and went on counting: 200 more observations.
    assert stats.obs_rms.count == pytest.approx(first.obs_rms.count + 200, abs=2)
    assert stats.norm_obs and stats.norm_reward and stats.clip_obs == 10.0
    card = json.loads(path.with_suffix(".json").read_text())
    assert "VecNormalize" in card["hyperparameters"]
    # The authors' 10,000 random steps before the first update, as a setting kept over resume.
    assert "learning_starts=250" in card["hyperparameters"]
    assert sbx.SAC.load(ckpt / "model.zip").learning_starts == 250
    with pytest.raises(ValueError, match="a resumed run keeps it"):
        train("sac", 6, 600, out, checkpoint_dir=ckpt, resume=True, eval_episodes=1,
              trainer="sbx", train_freq=4, normalize=True, learning_starts=10_000, **SMALL_ENV)
    with pytest.raises(ValueError, match="PPO has none"):
        train("ppo", 0, 100, out, checkpoint_dir=tmp_path / "p", learning_starts=10)
    shipped = find_vecnormalize(path)
    assert shipped == path.with_name(f"{path.stem}_vecnormalize.pkl")
    # The frozen source normalises as the trained model saw its observations.
    trained = sbx.SAC.load(ckpt / "model.zip")
    obs = np.random.default_rng(0).normal(size=(32, 4)) * 3.0
    a_jax, _ = trained.predict(stats.normalize_obs(obs).astype(np.float32), deterministic=True)
    frozen = FrozenPolicy(path, (4,), -3 * np.ones(1), 3 * np.ones(1))
    assert frozen.vecnormalize == str(shipped)
    normalized = stats.normalize_obs(obs).astype(np.float32)
    exact, bound = exact_action(frozen.model, normalized)
    assert_within(a_jax, exact, bound)
    assert_within(frozen.act_many(obs, [np.random.default_rng(0)] * 32, True), exact, bound)
    # Without the statistics the same zip acts differently: they matter.
    raw, _ = trained.predict(obs.astype(np.float32), deterministic=True)
    assert np.abs(raw - a_jax).max() > 1e-3


def test_the_nudge_probe_tells_a_settled_loop_from_a_chaotic_one():
    from idt_desk_sources.gym.cards import NUDGE, NUDGE_SMALL, nudge_growth

    # Stand-ins for a model's predict: one observation or a batch (the probe asks for both
    # copies at once), as SB3's.
    class Still:  # zero torques: the body comes to rest and a push dies away
        def predict(self, obs, deterministic=False):
            return np.zeros((*np.shape(obs)[:-1], 6), np.float32), None

    class Jumpy:  # torques that flip with the 4th decimal of the state: any push is amplified
        def predict(self, obs, deterministic=False):
            return np.sign(np.sin(1e4 * np.asarray(obs)[..., :6])).astype(np.float32), None

    still = nudge_growth(Still(), "HalfCheetah-v5", 2, seed=0)
    jumpy = nudge_growth(Jumpy(), "HalfCheetah-v5", 2, seed=0)
    assert len(still) == len(jumpy) == 2
    assert max(still) < np.log10(NUDGE)  # smaller than the push itself
    assert min(jumpy) > np.log10(NUDGE_SMALL)


def test_a_checkpoint_pickled_under_another_jax_resumes_with_its_weights(tmp_path, capsys):
    """SB3 reads an item it cannot unpickle as a fresh one and only warns: here a name that
    this JAX lacks (as jax 0.11's ``jax._src.api.Inline`` under 0.10) sits inside the pickled
    policy, and the resumed model must act as the trained one, not from random weights."""
    sbx = pytest.importorskip("sbx")
    import sys
    import types

    import stable_baselines3 as sb3

    ckpt, out = tmp_path / "ckpt", tmp_path / "policies"
    train("sac", 7, 300, out, checkpoint_dir=ckpt, checkpoint_minutes=60.0, eval_episodes=1,
          trainer="sbx", train_freq=4, learning_starts=100, **SMALL_ENV)
    trained = sbx.SAC.load(ckpt / "model.zip")
    obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    expected, _ = trained.predict(obs, deterministic=True)
    # Write the checkpoint again with an object of a class that the module it names lacks
    # when the checkpoint is read.
    ghost_mod = types.ModuleType("idt_ghost_jax")
    ghost_mod.__file__ = "idt_ghost_jax.py"  # importable, so pickled by reference

    class Inline:
        pass

    Inline.__module__, Inline.__qualname__ = "idt_ghost_jax", "Inline"
    ghost_mod.Inline = Inline
    sys.modules["idt_ghost_jax"] = ghost_mod
    try:
        trained.policy.ghost = Inline()
        trained.save(ckpt / "model.zip")
        del ghost_mod.Inline
        with pytest.warns(UserWarning, match="Could not deserialize object policy"):
            fresh = sbx.SAC.load(ckpt / "model.zip")
        lost, _ = fresh.predict(obs, deterministic=True)
        assert np.abs(lost - expected).max() > 1e-2  # SB3 alone: the weights are gone
        path = train("sac", 7, 300, out, checkpoint_dir=ckpt, resume=True, eval_episodes=1,
                     trainer="sbx", train_freq=4, **SMALL_ENV)
        assert "idt_ghost_jax.Inline" in capsys.readouterr().err
        shipped = sb3.SAC.load(path, device="cpu")
        exact, bound = exact_action(shipped, obs)
        assert_within(expected, exact, bound)
        assert_within(shipped.predict(obs, deterministic=True)[0], exact, bound)
        # Training goes on from there: the optimiser's state came along, its step count too.
        from idt_desk_sources.gym.jax_models import load_checkpoint

        model = load_checkpoint(sbx.SAC, ckpt / "model.zip", None)
        assert int(model.policy.actor_state.step) == int(trained.policy.actor_state.step) > 0
    finally:
        del sys.modules["idt_ghost_jax"]


def test_envs_stepped_together_keep_one_update_per_transition_and_their_count(tmp_path):
    sbx = pytest.importorskip("sbx")

    ckpt, out = tmp_path / "ckpt", tmp_path / "policies"
    train("sac", 8, 400, out, checkpoint_dir=ckpt, checkpoint_minutes=60.0, eval_episodes=1,
          trainer="sbx", train_freq=2, normalize=True, learning_starts=100, n_envs=3,
          **SMALL_ENV)
    state = json.loads((ckpt / "state.json").read_text())
    assert state["n_envs"] == 3 and state["steps"] >= 400
    model = sbx.SAC.load(ckpt / "model.zip")
    # Two steps of three envs, then six gradient steps: one update per transition.
    assert model.n_envs == 3 and model.train_freq.frequency == 2 and model.gradient_steps == 6
    assert model._n_updates == pytest.approx(model.num_timesteps - 100, abs=6)
    with pytest.raises(ValueError, match="keeps the count"):
        train("sac", 8, 600, out, checkpoint_dir=ckpt, resume=True, eval_episodes=1,
              trainer="sbx", normalize=True, n_envs=1, **SMALL_ENV)
    # Resumed without saying, it takes the checkpoint's count and its replay buffer.
    path = train("sac", 8, 600, out, checkpoint_dir=ckpt, resume=True, eval_episodes=1,
                 trainer="sbx", normalize=True, **SMALL_ENV)
    card = json.loads(path.with_suffix(".json").read_text())
    assert card["n_envs"] == 3 and card["steps"] >= 600
    assert "3 envs stepped together, train_freq=2 and gradient_steps=6" in card["hyperparameters"]
    resumed = sbx.SAC.load(ckpt / "model.zip")
    resumed.load_replay_buffer(ckpt / "replay.pkl")
    assert resumed.replay_buffer.n_envs == 3 and resumed.replay_buffer.size() * 3 >= 600
    assert math.isfinite(card["return_deterministic"]["mean"])


def test_progress_says_where_each_run_stands_from_its_checkpoint(tmp_path):
    import os

    from .cli_call import call

    def run(name, state, age):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "state.json").write_text(json.dumps(state))
        t = 1_000_000.0 - age
        os.utime(folder / "state.json", (t, t))

    run("sac-seed1", {"steps": 1_250_000, "wall_seconds": 3 * 3600 + 7 * 60, "normalize": True,
                      "target_steps": 2_000_000,
                      "history": [
                          {"steps": 1_200_000, "return_deterministic": 12_100.0,
                           "upside_down_share": 0.0, "nudge_log10": -5.4},
                          {"steps": 1_225_000, "return_deterministic": 12_480.5,
                           "upside_down_share": 0.0, "nudge_log10": 1.2},
                          {"steps": 1_250_000, "return_deterministic": 12_300.0,
                           "upside_down_share": 0.02, "nudge_log10": 0.4}]}, age=180)
    run("tqc-seed0", {"steps": 25_000, "wall_seconds": 600, "n_envs": 4, "history": []},
        age=2 * 3600)
    run("broken", {"steps": "many"}, age=0)
    # An env with no torso pitch (its share NaN, as JSON writes it): nothing said of it.
    run("zz-reacher", {"steps": 5000, "wall_seconds": 60, "history": [
        {"steps": 5000, "return_deterministic": -4.0, "upside_down_share": float("nan"),
         "nudge_log10": None}]}, age=60)
    lines = progress(tmp_path, now=1_000_000.0)
    assert lines[3] == ("zz-reacher: 5,000 steps in 1 min; last checkpoint 1 min ago; episode "
                        "at 5,000: -4; best -4 at 5,000; settled at 0 of 0 checkpoints")
    assert lines[0].startswith("broken: unreadable state.json")
    assert lines[1] == (
        "sac-seed1 (VecNormalize): 1,250,000 of 2,000,000 steps in 3 h 07 min, about 1 h 52 min "
        "to go at its pace so far; last checkpoint 3 min ago; episode at 1,250,000: 12,300 (2% "
        "upside down, push log10 +0.4: chaotic); best 12,480 at 1,225,000; settled at 1 of 3 "
        "checkpoints")
    # A checkpoint from before the target was recorded: no "of", no time to go.
    assert lines[2] == "tqc-seed0 (4 envs): 25,000 steps in 10 min; last checkpoint 2 h 00 min ago"
    # The command: one folder's runs, an empty folder said so, a missing one refused.
    rc, out, _ = call(["train", "--progress", str(tmp_path)])
    assert rc == 0 and out.count("\n") == 4 and "settled at 1 of 3" in out
    (tmp_path / "empty").mkdir()
    rc, out, _ = call(["train", "--progress", str(tmp_path / "empty")])
    assert rc == 0 and "no training run in" in out
    rc, _, err = call(["train", "--progress", str(tmp_path / "nope")])
    assert rc == 2 and "no such folder" in err


def test_the_cards_predictor_is_sb3s_predict_bit_for_bit():
    """Cards evaluate thousands of steps through :func:`predictor`: the same actions as
    SB3's own ``predict``, deterministic and sampled (the same draws of torch's generator),
    a VecNormalize in front or not."""
    import glob

    import torch
    from idt_desk_sources.gym.cards import NormalizedActor, predictor
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common.running_mean_std import RunningMeanStd

    class Stats:  # VecNormalize's normalize_obs, with running statistics of its own
        def __init__(self, rms):
            self.rms = rms

        def normalize_obs(self, obs):
            return np.clip((obs - self.rms.mean) / np.sqrt(self.rms.var + 1e-8), -10, 10)

    rng = np.random.default_rng(0)
    rms = RunningMeanStd(shape=(17,))
    rms.update(rng.normal(1.0, 2.0, (100, 17)))
    obs = rng.normal(size=(100, 17))
    for pattern, cls in (("*sac-seed3.zip", SAC), ("*ppo-seed0.zip", PPO)):
        here = Path(__file__).resolve().parents[1] / "assets" / "policies"
        (path,) = glob.glob(f"{here}/halfcheetah-v5-{pattern}")
        model = cls.load(path, device="cpu", **({"buffer_size": 1} if cls is SAC else {}))
        for actor in (model, NormalizedActor(model, Stats(rms))):
            fast = predictor(actor)
            for deterministic in (True, False):
                torch.manual_seed(1)
                want = [actor.predict(o, deterministic=deterministic)[0] for o in obs]
                torch.manual_seed(1)
                got = [fast(o, deterministic) for o in obs]
                assert all(np.array_equal(w, g) and w.dtype == g.dtype
                           for w, g in zip(want, got, strict=True))
            # A batch of observations: one action a row, as SB3's predict gives them.
            torch.manual_seed(1)
            want = actor.predict(obs[:8], deterministic=True)[0]
            got = fast(obs[:8], True)
            assert got.shape == want.shape == (8, model.action_space.shape[0])
            np.testing.assert_array_equal(got, want)
