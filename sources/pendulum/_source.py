"""The double pendulum as a live data source: a passive system, the IDT's calibration point."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
from idt_desk_sources.pendulum._dynamics import (
    PendulumParams,
    Stepper,
    energy,
    predict_states,
)

from idt_desk.plugin import Batch, Hypothesis, Param, Perturbation, Source

__all__ = ["PendulumSource", "PendulumTwin"]

_RATE = 1000.0


class PendulumTwin:
    """The double pendulum's twin: its own equations, stepped 1/rate from each measured S.

    On clean samples it predicts S' to about 1e-10 (within the live integrator's tolerance); sensor
    noise spreads the residual, friction and a change of gravity bias it (its hypotheses:
    gravity ×1.1 and a damping of 0.1 N·m·s/rad, both changes of the dynamics).
    """

    kinds = ("position", "position", "velocity", "velocity")

    def __init__(self, params: PendulumParams, rate: float) -> None:
        self.params, self.dt = params, 1.0 / float(rate)
        self.description = (f"the double pendulum's equations (m {params.m1:g}, {params.m2:g} "
                            f"kg; l {params.l1:g}, {params.l2:g} m; g {params.g:g} m/s²)")

    def predict(self, s: np.ndarray, a: np.ndarray | None) -> np.ndarray:
        """S' of each row: the equations integrated over one sample."""
        return predict_states(s, self.params, self.dt)

    def hypotheses(self, s: np.ndarray, a: np.ndarray | None) -> list[Hypothesis]:
        """Gravity ×1.1 and joint friction: what each does to these rows' S'."""
        base = self.predict(s, a)
        p = self.params
        return [Hypothesis(name, "dynamics", words,
                           predict_states(s, changed, self.dt) - base, size, nominal, unit)
                for name, words, changed, size, nominal, unit in (
                    ("gravity", "gravity", replace(p, g=p.g * 1.1), 0.1, 1.0, "×{:.3g}"),
                    ("friction", "friction at the joints", replace(p, damping=p.damping + 0.1),
                     0.1, p.damping, "damping {:.3g} N·m·s/rad"))]


class PendulumSource(Source):
    """Double pendulum integrated live (Dormand–Prince, RelTol = AbsTol = 1e-9, 1 kHz).

    S = (θ1, θ2, ω1, ω2) as measured (continuous angles from the downward vertical), S' the
    next measured sample; no action. Physical perturbations change the dynamics; sensor
    perturbations change only what is measured.
    """

    name = "pendulum"
    label = "Double pendulum"
    description = (
        "A deterministic, chaotic system with no action channel: P should sit near the "
        "classical ceiling 1/2 and ΔH near 0 (paper §3, Tables 1-2)."
    )
    state_names = ("theta1", "theta2", "omega1", "omega2")
    rate = _RATE
    chunk = 50
    view = "pendulum"
    presets = ("pendulum-live", "pendulum", "pendulum-batch2")
    settings = (
        Param("m1", 1.0, "Mass 1", 0.01, 100.0, unit="kg"),
        Param("m2", 1.0, "Mass 2", 0.01, 100.0, unit="kg"),
        Param("l1", 1.0, "Length 1", 0.01, 100.0, unit="m"),
        Param("l2", 1.0, "Length 2", 0.01, 100.0, unit="m"),
        Param("g", 9.81, "Gravity", 0.0, 100.0, unit="m/s²"),
        Param("theta1", 2.0, "Initial θ1", -10.0, 10.0, unit="rad"),
        Param("theta2", 2.5, "Initial θ2", -10.0, 10.0, unit="rad"),
        Param("random_start", False, "Random start",
              help="θ1, θ2 uniform in (−π, π] from rest, drawn from the seed"),
    )
    perturbations = (
        Perturbation(
            "kick", "Kick",
            (Param("d_omega1", 4.0, "Δω1", -50.0, 50.0, unit="rad/s"),
             Param("d_omega2", -4.0, "Δω2", -50.0, 50.0, unit="rad/s"),
             Param("period", 0.0, "Repeat every", 0.0, 600.0, unit="s",
                   help="0: one kick at onset; otherwise repeat while on")),
            "An impulse to the angular velocities (a physical change); with a period, a "
            "repeating kick while on.",
            impulse=True, repeat="period",
        ),
        Perturbation(
            "sensor_noise", "Sensor noise",
            (Param("sigma_angle", 0.05, "σ angle", 0.0, 10.0, unit="rad"),
             Param("sigma_rate", 0.3, "σ rate", 0.0, 100.0, unit="rad/s")),
            "Gaussian noise on the measured state; the true motion is untouched.",
            target="sensor",
        ),
        Perturbation(
            "friction", "Friction",
            (Param("damping", 0.3, "Damping", 0.0, 50.0, unit="N·m·s/rad"),),
            "Viscous friction at both joints (a physical change).",
        ),
        Perturbation(
            "gravity", "Gravity change",
            (Param("factor", 1.5, "g factor", 0.05, 10.0),),
            "Multiply gravity by a factor (a physical change).",
        ),
        Perturbation(
            "coarse_sensor", "Coarse sensor",
            (Param("step_angle", 0.2, "Angle step", 1e-6, 10.0, unit="rad"),
             Param("step_rate", 1.0, "Rate step", 1e-6, 100.0, unit="rad/s")),
            "Quantise the measured state to a coarse grid; the true motion is untouched.",
            target="sensor",
        ),
    )

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        c = self.config
        self._base = PendulumParams(c["m1"], c["m2"], c["l1"], c["l2"], c["g"])
        self._stepper: Stepper | None = None
        self._rng = np.random.default_rng()
        self._prev: np.ndarray | None = None
        self._e0 = 0.0
        self._next_kick: int | None = None  # sample index of the next kick

    # -- loop -------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> None:
        """Release the pendulum from its initial condition."""
        self._rng = np.random.default_rng(seed)
        if self.config["random_start"]:
            theta = np.pi - self._rng.uniform(0.0, 2.0 * np.pi, size=2)
        else:
            theta = np.array([self.config["theta1"], self.config["theta2"]])
        y0 = np.array([theta[0], theta[1], 0.0, 0.0])
        self._stepper = Stepper(y0, self._physical_params())
        self._e0 = float(energy(y0, self._base))
        self._prev = self._measure(y0[None, :])[0]
        if "kick" in self.active_perturbations:
            self._next_kick = 0

    def step(self, n: int) -> Batch:
        """Integrate ``n`` more milliseconds; return the measured transitions."""
        if self._stepper is None:
            self.reset()
        st = self._stepper
        # Kicks land on their own sample whatever the chunking: advance up to each one.
        parts, done = [], 0
        while done < n:
            self._apply_kick()
            k = n - done
            if self._next_kick is not None:
                k = min(k, max(self._next_kick - self._index(), 1))
            parts.append(st.advance(k))
            done += k
        y = parts[0] if len(parts) == 1 else np.vstack(parts)
        meas = self._measure(y)
        s = np.vstack([self._prev[None, :], meas[:-1]])
        self._prev = meas[-1]
        t = (self._index() - n + 1 + np.arange(n)) / _RATE
        e = float(energy(y[-1], self._base))
        info = {
            "y": y[-1].copy(),
            "l1": self._base.l1,
            "l2": self._base.l2,
            "time": st.t,
            "energy": e,
            "energy_drift": abs(e - self._e0) / self._e0 if self._e0 > 0 else 0.0,
        }
        return Batch(s=s, s_next=meas, t=t, info=info)

    def value_ranges(self) -> dict[str, tuple[float, float]]:
        """Angular velocities bounded by the current energy (kinetic <= total).

        With E the energy above hanging rest, T = E - V <= E, and T >= m1 l1² ω1² / 2 and
        T >= m1 m2 l2² ω2² / (2 (m1 + m2)) for any angles and the other rate, so
        |ω1| <= sqrt(2E / (m1 l1²)) and |ω2| <= sqrt(2E (m1 + m2) / (m1 m2 l2²)). Measured
        on the default start over 600 s: the rates reach 99.9 % of these bounds.
        """
        if self._stepper is None:
            return {}
        p = self._physical_params()
        e = float(energy(self._stepper.y, p))
        if not e > 0:
            return {}
        w1 = float(np.sqrt(2 * e / (p.m1 * p.l1**2)))
        w2 = float(np.sqrt(2 * e * (p.m1 + p.m2) / (p.m1 * p.m2 * p.l2**2)))
        return {"omega1": (-w1, w1), "omega2": (-w2, w2)}

    @classmethod
    def twin_for(cls, settings: Mapping[str, Any]) -> PendulumTwin:
        """The unperturbed equations (:class:`PendulumTwin`) with these settings' pendulum."""
        given = {p.name: settings.get(p.name, p.default) for p in cls.settings}
        return PendulumTwin(PendulumParams(*(float(given[k]) for k in ("m1", "m2", "l1", "l2",
                                                                     "g"))), _RATE)

    # -- perturbations ----------------------------------------------------------------------

    def set_perturbation(self, name: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """Switch a perturbation; physical ones take effect at the next step."""
        resolved = super().set_perturbation(name, params)
        if name in ("friction", "gravity") and self._stepper is not None:
            self._stepper.params = self._physical_params()
        if name == "kick":
            self._next_kick = None if params is None else (
                self._index() if self._stepper is not None else 0)
        return resolved

    def _index(self) -> int:
        """Samples integrated so far."""
        return round(self._stepper.t * _RATE)

    def _physical_params(self) -> PendulumParams:
        p = self._base
        if "friction" in self.active_perturbations:
            p = replace(p, damping=self.active_perturbations["friction"]["damping"])
        if "gravity" in self.active_perturbations:
            p = replace(p, g=p.g * self.active_perturbations["gravity"]["factor"])
        return p

    def _apply_kick(self) -> None:
        kick = self.active_perturbations.get("kick")
        if kick is None or self._next_kick is None or self._index() < self._next_kick:
            return
        y = self._stepper.y
        y[2] += kick["d_omega1"]
        y[3] += kick["d_omega2"]
        self._stepper.y = y
        # Energy is no longer conserved across a kick: measure drift from here on.
        self._e0 = float(energy(y, self._base))
        period = max(round(kick["period"] * _RATE), 1) if kick["period"] > 0 else 0
        self._next_kick = self._index() + period if period > 0 else None

    def _measure(self, y: np.ndarray) -> np.ndarray:
        m = y.copy()
        coarse = self.active_perturbations.get("coarse_sensor")
        if coarse is not None:
            m[:, :2] = np.round(m[:, :2] / coarse["step_angle"]) * coarse["step_angle"]
            m[:, 2:] = np.round(m[:, 2:] / coarse["step_rate"]) * coarse["step_rate"]
        noise = self.active_perturbations.get("sensor_noise")
        if noise is not None:
            # Four draws per sample in sample order: the same noise however steps are chunked.
            sigma = np.array([noise["sigma_angle"]] * 2 + [noise["sigma_rate"]] * 2)
            m += self._rng.normal(0.0, 1.0, size=(len(m), 4)) * sigma
        return m
