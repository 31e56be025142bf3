"""A small agent loop for tests: S' = S + A + noise, with reward and every modulation."""

from __future__ import annotations

import numpy as np

from idt_desk.live.source import (
    DIM_REDUCTION,
    HOLD,
    INPUT_FILTER,
    Batch,
    Param,
    Perturbation,
    Source,
)


class ToySource(Source):
    """A 2-D state pushed by a 1-D action from a fixed linear policy."""

    name = "toy"
    label = "Toy agent"
    description = "A test loop with an action channel, reward and episodes."
    state_names = ("x", "v")
    action_names = ("u",)
    has_reward = True
    rate = 100.0
    chunk = 20
    presets = ()
    settings = (Param("noise", 0.05, "Noise", 0.0, 10.0), Param("fail_at", -1, "Fail at"))
    perturbations = (
        Perturbation("obs_noise", "Observation noise", (Param("sigma", 1.0, "σ", 0.0, 100.0),),
                     target="sensor"),
        Perturbation("push", "Push", (Param("force", 1.0, "F", -100.0, 100.0),)),
    )
    modulations = (HOLD, INPUT_FILTER, DIM_REDUCTION)

    def reset(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self.y = np.zeros(2)
        self.obs = self.y.copy()
        self.prev_a = 0.0
        self.n = 0

    def step(self, n: int) -> Batch:
        s, a, s2, r, ep = [], [], [], [], []
        for _ in range(n):
            if self.config["fail_at"] >= 0 and self.n >= self.config["fail_at"]:
                raise RuntimeError("toy source failed on purpose")
            obs = self.obs
            if "input_filter" in self.active_modulations:
                alpha = self.active_modulations["input_filter"]["alpha"]
                obs = alpha * self.y + (1 - alpha) * obs
            u = float(np.tanh(-obs[0] - 0.5 * obs[1]) + self.rng.normal(0, 0.3))
            hold = self.active_modulations.get("hold")
            if hold is not None:
                u = self.prev_a if hold["mode"] == "repeat" else u * hold["scale"]
            self.prev_a = u
            push = self.active_perturbations.get("push", {}).get("force", 0.0)
            y2 = self.y + np.array([self.y[1], u + push]) * 0.1
            y2 += self.rng.normal(0, self.config["noise"], 2)
            meas = y2.copy()
            if "obs_noise" in self.active_perturbations:
                meas += self.rng.normal(0, self.active_perturbations["obs_noise"]["sigma"], 2)
            s.append(self.obs.copy())
            a.append([u])
            s2.append(meas)
            r.append(-abs(y2[0]))
            ep.append(self.n // 1000)
            self.y, self.obs = y2, meas
            self.n += 1
        events = [{"kind": "episode_end", "row": i} for i in range(n)
                  if (self.n - n + i + 1) % 1000 == 0]
        return Batch(np.array(s), np.array(s2), np.array(a), np.array(r), np.array(ep),
                     events=events, info={"x": float(self.y[0])})
