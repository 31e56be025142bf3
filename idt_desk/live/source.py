"""The data-source interface: small, declarative, Qt-free.

A source runs one closed loop (a physical system, an RL agent, a dialogue) and hands the IDT
copies of its transitions. Like a Gymnasium ``Env`` it is a few methods plus class-level
declarations; the GUI builds its panels from the declarations, never by hand per source.

- declarations: ``name``, ``label``, ``state_names``, ``action_names`` (empty = passive),
  ``has_reward``, ``rate`` (transitions per second of the loop's own time), ``settings``,
  ``perturbations``, ``modulations``, ``presets``, ``view``, ``metric_path``;
- methods: ``reset(seed)``, ``step(n) -> Batch``, ``set_perturbation(name, params)``,
  ``set_modulation(name, params)``, ``close()``; optionally ``value_ranges()``.

The session calls ``step`` in small chunks from its worker thread and checks its stop flag
between chunks; a source whose single step can take long (a dialogue turn) checks
``self.should_stop()`` inside it, shows its progress through ``self.publish(info)`` and, when
its backend fails part-way, raises :class:`SourcePaused`: the session pauses with what was
made so far kept, and the next ``step`` after a resume carries on.

The metric stage is the source's choice (``metric_path``): ``"windows"`` (symbols of the
numeric S, A, S' over sliding windows: pendulum, RL) or ``"turns"`` (one row per transition
from the token counts of the texts in ``Batch.turns``: a dialogue,
``idt_desk.metrics.tokens``). Both give the session one table of the same columns.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from idt_desk.detection.spec import DEFAULT_BASELINE_WINDOWS, DEFAULT_BUDGET, DEFAULT_DETECTOR
from idt_desk.metrics.twin import Twin

__all__ = [
    "ACTION_SMOOTHING",
    "DIM_REDUCTION",
    "HOLD",
    "INPUT_FILTER",
    "OBS_HOLD",
    "Batch",
    "Modulation",
    "Param",
    "Perturbation",
    "Source",
    "SourceCheckError",
    "SourcePaused",
    "Suggestion",
    "check_source",
]


@dataclass(frozen=True)
class Suggestion:
    """A value a text :class:`Param` offers in a list, with how to show it.

    ``label`` is the list's one line (the value itself need not be readable: a path, say);
    ``tip`` says more. Any other text stays allowed.
    """

    value: str
    label: str
    tip: str = ""


@dataclass(frozen=True)
class Param:
    """A declared parameter: of a source setting, a perturbation or a modulation.

    The type is the default's type (bool, int, float or str). Numbers may have a range;
    strings may have choices, or a ``pattern`` (a regular expression the whole string must
    match; ``pattern_hint`` says what is expected, e.g. "http://HOST[:PORT]"), or
    ``suggestions``: values offered in a list without restricting the text (the GUI shows an
    editable list).
    """

    name: str
    default: bool | int | float | str
    label: str = ""
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    unit: str = ""
    help: str = ""
    pattern: str = ""
    pattern_hint: str = ""
    suggestions: tuple[Suggestion, ...] = ()

    @property
    def kind(self) -> type:
        """bool, int, float or str."""
        return type(self.default)

    def validate(self, value: Any) -> Any:
        """Coerce ``value`` to this parameter's type and check its range; ValueError if not."""
        kind = self.kind
        try:
            if kind is bool:
                if isinstance(value, str):
                    low = value.strip().lower()
                    if low not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                        raise ValueError
                    value = low in ("1", "true", "yes", "on")
                else:
                    value = bool(value)
            elif kind is int:
                f = float(value)
                if f != int(f):
                    raise ValueError
                value = int(f)
            elif kind is float:
                value = float(value)
                if not math.isfinite(value):
                    raise ValueError
            else:
                value = str(value)
        except (TypeError, ValueError):
            raise ValueError(
                f"{self.name}: expected {kind.__name__}, got {value!r}"
            ) from None
        if kind in (int, float):
            if self.minimum is not None and value < self.minimum:
                raise ValueError(f"{self.name}: {value} is below the minimum {self.minimum}")
            if self.maximum is not None and value > self.maximum:
                raise ValueError(f"{self.name}: {value} is above the maximum {self.maximum}")
        if self.choices and value not in self.choices:
            raise ValueError(f"{self.name}: {value!r} is not one of {list(self.choices)}")
        if self.pattern and not re.fullmatch(self.pattern, str(value)):
            raise ValueError(f"{self.name}: {value!r} is not {self.pattern_hint or self.pattern}")
        return value


def _resolve(params: tuple[Param, ...], given: Mapping[str, Any] | None, what: str) -> dict:
    given = dict(given or {})
    known = {p.name for p in params}
    unknown = sorted(set(given) - known)
    if unknown:
        raise ValueError(f"{what}: unknown parameter(s) {unknown}; known: {sorted(known)}")
    return {p.name: p.validate(given.get(p.name, p.default)) for p in params}


@dataclass(frozen=True)
class Perturbation:
    """A perturbation a user can switch on and off, with its parameters.

    ``target`` says which side of the loop it hits: ``environment`` (the world's response),
    ``sensor`` (what the agent/IDT observes), ``actuator`` (what the agent's action does) or
    ``agent`` (the policy's input or output).

    An ``impulse`` is a one-shot event (a kick), not a state: switching it on applies it once
    at the next transition and it is not active afterwards. ``repeat`` names a parameter that,
    when > 0, makes the impulse repeat while on, which is a state again.

    A ``scheduled`` perturbation only arms a schedule: it acts through the impulses the
    source logs at the schedule's moments (``perturbation_pulse``; the paper's injections
    at turns 31, 46, ...), so being on is no perturbation by itself.
    """

    name: str
    label: str
    params: tuple[Param, ...] = ()
    help: str = ""
    target: str = "environment"
    impulse: bool = False
    repeat: str = ""
    scheduled: bool = False

    def is_impulse(self, params: Mapping[str, Any] | None = None) -> bool:
        """Whether switching on with these parameters is a one-shot impulse (not a state)."""
        if not self.impulse:
            return False
        if self.repeat:
            value = self.resolve(params)[self.repeat]
            return not value > 0
        return True

    def resolve(self, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Defaults filled in, values validated."""
        return _resolve(self.params, given, f"perturbation {self.name}")


@dataclass(frozen=True)
class Modulation:
    """A modulation of the loop's interface (paper §4.3): never of the model's weights."""

    name: str
    label: str
    params: tuple[Param, ...] = ()
    help: str = ""

    def resolve(self, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Defaults filled in, values validated."""
        return _resolve(self.params, given, f"modulation {self.name}")


#: Action dampening: repeat the previous action, scale actions toward zero, or hold with a
#: probability.
HOLD = Modulation(
    "hold",
    "Hold",
    (
        Param("mode", "scale", "Mode", choices=("repeat", "scale", "probabilistic")),
        Param("scale", 0.5, "Scale", 0.0, 1.0, help="action multiplier (mode scale)"),
        Param("probability", 0.5, "Probability", 0.0, 1.0,
              help="chance of repeating the previous action (mode probabilistic)"),
    ),
    "Dampen actions before they reach the environment.",
)
#: Input filter: exponential moving average of observations before the agent sees them.
INPUT_FILTER = Modulation(
    "input_filter",
    "Input filter",
    (Param("alpha", 0.3, "EMA weight", 0.01, 1.0, help="weight of the newest observation"),),
    "Smooth observations (EMA) before the agent sees them.",
)
#: Dimensionality reduction: drop variable groups from what the agent observes.
DIM_REDUCTION = Modulation(
    "dim_reduction",
    "Dimensionality reduction",
    (Param("drop", "", "Drop groups", help="comma-separated group names to hide"),),
    "Hide noisy variable groups from the agent (held at their last calibrated mean).",
)
#: Action smoothing (the paper authors' app has it): an EMA of the applied action, restarted
#: each episode — ``alpha`` is the newest action's weight (1: no smoothing).
ACTION_SMOOTHING = Modulation(
    "action_smoothing", "Action smoothing",
    (Param("alpha", 0.5, "EMA weight", 0.01, 1.0,
           help="weight of the policy's newest action in the applied one (1: none)"),),
    "Apply an exponential moving average of the policy's actions (restarts each episode).")
#: Probabilistic observation hold (the authors' app has it): with ``probability`` the policy
#: sees the previous step's observation again instead of the new one.
OBS_HOLD = Modulation(
    "obs_hold", "Observation hold",
    (Param("probability", 0.2, "Probability", 0.0, 1.0,
           help="chance that a step's observation repeats the previous one"),),
    "Show the policy its previous observation again, at random, instead of the new one.")


@dataclass
class Batch:
    """Transitions produced by one ``step`` call; row i is (s[i], a[i], s_next[i]).

    ``info`` carries the source's latest auxiliary state for displays (e.g. the pendulum's
    true angles and energy drift); ``events`` are things the source itself saw happen
    (episode ends, for instance) as dicts with at least a ``kind``; ``done`` means the
    source has nothing more to give (a replay at its end).
    """

    s: np.ndarray
    s_next: np.ndarray
    a: np.ndarray | None = None
    reward: np.ndarray | None = None
    episode: np.ndarray | None = None
    t: np.ndarray | None = None
    info: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    #: One mapping of texts per transition, for a ``metric_path = "turns"`` source (see
    #: ``idt_desk.metrics.tokens.DialogueMetrics`` for the keys the metrics read); recorded as is.
    turns: list[dict[str, Any]] | None = None

    def __len__(self) -> int:
        return int(self.s.shape[0])


class SourcePaused(Exception):
    """Raised by ``step`` when the loop cannot go on for now (a dialogue's server failed).

    The session pauses (it does not stop) and logs a ``source_paused`` event with the message
    and ``record`` (what the failed step had made, e.g. a partial reply, kept and marked);
    after a resume it calls ``step`` again and the source carries on where it was.
    """

    def __init__(self, message: str, record: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.record = dict(record or {})


class Source(ABC):
    """Base class of every data source; subclasses fill in the declarations."""

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    description: ClassVar[str] = ""
    state_names: tuple[str, ...] = ()
    action_names: tuple[str, ...] = ()
    has_reward: bool = False
    #: The false-alarm budget a session uses unless told otherwise (``idt_desk.detection.detectors``
    #: ``parse_budget``): per hour of loop time; a dialogue's is per turns.
    default_budget: str = DEFAULT_BUDGET
    #: The baseline's length a session uses unless told otherwise, in windows (turns on the
    #: turn path): long enough for the default budget (``DEFAULT_BASELINE_WINDOWS``).
    default_baseline: int = DEFAULT_BASELINE_WINDOWS
    #: The alarm's detector a session uses unless told otherwise (``DETECTOR_KINDS``).
    default_detector: str = DEFAULT_DETECTOR
    #: Steps of an episode, for false-alarm budgets per episode (None: no episodes).
    episode_steps: int | None = None
    #: Bins of every state / action variable, where the loop's values are categories (a
    #: Gymnasium Discrete space: each of its n values its own symbol), overriding the preset's
    #: (None: the preset's bins). Recorded with the source (a replay declares the same).
    state_bins: int | None = None
    action_bins: int | None = None
    #: A replay: the name of the source whose recording it plays (its switches' names).
    recorded_source: str | None = None
    #: A warning about the data to say once before a session runs (a replay of an
    #: incomplete recording), or None.
    notice: str | None = None
    #: Transitions per second of the loop's own time, for real-time pacing.
    rate: float = 1000.0
    #: Building it takes seconds to minutes (it imports torch or MuJoCo, loads a model): the
    #: GUI opens its window first and builds it there, with its loading screen, and the
    #: command line checks its settings by their declarations instead of building it.
    slow_to_load: ClassVar[bool] = False
    #: Its steps cost a core (a policy and a physics engine): the window runs its session in
    #: a process of its own (``idt_desk.live.process``), so drawing does not slow the loop;
    #: the next one waits warmed by a build with the default settings.
    own_process: ClassVar[bool] = False
    #: Transitions per ``step`` call the session asks for at full speed.
    chunk: ClassVar[int] = 50
    settings: ClassVar[tuple[Param, ...]] = ()
    perturbations: ClassVar[tuple[Perturbation, ...]] = ()
    modulations: ClassVar[tuple[Modulation, ...]] = ()
    #: Names of symbolisation presets (``idt_desk.PRESETS``); the first is the default.
    presets: ClassVar[tuple[str, ...]] = ()
    #: Which live view draws this source (``widgets`` maps names to views), or "".
    view: str = ""
    #: "windows" (symbols over sliding windows) or "turns" (token counts per transition).
    metric_path: ClassVar[str] = "windows"
    #: It plays back data already on disk (a recording): closing its session loses nothing.
    replays: ClassVar[bool] = False

    def __init__(self, **settings: Any) -> None:
        self.config: dict[str, Any] = _resolve(self.settings, settings, f"source {self.name}")
        self.active_perturbations: dict[str, dict[str, Any]] = {}
        self.active_modulations: dict[str, dict[str, Any]] = {}
        self.should_stop: Callable[[], bool] = lambda: False
        #: Hand display state to consumers during a long step (the session sets it): the
        #: mapping is merged into the snapshot's ``info``.
        self.publish: Callable[[Mapping[str, Any]], None] = lambda info: None

    @property
    def passive(self) -> bool:
        """True when the source has no action channel."""
        return not self.action_names

    @classmethod
    def perturbation(cls, name: str) -> Perturbation:
        """The declared perturbation called ``name``."""
        for p in cls.perturbations:
            if p.name == name:
                return p
        raise KeyError(f"{cls.name}: no perturbation {name!r}; known: "
                       f"{[p.name for p in cls.perturbations]}")

    @classmethod
    def modulation(cls, name: str) -> Modulation:
        """The declared modulation called ``name``."""
        for m in cls.modulations:
            if m.name == name:
                return m
        if not cls.modulations:
            raise KeyError(f"{cls.name} is passive or has no interface to modulate")
        raise KeyError(f"{cls.name}: no modulation {name!r}; known: "
                       f"{[m.name for m in cls.modulations]}")

    @abstractmethod
    def reset(self, seed: int | None = None) -> None:
        """Start (or restart) the loop from its initial condition."""

    @abstractmethod
    def step(self, n: int) -> Batch:
        """Advance the loop by up to ``n`` transitions and return them."""

    def set_perturbation(self, name: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """Switch a perturbation on (with parameters) or off (``params=None``).

        Returns the resolved parameters (empty when switched off). Subclasses read
        ``self.active_perturbations`` in ``step`` or override this to act at once.
        """
        spec = self.perturbation(name)
        if params is None:
            self.active_perturbations.pop(name, None)
            return {}
        resolved = spec.resolve(params)
        self.active_perturbations[name] = resolved
        return resolved

    def set_modulation(self, name: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """Engage a modulation (with parameters) or release it (``params=None``)."""
        spec = self.modulation(name)
        if params is None:
            self.active_modulations.pop(name, None)
            return {}
        resolved = spec.resolve(params)
        self.active_modulations[name] = resolved
        return resolved

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (files, models, connections)."""

    def interrupt(self) -> None:  # noqa: B027 - optional hook
        """The session was asked to stop: a step waiting on the outside gives up now.

        Called from another thread (the GUI's) while :meth:`step` may be running; a source
        that waits on a server (a followed run over SSH) ends that wait, so stopping, or
        closing the window, never waits on the network.
        """

    def describe(self) -> dict[str, Any]:
        """What a recording should know about the loop beyond its settings.

        A policy's algorithm, say. Default: nothing.
        """
        return {}

    def recorded_pipeline(self) -> dict[str, Any] | None:
        """The pipeline settings a recording ran with, which its session applies over its own.

        A replay's (``replays``): its symbols, baseline and detector as recorded, and a turn
        path's tokenizer. Default: None, the session's settings stand.
        """
        return None

    @classmethod
    def twin_for(cls, settings: Mapping[str, Any]) -> Twin | None:
        """The loop's nominal model for these settings (``idt_desk.metrics.twin``), or None.

        A batched prediction of S' from (S, A) by an unperturbed model of the loop, which
        the pipeline steps beside the IDT: each window's residual of the physics, and at an
        alarm the class of change (sensor, actuator, force, dynamics). A class method, so a
        replay builds the recorded loop's from its recorded settings; a ValueError says in
        one line why these settings have none. Default: none (:attr:`twin_note`).
        """
        return None

    #: Why :meth:`twin` gives none, in words shown where a class of change would be.
    twin_note: str = "this loop declares no model of itself (a twin): no class of change"

    def twin(self) -> Twin | None:
        """The source's twin (:meth:`twin_for` its settings, built once), or None."""
        if not hasattr(self, "_twin"):
            try:
                self._twin = self.twin_for(self.config)
            except ValueError as exc:
                self._twin, self.twin_note = None, f"{exc}: no class of change"
        return self._twin

    def value_ranges(self) -> dict[str, tuple[float, float]]:
        """Ranges the source knows its variables stay within, by variable name.

        A live session calibrates its symbols on its first seconds, which rarely visit a
        variable's whole range; where the physics bounds a variable (energy bounds a
        pendulum's angular velocities), the bins span that range instead. Asked at each
        (re-)calibration, so it may follow the loop's current state. Default: none.
        """
        return {}


class SourceCheckError(AssertionError):
    """A source breaks the interface; the message lists every problem found."""


def _check_batch(src: Source, batch: Batch, n: int, problems: list[str], where: str) -> None:
    if not isinstance(batch, Batch):
        problems.append(f"{where}: step() returned {type(batch).__name__}, not Batch")
        return
    k = len(batch)
    if k > n:
        problems.append(f"{where}: asked for {n} transitions, got {k}")
    ds, da = len(src.state_names), len(src.action_names)
    for label, arr, cols in (("s", batch.s, ds), ("s_next", batch.s_next, ds)):
        if np.shape(arr) != (k, cols):
            problems.append(f"{where}: {label} has shape {np.shape(arr)}, expected ({k}, {cols})")
        elif not np.all(np.isfinite(arr)):
            problems.append(f"{where}: {label} holds non-finite values")
    if src.passive and batch.a is not None:
        problems.append(f"{where}: passive source returned actions")
    if not src.passive and np.shape(batch.a) != (k, da):
        problems.append(f"{where}: a has shape {np.shape(batch.a)}, expected ({k}, {da})")
    if src.has_reward and np.shape(batch.reward) != (k,):
        problems.append(f"{where}: reward has shape {np.shape(batch.reward)}, expected ({k},)")
    if not src.has_reward and batch.reward is not None:
        problems.append(f"{where}: source declares no reward but returned one")


def check_source(cls: type[Source], settings: Mapping[str, Any] | None = None,
                 n: int | None = None) -> None:
    """Conformance check of a source class (like Gymnasium's ``check_env``).

    Checks the declarations, builds the source, resets it, steps it, switches every
    perturbation (and modulation) on and off, checks determinism under a seed, and closes it.
    Raises :class:`SourceCheckError` listing every problem.
    """
    from idt_desk.metrics.presets import PRESETS

    problems: list[str] = []
    if not (isinstance(cls, type) and issubclass(cls, Source)):
        raise SourceCheckError(f"{cls!r} is not a Source subclass")
    if not cls.name or not cls.name.replace("_", "").replace("-", "").isalnum():
        problems.append(f"name {cls.name!r} must be a non-empty identifier")
    if not cls.label:
        problems.append("label is empty")
    for p in (*cls.settings, *(q for pert in cls.perturbations for q in pert.params),
              *(q for mod in cls.modulations for q in mod.params)):
        try:
            p.validate(p.default)
        except ValueError as exc:
            problems.append(f"declared default invalid: {exc}")
    names = [p.name for p in cls.perturbations]
    if len(set(names)) != len(names):
        problems.append(f"duplicate perturbation names: {names}")
    for preset in cls.presets:
        if preset not in PRESETS:
            problems.append(f"unknown preset {preset!r}")
    n = n or cls.chunk
    try:
        one = cls(**dict(settings or {}))
        two = cls(**dict(settings or {}))
    except Exception as exc:  # reported, not raised
        raise SourceCheckError(f"{cls.name}: cannot construct: {exc!r}") from exc
    try:
        if not one.state_names or len(set(one.state_names)) != len(one.state_names):
            problems.append(f"state_names must be non-empty and unique: {one.state_names}")
        if one.passive and one.modulations:
            problems.append("a passive source declares modulations")
        if not (one.rate > 0):
            problems.append(f"rate must be > 0, got {one.rate}")
        one.reset(seed=123)
        two.reset(seed=123)
        b1, b2 = one.step(n), two.step(n)
        _check_batch(one, b1, n, problems, "first step")
        if len(b1) == len(b2) and len(b1) and not (
            np.array_equal(b1.s, b2.s) and np.array_equal(b1.s_next, b2.s_next)
        ):
            problems.append("two sources reset with the same seed gave different transitions")
        for pert in one.perturbations:
            one.set_perturbation(pert.name, {})
            _check_batch(one, one.step(n), n, problems, f"perturbation {pert.name} on")
            one.set_perturbation(pert.name, None)
            _check_batch(one, one.step(n), n, problems, f"perturbation {pert.name} off")
        for mod in one.modulations:
            one.set_modulation(mod.name, {})
            _check_batch(one, one.step(n), n, problems, f"modulation {mod.name} on")
            one.set_modulation(mod.name, None)
        try:
            one.set_perturbation("__no_such_perturbation__", {})
            problems.append("an unknown perturbation name was accepted")
        except KeyError:
            pass
    except Exception as exc:
        problems.append(f"raised {exc!r}")
    finally:
        one.close()
        two.close()
    if problems:
        raise SourceCheckError(f"{cls.name}: " + "; ".join(problems))
