"""Crafted finished runs for the analyses of ``reproduce cheetah`` (``--pool``,
``--out-of-sample``, ``--modulation``): every damaged, partial, duplicated, non-finite or
conflicting input is one line and exit code 2, never a traceback or a number."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from idt_desk.cli import main

from .test_modulation_study import _run
from .test_reproduce_cheetah import make_tiny

MODES = ("--pool", "--out-of-sample", "--modulation")


@pytest.fixture(scope="module")
def bases(tmp_path_factory, once_per_run):
    """A real tiny run (pool, out of sample) and a run with settings switched by hand."""
    real = once_per_run("tiny-cheetah", make_tiny)
    manual = tmp_path_factory.mktemp("manual")
    _run(0.1, -0.005).to_csv(manual / "trials.csv", index=False)
    return {"--pool": real, "--out-of-sample": real, "--modulation": manual}


def _lines(path):
    return path.read_text().splitlines()


def _set_cell(path, column, value, line=2):
    """Write ``value`` (raw CSV text) into ``column`` at file line ``line``."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO(path.read_text())))
    j = rows[0].index(column)
    rows[line - 1][j] = value
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    path.write_text(out.getvalue())


def _empty(p):
    p.write_text("")


def _truncated(p):
    text = p.read_text()
    p.write_text(text[: len(text) // 2] + '"unclosed')


def _binary(p):
    p.write_bytes(os.urandom(4096) + b"\xff\xfe\x00")


def _header_only(p):
    p.write_text(_lines(p)[0] + "\n")


def _all_failed(p):
    for line in range(2, len(_lines(p)) + 1):
        _set_cell(p, "error", f"RuntimeError: crashed in trial {line}", line)


def _duplicated(p):
    lines = _lines(p)
    p.write_text("\n".join([*lines, lines[1]]) + "\n")


def _no_perturbation_column(p):
    import pandas as pd

    pd.read_csv(p, dtype=str, keep_default_na=False).drop(columns="perturbation").to_csv(
        p, index=False)


CASES = {
    "empty": (_empty, "empty"),
    "truncated": (_truncated, "trials.csv"),
    "random bytes": (_binary, "not a table of trials"),
    "header only": (_header_only, "a header and no trials"),
    "every trial failed": (_all_failed, "every trial failed"),
    "a row twice": (_duplicated, "the same trial as line 2"),
    "no perturbation column": (_no_perturbation_column, "no column 'perturbation'"),
    "nan in a number": (lambda p: _set_cell(p, "env_seed", "nan"), "env_seed: 'nan'"),
    "abc in a number": (lambda p: _set_cell(p, "env_seed", "abc"), "env_seed: 'abc'"),
    "returns {}": (lambda p: _set_cell(p, "returns_post", "{}"), "returns_post"),
    "returns null": (lambda p: _set_cell(p, "returns_post", "null"), "returns_post"),
    "returns 2-D": (lambda p: _set_cell(p, "returns_post", "[[1, 2], [3, 4]]"),
                    "returns_post"),
    "returns NaN": (lambda p: _set_cell(p, "returns_post", "[NaN, 1.0]"), "returns_post"),
    "returns infinite": (lambda p: _set_cell(p, "returns_post", "[Infinity, 1e309]"),
                         "returns_post"),
    "returns empty": (lambda p: _set_cell(p, "returns_post", "[]"), "returns_post"),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_damaged_run_is_one_line(bases, tmp_path, capsys, mode, case):
    damage, said = CASES[case]
    bad = tmp_path / "bad"
    shutil.copytree(bases[mode], bad)
    damage(bad / "trials.csv")
    good = tmp_path / "good"
    shutil.copytree(bases[mode], good)
    runs = [str(bad), str(good)] if mode != "--modulation" else [str(bad)]
    rc = main(["reproduce", "cheetah", mode, *runs, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2, (case, mode, err)
    assert said in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()  # nothing written from it


@pytest.mark.parametrize("mode", MODES)
def test_the_same_run_twice_or_a_copy_of_it_is_refused(bases, tmp_path, capsys, mode):
    run = bases[mode]
    twice = [str(run), str(run)]
    assert main(["reproduce", "cheetah", mode, *twice, "--out", str(tmp_path / "o")]) == 2
    assert "given twice" in capsys.readouterr().err
    # A copy in another folder: every trial one of the first run's.
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    assert main(["reproduce", "cheetah", mode, str(run), str(copy), "--out",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"{copy}: every trial in it is one of {run}'s" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists()
    # The undamaged bases are read: the crafted cases above fail on their damage alone.
    other = [str(_moved(copy, tmp_path / "other"))] if mode == "--out-of-sample" else []
    assert main(["reproduce", "cheetah", mode, str(run), *other, "--out",
                 str(tmp_path / "o")]) == 0
    assert list((tmp_path / "o").iterdir())


def _moved(run, to):
    """``run``'s trials at other environment seeds: another run (as another --seed)."""
    import pandas as pd

    to.mkdir()
    rows = pd.read_csv(run / "trials.csv", dtype=str, keep_default_na=False)
    rows["env_seed"] = [str(int(v) + 10**6) for v in rows["env_seed"]]
    rows.to_csv(to / "trials.csv", index=False)
    return to


def test_a_perturbed_trial_two_runs_share_counts_once(bases, tmp_path, capsys):
    import pandas as pd

    run = bases["--pool"]
    rows = pd.read_csv(run / "trials.csv", dtype=str, keep_default_na=False)
    perturbed = rows[rows["perturbation"] != "none"]
    other = tmp_path / "other"
    other.mkdir()
    # A second run: one of the first's perturbed trials, and that trial at another seed.
    moved = perturbed.iloc[:1].assign(env_seed=str(10**6))
    pd.concat([perturbed.iloc[:1], moved]).to_csv(other / "trials.csv", index=False)
    assert main(["reproduce", "cheetah", "--pool", str(run), str(other), "--out",
                 str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "1 perturbed trial(s) appear in two runs" in out, out
    pooled = json.loads((tmp_path / "o" / "pooled.json").read_text())
    assert pooled["perturbed_shared"] == 1
    ok = perturbed[perturbed["error"] == ""]
    assert pooled["all"]["perturbed_trials"] == len(ok) + 1  # the moved one only


def test_two_analyses_at_once_and_an_out_that_is_a_file_are_refused(bases, tmp_path, capsys):
    run = str(bases["--pool"])
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    assert main(["reproduce", "cheetah", "--pool", run, str(copy), "--out-of-sample", run,
                 str(copy), "--out", str(tmp_path / "o")]) == 2
    assert "one analysis at a time" in capsys.readouterr().err
    afile = tmp_path / "a-file"
    afile.write_text("x")
    assert main(["reproduce", "cheetah", "--pool", run, "--out", str(afile)]) == 2
    err = capsys.readouterr().err
    assert "is a file" in err and "Traceback" not in err
    assert json.loads(json.dumps(afile.read_text())) == "x"  # untouched
