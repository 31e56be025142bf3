"""What ``idt-desk reproduce cheetah`` reproduces: its settings, trials and tasks.

The paper's RL results (§5.1, §10; Tables 3 and 4), and closing the loop: frozen policies in
HalfCheetah with each of the paper's eight perturbations (Table 9) switched on at the start of
episode ``onset``; do the IDT (P, H_f, H_b, ΔH, and their union) and the reward see it, and
how soon? :class:`CheetahConfig` holds the settings, :func:`make_groups` cuts them into
:class:`TrialGroup` tasks (one policy's trials, stepped together), each of :class:`Trial`.

One trial (a policy, a perturbation, optionally an Auto modulation)
----------------------------------------------------------------
1. The live source (:class:`~idt_desk_sources.gym.GymSource`) runs ``episodes`` episodes of ``L``
   steps (the env's time limit: 1000 for HalfCheetah) through a
   :class:`~idt_desk.live.session.Session`, seeded with ``seed``: every perturbed trial of a policy
   shares its pre-onset steps exactly (same environment, same policy noise). The policy acts
   deterministically (its mean, ``model.predict(obs, deterministic=True)``, as every
   evaluation loop of the authors' released code does) or, with ``actions`` stochastic,
   samples from its own distribution (the paper's wording: "stochastic policies ensure
   choice"); ``actions`` may name both, and each trial is then run under each. The
   perturbation is switched on at transition ``T0 = (onset − 1) · L``, the first step of
   episode ``onset``, and stays on. Trials of one policy, protocol and loop setting step in
   lockstep, one batched forward pass per step.
2. The paper's pipeline on the recorded (S, A, S'): each variable z-scored and cut into 3
   equal-width bins, both calibrated on the **pre-onset transitions only** (the data a
   deployed monitor has; calibrating on the whole run would let the perturbed data shape the
   bins), the body-part groups of the ``cheetah`` preset, windows of 300 steps every 50.
3. Baseline: mean and σ (ddof 1) of each metric over the windows wholly before ``T0``; a
   window is an excursion when it is more than 3σ from the mean; detection is any excursion
   at or after the first window that holds a perturbed step, latency the number of windows
   from that window to the first excursion (0: at once; NaN: never). The reward detector is
   the mean reward per window, judged the same way. ``IDT`` is the union of the four.
   Cohen's d of each metric: (mean over post-onset windows − baseline mean) / baseline σ.
4. ``none`` is a control trial: no perturbation. Its "detections" are false alarms of the
   rule above, the rate against which every detection rate must be read. ``control_seeds``
   controls run per policy (and protocol, and loop setting): the first with ``seed``, so it
   shares the perturbed trials' pre-onset steps, the others with seeds spawned from it
   (:func:`control_seed`: other initial states, so other runs); false alarms are counted over
   all of them ("4 of 30").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from idt_desk_sources.gym._source import ACTIONS

from idt_desk.plugin import (
    CONTROL_BUDGET,
    DEFAULT_BUDGET,
    InputError,
    check_float,
    check_int,
    check_limit,
    check_out_dir,
)

#: Detectors, in the order of the paper's Table 4.
DETECTORS = ("IDT", "P", "dH", "H_f", "H_b", "reward")
#: The IDT's four components (its union ``IDT`` alarms when any of them does).
COMPONENTS = ("P", "H_f", "H_b", "dH")
#: The control trial: no perturbation.
CONTROL = "none"
#: The ``auto`` label of a trial whose modulation is switched on by hand at the onset.
HAND = "by hand: "


def perturbation_names() -> tuple[str, ...]:
    """The gym source's perturbations (the paper's Table 9), in its order."""
    from idt_desk_sources.gym._source import GymSource

    return tuple(p.name for p in GymSource.perturbations)


def _shipped_policies() -> tuple[str, ...]:
    from idt_desk_sources.gym._source import POLICY_DIR

    return tuple(str(p) for p in sorted(POLICY_DIR.glob("halfcheetah-v5-*.zip")))


@dataclass(frozen=True)
class CheetahConfig:
    """What to reproduce (the command line's options; the protocol: the module docstring)."""

    policies: tuple[str, ...] = ()
    perturbations: tuple[str, ...] = ()
    control_seeds: int = 5
    actions: tuple[str, ...] = ("deterministic",)
    episodes: int = 50
    onset: int = 15
    env_id: str = "HalfCheetah-v5"
    #: The IDT's preset ("": the source's default for the env: ``cheetah`` on HalfCheetah,
    #: ``auto`` elsewhere, which chooses each trial's view on its first 20 windows).
    preset: str = ""
    seed: int = 0
    auto: tuple[str, ...] = ()
    #: Modulations switched on by hand at the onset (``NAME[:k=v,...]``), beside Auto.
    manual: tuple[str, ...] = ()
    #: The Auto controller's alarm: a calibrated detector and its budget, or ``paper``.
    auto_detector: str = "persistence"
    auto_false_alarms: str = DEFAULT_BUDGET
    #: The budget of the live-calibrated block: each trial judged by the detectors a live
    #: session calibrates on the trial's own pre-onset windows to this budget (the gym
    #: source's default).
    false_alarms: str = CONTROL_BUDGET
    #: Judge every trial with the env's twin too (its alarm, and each detection's class).
    twin: bool = True
    #: Judge every trial with the generic drift detectors too (online MMD and LSDD on its
    #: transitions, calibrated to ``false_alarms``).
    drift: bool = True
    max_baseline_cv: float = 0.25
    k: float = 3.0
    workers: int | None = None
    scheduler: str | None = None
    out: Path | None = None

    def resolved(self) -> CheetahConfig:
        """Defaults filled in (every shipped policy, every perturbation) and checked.

        Raises
        ------
        InputError
            An unknown perturbation or modulation, a missing policy file, bad counts.

        """
        from dataclasses import replace

        from idt_desk_sources.gym._source import CHEETAH_GROUPS, GymSource

        from idt_desk.plugin import DETECTOR_KINDS, parse_auto, parse_budget, parse_switch

        known = perturbation_names()
        perts = self.perturbations or known
        for p in perts:  # NAME or NAME:k=v (a stronger noise: obs_noise_3:percent=20)
            if p != CONTROL:
                parse_switch(p, GymSource, "perturb", "--perturbations")
        for spec in self.manual:
            parse_switch(spec, GymSource, "modulate", "--manual")
        if self.auto_detector not in DETECTOR_KINDS:
            raise InputError(f"--auto-detector {self.auto_detector}: choose from "
                             f"{', '.join(DETECTOR_KINDS)}")
        try:
            parse_budget(self.auto_false_alarms)
        except ValueError as exc:
            raise InputError(f"--auto-false-alarms: {exc}") from None
        try:
            parse_budget(self.false_alarms)
        except ValueError as exc:
            raise InputError(f"--false-alarms: {exc}") from None
        check_int("--control-seeds", self.control_seeds, 0, 10_000)
        # 'none' named among the perturbations asks for a control: at least one.
        controls = max(self.control_seeds, 1) if CONTROL in perts else self.control_seeds
        perts = tuple(p for p in perts if p != CONTROL)
        actions = tuple(dict.fromkeys(self.actions))
        bad = [a for a in actions if a not in ACTIONS]
        if bad or not actions:
            raise InputError(f"--actions: {', '.join(bad) or 'none given'}; choose from "
                             f"{', '.join(ACTIONS)} (comma-separated for several)")
        policies = self.policies or _shipped_policies()
        if not policies:
            raise InputError("no policies: pass --policies PATH,... (train one with "
                             "`idt-desk train`)")
        missing = [p for p in policies if not Path(p).expanduser().is_file()]
        if missing:
            raise InputError(f"--policies: no such file: {', '.join(missing)}")
        check_int("--episodes", self.episodes, 2, 10_000)
        check_int("--onset", self.onset, 2, self.episodes)
        check_limit("seed", self.seed)
        check_int("--workers", self.workers, 0)
        check_float("--max-baseline-cv", self.max_baseline_cv, 0.0)
        check_limit("k", self.k)
        for spec in self.auto:
            auto = parse_auto(spec, GymSource)
            if auto["modulation"] != "dim_reduction":
                continue
            drop = [g.strip() for g in str(auto["params"]["drop"]).split(",") if g.strip()]
            unknown = [g for g in drop if g not in CHEETAH_GROUPS]
            if unknown and self.env_id.startswith("HalfCheetah"):
                raise InputError(f"--auto {spec}: unknown group(s) {unknown}; known: "
                                 f"{', '.join(CHEETAH_GROUPS)}")
            if not drop:
                raise InputError(f"--auto {spec}: name the observation groups to freeze, e.g. "
                                 "dim_reduction:drop=front_leg (groups: torso, back_leg, "
                                 "front_leg)")
        if self.preset and self.preset not in GymSource.presets:
            raise InputError(f"--preset {self.preset}: choose from "
                             f"{', '.join(GymSource.presets)}")
        check_out_dir(self.out, "--out")
        return replace(self, policies=tuple(str(Path(p).expanduser()) for p in policies),
                       perturbations=tuple(dict.fromkeys(perts)), control_seeds=controls,
                       actions=actions)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, with the fixed protocol settings."""
        d = asdict(self)
        d["out"] = None if self.out is None else str(self.out)
        cheetah = self.env_id.startswith("HalfCheetah")
        d.update(window=300, stride=50, bins=3,
                 preset=self.preset or ("cheetah" if cheetah else "auto"),
                 symbol_calibration="pre-onset transitions of each trial",
                 baseline="windows wholly before the onset", std_ddof=1)
        return d


@dataclass(frozen=True)
class Trial:
    """One trial: the perturbation switched on at the onset, and the Auto spec ('' for none).

    ``seed`` is the environment and noise seed; None: the group's.
    """

    perturbation: str
    auto: str = ""
    seed: int | None = None


@dataclass(frozen=True)
class TrialGroup:
    """The trials of one policy, stepped together (the unit of work sent to an executor)."""

    policy: str
    trials: tuple[Trial, ...]
    env_id: str
    episodes: int
    onset: int
    seed: int
    k: float
    deterministic: bool = True
    auto_detector: str = "persistence"
    auto_false_alarms: str = DEFAULT_BUDGET
    false_alarms: str = CONTROL_BUDGET
    twin: bool = True
    drift: bool = True
    preset: str = ""


# The resume key (``runner``'s ``_group_key``) hashes a pickled group, and a pickle names its
# classes' module: the package's, as before it was split, so that an interrupted run resumes.
Trial.__module__ = TrialGroup.__module__ = "idt_desk_sources.gym.reproduce"


def control_seed(seed: int, j: int) -> int:
    """The environment seed of control ``j`` ≥ 1 of a run seeded ``seed``.

    Spawned from (seed, j) by NumPy's ``SeedSequence`` (63 bits), so the controls of two runs
    never share a seed, whatever their seeds (``seed + j`` made ``--seed 300`` and ``--seed
    301`` share 9 of 10 controls). Control 0 has the run's own seed, the perturbed trials'.
    """
    state = np.random.SeedSequence([int(seed), int(j)]).generate_state(1, np.uint64)[0]
    return int(state >> np.uint64(1))


def make_groups(config: CheetahConfig) -> list[TrialGroup]:
    """One group per policy, protocol and Auto setting (open loop first).

    A group holds the ``control_seeds`` control trials (the first with the group's seed, the
    others with :func:`control_seed`) and then each perturbation. A group's trials step together;
    groups are the tasks the executor spreads over cores (and the progress bar counts), so
    they are kept to one protocol and loop setting each.
    """
    def trials(auto: str) -> tuple[Trial, ...]:
        controls = tuple(Trial(CONTROL, auto, None if j == 0 else control_seed(config.seed, j))
                         for j in range(config.control_seeds))
        return controls + tuple(Trial(name, auto) for name in config.perturbations)

    return [TrialGroup(p, trials(a), config.env_id, config.episodes, config.onset,
                       config.seed, config.k, deterministic=actions == "deterministic",
                       auto_detector=config.auto_detector,
                       auto_false_alarms=config.auto_false_alarms,
                       false_alarms=config.false_alarms, twin=config.twin,
                       drift=config.drift, preset=config.preset)
            for actions in config.actions for p in config.policies
            for a in ("", *config.auto, *(HAND + m for m in config.manual))]

