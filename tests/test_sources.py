"""Source plugins: discovery, the conformance check over every registered source, and the
pendulum's perturbations doing what their names say."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import numpy as np
import pytest
from idt_desk_sources.pendulum import PendulumSource
from idt_desk_sources.pendulum._dynamics import PendulumParams, energy, integrate

from idt_desk.live import plugins
from idt_desk.live.plugins import SourceLoadError, discover, load_source
from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.live.source import Batch, Param, Source, SourceCheckError, check_source

from .fake_ollama import FakeOllama


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    path = tmp_path_factory.mktemp("rec") / "pendulum"
    run_headless(Session(SessionConfig(speed=None), record=path), steps=1500)
    return path


def _settings_for(name: str, recording, ollama) -> dict:
    if name == "replay":
        return {"path": str(recording)}
    if name == "dialogue":
        # The contract, not the language model: the scripted Ollama server answers at once.
        # The built-in SmolLM2 backend runs (and repeats itself under a seed) in
        # tests/test_dialogue_builtin.py; through this check it took ~70 s.
        return {"host": ollama.host, "student_model": "student:1b",
                "teacher_model": "teacher:1b"}
    return {}


@pytest.mark.parametrize("name", sorted(discover()))
def test_every_registered_source_passes_the_conformance_check(name, recording):
    cls = load_source(name)
    with FakeOllama() as ollama:
        check_source(cls, _settings_for(name, recording, ollama))


def test_builtin_sources_are_registered_through_entry_points():
    entries = discover(refresh=True)
    assert {"pendulum", "replay"} <= set(entries)
    assert entries["pendulum"].entry_point is not None
    assert entries["pendulum"].value == "idt_desk_sources.pendulum:PendulumSource"


def test_a_broken_plugin_is_listed_with_its_error_not_raised(monkeypatch):
    good = EntryPoint("pendulum", "idt_desk_sources.pendulum:PendulumSource", plugins.GROUP)
    bad = EntryPoint("broken", "no_such_module_xyz:Thing", plugins.GROUP)
    not_a_source = EntryPoint("wrong", "json:dumps", plugins.GROUP)
    monkeypatch.setattr(plugins, "entry_points", lambda group: [bad, good, not_a_source])
    entries = discover(refresh=True)
    try:
        assert list(entries) == ["broken", "pendulum", "wrong"]
        assert entries["pendulum"].load() is PendulumSource
        with pytest.raises(SourceLoadError, match="no_such_module_xyz"):
            load_source("broken")
        assert "ModuleNotFoundError" in entries["broken"].error
        with pytest.raises(SourceLoadError, match="not a Source subclass"):
            load_source("wrong")
        with pytest.raises(SourceLoadError, match="no source named 'nope'"):
            load_source("nope")
    finally:
        monkeypatch.undo()
        discover(refresh=True)


def test_the_cli_lists_load_failures(monkeypatch, capsys):
    from idt_desk.cli import main

    bad = EntryPoint("broken", "no_such_module_xyz:Thing", plugins.GROUP)
    monkeypatch.setattr(plugins, "entry_points", lambda group: [bad])
    discover(refresh=True)
    try:
        assert main(["sources"]) == 0
        assert "broken: FAILED TO LOAD" in capsys.readouterr().out
    finally:
        monkeypatch.undo()
        discover(refresh=True)
        plugins.discover_commands(refresh=True)  # the patch above served every group


class _Broken(Source):
    name = "broken"
    label = "Broken"
    state_names = ("x", "y")
    settings = (Param("k", 1, "k", 0, 10),)

    def reset(self, seed=None):
        self.rng = np.random.default_rng(seed)

    def step(self, n):
        # Wrong width, NaNs, and not reproducible under a seed.
        x = np.random.default_rng().normal(size=(n, 3))
        x[0, 0] = np.nan
        return Batch(x, x)


def test_the_conformance_check_catches_a_broken_source():
    with pytest.raises(SourceCheckError) as err:
        check_source(_Broken)
    msg = str(err.value)
    assert "expected (50, 2)" in msg


def test_declared_parameters_validate_and_explain():
    p = Param("sigma", 0.1, minimum=0.0, maximum=1.0)
    assert p.validate("0.5") == 0.5
    with pytest.raises(ValueError, match="above the maximum"):
        p.validate(2)
    with pytest.raises(ValueError, match="expected float"):
        p.validate("abc")
    assert Param("on", False).validate("yes") is True
    with pytest.raises(ValueError, match="not one of"):
        Param("mode", "a", choices=("a", "b")).validate("c")
    with pytest.raises(ValueError, match=r"unknown parameter"):
        PendulumSource(mass=3)


# --- the pendulum source ----------------------------------------------------------------------


def _stream(src: PendulumSource, n: int) -> Batch:
    out = [src.step(100) for _ in range(n // 100)]
    return Batch(np.vstack([b.s for b in out]), np.vstack([b.s_next for b in out]),
                 info=out[-1].info)


def test_unperturbed_stream_is_the_integrated_trajectory():
    src = PendulumSource(theta1=1.0, theta2=-0.5)
    src.reset(0)
    b = _stream(src, 1000)
    ref = integrate(np.array([1.0, -0.5, 0.0, 0.0]), PendulumParams(), 1.0).y
    np.testing.assert_array_equal(b.s, ref[:-1])
    np.testing.assert_array_equal(b.s_next, ref[1:])


def test_kick_adds_the_impulse_to_the_angular_velocities():
    a, b = PendulumSource(), PendulumSource()
    a.reset(0)
    b.reset(0)
    a.step(500)
    b.step(500)
    b.set_perturbation("kick", {"d_omega1": 3.0, "d_omega2": -2.0})
    sa, sb = a.step(1), b.step(1)
    dw = sb.s_next[0, 2:] - sa.s_next[0, 2:]
    np.testing.assert_allclose(dw, [3.0, -2.0], atol=0.05)  # one ms of dynamics after it
    later = b.step(200)
    assert not np.allclose(later.s_next[-1], a.step(200).s_next[-1])
    # One kick (period 0): no second jump while it stays on.
    assert np.max(np.abs(np.diff(later.s_next[:, 2]))) < 0.5


def test_sensor_noise_touches_the_measurement_not_the_motion():
    a, b = PendulumSource(), PendulumSource()
    a.reset(0)
    b.reset(0)
    b.set_perturbation("sensor_noise", {"sigma_angle": 0.05, "sigma_rate": 0.3})
    ba, bb = _stream(a, 2000), _stream(b, 2000)
    diff = bb.s_next - ba.s_next
    np.testing.assert_allclose(diff[:, :2].std(axis=0), 0.05, rtol=0.1)
    np.testing.assert_allclose(diff[:, 2:].std(axis=0), 0.3, rtol=0.1)
    np.testing.assert_array_equal(ba.info["y"], bb.info["y"])  # true state unchanged


def test_friction_drains_energy_and_gravity_change_speeds_the_swing():
    src = PendulumSource()
    src.reset(0)
    src.set_perturbation("friction", {"damping": 0.5})
    e = [energy(src.step(200).info["y"], PendulumParams()) for _ in range(20)]
    assert np.all(np.diff(e) < 0)

    def accel(factor):
        s = PendulumSource(theta1=0.3, theta2=0.3)
        s.reset(0)
        if factor != 1:
            s.set_perturbation("gravity", {"factor": factor})
        return s.step(5).s_next[-1, 2] / 0.005  # omega1 gained from rest over 5 ms
    assert accel(2.0) == pytest.approx(2 * accel(1.0), rel=0.02)


def test_coarse_sensor_quantises_the_measurement():
    src = PendulumSource()
    src.reset(0)
    src.set_perturbation("coarse_sensor", {"step_angle": 0.25, "step_rate": 2.0})
    b = _stream(src, 500)
    np.testing.assert_allclose(b.s_next[:, :2] / 0.25, np.round(b.s_next[:, :2] / 0.25),
                               atol=1e-9)
    np.testing.assert_allclose(b.s_next[:, 2:] / 2.0, np.round(b.s_next[:, 2:] / 2.0), atol=1e-9)
    src.set_perturbation("coarse_sensor", None)
    b = src.step(100)
    assert not np.allclose(b.s_next[:, 0] / 0.25, np.round(b.s_next[:, 0] / 0.25))


def test_random_start_is_seeded():
    a, b, c = (PendulumSource(random_start=True) for _ in range(3))
    a.reset(5)
    b.reset(5)
    c.reset(6)
    assert np.array_equal(a.step(10).s, b.step(10).s)
    assert not np.array_equal(a.step(10).s, c.step(10).s)


def _mean_metrics(perturbation, params, steps=40000, onset=10000):
    cfg = SessionConfig(speed=None, calibration_windows=30, baseline_windows=30)
    session = Session(cfg)
    if perturbation:
        session.schedule(onset, "perturb", name=perturbation, params=params)
    run_headless(session, steps=steps)
    w = session.snapshot(limit=10**6).windows
    after = w["start"] >= onset
    return {m: float(np.nanmean(w[m][after])) for m in ("P", "dH")}


def test_sensor_noise_lowers_p_while_physical_changes_keep_dh_near_zero():
    clean = _mean_metrics(None, None)
    noisy = _mean_metrics("sensor_noise", {"sigma_angle": 0.05, "sigma_rate": 0.3})
    friction = _mean_metrics("friction", {"damping": 0.3})
    gravity = _mean_metrics("gravity", {"factor": 1.5})
    assert noisy["P"] < clean["P"] - 0.05
    for m in (clean, friction, gravity):
        assert abs(m["dH"]) < 5e-3
