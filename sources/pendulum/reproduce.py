"""Reproduce the paper's double-pendulum batches (§3 Tables 1–2, §9 Table 8 and Figure 5).

``idt-desk reproduce pendulum`` simulates a batch of random double-pendulum runs, symbolises
each one with the paper's preset and tabulates P, H_f, H_b, ΔH and the finite-time Lyapunov
exponent across runs, next to the paper's published values.

One run
-------
1. Masses: ``symmetric`` runs have ``m1 = m2 = 1`` kg; ``asymmetric`` runs have ``m1 = 1`` kg
   and ``m2 / m1`` drawn log-uniform on ``[1/4, 4]`` (so heavier and lighter lower bobs are
   equally likely) from ``numpy.random.default_rng([seed, run, 1])``. ``--masses both``
   alternates: even runs symmetric, odd runs asymmetric. Rods are 1 m, ``g = 9.81``, no
   damping. (The paper says only "symmetric (equal bob masses) and asymmetric (unequal bob
   masses)"; the ratio range is our choice.)
2. Initial condition from ``numpy.random.default_rng([seed, run])``:
   :func:`~idt_desk_sources.pendulum._dynamics.random_initial_condition`, i.e. released from
   rest with ``θ1, θ2`` independent and uniform on ``(−π, π]``.
3. :func:`~idt_desk_sources.pendulum._dynamics.integrate` for ``seconds`` at 1 kHz (Dormand–Prince
   5(4), ``rtol = atol = 1e-9``, ``max_step = 1 ms``, the paper's settings). A run whose
   relative energy drift exceeds ``VALID_DRIFT`` (0.05 %, the paper's criterion) is *invalid*:
   it is counted and left out of every statistic.
4. :func:`~idt_desk_sources.pendulum._dynamics.ftle` over the same ``seconds`` (Benettin's method,
   separation 1e-8, renormalised every 10 ms; natural log, units 1/s).
5. The authors' pipeline, exactly as ``idt-desk analyze`` runs it on their released sample:
   transitions S = rows ``0 … n−1``, S' = rows ``1 … n``, angles unwrapped, each of
   ``θ1, θ2, ω1, ω2`` z-scored and cut into equal-width bins over the run itself, S the
   composite of the four bins, passive (no action), windows of the preset's ``W`` / stride.
6. The run's statistic for each metric is the **mean over its windows**. The paper's
   Tables 1, 2 and 8 are across runs: Table 1's smallest P (0.4729) is far above what single
   windows reach (the authors' own sample has windows down to 0.455), so each run contributes
   one number, its window mean. ``summary.json`` gives min / mean / max / std (ddof = 1, as
   MATLAB's ``std``) of these per-run means over the valid runs.

Run ``i`` of a given seed has the same masses and initial condition in both batches, so
``--batch 1`` and ``--batch 2`` with one seed compare the two representations on the same
trajectories; the paper's two batches were independent simulations, which ``--seed`` gives.

Runs are independent tasks (:func:`simulate_run` on a :class:`RunTask`) executed through any
``concurrent.futures``-style executor: a spawn-context ``ProcessPoolExecutor`` by default, or a
``dask.distributed.Client`` (``--scheduler ADDRESS``; the workers must be able to import this
package). The same seed gives bit-identical per-run numbers whatever the executor, so
``runs.csv`` is reproducible byte for byte (it holds no timings; those are in
``summary.json``).

One file: the reproduction reads top to bottom as the paper's protocol (runs, symbols,
FTLE, the tables beside the paper's values), and its tasks must be importable by name from
one module by the executor's worker processes.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from idt_desk_sources.pendulum._dynamics import (
    VALID_DRIFT,
    PendulumParams,
    ftle,
    integrate,
    random_initial_condition,
)

from idt_desk.plugin import (
    InputError,
    Preset,
    Trajectory,
    add_executor_arguments,
    check_int,
    check_out_dir,
    default_workers,
    executor_description,
    get_preset,
    run_tasks,
    sliding_metrics,
    summarize,
    summary_document,
    symbolize_trajectory,
    write_report,
)

__all__ = [
    "BATCH_PRESETS",
    "FTLE_NOTE",
    "MASS_MODES",
    "PAPER_VALUES",
    "ReproduceConfig",
    "ReproduceResult",
    "RunResult",
    "RunTask",
    "add_arguments",
    "format_tables",
    "make_tasks",
    "plot_ftle_vs_p",
    "reproduce",
    "run",
    "simulate_run",
    "write_outputs",
]

#: ``--batch`` -> preset name (``idt_desk.PRESETS``).
#: ``idt-desk reproduce pendulum``'s one-line help.
HELP = "the paper's double-pendulum batches (Tables 1, 2, 8; Figure 5)"

BATCH_PRESETS = {1: "pendulum", 2: "pendulum-batch2"}

#: ``--masses`` choices.
MASS_MODES = ("symmetric", "asymmetric", "both")

#: Range of ``m2 / m1`` for asymmetric runs (log-uniform), ``m1 = 1`` kg.
ASYMMETRIC_RATIO = (0.25, 4.0)

#: The per-run metrics, in table order.
RUN_METRICS = ("P", "H_f", "H_b", "dH")

#: Statistics in ``summary.json`` (the per-run metrics and the FTLE).
SUMMARY_METRICS = (*RUN_METRICS, "FTLE")

#: Upper bounds of ``--runs`` and ``--seconds`` (a run's trajectory is held in memory).
MAX_RUNS = 1_000_000
MAX_SECONDS = 3600.0

# The paper's published values, copied from its text: Table 1 (P across runs), Table 2
# (H_f = H(S'|S), H_b = H(S|S'), dH) and Table 8 (FTLE and P, mean and std), per batch.
# Table 8 repeats Table 1's P mean and gives its std with one more digit.
PAPER_VALUES: dict[int, dict[str, dict[str, float]]] = {
    1: {
        # Table 1, "1st batch".
        "P": {"min": 0.472944657, "mean": 0.475747126, "max": 0.48095266, "std": 0.00155264},
        # Table 2, "1st batch".
        "H_f": {"min": 0.101762767, "mean": 0.173011607, "max": 0.21491649, "std": 0.02207975},
        "H_b": {"min": 0.101853985, "mean": 0.172982039, "max": 0.21480427, "std": 0.02213793},
        "dH": {"min": -3.76e-04, "mean": -6.6996e-07, "max": 5.15e-04, "std": 0.00016409},
        # Table 8, "1st batch".
        "FTLE": {"mean": -6.632019915, "std": 4.442605378},
        "P_table8": {"mean": 0.475747126, "std": 0.001552642},
    },
    2: {
        # Table 1, "2nd batch" (as printed: its min exceeds its mean; see format_tables).
        "P": {"min": 0.475749647, "mean": 0.472919123, "max": 0.4769658, "std": 0.00169209},
        # Table 2, "2nd batch".
        "H_f": {"min": 7.62e-02, "mean": 0.132628187, "max": 0.19915062, "std": 0.01919794},
        "H_b": {"min": 7.63e-02, "mean": 0.132629277, "max": 0.19949738, "std": 0.01920498},
        "dH": {"min": -6.25e-04, "mean": -1.09e-06, "max": 0.00063149, "std": 0.00022369},
        # Table 8, "2nd batch".
        "FTLE": {"mean": -8.550904894, "std": 5.819810661},
        "P_table8": {"mean": 0.472919123, "std": 0.001692086},
    },
}

FTLE_NOTE = (
    "The paper reports FTLE means of −6.63 ± 4.44 (batch 1) and −8.55 ± 5.82 (batch 2). "
    "The largest Lyapunov exponent of a conservative (Hamiltonian) flow is ≥ 0 in the "
    "long-time limit, and Benettin's method gives positive values for chaotic runs, so our "
    "FTLE column cannot match the paper's sign; the paper does not say how its FTLE was "
    "normalised. Ours is Benettin's largest finite-time exponent (natural log, 1/s, "
    "separation 1e-8 renormalised every 10 ms over the whole run), reported as computed."
)

_TABLE1_NOTE = (
    "The paper's Table 1 row for the 2nd batch is printed with min 0.475749647 above its "
    "mean 0.472919123, which cannot both be right; the 1st batch's min (0.472944657) and the "
    "2nd batch's mean agree to 4 decimals, as do the 2nd batch's min and the 1st batch's "
    "mean, so two cells may have been swapped. The values are shown as printed."
)

_PER_RUN_NOTE = (
    "Each run contributes one number per metric, the mean over its windows; the columns are "
    "statistics of those per-run means across the valid runs (std with ddof = 1)."
)

_METRIC_LABELS = {
    "H_f": "Forward predictive uncertainty H(S'\\|S)",
    "H_b": "Backward predictive uncertainty H(S\\|S')",
    "dH": "Predictive asymmetry ΔH = H_f − H_b",
}


# ---------------------------------------------------------------------------------------------
# Configuration, tasks and per-run results
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReproduceConfig:
    """What to reproduce.

    Attributes
    ----------
    batch : int
        1 (preset ``pendulum``: 16 bins, W = 300, stride 75) or 2 (``pendulum-batch2``: 8 bins,
        W = 150, stride 25).
    runs : int
        Number of simulations (the paper: 300 per batch).
    seconds : float
        Simulated time per run (s), sampled at 1 kHz.
    seed : int
        Master seed; run ``i`` draws its initial condition from ``default_rng([seed, i])``.
    masses : str
        ``symmetric``, ``asymmetric`` or ``both`` (alternating).
    workers : int or None
        Worker processes for the default process pool (None: every available core; 0: none,
        the tasks run in this process one after another). Ignored when an executor or a
        scheduler is given.
    scheduler : str or None
        Address of a Dask scheduler; its ``Client`` then runs the tasks.
    out : pathlib.Path or None
        If set, :func:`reproduce` writes its outputs there (see :func:`write_outputs`).

    """

    batch: int = 1
    runs: int = 300
    seconds: float = 20.0
    seed: int = 0
    masses: str = "both"
    workers: int | None = None
    scheduler: str | None = None
    out: Path | None = None

    @property
    def preset_name(self) -> str:
        """The ``idt_desk.PRESETS`` key of this batch."""
        return BATCH_PRESETS[self.batch]

    def validate(self) -> Preset:
        """Check the settings; return the batch's preset.

        Raises
        ------
        InputError
            A setting out of range, or runs too short for one window.

        """
        if self.batch not in BATCH_PRESETS:
            raise InputError(f"--batch must be 1 or 2, got {self.batch!r}")
        if self.masses not in MASS_MODES:
            raise InputError(
                f"--masses must be one of {', '.join(MASS_MODES)}, got {self.masses!r}"
            )
        check_int("--runs", self.runs, 1, MAX_RUNS)
        check_int("--workers", self.workers, 0)
        check_int("--seed", self.seed, 0, 2**63 - 1)
        preset = get_preset(self.preset_name)
        if not (math.isfinite(self.seconds) and 0 < self.seconds <= MAX_SECONDS):
            raise InputError(f"--seconds {self.seconds!r}: must be a number > 0 and <= "
                             f"{MAX_SECONDS:g} (each run is held in memory)")
        check_out_dir(self.out, "--out")  # before the simulations, not after them
        transitions = math.floor(self.seconds * 1000.0 + 1e-9)
        if transitions < preset.window:
            raise InputError(
                f"--seconds {self.seconds:g}: gives {transitions} transitions at 1 kHz, fewer "
                f"than one window of {preset.window} (batch {self.batch})"
            )
        return preset

    def to_dict(self, preset: Preset | None = None) -> dict[str, Any]:
        """JSON-able description (with the preset and the fixed simulation settings)."""
        preset = preset or get_preset(self.preset_name)
        workers = None if self.scheduler else (
            default_workers() if self.workers is None else self.workers)
        return {
            "batch": self.batch,
            "preset": preset.to_dict(),
            "runs": self.runs,
            "seconds": self.seconds,
            "seed": self.seed,
            "masses": self.masses,
            "workers": workers,
            "scheduler": self.scheduler,
            "mass_distribution": (
                "symmetric: m1 = m2 = 1 kg; asymmetric: m1 = 1 kg, m2/m1 log-uniform on "
                f"[{ASYMMETRIC_RATIO[0]:g}, {ASYMMETRIC_RATIO[1]:g}] from "
                "default_rng([seed, run, 1]); 'both' alternates, even runs symmetric"
            ),
            "initial_condition": (
                "default_rng([seed, run]): theta1, theta2 uniform on (-pi, pi], released "
                "from rest"
            ),
            "physics": {"l1": 1.0, "l2": 1.0, "g": 9.81, "damping": 0.0},
            "integrator": {
                "method": "Dormand-Prince 5(4)", "rtol": 1e-9, "atol": 1e-9,
                "max_step": 1e-3, "sample_rate": 1000.0, "valid_drift": VALID_DRIFT,
            },
            "ftle": {"method": "Benettin", "d0": 1e-8, "renorm_every": 0.01, "units": "1/s"},
            "per_run_statistic": "mean over the run's windows",
        }


@dataclass(frozen=True)
class RunTask:
    """One simulation: everything a worker needs (small and picklable).

    Attributes
    ----------
    index : int
        Run number (0-based).
    seed : int
        Master seed; the initial condition comes from ``default_rng([seed, index])``.
    m1, m2 : float
        Bob masses (kg).
    seconds : float
        Simulated time (s).
    preset : str
        Name of the symbolisation/window preset.

    """

    index: int
    seed: int
    m1: float
    m2: float
    seconds: float
    preset: str

    @property
    def masses(self) -> str:
        """``symmetric`` when the masses are equal, else ``asymmetric``."""
        return "symmetric" if self.m1 == self.m2 else "asymmetric"


@dataclass
class RunResult:
    """What one run returns (the per-run metrics are means over the run's windows)."""

    run: int
    masses: str
    m1: float
    m2: float
    theta1_0: float
    theta2_0: float
    omega1_0: float
    omega2_0: float
    energy_drift: float
    valid: bool
    P: float
    H_f: float
    H_b: float
    dH: float
    FTLE: float
    windows: int
    steps: int
    rejected: int
    error: str = ""
    wall_seconds: float = field(default=math.nan, compare=False)

    def row(self) -> dict[str, Any]:
        """The ``runs.csv`` row: everything but the wall time (so the file is reproducible)."""
        d = asdict(self)
        del d["wall_seconds"]
        return d


def make_tasks(config: ReproduceConfig) -> list[RunTask]:
    """The runs of ``config``, with their masses drawn (see the module docstring)."""
    lo, hi = math.log(ASYMMETRIC_RATIO[0]), math.log(ASYMMETRIC_RATIO[1])
    tasks = []
    for i in range(config.runs):
        asymmetric = config.masses == "asymmetric" or (config.masses == "both" and i % 2 == 1)
        m2 = 1.0
        if asymmetric:
            m2 = float(math.exp(np.random.default_rng([config.seed, i, 1]).uniform(lo, hi)))
        tasks.append(RunTask(i, config.seed, 1.0, m2, float(config.seconds), config.preset_name))
    return tasks


def _window_mean(x: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]  # P is NaN only in a window where the symbols never change
    return float(x.mean()) if x.size else math.nan


def simulate_run(task: RunTask) -> RunResult:
    """Simulate, symbolise and window one run (the unit of work sent to an executor).

    Parameters
    ----------
    task : RunTask
        The run to do.

    Returns
    -------
    RunResult
        Initial condition, energy drift, validity, per-run window means of P, H_f, H_b, ΔH,
        the FTLE, and counts. A run the integrator cannot finish is returned invalid with
        the error message, not raised.

    """
    t0 = time.perf_counter()
    preset = get_preset(task.preset)
    y0 = random_initial_condition(np.random.default_rng([task.seed, task.index]))
    params = PendulumParams(m1=task.m1, m2=task.m2)
    base = {
        "run": task.index, "masses": task.masses, "m1": task.m1, "m2": task.m2,
        "theta1_0": float(y0[0]), "theta2_0": float(y0[1]),
        "omega1_0": float(y0[2]), "omega2_0": float(y0[3]),
    }
    try:
        traj = integrate(y0, params, task.seconds)
        lam = ftle(y0, params, task.seconds)
    except FloatingPointError as exc:
        nan = math.nan
        return RunResult(
            **base, energy_drift=nan, valid=False, P=nan, H_f=nan, H_b=nan, dH=nan, FTLE=nan,
            windows=0, steps=0, rejected=0, error=str(exc),
            wall_seconds=time.perf_counter() - t0,
        )
    y = traj.y
    names = ["theta1", "theta2", "omega1", "omega2"]
    transitions = Trajectory(
        s=y[:-1], s_next=y[1:], a=None, reward=None, episode=None,
        state_names=names, action_names=[], rows=y.shape[0] - 1,
    )
    s, s_next, _, _ = symbolize_trajectory(transitions, preset)
    w = sliding_metrics(s, s_next, None, preset.window, preset.stride)
    return RunResult(
        **base,
        energy_drift=float(traj.energy_drift),
        valid=bool(traj.valid),
        P=_window_mean(w["P"]),
        H_f=_window_mean(w["H_f"]),
        H_b=_window_mean(w["H_b"]),
        dH=_window_mean(w["dH"]),
        FTLE=float(lam),
        windows=len(w["P"]),
        steps=int(traj.steps),
        rejected=int(traj.rejected),
        wall_seconds=time.perf_counter() - t0,
    )


@dataclass
class ReproduceResult:
    """A finished reproduction.

    Attributes
    ----------
    config : ReproduceConfig
        What was run.
    preset : Preset
        The batch's symbolisation/window preset.
    results : list of RunResult
        Per-run results, sorted by run index.
    runs : pandas.DataFrame
        The same as a table (the ``runs.csv`` columns).
    summary : dict
        The ``summary.json`` content.
    wall_seconds : float
        Wall time of the whole batch (s).

    """

    config: ReproduceConfig
    preset: Preset
    results: list[RunResult]
    runs: pd.DataFrame
    summary: dict[str, Any]
    wall_seconds: float


def _corr(x: np.ndarray, y: np.ndarray) -> float | None:
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def _summary(
    config: ReproduceConfig, preset: Preset, results: list[RunResult], wall: float
) -> dict[str, Any]:
    table = pd.DataFrame([r.row() for r in results])
    valid = table[table["valid"]]
    cols = {m: valid[m].to_numpy(dtype=np.float64) for m in SUMMARY_METRICS}
    by_masses = {}
    for kind in ("symmetric", "asymmetric"):
        part = valid[valid["masses"] == kind]
        if len(part):
            by_masses[kind] = {
                "runs": len(part),
                "metrics": summarize({m: part[m].to_numpy() for m in SUMMARY_METRICS},
                                     SUMMARY_METRICS),
                "corr_FTLE_P": _corr(part["FTLE"].to_numpy(), part["P"].to_numpy()),
            }
    run_walls = np.array([r.wall_seconds for r in results], dtype=np.float64)
    return summary_document(
        summarize(cols, SUMMARY_METRICS),
        notes=[_PER_RUN_NOTE, FTLE_NOTE],
        config=config.to_dict(preset),
        corr_FTLE_P=_corr(cols["FTLE"], cols["P"]),
        runs=len(results),
        valid_runs=len(valid),
        invalid_runs=len(results) - len(valid),
        errors=[f"run {r.run}: {r.error}" for r in results if r.error],
        by_masses=by_masses,
        max_energy_drift=(
            float(table["energy_drift"].max()) if table["energy_drift"].notna().any() else None
        ),
        run_wall_seconds={
            "min": float(run_walls.min()), "mean": float(run_walls.mean()),
            "max": float(run_walls.max()), "total": float(run_walls.sum()),
        },
        wall_seconds=wall,
        paper=PAPER_VALUES[config.batch],
    )


def reproduce(
    config: ReproduceConfig,
    *,
    executor: Any | None = None,
    progress: bool = True,
) -> ReproduceResult:
    """Run a batch of double-pendulum simulations and summarise them like the paper.

    Parameters
    ----------
    config : ReproduceConfig
        The batch, number of runs, duration, seed, masses and where to run.
    executor : concurrent.futures.Executor or dask.distributed.Client, optional
        Runs the tasks (anything with ``submit(fn, arg)`` returning futures; a Dask
        ``Client`` is recognised and its own ``as_completed`` used). It is left open. By
        default a Dask ``Client`` to ``config.scheduler`` if that is set, else a
        spawn-context ``ProcessPoolExecutor`` with ``config.workers`` processes; either is
        closed at the end.
    progress : bool, optional
        Show a tqdm progress bar (on stderr).

    Returns
    -------
    ReproduceResult
        Per-run results and the summary; written to ``config.out`` when that is set.

    Raises
    ------
    InputError
        Bad settings, Dask missing (``--scheduler``), or an unreachable scheduler.

    """
    preset = config.validate()
    tasks = make_tasks(config)
    t0 = time.perf_counter()
    results = run_tasks(simulate_run, tasks, executor=executor, workers=config.workers,
                        scheduler=config.scheduler, progress=progress, desc="pendulum runs",
                        unit="run")
    wall = time.perf_counter() - t0
    summary = _summary(config, preset, results, wall)
    table = pd.DataFrame([r.row() for r in results])
    result = ReproduceResult(config, preset, results, table, summary, wall)
    if config.out is not None:
        write_outputs(result, Path(config.out))
    return result


# ---------------------------------------------------------------------------------------------
# Outputs
# ---------------------------------------------------------------------------------------------


def _fmt(v: float | None, digits: int = 6) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return f"{v:.{digits}g}"


def _paper(v: float | None) -> str:
    # Shortest round-trip form: the digits the paper prints.
    return "—" if v is None else repr(float(v))


def format_tables(summary: dict[str, Any]) -> str:
    """Markdown tables laid out like the paper's Tables 1, 2 and 8, paper beside this run.

    Parameters
    ----------
    summary : dict
        The ``summary.json`` content (:attr:`ReproduceResult.summary`).

    Returns
    -------
    str
        Markdown text (``table.md``).

    """
    cfg = summary["config"]
    batch = int(cfg["batch"])
    paper = PAPER_VALUES[batch]
    ordinal = {1: "1st", 2: "2nd"}[batch]
    pre = cfg["preset"]
    ours = f"this run, batch {batch} ({summary['valid_runs']} valid runs)"
    theirs = f"paper, {ordinal} batch"
    where = executor_description(cfg["workers"], cfg["scheduler"])
    lines = [
        f"# Double pendulum, batch {batch}: reproduction of the paper's Tables 1, 2 and 8",
        "",
        f"Preset `{pre['name']}`: {pre['bins']} bins, W = {pre['window']}, stride "
        f"{pre['stride']}. {summary['runs']} runs × {cfg['seconds']:g} s at 1 kHz, seed "
        f"{cfg['seed']}, masses {cfg['masses']}; {summary['invalid_runs']} invalid "
        f"(energy drift > {VALID_DRIFT:.2%}) excluded. Wall time "
        f"{summary['wall_seconds']:.1f} s on {where}.",
        "",
        _PER_RUN_NOTE,
        "",
        "## Table 1 — Bi-predictability P",
        "",
        "| Batch | P Min | P Mean | P Max | P STD |",
        "|---|---|---|---|---|",
    ]
    p = paper["P"]
    lines.append(f"| {theirs} | {_paper(p['min'])} | {_paper(p['mean'])} | {_paper(p['max'])} "
                 f"| {_paper(p['std'])} |")
    ours_metrics = summary["metrics"]
    o = ours_metrics["P"]
    lines.append(f"| {ours} | {_fmt(o['min'])} | {_fmt(o['mean'])} | {_fmt(o['max'])} "
                 f"| {_fmt(o['std'])} |")
    if batch == 2:
        lines += ["", _TABLE1_NOTE]
    lines += [
        "",
        "## Table 2 — Forward and backward predictive uncertainty (bits)",
        "",
        "| Batch | Metric | Min | Mean | Max | STD |",
        "|---|---|---|---|---|---|",
    ]
    for label, values, fmt in ((theirs, paper, _paper), (ours, ours_metrics, _fmt)):
        for j, m in enumerate(("H_f", "H_b", "dH")):
            st = values[m]
            lines.append(
                f"| {label if j == 0 else ''} | {_METRIC_LABELS[m]} | {fmt(st['min'])} "
                f"| {fmt(st['mean'])} | {fmt(st['max'])} | {fmt(st['std'])} |"
            )
    corr = summary["corr_FTLE_P"]
    lines += [
        "",
        "## Table 8 — Chaos and predictive coherence",
        "",
        "| Batch | Metric | Mean | STD |",
        "|---|---|---|---|",
        f"| {theirs} | FTLE | {_paper(paper['FTLE']['mean'])} | {_paper(paper['FTLE']['std'])} |",
        f"| | Bi-predictability P | {_paper(paper['P_table8']['mean'])} "
        f"| {_paper(paper['P_table8']['std'])} |",
        "| | Pearson r(FTLE, P) | positive (Figure 5; no value given) | |",
        f"| {ours} | FTLE (1/s) | {_fmt(ours_metrics['FTLE']['mean'])} "
        f"| {_fmt(ours_metrics['FTLE']['std'])} |",
        f"| | Bi-predictability P | {_fmt(ours_metrics['P']['mean'])} "
        f"| {_fmt(ours_metrics['P']['std'])} |",
        f"| | Pearson r(FTLE, P) | {_fmt(corr, 3)} | |",
        "",
        f"Note: {FTLE_NOTE}",
    ]
    by = summary.get("by_masses", {})
    if by:
        lines += [
            "",
            "By masses (valid runs): "
            + "; ".join(
                f"{k}: {v['runs']} runs, P mean {_fmt(v['metrics']['P']['mean'])}, FTLE mean "
                f"{_fmt(v['metrics']['FTLE']['mean'], 4)} 1/s, "
                f"r(FTLE, P) {_fmt(v['corr_FTLE_P'], 3)}"
                for k, v in by.items()
            )
            + ".",
        ]
    return "\n".join(lines) + "\n"


def plot_ftle_vs_p(runs: pd.DataFrame, path: Path, title: str = "") -> None:
    """Write the FTLE-vs-P scatter (the paper's Figure 5) of the valid runs as a PNG.

    Parameters
    ----------
    runs : pandas.DataFrame
        The ``runs.csv`` table (columns ``valid``, ``masses``, ``FTLE``, ``P``).
    path : pathlib.Path
        PNG to write.
    title : str, optional
        First title line; the Pearson correlation is added below it.

    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    valid = runs[runs["valid"]]
    r = _corr(valid["FTLE"].to_numpy(dtype=float), valid["P"].to_numpy(dtype=float))
    fig, ax = plt.subplots(figsize=(6.4, 4.8), constrained_layout=True)
    for kind, colour in (("symmetric", "tab:blue"), ("asymmetric", "tab:orange")):
        part = valid[valid["masses"] == kind]
        if len(part):
            ax.scatter(part["FTLE"], part["P"], s=14, alpha=0.75, color=colour,
                       label=f"{kind} ({len(part)})", edgecolors="none")
    ax.set_xlabel("FTLE (1/s)")
    ax.set_ylabel("P (mean over the run's windows)")
    ax.grid(alpha=0.3)
    if len(valid):
        ax.legend(loc="best", fontsize=9)
    r_text = "Pearson r = —" if r is None else f"Pearson r = {r:.3f}"
    ax.set_title(f"{title}\n{r_text}" if title else r_text, fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(result: ReproduceResult, out: Path) -> list[Path]:
    """Write ``runs.csv``, ``summary.json``, ``table.md`` and ``ftle_vs_p.png`` into ``out``.

    Parameters
    ----------
    result : ReproduceResult
        A finished reproduction.
    out : pathlib.Path
        Output directory (created if needed).

    Returns
    -------
    list of pathlib.Path
        The files written.

    """
    cfg = result.config
    title = (f"Double pendulum batch {cfg.batch}: {result.summary['valid_runs']} runs × "
             f"{cfg.seconds:g} s (cf. the paper's Figure 5)")
    return write_report(
        out, rows=result.runs, rows_name="runs.csv", summary=result.summary,
        markdown=format_tables(result.summary),
        figure=lambda path: plot_ftle_vs_p(result.runs, path, title), figure_name="ftle_vs_p.png",
    )


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``idt-desk reproduce pendulum`` options to ``parser`` (and ``func=run``)."""
    parser.description = (
        "Simulate a batch of random double-pendulum runs, compute per-run window means of P, "
        "H_f, H_b, dH and the FTLE, and tabulate them beside the paper's Tables 1, 2 and 8. "
        "Writes runs.csv, summary.json, table.md and ftle_vs_p.png into --out."
    )
    parser.add_argument("--batch", type=int, choices=(1, 2), default=1,
                        help="1: 16 bins, W=300, stride 75; 2: 8 bins, W=150, stride 25")
    parser.add_argument("--runs", type=int, default=300, help="simulations (default 300)")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="simulated seconds per run (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="master seed (default 0)")
    parser.add_argument("--masses", choices=MASS_MODES, default="both",
                        help="symmetric (m1=m2=1), asymmetric (m2/m1 log-uniform in "
                             "[0.25, 4]) or both, alternating (default)")
    add_executor_arguments(parser, "runs")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, print_fn: Callable[[str], None] = print) -> int:
    """Run ``idt-desk reproduce pendulum`` from parsed arguments; print the tables.

    Raises
    ------
    InputError
        Bad settings, Dask missing, or an unreachable scheduler (the CLI prints it, exit 2).

    """
    config = ReproduceConfig(
        batch=args.batch, runs=args.runs, seconds=args.seconds, seed=args.seed,
        masses=args.masses, workers=args.workers, scheduler=args.scheduler, out=args.out,
    )
    result = reproduce(config, progress=not args.no_progress)
    print_fn(format_tables(result.summary).rstrip("\n"))
    s = result.summary
    where = executor_description(s["config"]["workers"], config.scheduler)
    print_fn("")
    print_fn(
        f"wall time: {result.wall_seconds:.1f} s for {s['runs']} runs × {config.seconds:g} s "
        f"on {where} ({s['invalid_runs']} invalid)"
    )
    print_fn("wrote " + ", ".join(
        str(Path(args.out) / n) for n in ("runs.csv", "summary.json", "table.md", "ftle_vs_p.png")
    ))
    return 0
