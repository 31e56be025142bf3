"""``idt-desk reproduce cheetah``: the paper's RL results and closing the loop, by concept.

The paper's RL results (§5.1, §10; Tables 3 and 4) in HalfCheetah, and closing the loop, one module
per concept: :mod:`~idt_desk_sources.gym.reproduce.config` holds the settings and the protocol
(:class:`CheetahConfig`, :class:`Trial`, :class:`TrialGroup`, :func:`make_groups`);
:mod:`~idt_desk_sources.gym.reproduce.judge` judges one trial (the paper's rule, the
live-calibrated detectors, the episode-return monitors, the matched false-alarm comparison);
:mod:`~idt_desk_sources.gym.reproduce.lockstep` runs one policy's trials together
(:func:`run_group`, the executor's task); :mod:`~idt_desk_sources.gym.reproduce.summary` builds
``summary.json`` and :mod:`~idt_desk_sources.gym.reproduce.report` its tables and figures;
:mod:`~idt_desk_sources.gym.reproduce.runner` runs a whole reproduction (:func:`reproduce`);
:mod:`~idt_desk_sources.gym.reproduce.command` is the command line (:data:`HELP`,
:func:`add_arguments`, :func:`run`). Each analysis of finished runs is its own module:
:mod:`~idt_desk_sources.gym.reproduce.pool` (``--pool``, with the perturbations' signatures),
:mod:`~idt_desk_sources.gym.reproduce.held_out` (``--out-of-sample``) and
:mod:`~idt_desk_sources.gym.reproduce.recovery` (``--modulation``), sharing
:mod:`~idt_desk_sources.gym.reproduce.finished` (their runs read, their blocks written) and
:mod:`~idt_desk_sources.gym.reproduce.read` (the checked reader of a run's ``trials.csv``). The
package re-exports the names other code imports from it.
"""

from __future__ import annotations

from idt_desk_sources.gym.reproduce.command import HELP, add_arguments, run
from idt_desk_sources.gym.reproduce.config import (
    CONTROL,
    DETECTORS,
    CheetahConfig,
    Trial,
    TrialGroup,
    control_seed,
    perturbation_names,
)
from idt_desk_sources.gym.reproduce.finished import shared_controls
from idt_desk_sources.gym.reproduce.held_out import out_of_sample
from idt_desk_sources.gym.reproduce.judge import analyze_trial
from idt_desk_sources.gym.reproduce.lockstep import run_group
from idt_desk_sources.gym.reproduce.pool import pool_runs
from idt_desk_sources.gym.reproduce.report import rate_errors
from idt_desk_sources.gym.reproduce.runner import reproduce
from idt_desk_sources.gym.reproduce.summary import summarize_trials

__all__ = [
    "CONTROL",
    "DETECTORS",
    "HELP",
    "CheetahConfig",
    "Trial",
    "TrialGroup",
    "add_arguments",
    "analyze_trial",
    "control_seed",
    "out_of_sample",
    "perturbation_names",
    "pool_runs",
    "rate_errors",
    "reproduce",
    "run",
    "run_group",
    "shared_controls",
    "summarize_trials",
]
