"""How a Gymnasium env's spaces become the IDT's variables, and the preset chosen for them.

A space becomes symbol-ready columns (:class:`SpaceCodec`: a Box's values, a Discrete
space's values each their own symbol), refused in one line where the IDT cannot describe it
(an image); :func:`resolve_preset` fits a preset to the env. See :mod:`idt_desk.gym`.
"""

from __future__ import annotations

import math
from dataclasses import replace

import gymnasium
import numpy as np
from gymnasium import spaces

from idt_desk.metrics.presets import PRESETS, Preset

__all__ = ["GENERIC_PRESET", "MAX_VARIABLES", "SpaceCodec", "resolve_preset"]

#: The preset used when none is given (``"auto"``): W = 300, stride 50 (the paper's
#: HalfCheetah numbers) and the view that resolves the calibration windows, 3 bins a
#: variable first (:mod:`idt_desk.metrics.views`). ``bins`` given fixes the view.
GENERIC_PRESET = PRESETS["auto"]


# ---------------------------------------------------------------------------------------------
# Spaces and presets
# ---------------------------------------------------------------------------------------------


#: Most variables a space may have (an observation's or an action's): a robot's state has
#: tens; more is an image or a sensor array, which the IDT's bins do not describe.
MAX_VARIABLES = 1024


class SpaceCodec:
    """How one Gymnasium space becomes a row of variables."""

    def __init__(self, space: gymnasium.Space, role: str) -> None:
        self.space = space
        self.discrete_n: int | None = None
        self.ranges: dict[int, tuple[float, float]] = {}
        if isinstance(space, spaces.Discrete):
            n, start = int(space.n), int(space.start)
            self.shape: tuple[int, ...] = ()
            self.dim = 1
            self.discrete_n = n
            self.ranges = {0: (float(start), float(start + n - 1))}
        elif isinstance(space, spaces.Box):
            self.shape = tuple(int(d) for d in space.shape)
            self.dim = math.prod(self.shape)
            if self.dim < 1:
                raise ValueError(f"the {role} space {space} has no variables")
            if self.dim > MAX_VARIABLES:
                # An image (64×64×3: 12,288 variables) grew the wrapper past 5.9 GB: each
                # variable is binned and kept; the IDT reads a state, not pixels.
                raise ValueError(
                    f"the {role} space {space} has {self.dim:,} variables, more than the "
                    f"{MAX_VARIABLES:,} the IDT symbolises: give it a state (a feature "
                    "extractor's output, a projection such as gymnasium.wrappers."
                    "ResizeObservation and FlattenObservation to a few numbers, or the "
                    "simulator's own state)")
        else:
            hint = ("flatten it first (gymnasium.wrappers.FlattenObservation)"
                    if role == "observation" else "wrap the env to act through one")
            raise ValueError(f"IDT metrics need a Box or Discrete {role} space, got {space}; "
                             f"{hint}")

    def bins(self, preset_bins: int) -> int:
        """Bins per variable: a Discrete space's n values are each their own bin."""
        return self.discrete_n if self.discrete_n is not None else preset_bins

    def buffer(self, capacity: int) -> np.ndarray:
        """An empty float64 store of ``capacity`` rows of this space."""
        return np.empty((capacity, *self.shape), dtype=np.float64)


def resolve_preset(
    preset: str | Preset | None,
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    bins: int | None = None,
    window: int | None = None,
    stride: int | None = None,
) -> Preset:
    """The preset to use on these spaces, with overrides applied and checked.

    Parameters
    ----------
    preset
        A name in :data:`~idt_desk.PRESETS`, a :class:`~idt_desk.Preset`, or None for
        :data:`GENERIC_PRESET` (each variable its own group).
    observation_space, action_space
        The env's spaces (Box or Discrete).
    bins, window, stride
        Overrides of the preset's values.

    Returns
    -------
    Preset
        With ``n_state`` / ``n_action`` set to the spaces' variable counts.

    Raises
    ------
    ValueError
        Unknown preset name, an unsupported space, bad overrides, or a preset whose
        ``n_state`` / ``n_action`` or groups do not fit the spaces.

    """
    obs = SpaceCodec(observation_space, "observation")
    act = SpaceCodec(action_space, "action")
    if preset is None:
        base = GENERIC_PRESET
    elif isinstance(preset, str):
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
        base = PRESETS[preset]
    elif isinstance(preset, Preset):
        base = preset
    else:
        raise TypeError(f"preset must be a name, a Preset or None, got {type(preset).__name__}")
    changes = {k: v for k, v in (("bins", bins), ("window", window), ("stride", stride))
               if v is not None}
    for key, value in changes.items():
        if isinstance(value, bool) or int(value) != value:
            raise ValueError(f"{key} must be an integer, got {value!r}")
    p = replace(base, **{k: int(v) for k, v in changes.items()})
    if "bins" in changes and p.auto_view:  # the user's bins: the view is theirs, not chosen
        p = replace(PRESETS["gym"], bins=p.bins, window=p.window, stride=p.stride)
    if p.bins < 1 or p.window < 2 or p.stride < 1:
        raise ValueError(f"need bins >= 1, window >= 2, stride >= 1; got bins={p.bins}, "
                         f"window={p.window}, stride={p.stride}")
    if (p.n_state is not None and p.n_state != obs.dim) or (
            p.n_action is not None and p.n_action != act.dim):
        want_s = "any number of" if p.n_state is None else str(p.n_state)
        want_a = "any number of" if p.n_action is None else str(p.n_action)
        raise ValueError(
            f"preset {p.name!r} expects {want_s} state variables and {want_a} action "
            f"variables; the env has {obs.dim} observation variables ({observation_space}) "
            f"and {act.dim} action variables ({action_space})"
        )
    for what, groups, dim in (("state", p.state_groups, obs.dim),
                              ("action", p.action_groups, act.dim)):
        flat = [j for g in groups or () for j in g]
        if flat and (min(flat) < 0 or max(flat) >= dim):
            raise ValueError(f"preset {p.name!r}: {what} groups use variable {max(flat)}, "
                             f"but the env has {dim} {what} variables")
    if p.angle_mode == "wrap" and p.angles and max(p.angles) >= obs.dim:
        raise ValueError(f"preset {p.name!r}: angle variable {max(p.angles)} out of range for "
                         f"{obs.dim} observation variables")
    return replace(p, n_state=obs.dim, n_action=act.dim)
