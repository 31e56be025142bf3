"""The estimator study's runs and table (``idt-desk reproduce cheetah-estimator``)."""

from __future__ import annotations

import numpy as np
from idt_desk_sources.gym import estimator_study as study


def test_the_study_keeps_its_runs_and_sees_the_settled_agent_s_cycle(tmp_path):
    made: list[str] = []
    study.rollouts(tmp_path, agents=("sac-seed3",), seeds=(5, 6), n=2_400, onset=1_200,
                   progress=made.append)
    assert len(made) == 10  # a clean run and four perturbed, on each seed
    again: list[str] = []
    study.rollouts(tmp_path, agents=("sac-seed3",), seeds=(5, 6), n=2_400, onset=1_200,
                   progress=again.append)
    assert again == []  # kept, not rolled out again
    clean = dict(np.load(tmp_path / "runs" / "sac-seed3_5_clean.npz"))
    force = dict(np.load(tmp_path / "runs" / "sac-seed3_5_force.npz"))
    assert clean["s"].shape == (2_400, 17) and clean["a"].shape == (2_400, 6)
    # Same seed, same start: the runs agree until the onset, and part after it.
    np.testing.assert_array_equal(clean["s"][:1_200], force["s"][:1_200])
    assert not np.array_equal(clean["s"][1_300:], force["s"][1_300:])

    rows = study.analyze(tmp_path, windows=(300,), agents=("sac-seed3",), seeds=(5, 6),
                         views=("composite-3", "parts-3"))
    assert {(r["split"], r["view"], r["estimator"]) for r in rows} == {
        (sp, v, e) for sp in ("choice", "held-out") for v in ("composite-3", "parts-3")
        for e in ("plug-in", "miller-madow", "chao-shen")}
    comp = next(r for r in rows if r["view"] == "composite-3" and r["split"] == "choice"
                and r["estimator"] == "plug-in")
    # The settled agent's gait: a short exact cycle is what a window of its symbols holds.
    assert comp["distinct"] <= 20 and comp["hf0"] > 0.3
    assert all(np.isfinite(r[f"shift_{c}"]) and r[f"shift_{c}"] > 0 for r in rows
               for c in study.PERTURBATIONS)

    # distinct, recounted with numpy over the view's symbols (independent of the engine).
    view = study._View(*study.VIEWS["composite-3"], clean)
    s, a, n = view.symbols(clean)["all"]
    counts = [len(set(zip(s[i:i + 300], a[i:i + 300], n[i:i + 300], strict=True)))
              for i in range(0, len(s) - 299, 50)]
    assert comp["distinct"] == float(np.median(counts))

    sig = study.signatures(tmp_path, "parts-2", 300, agents=("sac-seed3",), seeds=(5, 6))
    assert set(sig["signatures"]) == {f"sac-seed3_{s}_{c}" for s in (5, 6)
                                      for c in study.PERTURBATIONS}
    # One IDT per body part, seven terms each.
    assert all(len(v) == 3 * len(study.TERMS) for v in sig["signatures"].values())
    for scope in ("per_agent", "pooled"):
        conf = sig[scope]["confusion"]
        assert sig[scope]["of"] == 4 == sum(sum(row.values()) for row in conf.values())
        assert sig[scope]["right"] == sum(conf[c][c] for c in conf)


def test_chao_shen_by_hand():
    # No singletons: coverage 1, and with n large the weights are 1: the plug-in entropy.
    assert np.isclose(study._chao_shen(np.array([100, 100, 100]), 300), np.log2(3))
    # Two singletons of n = 4 (counts 2, 1, 1): coverage 1/2, p = (1/4, 1/8, 1/8), each
    # term divided by 1 - (1 - p)^4.
    p = np.array([0.25, 0.125, 0.125])
    want = -np.sum(p * np.log2(p) / (1 - (1 - p) ** 4))
    assert np.isclose(study._chao_shen(np.array([2, 1, 1]), 4), want)
    assert want > np.log2(3) > 1.5  # above the plug-in's 1.5 bits: unseen symbols counted
    # Per window, its K_SAS is the engine's.
    rng = np.random.default_rng(1)
    s, a = rng.integers(0, 6, 900), rng.integers(0, 3, 900)
    n = (s + a + rng.integers(0, 2, 900)) % 6
    cs = study.chao_shen_metrics(s, n, a, 300, 100)
    from idt_desk.plugin import sliding_metrics

    ref = sliding_metrics(s, n, a, 300, 100)
    np.testing.assert_array_equal(cs["K_SAS"], ref["K_SAS"])
    np.testing.assert_allclose(cs["dH"], cs["H_f"] - cs["H_b"])
