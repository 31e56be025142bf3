"""Training in phases: a run measured as it stands, a new phase from a checkpoint, the settled
checkpoint kept apart, Ctrl-C (tiny runs; ``test_train.py`` has the card and the trainers)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from idt_desk_sources.gym.cards import upside_down
from idt_desk_sources.gym.runs import progress
from idt_desk_sources.gym.train import train

#: What these tests show (checkpoints, phases, seeds, a stop) is the trainer's, not the env's:
#: a one-joint MuJoCo env whose untrained episodes end in a few dozen steps makes each
#: card's evaluation short (HalfCheetah's run 1,000 steps each).
ENV = {"env_id": "InvertedPendulum-v5"}


def test_a_run_is_measured_as_it_stands_without_touching_its_checkpoint(tmp_path):
    pytest.importorskip("sbx")
    import hashlib

    ckpt = tmp_path / "ckpt"
    train("sac", 9, 300, tmp_path / "first", checkpoint_dir=ckpt, checkpoint_minutes=60.0,
          eval_episodes=1, trainer="sbx", train_freq=4, normalize=True, learning_starts=100,
          **ENV)

    def digest():
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in ckpt.iterdir()
                if p.is_file()}  # (a barely trained agent may settle: settled/ holds a copy)

    before = digest()
    path = train("sac", 9, 1, tmp_path / "snapshot", checkpoint_dir=ckpt, resume=True,
                 eval_episodes=1, trainer="sbx", normalize=True, **ENV)
    assert digest() == before  # the run goes on from exactly where it was
    card = json.loads(path.with_suffix(".json").read_text())
    assert path.parent == tmp_path / "snapshot" and card["steps"] == 300
    assert path.with_name(f"{path.stem}_vecnormalize.pkl").exists()


def test_a_new_phase_continues_from_a_checkpoint_with_an_empty_replay_buffer(tmp_path):
    """--continue-from: the paper authors' continue_training_sac (SB3 load + learn): weights,
    optimiser and VecNormalize statistics carry over; the buffer and the step count restart."""
    sbx = pytest.importorskip("sbx")
    import pickle

    from idt_desk_sources.gym._policy import FrozenPolicy

    first, second = tmp_path / "first", tmp_path / "second"
    out1, out2 = tmp_path / "p1", tmp_path / "p2"
    kw = {"checkpoint_minutes": 60.0, "eval_episodes": 1, "trainer": "sbx", "train_freq": 4,
          "normalize": True, **ENV}
    p1 = train("sac", 6, 300, out1, checkpoint_dir=first, learning_starts=50, **kw)
    # Within its random steps the new phase makes no update: it acts exactly as the source.
    p2 = train("sac", 6, 100, out2, checkpoint_dir=second, continue_from=first,
               learning_starts=100, **kw)
    model = sbx.SAC.load(second / "model.zip")
    assert model.num_timesteps == 100 and model.learning_starts == 100
    with open(second / "replay.pkl", "rb") as f:
        buffer = pickle.load(f)
    assert buffer.pos == 100 and not buffer.full  # only this phase's transitions
    with open(first / "vecnormalize.pkl", "rb") as f:
        before = pickle.load(f)
    with open(second / "vecnormalize.pkl", "rb") as f:
        after = pickle.load(f)
    assert after.obs_rms.count == pytest.approx(before.obs_rms.count + 100, abs=2)
    obs = np.random.default_rng(0).normal(size=(16, 4))
    acts = [FrozenPolicy(p, (4,), -3 * np.ones(1), 3 * np.ones(1)) for p in (p1, p2)]
    rngs = [np.random.default_rng(0)] * 16
    # Same weights; the statistics moved a little (100 more observations).
    np.testing.assert_allclose(acts[0].policy.actor.mu.weight.detach().numpy(),
                               acts[1].policy.actor.mu.weight.detach().numpy())
    gap = acts[0].act_many(obs, rngs, True) - acts[1].act_many(obs, rngs, True)
    assert np.abs(gap).max() < 1.5  # of actions in [-3, 3]
    state = json.loads((second / "state.json").read_text())
    assert state["continued_from"] == {"checkpoint": str(first), "steps": 300, "train_freq": 4,
                                       "gradient_steps": 4, "learning_starts": 50}
    (line,) = progress(second)
    assert line.startswith("second (VecNormalize, continued from first at 300 steps): 100 ")
    # Resumed, the phase keeps its origin; the card counts both phases' steps.
    p3 = train("sac", 6, 200, out2, checkpoint_dir=second, resume=True, **kw)
    card = json.loads(p3.with_suffix(".json").read_text())
    assert card["steps"] == 500 and card["continued_from"]["steps"] == 300
    assert ("continued from a checkpoint at 300 steps (trained with train_freq=4 and "
            "gradient_steps=4, learning_starts=50) with an empty replay buffer"
            in card["hyperparameters"])
    assert sbx.SAC.load(second / "model.zip").num_timesteps == 200
    assert "train_freq=4 and gradient_steps=4" in card["hyperparameters"]  # the source's
    # A new phase may take another update rhythm (the authors': one update a step); a resumed
    # run keeps its own.
    with pytest.raises(ValueError, match="started with train_freq=4: a resumed run keeps it"):
        train("sac", 6, 300, out2, checkpoint_dir=second, resume=True,
              **{**kw, "train_freq": 1})
    third = tmp_path / "third"
    p4 = train("sac", 6, 120, tmp_path / "p4", checkpoint_dir=third, continue_from=first,
               learning_starts=100, **{**kw, "train_freq": 1})
    model = sbx.SAC.load(third / "model.zip")
    assert (model.train_freq.frequency, model.gradient_steps) == (1, 1)
    # This phase's rhythm is the default; the card still says the source's.
    hyper = json.loads(p4.with_suffix(".json").read_text())["hyperparameters"]
    assert hyper.startswith("stable-baselines3 defaults; continued from "
                            "a checkpoint at 300 steps (trained with train_freq=4 and "
                            "gradient_steps=4, learning_starts=50)"), hyper
    with pytest.raises(ValueError, match="its own --checkpoint-dir"):
        train("sac", 6, 100, out2, checkpoint_dir=first, continue_from=first, **kw)
    with pytest.raises(ValueError, match="no checkpoint there"):
        train("sac", 6, 100, out2, checkpoint_dir=tmp_path / "x", continue_from=tmp_path, **kw)
    with pytest.raises(ValueError, match="continue it the same way"):
        train("sac", 6, 100, out2, checkpoint_dir=tmp_path / "y", continue_from=first,
              **{**kw, "normalize": False})


def test_a_new_phase_takes_its_own_seed_not_the_source_s(tmp_path):
    """Loading a model re-seeds torch, numpy, the envs and the random actions with the seed
    saved in it; a new phase must take the seed it is given, or phases run with different
    seeds are the same run (seen: 15 continuations of two checkpoints gave two runs)."""
    from stable_baselines3 import SAC

    kw = {"checkpoint_minutes": 60.0, "eval_episodes": 1, "normalize": True, **ENV}
    train("sac", 6, 120, tmp_path / "p0", checkpoint_dir=tmp_path / "first", learning_starts=50,
          **kw)
    weights = {}
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        train("sac", seed, 120, tmp_path / f"p{name}", checkpoint_dir=tmp_path / name,
              continue_from=tmp_path / "first", learning_starts=50, **kw)
        model = SAC.load(tmp_path / name / "model.zip")
        assert model.seed == seed
        weights[name] = model.policy.actor.mu.weight.detach().numpy()
    np.testing.assert_array_equal(weights["a"], weights["b"])  # a seed is a run
    assert np.abs(weights["a"] - weights["c"]).max() > 1e-6  # another seed, another run


def test_a_settled_checkpoint_is_kept_apart_from_the_next_one(tmp_path, monkeypatch):
    """The closed-loop probe says settled: that checkpoint is copied to settled/<steps>/
    (the next one overwrites the run's own), whole, evaluated as its card would be, and
    --progress names it with that evaluation."""
    import re

    pytest.importorskip("sbx")
    from idt_desk_sources.gym import train as train_mod

    # Chaotic, settled while running, chaotic again, settled standing still (return -40).
    pushes = iter([[1.4], [-5.5], [1.2], [-5.6]])
    returns = iter([900.0, 1000.0, 1200.0, -40.0])
    monkeypatch.setattr(train_mod, "nudge_growth", lambda *a, **k: next(pushes))
    monkeypatch.setattr(train_mod, "rollouts", lambda *a, **k: ([next(returns)], 0.0))
    ckpt, out = tmp_path / "runs" / "sac-seed6", tmp_path / "policies"
    kept = []
    for steps in (300, 400, 500, 600):
        train("sac", 6, steps, out, checkpoint_dir=ckpt, checkpoint_minutes=60.0,
              eval_episodes=1, trainer="sbx", train_freq=4, normalize=True,
              learning_starts=250, resume=steps > 300, **ENV)
        kept.append(sorted(p.name for p in (ckpt / "settled").glob("*")))
        if steps == 400:
            weights = (ckpt / "model.zip").read_bytes()
    assert kept == [[], ["400"], ["400"], ["400"]]
    copy = ckpt / "settled" / "400"
    assert sorted(p.name for p in copy.iterdir()) == ["evaluation.json", "model.zip",
                                                      "state.json", "vecnormalize.pkl"]
    assert (copy / "model.zip").read_bytes() == weights != (ckpt / "model.zip").read_bytes()
    assert json.loads((copy / "state.json").read_text())["history"][-1]["nudge_log10"] == -5.5
    (line,) = progress(tmp_path / "runs")
    evaluation = json.loads((copy / "evaluation.json").read_text())
    shown = re.escape(f"{evaluation['return_deterministic']['mean']:,.0f}")
    assert re.search(r"settled at 1 of 4 checkpoints \(1 more standing, crawling or upside "
                     rf"down\); kept: settled/400 \({shown} ± \d+ deterministic, "
                     r"settled in [01] of 1 episodes\)$", line), line
    # The copy is a checkpoint: its card is written from it as from any run's folder, and
    # says what the evaluation at the copy said (the same episodes, the same weights).
    path = train("sac", 6, 1, tmp_path / "snap", checkpoint_dir=copy, resume=True,
                 eval_episodes=1, trainer="sbx", train_freq=4, normalize=True, **ENV)
    card = json.loads(path.with_suffix(".json").read_text())
    assert card["steps"] == evaluation["steps"] == 400
    assert card["return_deterministic"] == pytest.approx(evaluation["return_deterministic"])
    # Below about 1e-6 the distance is the float32 policy's rounding: the verdict must agree.
    assert card["closed_loop"]["stable_share"] == evaluation["closed_loop"]["stable_share"]
    assert upside_down(card) is upside_down(evaluation) is None  # no torso pitch: no share


def test_ctrl_c_writes_a_checkpoint_before_training_stops(tmp_path, monkeypatch, capsys):
    """SIGINT (or SIGTERM) mid-run: the checkpoint as of that step, exit 130, and --resume
    goes on from it; nothing of the steps since the last periodic checkpoint is lost."""
    import os
    import signal

    import tqdm

    class Bar:  # the progress bar: at step 300 the user presses Ctrl-C
        def __init__(self, total, initial, **kw):
            self.n = initial

        def update(self, k):
            self.n += k
            if self.n == 300:
                os.kill(os.getpid(), signal.SIGINT)

        def close(self):
            pass

    monkeypatch.setattr(tqdm, "tqdm", Bar)
    before = signal.getsignal(signal.SIGINT)
    ckpt, out = tmp_path / "ckpt", tmp_path / "policies"
    # No update before 1,000 steps: the run is quick.
    kw = {"checkpoint_dir": ckpt, "checkpoint_minutes": 60.0, "eval_episodes": 1,
          "learning_starts": 1000, **ENV}
    with pytest.raises(SystemExit) as stop:
        train("sac", 4, 600, out, **kw)
    assert stop.value.code == 130
    assert signal.getsignal(signal.SIGINT) is before
    assert "stopped at 300 steps by SIGINT; checkpoint written to" in capsys.readouterr().err
    assert json.loads((ckpt / "state.json").read_text())["steps"] == 300
    from stable_baselines3 import SAC

    model = SAC.load(ckpt / "model.zip")
    model.load_replay_buffer(ckpt / "replay.pkl")
    # SB3 stores a step's transition after the callback: every checkpoint, periodic or this
    # one, holds the buffer up to the step before.
    assert model.num_timesteps == 300 and model.replay_buffer.pos == 299
    assert not out.exists()  # no card for a run that did not finish
    path = train("sac", 4, 600, out, resume=True, **kw)
    assert json.loads(path.with_suffix(".json").read_text())["steps"] == 600
