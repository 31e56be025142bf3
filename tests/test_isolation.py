"""Isolation by a bank of fault hypotheses: a generalized likelihood ratio over the twin's
residual names the change, its component and its size.

Checked on a linear loop whose truth is known exactly (x' = F x + G u), against least squares
done independently, and on HalfCheetah with faults the monitor is told nothing of (the
actions commanded, the faults injected by :mod:`idt_desk.gym.faults`)."""

from __future__ import annotations

import numpy as np
import pytest

from idt_desk.detection.isolation import (
    MIN_SHARE,
    ROWS,
    isolate,
    sample_rows,
    signal_hypotheses,
    whitener,
)

D, M, N = 4, 2, 400
NAMES = ("x0", "x1", "x2", "x3")
ACTS = ("u0", "u1")


class Linear:
    """x' = F x + G u: a twin that is the loop exactly."""

    description, kinds = "x' = F x + G u", ("position",) * 2 + ("velocity",) * 2

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        self.F = 0.9 * np.eye(D) + 0.05 * rng.standard_normal((D, D))
        self.G = rng.standard_normal((D, M))

    def predict(self, s, a):
        return s @ self.F.T + a @ self.G.T

    def hypotheses(self, s, a):
        return []


def _loop(fault: str, size: float, seed: int = 1):
    """N transitions read through a faulty sensor or actuator; (S, A commanded, S')."""
    twin = Linear()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(D)
    s, a, s2 = [], [], []
    for _ in range(N + 1):
        u = rng.uniform(-1, 1, M)
        applied = u.copy()
        if fault == "actuator_gain":
            applied[1] *= size
        elif fault == "actuator_noise":
            applied[0] += rng.normal(0, size)
        x_next = twin.F @ x + twin.G @ applied + 1e-9 * rng.standard_normal(D)
        s.append(x), a.append(u), s2.append(x_next)
        x = x_next
    s, a, s2 = (np.array(v) for v in (s, a, s2))
    read = s.copy()
    if fault == "sensor_offset":
        read[:, 2] += size
    elif fault == "sensor_noise":
        read[:, 1] += rng.normal(0, size, len(read))
    # What the loop reads: S of row t+1 is S' of row t.
    seen_s, seen_s2 = read[:-1], read[1:]
    return twin, seen_s, a[:-1], seen_s2


def _isolate(fault: str, size: float, seed: int = 1):
    twin, s, a, s2 = _loop(fault, size, seed)
    base = twin.predict(s, a)
    r = s2 - base
    hyps = signal_hypotheses(twin, s, a, base, NAMES, ACTS, spread=s.std(axis=0))
    # The baseline: the same loop without the fault (its residual at 1e-9).
    _t, bs, ba, bs2 = _loop("none", 0.0, seed + 100)
    rb = bs2 - twin.predict(bs, ba)
    scale = np.sqrt(np.mean(rb ** 2, axis=0))
    w = whitener(np.cov((rb / scale).T))
    return isolate(r / scale - (rb / scale).mean(axis=0), hyps, whiten=w, scale=scale), hyps


@pytest.mark.parametrize(("fault", "size", "name", "rel"), [
    ("sensor_offset", 0.3, "sensor_offset:x2", 0.01),
    ("sensor_noise", 0.05, "sensor_noise:x1", 0.15),
    ("actuator_gain", 0.5, "actuator_gain:u1", 0.01),
    ("actuator_noise", 0.1, "actuator_noise:u0", 0.15)])
def test_each_fault_is_named_with_its_component_and_size(fault, size, name, rel):
    iso, _ = _isolate(fault, size)
    best = iso.best
    assert best.hypothesis.name == name, [f.hypothesis.name for f in iso.fits[:4]]
    assert iso.named and best.share > 0.9
    assert abs(best.size - size) <= rel * size, (best.size, size)
    runner = iso.runner_up
    assert runner is not None
    assert (runner.hypothesis.component, runner.hypothesis.cls) != \
        (best.hypothesis.component, best.hypothesis.cls)
    assert runner.loglik < best.loglik
    d = iso.to_dict()
    assert d["best"]["class"] == fault.split("_")[0] and d["best"]["component"] == name[-2:]


def test_a_mean_fit_is_least_squares_on_the_whitened_residual():
    """The size of a mean hypothesis (before its exact simulation refines it) against numpy's
    lstsq on the same whitened arrays."""
    twin, s, a, s2 = _loop("sensor_offset", 0.3)
    base = twin.predict(s, a)
    hyps = [h for h in signal_hypotheses(twin, s, a, base, NAMES, ACTS)
            if h.name == "actuator_offset:u0"]
    w = whitener(np.diag([1.0, 2.0, 3.0, 4.0]))
    y = s2 - base
    want = np.linalg.lstsq((hyps[0].delta @ w.T).reshape(-1, 1), (y @ w.T).reshape(-1),
                           rcond=None)[0][0]
    h = hyps[0].__class__(**{**hyps[0].__dict__, "simulate": None})  # the linear fit alone
    got = isolate(y, [h], whiten=w).best
    assert got.k == pytest.approx(want, rel=1e-10)
    rss = np.sum(((y - want * hyps[0].delta) @ w.T) ** 2)
    rss0 = np.sum((y @ w.T) ** 2)
    # The share of the excess over what a baseline's rows hold (n d in whitened units).
    excess = max(rss0 - y.size, 3 * np.sqrt(2 * y.size))
    assert got.share == pytest.approx(min((rss0 - rss) / excess, 1.0), rel=1e-9)


def test_an_alarm_simulates_each_hypothesis_at_each_size_once():
    """A twin prediction is the alarm's cost: a deep candidate's first Gauss-Newton step and a
    search's best multiple are sizes already simulated, and are not simulated again."""
    from dataclasses import replace

    twin, s, a, s2 = _loop("sensor_noise", 0.05)  # a spread and a far fit: every stage runs
    base = twin.predict(s, a)
    hyps = signal_hypotheses(twin, s, a, base, NAMES, ACTS, spread=s.std(axis=0))
    calls: list[tuple[str, bytes]] = []

    def counted(h):
        def sim(x):
            calls.append((h.name, np.asarray(x, dtype=np.float64).tobytes()))
            return h.simulate(x)
        return replace(h, simulate=sim)

    iso = isolate(s2 - base, [h if h.simulate is None else counted(h) for h in hyps])
    assert calls and len(calls) == len(set(calls)), len(calls) - len(set(calls))
    assert iso.best.hypothesis.name == "sensor_noise:x1"


def test_a_change_no_hypothesis_simulates_is_unknown():
    """The loop's F changed (no sensor, no actuator): no hypothesis of the bank explains it."""
    twin, s, a, _s2 = _loop("none", 0.0)
    rng = np.random.default_rng(5)
    changed = twin.F + 0.2 * rng.standard_normal((D, D))
    s2 = s @ changed.T + a @ twin.G.T
    base = twin.predict(s, a)
    hyps = signal_hypotheses(twin, s, a, base, NAMES, ACTS, spread=s.std(axis=0))
    iso = isolate(s2 - base, hyps)
    assert iso.best.share < MIN_SHARE and not iso.named


def test_sample_rows_spans_the_window():
    rows = sample_rows(300)
    assert rows[0] == 0 and rows[-1] == 299 and len(rows) == ROWS and np.all(np.diff(rows) > 0)
    assert list(sample_rows(7)) == list(range(7))


@pytest.mark.parametrize(("kind", "component", "size", "axis", "words"), [
    ("force", "bfoot", 8.0, "x", "force on bfoot along x"),
    ("mass", "torso", 1.4, "x", "mass of torso"),
    ("actuator_gain", "fshin", 0.5, "x", "actuator fshin: gain"),
    ("sensor_offset", "rootz", 0.05, "x", "sensor rootz: offset")])
def test_halfcheetah_faults_the_monitor_is_not_told_of_are_named(kind, component, size, axis,
                                                                words):
    import gymnasium as gym

    from idt_desk.gym.faults import Fault, FaultWrapper, component_names
    from idt_desk.gym.twin import MujocoTwin

    onset = 400
    env = FaultWrapper(gym.make("HalfCheetah-v5"),
                       Fault(kind, component, size, onset=onset, axis=axis))
    twin = MujocoTwin(env)
    obs, _ = env.reset(seed=11)
    rng = np.random.default_rng(11)
    s, a, s2 = [], [], []
    for _ in range(onset + 300):
        u = 0.5 * rng.uniform(-1, 1, 6)
        nxt, *_ = env.step(u)
        s.append(obs), a.append(u), s2.append(nxt)
        obs = nxt
    s, a, s2 = (np.array(v) for v in (s, a, s2))
    r = s2 - twin.predict(s, a)
    clean = slice(0, onset - 1)  # S' of step onset − 1 is read through a sensor fault already
    scale = np.maximum(np.sqrt(np.mean(r[clean] ** 2, axis=0)), 1e-6 * s[clean].std(axis=0))
    z = r / scale
    idx = onset + sample_rows(300)
    names = component_names(env)
    base = twin.predict(s[idx], a[idx])
    bank = signal_hypotheses(twin, s[idx], a[idx], base, names["sensor"], names["actuator"],
                             spread=s[clean].std(axis=0)) + twin.bank(s[idx], a[idx])
    iso = isolate(z[idx] - z[clean].mean(axis=0), bank, whiten=whitener(np.cov(z[clean].T)),
                  scale=scale)
    best = iso.best
    assert best.hypothesis.words == words, best.words()
    assert iso.named and abs(best.size - size) <= 0.1 * abs(size), best.words()


@pytest.mark.parametrize(("fault", "cls", "component"), [
    (("actuator_gain", "fshin", 0.4), "actuator", "fshin"),
    (("force", "torso", 12.0), "force", "torso"),
    (("sensor_offset", "bthigh", 0.3), "sensor", "bthigh")])
def test_the_wrapper_names_class_component_and_size_around_a_plain_fault_wrapper(fault, cls,
                                                                               component):
    """IDTMonitor around the user's own (plain) wrapper: its twin is the env copied, and an
    alarm carries the class, the component and the size the bank fitted."""
    import gymnasium as gym

    from idt_desk.gym import IDTMonitor
    from idt_desk.gym.faults import Fault, FaultWrapper

    kind, part, size = fault
    env = IDTMonitor(FaultWrapper(gym.make("HalfCheetah-v5"),
                                  Fault(kind, part, size, onset=6600)),
                     window=100, stride=50, baseline_windows=120, calibration_windows=2)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    named = None
    for t in range(7400):
        _, _, term, trunc, info = env.step(0.3 * rng.uniform(-1, 1, 6))
        idt = info.get("idt") or {}
        if named is None and t > 6600 and idt.get("attribution"):
            named = idt
        if term or trunc:
            env.reset()
    after = [a for a in env.alarms if a["end"] >= 6600]
    assert after, "no alarm after the fault"
    first = after[0]
    assert first["attribution"] == cls, first["evidence"]
    assert first["component"] == component and named["component"] == component
    assert abs(first["size"] - size) <= 0.15 * abs(size), first["evidence"]


def test_a_twin_a_tenth_off_is_kept_apart_from_the_alarm():
    """A twin that is not exact (masses ×1.1, friction ×0.9): its clean residual is far above
    rounding, so its alarm is kept apart from the IDT's (each its whole budget), and the
    session says so; an exact twin's joins it."""
    import gymnasium as gym

    from idt_desk.gym import IDTMonitor
    from idt_desk.gym.faults import Fault, FaultWrapper
    from idt_desk.gym.twin import MujocoTwin

    def run(mismatch):
        inner = FaultWrapper(gym.make("HalfCheetah-v5"),
                             Fault("sensor_offset", "bthigh", 0.3, onset=6600))
        env = IDTMonitor(inner, twin=MujocoTwin(inner, mismatch=mismatch), window=100,
                         stride=50, baseline_windows=120, calibration_windows=2)
        env.reset(seed=0)
        rng = np.random.default_rng(0)
        for _ in range(7400):
            _, _, term, trunc, _ = env.step(0.3 * rng.uniform(-1, 1, 6))
            if term or trunc:
                env.reset()
        return env

    exact, off = run(0.0), run(0.1)
    stage_exact = exact._stream.session.pipeline.twin_stage
    stage_off = off._stream.session.pipeline.twin_stage
    assert stage_exact.exact and stage_exact.misfit < 1e-12
    assert not stage_off.exact and stage_off.misfit > 1e-3
    assert exact.monitor.apart == set() and "shared with its twin" in exact.monitor.describe()
    assert off.monitor.apart == {"twin"} and "twin apart (not exact)" in off.monitor.describe()
    cal = [e for e in off._stream.session.events_since(0) if e["kind"] == "calibrated"]
    assert cal and "not exact" in cal[0]["twin"]["said"]
    assert "twin" not in next(e for e in exact._stream.session.events_since(0)
                              if e["kind"] == "calibrated")
    # Apart: the twin's alarm is its own light, not the IDT's; joined, the IDT's holds it.
    for env, joined in ((exact, True), (off, False)):
        w = env.windows
        armed = w["x_IDT"].notna()
        twin_on = armed & (w["x_twin"] == 1)
        assert twin_on.any()  # the offset moves either twin's residual
        assert (w["x_IDT"][twin_on] == 1).all() == joined
