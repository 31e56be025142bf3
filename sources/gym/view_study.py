"""The wrappers' default view on any agent: the regime of its windows, and what its alarm sees.

``idt-desk reproduce wrapper-views --out DIR`` rolls out each agent (its deterministic
actions, the gym source's default) on each seed, clean, and keeps every run
(``DIR/runs/*.npz``: S, A, S', reward, episode), so the table is recomputed without a
rollout. Each run is replayed step by step through an :class:`~idt_desk.gym.IDTMonitor`
with the default preset (``"auto"``: the view chosen on the calibration windows, see
:mod:`idt_desk.metrics.views`) and with the fixed ``"gym"`` preset (3 bins of every
variable, the default before it), and the table gives, per agent, seed and preset, the view
used and the share of each estimator regime over the windows after calibration.

``--noise-agent`` (SAC seed 2 by default) is also run with 3 % observation noise switched on
at ``--onset`` (the gym source's ``obs_noise_3``: noise on what the policy sees, which is the
S the wrapper records) for 200 windows, and a clean run of the same seed and length is the
control: the table says how many windows after the onset the default's alarm (the wrapper's
own: MEWMA at 1 false alarm in 10 h of loop time, armed once its 2,200-window baseline is
in, hence the late onset) first went off, and whether the control alarmed after the onset.

The view rule was fixed on the six shipped HalfCheetah agents (the training env); the other
envs' agents judge it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["HELP", "add_arguments", "replay_monitor", "rollout", "run", "study"]

#: ``idt-desk reproduce wrapper-views``'s one-line help.
HELP = "the wrappers' default view on any agent: regimes of its windows, the alarm on noise"

#: The shipped agents (the rule's training env).
SHIPPED = ("sac-seed0", "sac-seed1", "sac-seed2", "sac-seed3", "sac-seed7", "ppo-seed0",
           "ppo-seed1", "ppo-seed2")
PRESETS = ("auto", "gym")
#: Transitions the noise run goes on after its onset: 200 windows of stride 50.
NOISE_AFTER = 10_000


def rollout(policy: str, seed: int, n: int, perturbation: str | None = None,
            onset: int = 0) -> dict[str, np.ndarray]:
    """``n`` transitions of ``policy`` from seed ``seed`` (``perturbation`` on from ``onset``)."""
    from idt_desk_sources.gym import GymSource

    card = Path(policy).with_suffix(".json")  # the env it was trained on (its model card)
    env_id = json.loads(card.read_text()).get("env_id") if card.is_file() else None
    src = GymSource(env_id=env_id or "HalfCheetah-v5", policy=policy)
    try:
        src.reset(seed)
        parts = [src.step(onset if perturbation else n)]
        if perturbation:
            decl = next(p for p in src.perturbations if p.name == perturbation)
            src.set_perturbation(perturbation, {p.name: p.default for p in decl.params})
            parts.append(src.step(n - onset))
    finally:
        src.close()
    out = {k: np.concatenate([getattr(b, k) for b in parts])
           for k in ("s", "a", "s_next", "reward", "episode")}
    return {**out, "env_id": np.array(env_id or "HalfCheetah-v5")}


def _replay_env(run: dict[str, np.ndarray], env_id: str) -> Any:
    """An env that gives back a run's observations: the wrapper sees exactly the run's rows.

    ``step`` returns the row's S' and reward; the row that ends an episode (the next row's
    episode differs) is truncated, and ``reset`` starts the next one at its S.
    """
    import gymnasium

    class Replay(gymnasium.Env):
        def __init__(self) -> None:
            spec = gymnasium.make(env_id)
            self.observation_space = spec.observation_space
            self.action_space = spec.action_space
            self.metadata = dict(spec.metadata)
            self.dt = getattr(spec.unwrapped, "dt", None)
            steps = getattr(spec.spec, "max_episode_steps", None)
            spec.close()
            self.spec = gymnasium.envs.registration.EnvSpec(
                "Replay-v0", max_episode_steps=steps)
            self.i = 0
            ep = run["episode"]
            self._ends = np.append(ep[1:] != ep[:-1], True)

        def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                  ) -> tuple[np.ndarray, dict[str, Any]]:
            return run["s"][self.i], {}

        def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
            i = self.i
            self.i += 1
            return run["s_next"][i], float(run["reward"][i]), False, bool(self._ends[i]), {}

    return Replay()


def replay_monitor(run: dict[str, np.ndarray], preset: str | None, **options: Any
                   ) -> tuple[Any, list[dict[str, Any]]]:
    """The run through an :class:`~idt_desk.gym.IDTMonitor`; its windows and every info."""
    from idt_desk.plugin import IDTMonitor

    env = IDTMonitor(_replay_env(run, str(run["env_id"])), preset=preset, **options)
    infos: list[dict[str, Any]] = []
    env.reset()
    n = len(run["s"])
    while env.unwrapped.i < n:
        *_, term, trunc, info = env.step(run["a"][env.unwrapped.i])
        if "idt" in info and (not infos or infos[-1]["end"] != info["idt"]["end"]):
            infos.append(info["idt"])
        if (term or trunc) and env.unwrapped.i < n:
            env.reset()
    windows = env.windows
    env.close()
    return windows, infos


def _regimes(infos: Sequence[dict[str, Any]]) -> dict[str, Any]:
    names = [i["regime"] for i in infos]
    share = {r: round(sum(x == r for x in names) / max(len(names), 1), 3)
             for r in ("resolved", "sparse", "saturated", "cycle")}
    return {"view": infos[-1].get("view", "3 bins a variable (fixed)") if infos else "",
            "windows": len(names), **share,
            "median_unique_frac": round(float(np.median([i["unique_frac"] for i in infos])), 3)
            if infos else None}


def _first_alarm(windows: Any, onset: int) -> int | None:
    """Windows from the first ending after ``onset`` to the first IDT alarm (None: none)."""
    after = windows[windows["end"] > onset]
    hits = np.flatnonzero(after["x_IDT"].to_numpy() == 1.0)
    return None if len(hits) == 0 else int(hits[0]) + 1


def study(out: Path, policies: Sequence[str], seeds: Sequence[int], steps: int,
          noise_agent: str | None, onset: int, progress: Callable[[str], None] = print
          ) -> dict[str, Any]:
    """Every run, the regime table and the noise check, as a dict (also ``table.json``)."""
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)

    def load(policy: str, seed: int, perturbation: str | None = None, n: int = steps
             ) -> dict[str, np.ndarray]:
        tag = Path(policy).stem + f"_{seed}_{n}" + (f"_{perturbation}" if perturbation else "")
        path = runs / f"{tag}.npz"
        if not path.exists():
            data = rollout(policy, seed, n, perturbation, onset)
            tmp = path.with_suffix(".tmp.npz")
            np.savez_compressed(tmp, **data)
            tmp.replace(path)
            progress(f"  rolled out {path.name}")
        with np.load(path) as f:
            return {k: f[k] for k in f.files}

    rows: list[dict[str, Any]] = []
    for policy in policies:
        for seed in seeds:
            run = load(policy, seed)
            for preset in PRESETS:
                _, infos = replay_monitor(run, preset, detector=None)
                rows.append({"agent": Path(policy).stem, "env": str(run["env_id"]),
                             "seed": seed, "preset": preset, **_regimes(infos)})
                progress("  " + json.dumps(rows[-1]))
    noise: list[dict[str, Any]] = []
    if noise_agent is not None:
        for seed in seeds:
            got = {}
            for tag, pert in (("perturbed", "obs_noise_3"), ("control", None)):
                run = load(noise_agent, seed, pert, onset + NOISE_AFTER)
                windows, _ = replay_monitor(run, None)
                got[tag] = _first_alarm(windows, onset)
            noise.append({"agent": Path(noise_agent).stem, "seed": seed, "onset": onset,
                          "windows_to_alarm": got["perturbed"],
                          "control_alarm_after_onset": got["control"]})
            progress("  " + json.dumps(noise[-1]))
    result = {"steps": steps, "seeds": list(seeds), "regimes": rows, "obs_noise_3": noise}
    (out / "table.json").write_text(json.dumps(result, indent=1))
    return result


def _print(result: dict[str, Any], print_fn: Callable[[str], None]) -> None:
    print_fn("| Agent | Env | Seed | Preset | View | Windows | Resolved | Sparse | Saturated "
             "| Cycle | Median distinct |")
    print_fn("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in result["regimes"]:
        print_fn(f"| {r['agent']} | {r['env']} | {r['seed']} | {r['preset']} | {r['view']} | "
                 f"{r['windows']} | {r['resolved']:.0%} | {r['sparse']:.0%} | "
                 f"{r['saturated']:.0%} | {r['cycle']:.0%} | {r['median_unique_frac']} |")
    for r in result["obs_noise_3"]:
        control = r["control_alarm_after_onset"]
        print_fn(f"{r['agent']} seed {r['seed']}, 3 % observation noise from step "
                 f"{r['onset']:,}: the default's alarm after "
                 f"{r['windows_to_alarm'] or 'no'} window(s); its clean control "
                 + (f"alarmed after {control} window(s)" if control else "quiet"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the command's options to ``parser`` (and ``func=run``)."""
    parser.add_argument("--out", type=Path, required=True,
                        help="folder for the runs and the table (runs already there are kept)")
    parser.add_argument("--policies", nargs="+", default=None,
                        help="SB3 zips (default: the shipped HalfCheetah agents)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[411],
                        help="env seeds, one clean run each")
    parser.add_argument("--steps", type=int, default=20_000, help="transitions per run")
    parser.add_argument("--noise-agent", default="sac-seed2",
                        help="shipped agent name or SB3 zip run with 3 %% observation noise "
                        "('none': skip)")
    parser.add_argument("--onset", type=int, default=120_000,
                        help="step the observation noise switches on (after the alarm's "
                        "baseline)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the study from parsed arguments."""
    from idt_desk.plugin import InputError, assets, check_int

    check_int("--steps", args.steps, 2_000, 10_000_000)
    check_int("--onset", args.onset, 1_500, 10_000_000)

    def policy(name: str) -> str:
        if name in SHIPPED:
            return str(assets.path("policies", f"halfcheetah-v5-{name}.zip"))
        if not Path(name).is_file():
            raise InputError(f"{name}: neither a shipped agent ({', '.join(SHIPPED)}) nor a "
                             f"policy file")
        return name

    policies = [policy(p) for p in (args.policies or SHIPPED)]
    noise = None if args.noise_agent == "none" else policy(args.noise_agent)
    result = study(args.out, policies, args.seeds, args.steps, noise, args.onset)
    _print(result, print)
    return 0
