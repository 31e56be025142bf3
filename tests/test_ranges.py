"""Out-of-range symbols re-checked with wider bins: the widening, the row ring, the verdicts."""

from __future__ import annotations

import numpy as np
import pytest

from idt_desk import Symbolizer
from idt_desk.detection.monitor import IDT_METRICS
from idt_desk.live.ranges import RowRing, recheck, recheck_text, shift_verdict
from idt_desk.metrics.reference import reference_metrics

W, STRIDE = 100, 25


def test_widened_keeps_the_scale_and_recuts_equal_bins_over_the_union():
    sym = Symbolizer(2, bins=4).fit(np.array([[0.0, 10.0], [4.0, 14.0]]))
    wide = sym.widened(np.array([[-4.0, 11.0]]), np.array([[2.0, 30.0]]))
    # Column 0 now spans [-4, 4] (bins of width 2); column 1 spans [10, 30] (width 5).
    x = np.array([[-3.9, 10.1], [-0.1, 14.9], [0.1, 15.1], [3.9, 29.9], [9.0, 99.0]])
    np.testing.assert_array_equal(wide.digits(x), [[0, 0], [1, 0], [2, 1], [3, 3], [3, 3]])
    assert not wide.symbolize(np.array([[-4.0, 30.0], [4.0, 10.0]]))[1].any()
    assert sym.symbolize(np.array([[-4.0, 30.0]]))[1].all()  # the original is untouched
    np.testing.assert_array_equal(sym.digits(np.array([[0.9, 11.1]])), [[0, 1]])


def test_row_ring_keeps_indices_through_growth_and_forgets_what_it_may():
    rng = np.random.default_rng(1)
    ring, s_all, a_all, n_all = RowRing(), [], [], []
    for size, keep in [(5, 10), (700, 10), (3, 2000), (1500, 2000), (40, 50)]:
        s, a, n = rng.normal(size=(size, 3)), rng.normal(size=(size, 2)), rng.normal(size=(size, 3))
        ring.add(s, a, n, keep=keep)
        s_all.append(s), a_all.append(a), n_all.append(n)
        s_cat, a_cat, n_cat = (np.concatenate(x) for x in (s_all, a_all, n_all))
        lo = max(ring.total - max(keep, size), 0)
        got = ring.rows(lo, ring.total)
        for g, want in zip(got, (s_cat, a_cat, n_cat), strict=True):
            np.testing.assert_array_equal(g, want[lo:])
    assert ring.total == 2248
    assert ring.rows(0, 10) is None  # long forgotten
    assert ring.rows(ring.total - 5, ring.total + 1) is None  # not there yet
    passive = RowRing()
    passive.add(np.ones((4, 2)), None, np.zeros((4, 2)), keep=4)
    s, a, n = passive.rows(1, 3)
    assert a is None and s.shape == n.shape == (2, 2)


# A one-variable loop whose bins can be reasoned about exactly: the symbols are calibrated on
# values spanning [0, 2] (3 bins of width 2/3); the loop's states and actions take the values
# 0.1 and 1.3, in bins 0 and 1. A state shifted by +1.7 (1.8 and 3.0) leaves that range: in the
# calibrated bins both land in the top bin (S is constant, P falls to 0). Bins widened to
# [0, 3] (width 1) put 0.1, 1.3 in bins 0, 1 and 1.8, 3.0 in bins 1, 2: the same partition.
LOW, HIGH, SHIFT = 0.1, 1.3, 1.7


def _loop(n: int, seed: int, copy: float = 0.9) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """S' copies A with probability ``copy`` (else a coin): rows (s, a, s_next)."""
    rng = np.random.default_rng(seed)
    a = rng.choice([LOW, HIGH], size=n)
    s_next = np.where(rng.random(n) < copy, a, rng.choice([LOW, HIGH], size=n))
    s = np.concatenate([[LOW], s_next[:-1]])
    return s[:, None], a[:, None], s_next[:, None]


def _shifted(rows: tuple) -> tuple:
    s, a, s_next = rows
    return s + SHIFT, a, s_next + SHIFT


def _symbolizers() -> tuple[Symbolizer, Symbolizer]:
    cal = np.array([[0.0], [0.5], [2.0]])
    return Symbolizer(1, bins=3).fit(cal), Symbolizer(1, bins=3).fit(cal)


def _check(reference: tuple, recent: tuple) -> dict:
    sym_s, sym_a = _symbolizers()
    return recheck(sym_s, sym_a, reference, recent, window=W, stride=STRIDE, k=3.0)


def test_a_shift_that_only_the_edge_bins_made_is_called_an_artefact():
    reference = _loop(W + 39 * STRIDE, seed=0)
    out = _check(reference, _shifted(reference))
    assert out["verdict"] == "artefact" and out["shifted"] == []
    assert out["shift"]["P"]["calibrated"] <= -3.0  # S clamped to one bin: P collapses
    for m in IDT_METRICS:  # the same partition in the widened bins: no shift at all
        assert out["shift"][m]["widened"] == 0.0


def test_a_changed_coupling_is_a_shift_in_the_widened_bins():
    reference = _loop(W + 39 * STRIDE, seed=0)
    recent = _shifted(_loop(W + 19 * STRIDE, seed=5, copy=0.0))  # S' no longer follows A
    out = _check(reference, recent)
    assert out["verdict"] == "shift" and "P" in out["shifted"]
    # Independently: symbols by hand (the widened bins of the comment above), every window
    # recounted with the plain reference, the shift in the reference's σ.
    def digits(x: np.ndarray) -> np.ndarray:
        return np.searchsorted([1.0, 2.0], x[:, 0], side="right")

    ref = reference_metrics(digits(reference[0]), digits(reference[2]),
                            np.searchsorted([0.667], reference[1][:, 0]), W, STRIDE)
    now = reference_metrics(digits(recent[0]), digits(recent[2]),
                            np.searchsorted([0.667], recent[1][:, 0]), W, STRIDE)
    for m in IDT_METRICS:
        want = (now[m].mean() - ref[m].mean()) / ref[m].std(ddof=1)
        assert out["shift"][m]["widened"] == pytest.approx(want, abs=0.006)


def test_a_shift_that_wider_bins_shrink_but_keep_is_still_a_shift():
    # What 1 % action noise does to a settled gait: P -4.2 sd in the calibrated bins, -2.9 in
    # bins widened over the noise's spread. Half of it or more, same sign: the loop moved.
    def verdict(cal: float, wide: float) -> tuple[str, list]:
        shift = {m: {"calibrated": 0.5, "widened": 0.5} for m in IDT_METRICS}
        shift["P"] = {"calibrated": cal, "widened": wide}
        return shift_verdict(shift, 3.0)

    assert verdict(-4.2, -2.9) == ("shift", ["P"])
    assert verdict(-4.2, -2.0) == ("artefact", [])  # less than half kept
    assert verdict(-4.2, +2.9) == ("artefact", [])  # the sign flipped
    assert verdict(-2.0, -3.1) == ("shift", ["P"])  # the wider bins show more
    assert verdict(-2.9, -2.9) == ("none", [])


def test_the_same_loop_again_has_nothing_to_recheck():
    out = _check(_loop(W + 39 * STRIDE, seed=0), _loop(W + 19 * STRIDE, seed=7))
    assert out["verdict"] == "none" and out["shifted"] == []
    assert all(abs(out["shift"][m][b]) < 3.0 for m in IDT_METRICS
               for b in ("calibrated", "widened"))


def _kicked(tmp_path, at: int, steps: int):
    """A recorded pendulum session (baseline 30 windows) kicked out of range at ``at``."""
    from idt_desk_sources.pendulum import PendulumSource

    from idt_desk.live.session import Session, SessionConfig, run_headless
    from idt_desk.recordings import load_recording

    session = Session(SessionConfig(speed=None, baseline_windows=30), record=tmp_path / "r")
    session.schedule(at, "perturb", name="kick",
                     params=PendulumSource.perturbation("kick").resolve({"d_omega1": 12.0}))
    run_headless(session, steps=steps)
    rec = load_recording(tmp_path / "r")
    ev = rec.events
    return session, ev, rec.windows, ev[ev["kind"] == "baseline"].iloc[0]


def _assert_calibrated_shifts(check, at: int, windows, base) -> None:
    """The re-check's calibrated-bin shifts are the recorded windows' against the baseline's."""
    from idt_desk.live.session import Session

    latest = windows[windows["end"] <= at].tail(Session.OUT_OF_RANGE_PERSIST)
    assert int(latest["end"].iloc[-1]) == at
    for m in IDT_METRICS:
        want = (latest[m].mean() - base["mean"][m]) / base["std"][m]
        assert check["shift"][m]["calibrated"] == pytest.approx(want, abs=0.006)


def test_a_session_rechecks_its_out_of_range_warning_against_its_baseline(tmp_path):
    """A kick takes the pendulum's rates out of range: the warning's event carries a re-check
    whose calibrated-bin shifts are exactly what the recorded windows and baseline say."""
    from idt_desk.live.session import Session

    session, ev, w, base = _kicked(tmp_path, 6000, 14000)
    warn = ev[ev["kind"] == "symbols_out_of_range"].iloc[0]
    check, at = warn["recheck"], int(warn["i"])
    assert check["verdict"] in ("shift", "artefact", "none") and check["k"] == 3.0
    _assert_calibrated_shifts(check, at, w, base)
    # While the warning holds, it is re-checked every PERSIST windows.
    later = session.snapshot(1).out_of_range_warning["recheck"]
    assert later["at"] > at and (later["at"] - at) % (
        Session.OUT_OF_RANGE_PERSIST * session.preset.stride) == 0


def test_the_recheck_in_words_names_the_components_and_the_advice():
    def check(verdict: str, cal: dict, wide: dict, shifted=()) -> dict:
        return {"verdict": verdict, "shifted": list(shifted), "k": 3.0,
                "shift": {m: {"calibrated": cal.get(m, 0.1), "widened": wide.get(m, 0.1)}
                          for m in IDT_METRICS}}

    text = recheck_text(check("shift", {"H_f": 2.59}, {"H_f": 3.47, "H_b": 3.49},
                              shifted=("H_f", "H_b")))
    assert "H_f +3.5 sd, H_b +3.5 sd from the baseline (calibrated bins: +2.6, +0.1)" in text
    assert "re-calibrating now would take the changed loop as the new normal" in text
    text = recheck_text(check("artefact", {"P": -3.4, "H_f": 1.0}, {"P": -0.4}))
    assert "P -0.4 sd, where the calibrated bins gave -3.4" in text
    assert text.endswith("re-calibrate.")
    text = recheck_text(check("none", {"H_b": -2.2}, {}))
    assert "in either binning (largest: H_b -2.2 sd" in text
    nan = float("nan")
    text = recheck_text(check("none", dict.fromkeys(IDT_METRICS, nan), {}))
    assert "cannot be compared" in text


def test_clamping_while_the_baseline_is_gathered_is_judged_once_there_is_one(tmp_path,
                                                                          monkeypatch):
    """Kicked while the baseline is still being gathered: nothing is said then (the baseline
    is gathered with that clamping); once it exists, the heavy clamping is re-checked against
    it, which finds no component moved (the baseline holds the kicked loop too): not said,
    however heavy."""
    from idt_desk.live import ranges
    from idt_desk.live.session import Session

    checks = []
    plain = ranges.RangeWatch._recheck

    def recheck(self, at):
        got = plain(self, at)
        checks.append((at, got))
        return got

    monkeypatch.setattr(ranges.RangeWatch, "_recheck", recheck)
    _session, ev, w, base = _kicked(tmp_path, 2500, 9000)
    assert not len(ev[ev["kind"] == "symbols_out_of_range"])
    assert checks and all(at >= base["i"] for at, _c in checks)
    assert all(c["verdict"] == "none" for _at, c in checks)
    heavy = ranges.RangeWatch.HEAVY * Session.OUT_OF_RANGE_WARN
    assert w["out_of_range"].iloc[-20:].mean() > heavy  # heavy indeed
    _assert_calibrated_shifts(checks[0][1], int(checks[0][0]), w, base)


N_REF = W + 39 * STRIDE  # rows of a 40-window baseline
N_RECENT = W + 19 * STRIDE  # rows of the latest 20 windows


def _watch(armed: bool = True):
    """A RangeWatch over a stand-in session (40-window baseline), and the events it says."""
    from types import SimpleNamespace

    from idt_desk.live.ranges import RangeWatch

    sym_s, sym_a = _symbolizers()
    events: list = []
    ses = SimpleNamespace(
        preset=SimpleNamespace(window=W, stride=STRIDE),
        monitor=SimpleNamespace(n_baseline=40, k=3.0, baseline=object() if armed else None),
        pipeline=SimpleNamespace(sym_s=sym_s, sym_a=sym_a), config=SimpleNamespace(correction=None))
    return RangeWatch(0.05, 20, lambda kind, **kw: events.append((kind, kw)), ses), events


def _clamped(watch, recent: tuple, fraction: float, windows: int = 23) -> None:
    """The baseline's rows, then ``recent`` ones; windows after the baseline at ``fraction``."""
    ref = _loop(N_REF, seed=0)
    watch.add_rows(*(np.concatenate([x, y]) for x, y in zip(ref, recent, strict=True)),
                   backlog=0)
    ends = N_REF + STRIDE * np.arange(windows + 1)
    watch.update({"end": ends, "out_of_range": np.r_[0.0, np.full(windows, fraction)]},
                 baseline_row=0)


@pytest.mark.parametrize(("fraction", "shifted", "windows", "said"), [
    (0.10, False, 23, None),  # a few per cent clamped, nothing moved: a settled gait's normal
    (0.30, False, 48, None),  # most values in edge bins, for long, nothing moved: not said
    (0.30, True, 23, "artefact"),  # heavy, and the components moved: said
    (0.10, True, 23, "artefact"),  # the edge bins moved the components: said (re-calibrate)
])
def test_clamping_is_said_when_it_matters(fraction, shifted, windows, said):
    watch, events = _watch()
    recent = _loop(N_RECENT + (windows - 23) * STRIDE, seed=7)
    _clamped(watch, _shifted(recent) if shifted else recent, fraction, windows=windows)
    kinds = [(k, kw.get("recheck", {}).get("verdict")) for k, kw in events]
    assert kinds == ([] if said is None else [("symbols_out_of_range", said)])
    assert (watch.warning is None) == (said is None)


def test_the_notice_clears_once_its_recheck_finds_nothing_moved():
    """A perturbation switched off leaves a few per cent clamped: the re-check that finds no
    component moved clears the notice (``symbols_in_range``, with that re-check), as it
    would not have been said for such clamping in the first place."""
    watch, events = _watch()
    on = _shifted(_loop(N_RECENT, seed=7))
    off = _loop(30 * STRIDE, seed=8)
    _clamped(watch, tuple(np.concatenate([x, y]) for x, y in zip(on, off, strict=True)), 0.10,
             windows=23 + 30)
    kinds = [(k, kw.get("recheck", {}).get("verdict")) for k, kw in events]
    assert kinds == [("symbols_out_of_range", "artefact"), ("symbols_in_range", "none")]
    assert watch.warning is None


def test_harmless_clamping_is_rechecked_every_persist_windows_not_every_window(monkeypatch):
    from idt_desk.live import ranges

    calls = []
    plain = ranges.RangeWatch._recheck
    monkeypatch.setattr(ranges.RangeWatch, "_recheck",
                        lambda self, at: calls.append(at) or plain(self, at))
    watch, events = _watch()
    _clamped(watch, _loop(N_RECENT + 25 * STRIDE, seed=7), 0.10, windows=48)
    assert events == [] and np.diff(calls).tolist() == [20 * STRIDE]


def test_nothing_is_said_before_there_is_a_baseline():
    watch, events = _watch(armed=False)
    _clamped(watch, _loop(N_RECENT, seed=7), 0.9)
    assert events == [] and watch.warning is None


def test_the_reference_windows_in_the_calibrated_bins_are_computed_once():
    sym_s, sym_a = _symbolizers()
    reference = _loop(W + 39 * STRIDE, seed=0)
    cache: dict = {}
    got = [recheck(sym_s, sym_a, reference, _shifted(_loop(W + 19 * STRIDE, seed=s)),
                   window=W, stride=STRIDE, cache=cache) for s in (3, 4)]
    assert len(cache["calibrated"]["P"]) == 40
    for recent_seed, out in zip((3, 4), got, strict=True):
        fresh = _check(reference, _shifted(_loop(W + 19 * STRIDE, seed=recent_seed)))
        assert out == fresh


def test_a_baseline_too_long_to_hold_is_not_kept_for_a_recheck():
    from types import SimpleNamespace

    from idt_desk.live.ranges import RangeWatch

    def watch(n_baseline: int, stride: int) -> RangeWatch:
        ses = SimpleNamespace(preset=SimpleNamespace(window=300, stride=stride),
                              monitor=SimpleNamespace(n_baseline=n_baseline))
        w = RangeWatch(0.05, 20, lambda *a, **k: None, ses)
        w.add_rows(np.ones((10, 17)), np.ones((10, 6)), np.ones((10, 17)), backlog=0)
        return w

    assert watch(800, 50)._rows.total == 10  # the cheetah's default: 40,250 rows, 13 MB
    # 10,000 windows at a stride of 100,000 (both within the limits): 1e9 rows, never held.
    assert watch(10_000, 100_000)._rows.total == 0


def test_a_warning_is_never_seen_without_its_recheck(tmp_path, monkeypatch):
    """The GUI reads the warning from its own thread while the loop's thread re-checks it:
    a warning raised after the baseline is published only once its re-check is attached."""
    from idt_desk.live import ranges

    seen = []
    plain = ranges.RangeWatch._recheck

    def observing(self, at):  # what a snapshot taken during the re-check would copy
        seen.append(None if self.warning is None else dict(self.warning))
        return plain(self, at)

    monkeypatch.setattr(ranges.RangeWatch, "_recheck", observing)
    _session, ev, _w, _base = _kicked(tmp_path, 6000, 9000)
    warn = ev[ev["kind"] == "symbols_out_of_range"].iloc[0]
    assert isinstance(warn["recheck"], dict)
    assert seen and seen[0] is None  # the first re-check ran before the warning was out
    assert all(s is None or isinstance(s.get("recheck"), dict) for s in seen)


def test_a_component_undefined_in_the_wider_bins_is_said_so_not_nan():
    from idt_desk.live.ranges import recheck_text

    shift = {m: {"calibrated": 0.2, "widened": 0.1} for m in ("P", "H_f", "H_b", "dH")}
    shift["P"] = {"calibrated": -12.1, "widened": float("nan")}
    text = recheck_text({"verdict": "artefact", "shift": shift, "k": 3.0, "shifted": []})
    assert "P undefined, where the calibrated bins gave -12.1" in text and "nan" not in text
