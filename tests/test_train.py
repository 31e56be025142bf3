"""Training the shipped policies: model card, checkpoints and resume (tiny runs)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("stable_baselines3")

from sources.gym.train import policy_name, train


def test_train_writes_policy_and_card_and_resumes(tmp_path):
    ckpt = tmp_path / "ckpt"
    out = tmp_path / "policies"
    path = train("ppo", 3, 2048, out, checkpoint_dir=ckpt, checkpoint_minutes=0.0,
                 eval_episodes=2, command="test")
    assert path == out / f"{policy_name('HalfCheetah-v5', 'ppo', 3)}.zip" and path.exists()
    card = json.loads(path.with_suffix(".json").read_text())
    assert card["algorithm"] == "PPO" and card["seed"] == 3 and card["steps"] == 2048
    assert card["return_stochastic"]["episodes"] == 2
    assert card["versions"]["stable_baselines3"] != "?" and card["command"] == "test"
    state = json.loads((ckpt / "state.json").read_text())
    assert state["steps"] == 2048 and (ckpt / "model.zip").exists()
    # A second run without --resume refuses to overwrite the checkpoint...
    with pytest.raises(FileExistsError):
        train("ppo", 3, 4096, out, checkpoint_dir=ckpt, eval_episodes=1)
    # ...and with it continues from 2,048 steps rather than starting again.
    train("ppo", 3, 4096, out, checkpoint_dir=ckpt, resume=True, eval_episodes=1)
    card2 = json.loads(path.with_suffix(".json").read_text())
    assert card2["steps"] == 4096 and card2["wall_seconds"] >= card["wall_seconds"]
    assert json.loads((ckpt / "state.json").read_text())["steps"] == 4096
