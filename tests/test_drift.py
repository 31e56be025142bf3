"""The generic online drift detectors (idt_desk.detection.drift) against alibi-detect's own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from idt_desk.detection.drift import OnlineDrift, median_sigma

#: alibi-detect 0.13's MMDDriftOnline and LSDDDriftOnline on a fixed stream, written by
#: assets/data/alibi_drift_reference.py in a venv of their own (see its docstring).
REF = np.load(Path(__file__).parents[1] / "assets" / "data" / "alibi_drift.npz")


def _ours(kind: str, **kw) -> OnlineDrift:
    return OnlineDrift(kind, REF["x_ref"], float(REF["ert"]), int(REF["window"]),
                       n_bootstraps=int(REF["n_bootstraps"]), seed=0, **kw)


def test_the_mmd_statistic_and_alarms_are_alibi_detects_on_its_split():
    det = _ours("mmd")
    assert det.sigma == pytest.approx(float(REF["mmd_sigma"][0]), rel=1e-6)
    det.start_at(REF["mmd_ref_inds"], REF["mmd_init_test_inds"])
    det.thresholds = list(REF["mmd_thresholds"])
    stat, thr = det.update(REF["stream"])
    np.testing.assert_allclose(stat, REF["mmd_stats"], rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(stat > thr, REF["mmd_drift"].astype(bool))
    assert REF["mmd_drift"][140:].sum() > 30  # the shifted end alarms: the check is not vacuous


def test_the_lsdd_regularisation_statistic_and_alarms_are_alibi_detects():
    det = _ours("lsdd", centres=REF["lsdd_c_inds"])
    x = REF["x_ref"]
    z = (x - x.mean(0)) / (x.std(0, ddof=1) + 1e-12)
    assert det.sigma == pytest.approx(median_sigma(z)) == pytest.approx(
        float(REF["lsdd_sigma"][0]), rel=1e-6)
    # The same centres: the same λ from our own bootstrap, so the same H_λ⁻¹.
    np.testing.assert_allclose(det.h_lam_inv, REF["lsdd_H_lam_inv"], rtol=1e-5, atol=1e-8)
    # alibi's split indexes its non-centre instances in its own (random) order; ours sorted.
    non_c = REF["lsdd_non_c_inds"]
    mine = np.searchsorted(np.sort(non_c), non_c)
    det.start_at(mine[REF["lsdd_ref_inds"]], mine[REF["lsdd_init_test_inds"]])
    det.thresholds = list(REF["lsdd_thresholds"])
    stat, thr = det.update(REF["stream"])
    np.testing.assert_allclose(stat, REF["lsdd_stats"], rtol=1e-5, atol=1e-8)
    np.testing.assert_array_equal(stat > thr, REF["lsdd_drift"].astype(bool))
    assert REF["lsdd_drift"][140:].sum() > 30


@pytest.mark.parametrize("kind", ["mmd", "lsdd"])
def test_our_bootstrap_configures_alibi_detects_thresholds(kind):
    """The same reference, ERT, window and bootstrap count, our permutations: thresholds
    within the bootstrap's own spread of alibi-detect's (LSDD with its kernel centres)."""
    det = _ours(kind, **({"centres": REF["lsdd_c_inds"]} if kind == "lsdd" else {}))
    np.testing.assert_allclose(det.thresholds, REF[f"{kind}_thresholds"], rtol=0.12)
    # The last (every later step's) within 6 %: the quantile of the most samples.
    assert det.thresholds[-1] == pytest.approx(float(REF[f"{kind}_thresholds"][-1]), rel=0.06)


@pytest.mark.parametrize("kind", ["mmd", "lsdd"])
def test_the_run_length_without_drift_is_the_expected_run_time(kind):
    """Independent instances from the reference distribution: the first alarm comes after
    ERT instances on average (the geometric run length the bootstrap targets)."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((400, 5))
    lengths = []
    for r in range(40):
        det = OnlineDrift(kind, x, 40, 5, seed=r)
        stat, thr = det.update(rng.standard_normal((1000, 5)))
        hits = np.flatnonzero(stat > thr)
        lengths.append(hits[0] + 1 if hits.size else 1000)
    # 40 geometric run lengths of mean 40: the mean's standard error is about 6.3.
    assert 25 < np.mean(lengths) < 60, lengths


@pytest.mark.parametrize("kind", ["mmd", "lsdd"])
def test_a_shift_alarms_within_a_few_windows(kind):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((300, 8))
    det = OnlineDrift(kind, x, 1000, 10, seed=1)
    quiet, q_thr = det.update(rng.standard_normal((200, 8)))
    shifted = rng.standard_normal((100, 8))
    shifted[:, :3] += 1.0
    stat, thr = det.update(shifted)
    assert not np.any(quiet > q_thr)
    assert np.flatnonzero(stat > thr)[0] < 20


def test_bad_input_is_refused_in_words():
    x = np.random.default_rng(0).standard_normal((30, 3))
    with pytest.raises(ValueError, match="needs at least"):
        OnlineDrift("mmd", x, 50, 20)
    with pytest.raises(ValueError, match="choose from mmd, lsdd"):
        OnlineDrift("ks", x, 50, 5)
    with pytest.raises(ValueError, match="finite"):
        OnlineDrift("mmd", np.full((100, 2), np.nan), 50, 5)
    with pytest.raises(ValueError, match="bootstrap samples"):
        OnlineDrift("mmd", x, 5000, 5, n_bootstraps=1000)
