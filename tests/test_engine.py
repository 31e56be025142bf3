"""The metric engine against an independent numpy reference, hand cases and properties."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from idt_desk import MetricEngine, sliding_metrics, surrogate_null, window_means
from idt_desk.metrics.reference import reference_metrics

from .conftest import NO_JIT

REF_KEYS = ("P", "H_f", "H_b", "dH", "MI", "H_S", "H_A", "H_S_next", "H_SA", "H_SAS")
N = 1200 if NO_JIT else 4000


def _stream(rng, n, alphabet, with_action, coupled):
    s = rng.integers(0, alphabet, n)
    a = rng.integers(0, min(alphabet, 5), n) if with_action else None
    if coupled:
        # S' depends on S (and A) with some noise: neither independent nor deterministic.
        noise = rng.integers(0, 3, n) * (rng.random(n) < 0.3)
        s_next = (s * 7 + (a if a is not None else 0) + noise) % alphabet
    else:
        s_next = rng.integers(0, alphabet, n)
    return s, a, s_next


@pytest.mark.parametrize("alphabet", [2, 40, 3**17, 2**62])
@pytest.mark.parametrize("with_action", [True, False])
@pytest.mark.parametrize("coupled", [True, False])
@pytest.mark.parametrize("window,stride", [(300, 75), (300, 50), (50, 1), (17, 5), (10, 23)])
def test_matches_numpy_reference(alphabet, with_action, coupled, window, stride):
    rng = np.random.default_rng(alphabet % 1000 + window + stride)
    n = min(N, window + 60 * stride + 7)
    s, a, s_next = _stream(rng, n, alphabet, with_action, coupled)
    got = sliding_metrics(s, s_next, a, window=window, stride=stride)
    ref = reference_metrics(s, s_next, a, window=window, stride=stride)
    np.testing.assert_array_equal(got["start"], ref["start"])
    assert len(got["start"]) == (n - window) // stride + 1
    for key in REF_KEYS:
        np.testing.assert_allclose(got[key], ref[key], atol=1e-9, rtol=0, err_msg=key)


def test_agency_quantities_match_definitions():
    rng = np.random.default_rng(1)
    s, a, s_next = _stream(rng, 2000, 6, True, True)
    got = sliding_metrics(s, s_next, a, window=200, stride=100)

    def h(*cols):
        _, c = np.unique(np.stack(cols, 1), axis=0, return_counts=True)
        p = c / c.sum()
        return -(p * np.log2(p)).sum()

    for i, st_ in enumerate(got["start"]):
        w = slice(st_, st_ + 200)
        choice = h(s[w], a[w]) - h(s[w])
        effect = h(s[w], a[w]) + h(s[w], s_next[w]) - h(s[w]) - h(s[w], a[w], s_next[w])
        assert got["H_A_given_S"][i] == pytest.approx(choice, abs=1e-9)
        assert got["MI_A_S_next_given_S"][i] == pytest.approx(max(effect, 0.0), abs=1e-9)
        assert got["H_SS_next"][i] == pytest.approx(h(s[w], s_next[w]), abs=1e-9)
        assert got["K_SAS"][i] == len(np.unique(np.stack([s[w], a[w], s_next[w]], 1), axis=0))
        assert got["unique_frac"][i] == got["K_SAS"][i] / 200


# --- hand-computed cases ------------------------------------------------------------------


def test_bijective_deterministic_stream_is_at_the_ceiling():
    s = np.arange(600) % 37
    s_next = (s * 5 + 3) % 37  # a bijection of the 37 symbols
    w = sliding_metrics(s, s_next, window=300, stride=75)
    assert np.all(w["P"] == 0.5)
    assert np.all(w["H_f"] == 0.0) and np.all(w["H_b"] == 0.0) and np.all(w["dH"] == 0.0)


def test_independent_streams_have_p_near_zero():
    rng = np.random.default_rng(2)
    s, s_next = rng.integers(0, 2, 20000), rng.integers(0, 2, 20000)
    w = sliding_metrics(s, s_next, window=10000, stride=5000)
    assert np.all(w["P"] < 5e-4)
    assert np.all(w["P"] >= 0)


def test_all_unique_stream_with_action_is_exactly_one_third():
    n = 900
    s, a, s_next = np.arange(n), np.arange(n) + 10**6, np.arange(n) * 3 + 5
    w = sliding_metrics(s, s_next, a, window=300, stride=50)
    np.testing.assert_allclose(w["P"], 1 / 3, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(w["unique_frac"], 1.0)


def test_two_by_two_hand_case():
    # S, S' uniform and independent in a 4-sample window: H(S)=H(S')=1, H(S,S')=2.
    s = np.array([0, 0, 1, 1])
    s_next = np.array([0, 1, 0, 1])
    w = sliding_metrics(s, s_next, window=4, stride=1)
    assert w["P"][0] == 0.0
    assert w["H_f"][0] == pytest.approx(1.0, abs=1e-15)
    assert w["H_b"][0] == pytest.approx(1.0, abs=1e-15)


def test_hand_case_with_action():
    # S constant, A uniform on {0, 1}, S' = A: H(S)=0, H(A)=1, H(S')=1, MI(S,A;S')=1.
    s = np.zeros(8, dtype=np.int64)
    a = np.array([0, 1] * 4)
    w = sliding_metrics(s, a.copy(), a, window=8, stride=8)
    assert w["P"][0] == pytest.approx(0.5, abs=1e-15)
    assert w["H_A_given_S"][0] == pytest.approx(1.0, abs=1e-15)
    assert w["MI_A_S_next_given_S"][0] == pytest.approx(1.0, abs=1e-15)
    assert w["H_f"][0] == 0.0 and w["H_b"][0] == 0.0


def test_constant_signal_gives_nan_not_zero():
    s = np.full(400, 7)
    w = sliding_metrics(s, s.copy(), window=300, stride=50)
    assert np.all(np.isnan(w["P"]))
    assert np.all(w["H_S"] == 0.0) and np.all(w["H_f"] == 0.0)


def test_miller_madow_adds_k_minus_one_over_2n_ln2():
    rng = np.random.default_rng(3)
    s, a, s_next = _stream(rng, 1500, 9, True, True)
    plug = sliding_metrics(s, s_next, a, window=300, stride=150)
    mm = sliding_metrics(s, s_next, a, window=300, stride=150, correction="miller-madow")
    bias = 1 / (2 * 300 * math.log(2))
    np.testing.assert_allclose(mm["H_S"], plug["H_S"] + (plug["K_S"] - 1) * bias, atol=1e-12)
    np.testing.assert_allclose(
        mm["H_SAS"], plug["H_SAS"] + (plug["K_SAS"] - 1) * bias, atol=1e-12
    )
    np.testing.assert_allclose(mm["H_f"], mm["H_SAS"] - mm["H_SA"], atol=1e-12)
    assert np.all(mm["H_S"] > plug["H_S"])


def test_stride_longer_than_window_skips_samples():
    rng = np.random.default_rng(4)
    s, a, s_next = _stream(rng, 1000, 5, True, True)
    got = sliding_metrics(s, s_next, a, window=30, stride=100)
    ref = reference_metrics(s, s_next, a, window=30, stride=100)
    np.testing.assert_array_equal(got["start"], np.arange(0, 971, 100))
    np.testing.assert_allclose(got["P"], ref["P"], atol=1e-12)


def test_fewer_samples_than_a_window_give_no_windows():
    w = sliding_metrics(np.arange(10), np.arange(10), window=300, stride=75)
    assert all(len(v) == 0 for v in w.values())


@pytest.mark.parametrize(
    "kwargs,error",
    [
        ({"s": np.ones(5), "s_next": np.ones(5)}, TypeError),
        ({"s": np.ones(5, int), "s_next": np.ones(4, int)}, ValueError),
        ({"s": np.ones((5, 2), int), "s_next": np.ones((5, 2), int)}, ValueError),
        ({"s": np.ones(5, int), "s_next": np.ones(5, int), "window": 0}, ValueError),
        ({"s": np.ones(5, int), "s_next": np.ones(5, int), "stride": 0}, ValueError),
        ({"s": np.ones(5, int), "s_next": np.ones(5, int), "correction": "x"}, ValueError),
    ],
)
def test_bad_input_is_rejected_with_a_clear_error(kwargs, error):
    with pytest.raises(error):
        sliding_metrics(**kwargs)


def test_engine_with_action_needs_a():
    with pytest.raises(ValueError, match="pass a"):
        MetricEngine(10, 5, has_action=True).push(np.arange(20), np.arange(20))


def test_reset_forgets_everything():
    rng = np.random.default_rng(5)
    s, a, s_next = _stream(rng, 700, 6, True, True)
    eng = MetricEngine(100, 30)
    first = eng.push(s, s_next, a)
    eng.reset()
    again = eng.push(s, s_next, a)
    for k in first:
        np.testing.assert_array_equal(first[k], again[k])


# --- properties -----------------------------------------------------------------------------

streams = st.integers(min_value=1, max_value=12).flatmap(
    lambda k: st.tuples(
        st.lists(st.integers(0, k), min_size=40, max_size=240),
        st.integers(0, 2**32),
        st.booleans(),
    )
)


def _arrays(data):
    values, seed, with_action = data
    rng = np.random.default_rng(seed)
    s = np.array(values, dtype=np.int64)
    s_next = np.roll(s, -1) if seed % 2 else rng.permutation(s)
    a = (s + rng.integers(0, 2, len(s))) % 3 if with_action else None
    return s, a, s_next


@given(streams, st.integers(5, 40), st.integers(1, 25))
def test_bounds_hold(data, window, stride):
    s, a, s_next = _arrays(data)
    w = sliding_metrics(s, s_next, a, window=window, stride=stride)
    p = w["P"][~np.isnan(w["P"])]
    assert np.all(p >= 0) and np.all(p <= 0.5 + 1e-12)
    assert np.all(w["H_f"] >= 0) and np.all(w["H_b"] >= 0)
    assert np.all(w["MI"] <= np.minimum(w["H_SA"], w["H_S_next"]) + 1e-12)
    assert np.all(w["H_A_given_S"] >= 0) and np.all(w["MI_A_S_next_given_S"] >= 0)
    assert np.all((w["unique_frac"] > 0) & (w["unique_frac"] <= 1))


@given(streams, st.integers(5, 40), st.integers(1, 25), st.integers(0, 2**32))
def test_invariant_to_relabelling_symbols(data, window, stride, seed):
    s, a, s_next = _arrays(data)
    rng = np.random.default_rng(seed)
    relabel = rng.permutation(50) * 1_000_003 - 7  # any injective map, negatives included
    relabel_a = rng.permutation(50) + 2**40
    w = sliding_metrics(s, s_next, a, window=window, stride=stride)
    r = sliding_metrics(
        relabel[s], relabel[s_next], None if a is None else relabel_a[a], window, stride
    )
    for key in w:
        np.testing.assert_array_equal(w[key], r[key], err_msg=key)


@given(streams, st.integers(5, 40), st.integers(1, 25), st.lists(st.integers(0, 240), max_size=6))
def test_streaming_equals_batch_for_every_split(data, window, stride, cuts):
    s, a, s_next = _arrays(data)
    batch = sliding_metrics(s, s_next, a, window=window, stride=stride)
    engine = MetricEngine(window, stride, has_action=a is not None)
    edges = [0, *sorted(c for c in cuts if c < len(s)), len(s)]
    parts = [
        engine.push(s[lo:hi], s_next[lo:hi], None if a is None else a[lo:hi])
        for lo, hi in itertools.pairwise(edges)
    ]
    for key in batch:
        joined = np.concatenate([p[key] for p in parts])
        np.testing.assert_array_equal(joined, batch[key], err_msg=key)
    assert engine.n_seen == len(s)


# --- surrogate null -------------------------------------------------------------------------


def test_surrogate_null_separates_coupling_from_artefact():
    rng = np.random.default_rng(6)
    s = rng.integers(0, 6, 1500)
    coupled = sliding_metrics(s, (s + 1) % 6, window=300, stride=300)
    null_c = surrogate_null(s, (s + 1) % 6, window=300, stride=300, n_draws=20, seed=1)
    assert np.all(coupled["P"] > null_c["P_null_mean"] + 5 * null_c["P_null_std"])
    indep = rng.integers(0, 6, 1500)
    null_i = surrogate_null(s, indep, window=300, stride=300, n_draws=20, seed=1)
    assert np.all(np.abs(null_i["P_null_z"]) < 4)


def test_surrogate_null_is_seeded_and_keeps_marginals():
    rng = np.random.default_rng(7)
    s, a, s_next = _stream(rng, 900, 8, True, True)
    one = surrogate_null(s, s_next, a, window=300, stride=150, n_draws=8, seed=3)
    two = surrogate_null(s, s_next, a, window=300, stride=150, n_draws=8, seed=3)
    other = surrogate_null(s, s_next, a, window=300, stride=150, n_draws=8, seed=4)
    np.testing.assert_array_equal(one["P_null_mean"], two["P_null_mean"])
    assert not np.array_equal(one["P_null_mean"], other["P_null_mean"])
    # Shuffling S' cannot raise MI above min(H(S,A), H(S')): the null P obeys the bound.
    assert np.all(one["P_null_mean"] <= 0.5)


def test_window_means():
    x = np.arange(10, dtype=float)
    np.testing.assert_allclose(window_means(x, np.array([0, 5]), 5), [2.0, 7.0])
