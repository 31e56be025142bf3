"""``idt-desk analyze``: the paper's pendulum sample, synthetic files, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from idt_desk.cli import main

DP_SAMPLE = Path(__file__).parent.parent / "assets" / "data" / "DP_Sample.csv.gz"
DP_COLUMNS = "theta1,theta2,omega1,omega2"

# Per-window values published by the paper's authors for this very file
# (dp_metrics_output.csv in Semarxai/double_pendulum_analysis, MIT), window_id -> (P, dH).
AUTHORS_WINDOWS = {
    1: (0.47612421858366905, 0.0011756454284581608),
    2: (0.4748637100937588, 0.0060425839011712945),
    80: (0.4682418717347186, 0.0),
    103: (0.46936488733783616, -0.01718617617470386),
    263: (0.4746564009749217, 0.0015047531220742094),
}


def test_dp_sample_reproduces_the_authors_pipeline_and_table_1(tmp_path, capsys):
    out = tmp_path / "dp"
    rc = main(["analyze", str(DP_SAMPLE), "--preset", "pendulum",
               "--state-columns", DP_COLUMNS, "--out", str(out)])
    assert rc == 0
    table = pd.read_csv(out / "windows.csv")
    summary = json.loads((out / "summary.json").read_text())
    assert len(table) == 263 == summary["windows"]
    for wid, (p, dh) in AUTHORS_WINDOWS.items():
        assert table["P"][wid - 1] == pytest.approx(p, abs=1e-12)
        assert table["dH"][wid - 1] == pytest.approx(dh, abs=1e-12)
    m = summary["metrics"]
    # Table 1 regime: P just below the classical ceiling 1/2, with small spread.
    assert 0.46 <= m["P"]["mean"] <= 0.49 and m["P"]["max"] < 0.5
    assert m["P"]["std"] < 0.01
    # Table 2: no action, so forward and backward uncertainty balance and dH ~ 0.
    assert abs(m["dH"]["mean"]) < 1e-3
    assert m["H_f"]["mean"] == pytest.approx(m["H_b"]["mean"], abs=1e-3)
    assert summary["passive"] is True
    assert (out / "metrics.png").stat().st_size > 10_000
    printed = capsys.readouterr().out
    assert "Bi-predictability P" in printed and "263 windows" in printed


def _write_agent_file(path: Path, n=1500, explicit_next=True, episodes=False, seed=0):
    rng = np.random.default_rng(seed)
    s = np.cumsum(rng.normal(size=(n + 1, 3)), axis=0)
    a = np.tanh(s[:-1, :2] + rng.normal(scale=0.5, size=(n, 2)))
    cols = {f"s_{j}": s[:-1, j] for j in range(3)}
    cols.update({f"a_{j}": a[:, j] for j in range(2)})
    if explicit_next:
        cols.update({f"s_next_{j}": s[1:, j] for j in range(3)})
    cols["reward"] = -np.abs(s[:-1, 0])
    if episodes:
        cols["episode"] = np.arange(n) // 500
    df = pd.DataFrame(cols)
    if path.suffix == ".parquet":
        df.to_parquet(path)
    else:
        df.to_csv(path, index=False)
    return df


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_agent_trajectory_with_action_reward_and_detection(tmp_path, suffix):
    f = tmp_path / f"traj{suffix}"
    _write_agent_file(f)
    out = tmp_path / "out"
    rc = main(["analyze", str(f), "--bins", "4", "--window", "200", "--stride", "50",
               "--out", str(out), "--onset", "800", "--null", "5"])
    assert rc == 0
    table = pd.read_csv(out / "windows.csv")
    summary = json.loads((out / "summary.json").read_text())
    assert len(table) == (1500 - 200) // 50 + 1
    assert summary["passive"] is False and "agency" in summary
    for col in ("reward", "P_null_mean", "P_null_z", "excursion_IDT", "excursion_reward"):
        assert col in table
    expected_reward = [np.mean(-np.abs(pd.read_parquet(f) if suffix == ".parquet"
                                       else pd.read_csv(f))["s_0"].to_numpy()[st:st + 200])
                       for st in table["start"][:2]]
    np.testing.assert_allclose(np.abs(table["reward"][:2]), np.abs(expected_reward))
    assert set(summary["detection"]["latency_windows"]) >= {"P", "IDT", "reward"}
    assert set(summary["metrics"]) == {"P", "H_f", "H_b", "dH"}
    assert set(summary["metrics"]["P"]) == {"min", "mean", "max", "std"}


def test_next_state_comes_from_the_next_row_within_episodes(tmp_path):
    f = tmp_path / "t.csv"
    _write_agent_file(f, n=1500, explicit_next=False, episodes=True)
    out = tmp_path / "out"
    assert main(["analyze", str(f), "--window", "100", "--stride", "100", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    # 1500 rows, 3 episodes of 500: each loses its last row -> 1497 transitions.
    assert summary["transitions"] == 1497


def test_passive_flag_and_miller_madow(tmp_path):
    f = tmp_path / "t.csv"
    _write_agent_file(f)
    plug, mm = tmp_path / "plug", tmp_path / "mm"
    main(["analyze", str(f), "--passive", "--out", str(plug)])
    main(["analyze", str(f), "--passive", "--correction", "miller-madow", "--out", str(mm)])
    a = json.loads((plug / "summary.json").read_text())
    b = json.loads((mm / "summary.json").read_text())
    assert a["passive"] and b["config"]["correction"] == "miller-madow"
    assert b["also"]["H_S"]["mean"] > a["also"]["H_S"]["mean"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "idt_desk.cli", *args], capture_output=True, text=True
    )


@pytest.mark.parametrize(
    "content,needle",
    [
        ("x,y\n1,2\n3,4\n", "no state columns"),
        ("s_0,s_1\n1,2\n3,abc\n" + "1,2\n" * 400, "column 's_1' is not numeric (row 1"),
        ("s_0,s_1\n" + "1,2\n" * 50, "fewer than one window"),
        ("s_0,s_next_0,s_next_1\n" + "1,2,3\n" * 400, "1 state columns but 2 next-state"),
        ("", "cannot read"),
    ],
)
def test_bad_files_get_one_line_and_exit_2(tmp_path, content, needle):
    f = tmp_path / "bad.csv"
    f.write_text(content)
    r = _cli("analyze", str(f), "--out", str(tmp_path / "o"))
    assert r.returncode == 2
    assert needle in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_missing_and_foreign_files_exit_2(tmp_path):
    r = _cli("analyze", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "no such file" in r.stderr
    (tmp_path / "x.json").write_text("{}")
    r = _cli("analyze", str(tmp_path / "x.json"), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "unknown file type" in r.stderr
    (tmp_path / "broken.parquet").write_bytes(b"not parquet at all")
    r = _cli("analyze", str(tmp_path / "broken.parquet"), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "cannot read" in r.stderr and "Traceback" not in r.stderr


def test_bench_engine_prints_ratios(capsys):
    assert main(["bench", "engine", "--n", "20000", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    rows = [ln.split() for ln in out.splitlines() if ln.strip() and ln.split()[0].isdigit()]
    assert [r[0] for r in rows] == ["1", "50"]
    assert all(r[-1].endswith("x") and float(r[-1][:-1].replace(",", "")) > 1 for r in rows)


def test_analyze_flags_with_the_live_calibrated_detector(tmp_path, capsys):
    f = tmp_path / "traj.csv"
    df = _write_agent_file(f, n=12_000)
    rng = np.random.default_rng(5)
    noisy = df.copy()  # from row 8000 on, the sensors read through heavy noise
    for j in range(3):
        for col in (f"s_{j}", f"s_next_{j}"):
            noisy.loc[8000:, col] += rng.normal(scale=3.0, size=len(noisy) - 8000)
    noisy.to_csv(f, index=False)
    out = tmp_path / "out"
    rc = main(["analyze", str(f), "--bins", "4", "--window", "200", "--stride", "50",
               "--out", str(out), "--onset", "8000", "--detector", "persistence",
               "--false-alarms", "1/20000windows"])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    det = summary["detection"]
    assert det["detector"]["describe"] == ("persistence (5 windows in a row), "
                                           "≤ 1 false alarm / 20000 windows")
    assert det["detector"]["arl_windows"] == 20000
    assert det["detected"]["IDT"] and det["latency_windows"]["IDT"] >= 4  # 5 in a row
    table = pd.read_csv(out / "windows.csv")
    onset_window = det["onset_window"]
    assert not table["excursion_IDT"][:onset_window].any()  # baseline: no verdict
    # The paper's rule on the same file (the default) flags the first window beyond 3σ.
    rc = main(["analyze", str(f), "--bins", "4", "--window", "200", "--stride", "50",
               "--out", str(tmp_path / "paper"), "--onset", "8000"])
    paper = json.loads((tmp_path / "paper" / "summary.json").read_text())["detection"]
    assert rc == 0 and "detector" not in paper
    assert paper["latency_windows"]["IDT"] <= det["latency_windows"]["IDT"]
    capsys.readouterr()
    rc = main(["analyze", str(f), "--out", str(tmp_path / "x"), "--onset", "8000",
               "--detector", "cusum", "--false-alarms", "1/h"])
    assert rc == 2 and "give --rate" in capsys.readouterr().err


def test_a_killed_sessions_csv_is_read_without_its_torn_last_line(tmp_path, capsys):
    f = tmp_path / "traj.csv"
    df = _write_agent_file(f, n=1500)
    data = f.read_bytes()
    torn = data[: data.rfind(b"\n", 0, len(data) - 1) + 1] + data.splitlines()[-1][:9]
    f.write_bytes(torn)  # the last row cut after 9 characters, no newline
    rc = main(["analyze", str(f), "--bins", "4", "--window", "200", "--stride", "50",
               "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert rc == 0
    note = "traj.csv: dropped a partly written last line (line 1501)"
    assert f"note: {note}" in out
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert note in summary["notes"] and summary["rows"] == len(df) - 1
    # A whole last line without its newline is data, not damage.
    f.write_bytes(data.rstrip(b"\n"))
    rc = main(["analyze", str(f), "--bins", "4", "--window", "200", "--stride", "50",
               "--out", str(tmp_path / "out2")])
    assert rc == 0 and "partly written" not in capsys.readouterr().out
    assert json.loads((tmp_path / "out2" / "summary.json").read_text())["rows"] == len(df)


def test_a_recording_folder_is_analysed_with_the_preset_it_ran_with(tmp_path, capsys):
    from idt_desk.live.session import Session, SessionConfig, run_headless

    rec = tmp_path / "rec"
    run_headless(Session(SessionConfig(speed=None, baseline_windows=30), record=rec),
                 steps=6000)
    assert main(["analyze", str(rec), "--out", str(tmp_path / "out"), "--baseline-windows",
                 "30", "--detector", "persistence", "--false-alarms", "1/h"]) == 0
    out = capsys.readouterr().out
    # pendulum-live: W 300, stride 75, 16 bins, passive; a budget in loop time through the
    # recording's rate (1,000 transitions a second).
    assert f"{rec}: 6000 transitions, 77 windows (W=300, stride 75, 16 bins, passive)" in out
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["detection"]["detector"]["arl_windows"] == 1000 * 3600 / 75
    # A folder that is no recording still gets its one line.
    (tmp_path / "empty").mkdir()
    assert main(["analyze", str(tmp_path / "empty"), "--out", str(tmp_path / "o2")]) == 2
