"""``reproduce cheetah --modulation``: recovered share and control cost against hand counts."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("stable_baselines3")

from idt_desk_sources.gym.modulation import modulation_table, verdict

from idt_desk.cli import main

RNG = np.random.default_rng(5)


def _episodes(mean: float, n: int = 15) -> list[float]:
    return list(mean + RNG.normal(0, 0.5, n))


def _trial(policy: str, pert: str, auto: str, env_seed: int, mean: float) -> dict:
    return {"policy": policy, "perturbation": pert, "auto": auto, "env_seed": env_seed,
            "error": "", "returns_pre": json.dumps([100.0] * 5),
            "returns_post": json.dumps(_episodes(mean))}


def _run(share: float, cost: float, policy: str = "p1") -> pd.DataFrame:
    """One policy: controls at 100, the perturbation losing 40, a setting recovering
    ``share`` of it and costing controls ``cost``; a costly setting beside it."""
    rows = [_trial(policy, "none", "", 1, 100), _trial(policy, "none", "", 2, 100),
            _trial(policy, "noise", "", 1, 60)]
    for auto, s, c in (("by hand: hold:scale=0.99", share, cost),
                       ("by hand: hold:scale=0.5", -0.5, -0.3)):
        rows += [_trial(policy, "none", auto, 1, 100 * (1 + c)),
                 _trial(policy, "none", auto, 2, 100 * (1 + c)),
                 _trial(policy, "noise", auto, 1, 60 + s * 40)]
    return pd.DataFrame(rows)


def test_share_and_cost_pool_as_ratios_of_sums_against_a_hand_count():
    runs = {"a": _run(0.5, -0.005, "p1"), "b": _run(0.25, -0.005, "p2")}
    table = modulation_table(runs, draws=300)
    gentle = table["settings"]["hold:scale=0.99"]
    # Hand count from the same episodes: (M − O) and (C − O) summed over the two units.
    num = den = 0.0
    for rows in runs.values():
        mean = {(r.perturbation, r.auto, r.env_seed): np.mean(json.loads(r.returns_post))
                for r in rows.itertuples()}
        o, c = mean[("noise", "", 1)], mean[("none", "", 1)]
        num += mean[("noise", "by hand: hold:scale=0.99", 1)] - o
        den += c - o
    noise = gentle["perturbations"]["noise"]
    assert noise["share"] == pytest.approx(num / den)
    assert noise["share"] == pytest.approx(0.375, abs=0.03)
    assert noise["share_ci"][0] < noise["share"] < noise["share_ci"][1]
    assert noise["share_ci"][0] > 0  # two units that both recover: the interval is above 0
    assert noise["units"] == 2 and set(noise["by_unit"]) == {"a: p1", "b: p2"}
    assert table["perturbations"]["noise"] == pytest.approx(0.40, abs=0.01)
    # Four controls, each against its own paired open-loop control.
    assert gentle["controls"] == 4
    assert gentle["cost"] == pytest.approx(-0.005, abs=0.002)
    said = verdict(table)
    assert said["helps"] == [("hold:scale=0.99", "noise")]
    assert said["cheapest"] == {"hold": "hold:scale=0.99"}


def test_a_setting_that_costs_controls_more_than_one_percent_never_helps():
    table = modulation_table({"a": _run(0.8, -0.03)}, draws=200)
    assert table["settings"]["hold:scale=0.99"]["perturbations"]["noise"]["share"] > 0.7
    assert verdict(table)["helps"] == []


def test_the_command_line_writes_the_table_and_refuses_runs_it_cannot_read(tmp_path, capsys):
    for name, share in (("a", 0.1), ("b", 0.0)):  # two runs: other policies' trials
        (tmp_path / name).mkdir()
        _run(share, -0.005, f"p_{name}").to_csv(tmp_path / name / "trials.csv", index=False)
    out = tmp_path / "mod"
    assert main(["reproduce", "cheetah", "--modulation", str(tmp_path / "a"),
                 str(tmp_path / "b"), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "No setting recovers 30 %" in said
    assert re.search(r"\| hold:scale=0\.99 \| −0\.\d % \[", said)
    got = json.loads((out / "modulation.json").read_text())
    assert got["verdict"]["cheapest"]["hold"] == "hold:scale=0.99"
    # A run without its episodes' returns, and a folder with no run: one line each.
    old = _run(0.1, -0.005).drop(columns=["returns_post"])
    (tmp_path / "old").mkdir()
    old.to_csv(tmp_path / "old" / "trials.csv", index=False)
    assert main(["reproduce", "cheetah", "--modulation", str(tmp_path / "old"),
                 "--out", str(out)]) == 2
    assert "returns_post" in capsys.readouterr().err
    assert main(["reproduce", "cheetah", "--modulation", str(tmp_path),
                 "--out", str(out)]) == 2


def test_the_study_runs_its_batches_once_and_writes_the_table(tmp_path, monkeypatch, capsys):
    """``--modulation-study`` (here a one-batch, one-policy stand-in for the page's four):
    each batch into ``m{seed}``, the table after; a second call keeps the finished batch."""
    from idt_desk_sources.gym import modulation, reproduce

    monkeypatch.setattr(modulation, "STUDY", ((7, ("act_noise_4:percent=30",),
                                               ("hold:mode=scale,scale=0.9",)),))
    monkeypatch.setattr(modulation, "STUDY_POLICIES", ("halfcheetah-v5-ppo-seed0.zip",))
    real = reproduce.reproduce
    runs = []

    def small(config, **kw):
        runs.append(config.seed)
        from dataclasses import replace

        return real(replace(config, episodes=3, onset=2, workers=0), **kw)

    monkeypatch.setattr(reproduce, "reproduce", small)
    argv = ["reproduce", "cheetah", "--modulation-study", "--no-progress", "--out",
            str(tmp_path)]
    assert main(argv) == 0
    assert runs == [7] and (tmp_path / "m7" / "trials.csv").is_file()
    got = json.loads((tmp_path / "modulation.json").read_text())
    assert set(got["settings"]) == {"hold:mode=scale,scale=0.9"}
    assert got["settings"]["hold:mode=scale,scale=0.9"]["controls"] == 2
    assert main(argv) == 0  # resumed: nothing run again
    assert runs == [7] and "kept from" in capsys.readouterr().out
