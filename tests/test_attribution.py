"""One IDT per part of the state and the live cheetah's symbols (the class of an alarm's change:
``tests/test_twin.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from idt_desk.detection.monitor import IDT_METRICS, Monitor, base_metric
from idt_desk.metrics.engine import sliding_metrics
from idt_desk.metrics.presets import PRESETS, Preset
from idt_desk.metrics.symbolize import Symbolizer
from idt_desk.pipeline import Pipeline, part_metrics

PARTS = Preset("toy-parts", "two parts", bins=3, window=200, stride=50,
               state_groups=((0, 1), (2, 3, 4)), parts=("front", "back"))


def _stream(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.cumsum(rng.normal(size=(n + 1, 5)), axis=0) * 0.1 + rng.normal(size=(n + 1, 5))
    return x, np.tanh(x[:-1, :2] + rng.normal(size=(n, 2)))


def test_each_part_is_the_engine_of_its_own_symbols_and_the_plain_columns_their_mean():
    x, u = _stream(3000)
    pipe = Pipeline(PARTS, None, state_names=list("abcde"), action_names=["u", "w"],
                    calibration_windows=4)
    w = pipe.push(x[:-1], u, x[1:], {"reward": np.zeros(3000), "t": np.arange(3000.0)}).windows
    # Reference: the symbolisers fitted on the same rows, each group's composite its own S.
    fit = PARTS.window + 3 * PARTS.stride
    sym_s = Symbolizer(5, 3, PARTS.state_groups).fit(x[:-1][:fit])
    sym_a = Symbolizer(2, 3).fit(u[:fit])
    g, gn, a = sym_s.group_symbols(x[:-1]), sym_s.group_symbols(x[1:]), sym_a.transform(u)
    for j, part in enumerate(PARTS.parts):
        ref = sliding_metrics(g[:, j], gn[:, j], a, PARTS.window, PARTS.stride)
        for m in ("P", "H_f", "H_b", "dH", "K_SAS", "H_A_given_S"):
            np.testing.assert_allclose(w[f"{m}@{part}"], ref[m], rtol=0, atol=1e-12)
    np.testing.assert_allclose(w["P"], (w["P@front"] + w["P@back"]) / 2, atol=1e-15)
    assert part_metrics(PARTS, IDT_METRICS)[:2] == ("P@front", "H_f@front")
    assert part_metrics(PRESETS["cheetah"], IDT_METRICS) == IDT_METRICS


def test_a_preset_with_parts_names_every_group():
    with pytest.raises(ValueError, match="1 part names for 2 state groups"):
        Preset("bad", "", bins=2, window=100, stride=10, state_groups=((0,), (1,)),
               parts=("only",))


def test_a_margin_keeps_two_bin_symbols_and_calls_less_out_of_range():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4000, 3))
    later = rng.normal(size=(4000, 3)) * 1.6
    plain, wide = Symbolizer(3, 2).fit(x[:500]), Symbolizer(3, 2).fit(x[:500], margin=0.5)
    s0, out0 = plain.symbolize(later)
    s1, out1 = wide.symbolize(later)
    np.testing.assert_array_equal(s0, s1)
    assert out0.mean() > 0.05 and out1.mean() < out0.mean() / 5
    # With 3 bins the margin moves the edges: it is a 2-bin device.
    assert not np.array_equal(Symbolizer(3, 3).fit(x[:500]).transform(later),
                              Symbolizer(3, 3).fit(x[:500], margin=0.5).transform(later))


def test_a_plain_metrics_flag_is_the_union_of_its_parts_and_all_are_the_idt_group():
    rng = np.random.default_rng(2)
    metrics = ("P@a", "H_f@a", "P@b", "H_f@b", "reward")
    mon = Monitor(50, 3.0, metrics)
    base = {m: rng.normal(size=50) for m in metrics}
    mon.update(base)
    assert set(mon.flag_names) >= {"P", "H_f", "IDT"} and base_metric("P@a") == "P"
    new = {m: np.zeros(4) for m in metrics}
    new["P@b"] = np.array([0.0, 10.0, 0.0, 0.0])
    flags = mon.update(new)
    np.testing.assert_array_equal(flags["P"], [False, True, False, False])
    np.testing.assert_array_equal(flags["IDT"], flags["P"])
    assert not flags["H_f"].any() and not flags["reward"].any()
