"""What a source plugin may import from the core: the plug-in API, in one place.

A source (``idt_desk_sources``, or your own package's entry point in the ``idt_desk.sources``
group) imports the core only from here, ``from idt_desk.plugin import Source, Param``; an
import-linter contract (``pyproject.toml``) keeps the shipped sources to it. Everything else
in the core may change between versions without notice; these names are the ones a plugin
can rely on. Each name is the core's own object, imported on first use (a plugin that needs
a source class only does not load the reproductions' machinery):

>>> from idt_desk.plugin import Source, Param
>>> Param("gain", 1.0, "Gain", 0.0, 10.0).default
1.0
>>> import idt_desk.plugin as api
>>> "Source" in api.__all__ and api.Source is Source
True

The names, by what a plugin does with them:

- **declare a source** (``idt_desk.live.source``, ``assets/docs/plugins.md``): Source,
  Batch, Param, Perturbation, Modulation, Suggestion, SourcePaused, check_source, the shared
  modulations HOLD, INPUT_FILTER, DIM_REDUCTION, ACTION_SMOOTHING, OBS_HOLD; its twin (its
  nominal model: Twin, Hypothesis, KINDS, TwinStage, TwinEvidence, twin_over, TWIN_METRICS; a
  MuJoCo env's, MujocoTwin and mujoco_twin; route_mujoco_warnings: MuJoCo's warnings to
  logging); faults in a MuJoCo loop (Fault, FaultWrapper, component_names, CLASS_OF:
  ``idt_desk.gym.faults``); its presets (PRESETS, Preset, get_preset) and data shipped with
  the product (assets);
- **run sessions** (a reproduction, a benchmark): Session, SessionConfig, run_headless,
  MAX_SPEED_CHUNKS, load_source, SourceLoadError, load_recording, RecordingError,
  RecordingTail, Trajectory, TRANSITIONS and row_place (a recording's transitions file, and
  where its row k is), the settings table (SETTINGS, DEFAULTS, PIPELINE_KEYS,
  source_defaults: what a source fills in), baseline profiles (Profile, ProfileError,
  save_baseline, fit_profile: a baseline fitted once, every later session armed at once);
- **add a detector** (``idt_desk.detection.registry``): Detector, register_detector,
  DETECTORS;
- **judge windows** (the detection layer, its defaults): Pipeline, build_monitor, judge,
  part_metrics, detect, first_post_onset_window, IDT_METRICS, DetectorSpec, DETECTOR_KINDS,
  DEFAULT_BUDGET, CONTROL_BUDGET, CONTROL_DETECTOR, DEFAULT_BASELINE_WINDOWS,
  CONTROL_BASELINE_WINDOWS, parse_budget,
  calibrate, standardise,
  whitening, detector_statistic, joint_statistic, attribute and CLASSES (an alarm's class
  of change, from the twin), first_above, matched_threshold, records, matched_comparison
  and MATCHED_RATE (detectors compared at a matched false-alarm rate), episode_steps,
  window_phase, the generic drift detectors (OnlineDrift, drift_alarms, DriftRun,
  DRIFT_KINDS, DRIFT_WINDOW: online MMD and LSDD), and
  a dialogue's per-turn rule (BASELINE_TURNS, RESPONSE_TURNS, detect_injection, response_z);
- **compute metrics**: Symbolizer, sliding_metrics, window_means, a dialogue's token metrics
  (DialogueMetrics, load_tokenizer, TOKENIZER, ADJUSTED, LENGTH_COLUMNS, length_confound,
  embeddings), statistics (cohens_d, correlation, paired_t_test);
- **run reproductions and their command lines**: run_tasks, default_workers,
  executor_description, add_executor_arguments, write_report, summarize, summary_document,
  symbolize_trajectory,
  deferred_signals, add_settings (options from the settings table), check_limit, check_float,
  check_int, check_out_dir, parse_auto, parse_switch, InputError.
"""

from __future__ import annotations

from idt_desk.lazy import lazy_names

#: Each name and the core module it comes from (a module itself where the name is one).
_WHERE: dict[str, str] = {
    **dict.fromkeys(("ACTION_SMOOTHING", "Batch", "DIM_REDUCTION", "HOLD", "INPUT_FILTER",
                     "Modulation", "OBS_HOLD", "Param", "Perturbation", "Source",
                     "SourcePaused", "Suggestion", "check_source"), "idt_desk.live.source"),
    **dict.fromkeys(("PRESETS", "Preset", "get_preset"), "idt_desk.metrics.presets"),
    **dict.fromkeys(("MAX_SPEED_CHUNKS", "Session", "SessionConfig", "run_headless"),
                    "idt_desk.live.session"),
    **dict.fromkeys(("SourceLoadError", "load_source"), "idt_desk.live.plugins"),
    **dict.fromkeys(("RecordingError", "RecordingTail", "load_recording"),
                    "idt_desk.recordings"),
    "Trajectory": "idt_desk.recordings.trajectory",
    **dict.fromkeys(("Profile", "ProfileError", "save_baseline"), "idt_desk.recordings.profile"),
    "fit_profile": "idt_desk.live.fit",
    "TRANSITIONS": "idt_desk.recordings.files",
    "row_place": "idt_desk.recordings.reader",
    **dict.fromkeys(("MujocoTwin", "mujoco_twin", "route_mujoco_warnings"),
                    "idt_desk.gym.twin"),
    "IDTMonitor": "idt_desk.gym.monitor",
    **dict.fromkeys(("CLASS_OF", "Fault", "FaultWrapper", "component_names"),
                    "idt_desk.gym.faults"),
    **dict.fromkeys(("Hypothesis", "KINDS", "TWIN_METRICS", "Twin", "TwinEvidence", "TwinStage",
                     "twin_over"), "idt_desk.metrics.twin"),
    **dict.fromkeys(("SETTINGS", "DEFAULTS", "PIPELINE_KEYS", "source_defaults"),
                    "idt_desk.settings"),
    **dict.fromkeys(("Pipeline", "build_monitor", "judge", "part_metrics"), "idt_desk.pipeline"),
    **dict.fromkeys(("IDT_METRICS", "detect", "first_post_onset_window"),
                    "idt_desk.detection.monitor"),
    **dict.fromkeys(("DETECTORS", "DETECTOR_KINDS", "Detector", "register_detector"),
                    "idt_desk.detection.registry"),
    **dict.fromkeys(("CONTROL_BASELINE_WINDOWS", "CONTROL_BUDGET", "CONTROL_DETECTOR",
                     "DEFAULT_BASELINE_WINDOWS", "DEFAULT_BUDGET", "DetectorSpec",
                     "parse_budget"), "idt_desk.detection.spec"),
    **dict.fromkeys(("calibrate", "detector_statistic", "joint_statistic", "standardise",
                     "whitening"), "idt_desk.detection.detectors"),
    **dict.fromkeys(("attribute", "CLASSES"), "idt_desk.detection.attribution"),
    **dict.fromkeys(("MATCHED_RATE", "first_above", "matched_comparison", "matched_threshold",
                     "records"), "idt_desk.detection.matched"),
    **dict.fromkeys(("episode_steps", "window_phase"), "idt_desk.detection.phase"),
    **dict.fromkeys(("DRIFT_KINDS", "DRIFT_WINDOW", "DriftRun", "OnlineDrift", "drift_alarms"),
                    "idt_desk.detection.drift"),
    **dict.fromkeys(("BASELINE_TURNS", "RESPONSE_TURNS", "detect_injection", "response_z"),
                    "idt_desk.detection.turns"),
    "Symbolizer": "idt_desk.metrics.symbolize",
    **dict.fromkeys(("View", "choose_view", "view_ladder", "view_symbolizers"),
                    "idt_desk.metrics.views"),
    **dict.fromkeys(("sliding_metrics", "window_means"), "idt_desk.metrics.engine"),
    **dict.fromkeys(("ADJUSTED", "DialogueMetrics", "LENGTH_COLUMNS", "TOKENIZER",
                     "length_confound", "load_tokenizer"), "idt_desk.metrics.tokens"),
    **dict.fromkeys(("cohens_d", "correlation", "paired_t_test"), "idt_desk.stats"),
    **dict.fromkeys(("add_executor_arguments", "default_workers", "executor_description",
                     "run_tasks", "write_report"),
                    "idt_desk.experiments.executor"),
    **dict.fromkeys(("summarize", "summary_document", "symbolize_trajectory"),
                    "idt_desk.experiments.analyze"),
    "deferred_signals": "idt_desk.cli.signals",
    **dict.fromkeys(("add_settings", "check_limit", "check_float", "check_int",
                     "check_out_dir", "parse_auto", "parse_switch"), "idt_desk.cli.validate"),
    "InputError": "idt_desk.errors",
}
#: Names that are modules: the shipped assets' reader and a dialogue's sentence embeddings.
_MODULES = {"assets": "idt_desk.assets", "embeddings": "idt_desk.metrics.embeddings"}

__all__ = sorted([*_WHERE, *_MODULES])


__getattr__, _ = lazy_names(__name__, _WHERE, globals(), modules=_MODULES,
                            hint=f"; a plugin may import: {', '.join(__all__)}")


def __dir__() -> list[str]:
    return __all__
