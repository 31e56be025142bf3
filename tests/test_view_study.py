"""``idt-desk reproduce wrapper-views``: each run replayed through the wrapper, its regimes."""

from __future__ import annotations

import numpy as np
from idt_desk_sources.gym._source import POLICY_DIR
from idt_desk_sources.gym.view_study import replay_monitor, study

from idt_desk.cli import main
from idt_desk.metrics.presets import PRESETS
from idt_desk.pipeline import Pipeline

SETTLED = str(POLICY_DIR / "halfcheetah-v5-sac-seed3.zip")


def test_the_settled_agents_cycle_is_resolved_by_the_view_chosen(tmp_path):
    said = []
    result = study(tmp_path, [SETTLED], [0], 3000, None, 0, progress=said.append)
    rows = {r["preset"]: r for r in result["regimes"]}
    # 3 bins a variable: the settled gait repeats an exact cycle in most windows.
    assert rows["gym"]["view"] == "3 bins a variable (fixed)" and rows["gym"]["cycle"] > 0.3
    # The default's view, chosen on the first 20 windows, resolves them all.
    assert "principal components" in rows["auto"]["view"] and rows["auto"]["resolved"] == 1.0
    assert rows["auto"]["windows"] == rows["gym"]["windows"] == (3000 - 1250) // 50 + 1
    assert sum(s.startswith("  rolled out") for s in said) == 1
    # The run is kept: the table again, without a rollout.
    said.clear()
    assert study(tmp_path, [SETTLED], [0], 3000, None, 0, progress=said.append) == result
    assert not any(s.startswith("  rolled out") for s in said)
    # The replayed env gives the wrapper exactly the run's rows: its windows are those of a
    # pipeline pushed the run at once.
    with np.load(next((tmp_path / "runs").glob("*.npz"))) as f:
        run = {k: f[k] for k in f.files}
    windows, _ = replay_monitor(run, "gym", detector=None)
    pipe = Pipeline(PRESETS["gym"], None, state_names=[f"s{j}" for j in range(17)],
                    action_names=[f"a{j}" for j in range(6)], calibration_windows=20)
    got = pipe.push(run["s"], run["a"], run["s_next"], {"reward": run["reward"],
                                                         "t": np.zeros(3000)}).windows
    np.testing.assert_array_equal(windows["P"].to_numpy(), got["P"])


def test_the_command_refuses_what_it_cannot_run(tmp_path, capsys):
    code = main(["reproduce", "wrapper-views", "--out", str(tmp_path), "--policies", "nope.zip"])
    assert code != 0 and "nope.zip: neither a shipped agent" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
