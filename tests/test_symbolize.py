"""The symboliser: frozen calibration, equal-width bins, composites of any size, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from idt_desk import SymbolizationError, Symbolizer, combine_digits, sliding_metrics
from idt_desk.metrics.presets import PRESETS


def test_equal_width_bins_over_calibrated_range():
    x = np.linspace(-3.0, 5.0, 9)[:, None]  # range 8, four bins of width 2
    sym = Symbolizer(1, bins=4).fit(x)
    np.testing.assert_array_equal(sym.digits(x)[:, 0], [0, 0, 1, 1, 2, 2, 3, 3, 3])


def test_calibration_is_frozen_and_out_of_range_values_clamp():
    sym = Symbolizer(1, bins=4).fit(np.array([[0.0], [1.0], [2.0], [4.0]]))
    later = np.array([[-100.0], [0.9], [1.1], [3.9], [100.0]])
    np.testing.assert_array_equal(sym.digits(later)[:, 0], [0, 0, 1, 3, 3])
    # Refitting is the only way to move the edges.
    assert sym.digits(np.array([[100.0]]))[0, 0] == 3


def test_matches_pandas_cut_binning_of_the_zscores():
    # The authors' released pendulum pipeline: z-score, then pd.cut(bins=16, labels=False).
    import pandas as pd

    rng = np.random.default_rng(0)
    x = rng.normal(size=(5000, 3)) * [1.0, 10.0, 0.1] + [0.0, 3.0, -7.0]
    sym = Symbolizer(3, bins=16).fit(x)
    z = (x - x.mean(0)) / x.std(0, ddof=1)
    expected = np.stack([pd.cut(z[:, j], bins=16, labels=False) for j in range(3)], 1)
    mismatch = (sym.digits(x) != expected).mean()
    assert mismatch < 1e-3  # at most a value sitting exactly on an edge may differ


def test_groups_make_mixed_radix_composites():
    sym = Symbolizer(3, bins=[2, 3, 4], groups=[[0, 2], [1]])
    x = np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.5]])
    sym.fit(x)
    d = sym.digits(x)
    g = sym.group_symbols(x)
    np.testing.assert_array_equal(g[:, 0], d[:, 0] + 2 * d[:, 2])
    np.testing.assert_array_equal(g[:, 1], d[:, 1])
    np.testing.assert_array_equal(sym.transform(x), g[:, 0] + 8 * g[:, 1])
    assert sym.alphabet_size == 24


def test_variables_in_no_group_are_dropped():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(100, 3))
    full = Symbolizer(3, bins=4, groups=[[0], [1]]).fit(x)
    y = x.copy()
    y[:, 2] = rng.normal(size=100)
    np.testing.assert_array_equal(full.transform(x), full.transform(y))


def test_huge_alphabets_are_hashed_injectively_in_practice():
    # 16 bins x 20 variables = 2**80 symbols: beyond int64, so digits are hashed.
    rng = np.random.default_rng(2)
    digits = rng.integers(0, 16, size=(20000, 20))
    digits[1::2] = digits[::2]  # every row appears twice
    sym = combine_digits(digits, [16] * 20)
    assert sym.dtype == np.int64 and np.all(sym >= 0)
    _, inv = np.unique(digits, axis=0, return_inverse=True)
    # Same tuple -> same symbol, different tuples -> different symbols (same partition).
    assert len(np.unique(sym)) == inv.max() + 1
    np.testing.assert_array_equal(sym[1::2], sym[::2])


def test_halfcheetah_sized_streams_work_end_to_end():
    preset = PRESETS["cheetah"]
    rng = np.random.default_rng(3)
    obs = rng.normal(size=(1201, 17))
    act = rng.uniform(-1, 1, size=(1200, 6))
    ss = Symbolizer(17, preset.bins, preset.state_groups).fit(obs)
    sa = Symbolizer(6, preset.bins, preset.action_groups).fit(act)
    assert ss.alphabet_size * sa.alphabet_size * ss.alphabet_size > 2**63
    s, s_next = ss.transform(obs[:-1]), ss.transform(obs[1:])
    w = sliding_metrics(s, s_next, sa.transform(act), preset.window, preset.stride)
    assert len(w["P"]) == (1200 - 300) // 50 + 1
    assert np.all(np.isfinite(w["P"]))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_name_the_variable_and_row(bad):
    x = np.zeros((10, 3))
    x[:, 1] = np.arange(10)
    sym = Symbolizer(3, bins=4, names=["theta1", "theta2", "omega1"]).fit(x)
    y = x.copy()
    y[7, 2] = bad
    with pytest.raises(SymbolizationError, match=r"variable 'omega1' at row 7"):
        sym.transform(y)
    with pytest.raises(SymbolizationError, match=r"'omega1' at row 7"):
        Symbolizer(3, names=["theta1", "theta2", "omega1"]).fit(y)


def test_circular_variables_wrap_before_binning():
    sym = Symbolizer(1, bins=4, circular=[0])
    x = np.array([[-np.pi + 0.01], [0.0], [np.pi]])
    sym.fit(x)
    assert sym.digits(x + 2 * np.pi).tolist() == sym.digits(x).tolist()
    assert sym.digits(np.array([[-np.pi]]))[0, 0] == sym.digits(np.array([[np.pi]]))[0, 0]


def test_constant_variable_is_one_bin():
    x = np.column_stack([np.full(50, 3.0), np.arange(50.0)])
    sym = Symbolizer(2, bins=8).fit(x)
    assert set(sym.digits(x)[:, 0]) == {0}


def test_uncalibrated_and_misshaped_inputs_are_rejected():
    sym = Symbolizer(2)
    with pytest.raises(SymbolizationError, match="not calibrated"):
        sym.transform(np.zeros((3, 2)))
    sym.fit(np.arange(6.0).reshape(3, 2))
    with pytest.raises(SymbolizationError, match=r"shape \(n, 2\)"):
        sym.transform(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="groups"):
        Symbolizer(2, groups=[[0, 5]])


def test_round_trips_through_a_dict():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(300, 4))
    sym = Symbolizer(4, bins=[3, 4, 5, 6], groups=[[0, 1], [3]], circular=[1]).fit(x)
    back = Symbolizer.from_dict(sym.to_dict())
    np.testing.assert_array_equal(back.transform(x), sym.transform(x))


def test_one_weighted_sum_equals_the_composite_of_group_composites():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(500, 7))
    for groups, bins in (([[0, 3], [1, 2, 6], [5]], 4), (None, [2, 3, 4, 5, 2, 3, 4])):
        sym = Symbolizer(7, bins, groups).fit(x)
        d = sym.digits(x)
        slow = combine_digits(sym.group_symbols(x), sym.group_radices())
        np.testing.assert_array_equal(sym.transform(x), slow)
        assert slow.max() < sym.alphabet_size and d.shape == (500, 7)
