"""The estimator's regime on the RL source: what a window sees of each shipped agent.

``idt-desk reproduce cheetah-estimator --out DIR`` rolls out each agent on a *choice* seed
and a *held-out* seed: one clean run, and one run per perturbation of the paper's four
classes (actuator noise, sensor noise, a torso force, heavier gravity) switched on at
``--onset`` and left on. Every run is kept (``DIR/runs/*.npz``: S, A, S'), so the table is
recomputed from them without a rollout. Each *view* turns the runs into symbols, calibrated
on the agent's clean choice-seed run as a whole (every episode of it, not its first
windows), and the engine computes sliding windows with the plug-in and the Miller–Madow
estimators. Per view, estimator and window length the table gives:

- ``distinct``: the median of distinct (S, A, S') triples in a window of the clean run (the
  regime: near the gait cycle's length means an exact cycle is all a window sees; near W
  means almost every triple is new, and plug-in entropies are saturated);
- ``hf0``: the share of clean windows with H_f = 0 exactly (a deterministic window);
- ``shift_<class>``: the largest mean shift of P, H_f, H_b or ΔH after onset, in units of
  the clean run's standard deviation over the same windows (the clean run is the control:
  same seed, same episodes, no perturbation).

The shift is a measure of how far a perturbation moves the metrics, not a detection rate
(no detector, no false-alarm budget): it ranks views; detection with the live detector on the
view chosen is the next step. Views:

- ``composite``: today's ``cheetah`` preset, S = the composite of all 17 observations at
  ``bins`` bins (3**17 symbols), A of the 6 torques;
- ``parts``: one IDT per body-part group (torso, back leg, front leg: S and S' of that
  group's observations, A of all torques); the table keeps the group that shifted most, its
  regime is the median over groups;
- ``pca``: S and S' = the top ``k`` principal components of the z-scored observations (from
  the calibration run), A = the top 2 of the torques, each at ``bins`` bins: a coarse,
  low-dimensional description of the gait's phase and amplitude.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["HELP", "add_arguments", "analyze", "rollouts", "run", "signatures"]

#: ``idt-desk reproduce cheetah-estimator``'s one-line help.
HELP = "the estimator's regime on the RL source: distinct triples and shifts per view"

#: The paper's four classes of change, one perturbation each (the source's declarations).
PERTURBATIONS = {"actuator": "act_noise_4", "sensor": "obs_noise_3",
                 "force": "force_torso_10N", "dynamics": "gravity_110"}
AGENTS = ("sac-seed3", "sac-seed7", "sac-seed2")
BODY_PARTS = {"torso": (0, 1, 8, 9, 10), "back_leg": (2, 3, 4, 11, 12, 13),
              "front_leg": (5, 6, 7, 14, 15, 16)}
METRICS = ("P", "H_f", "H_b", "dH")


def _rollout(policy: str, seed: int, n: int, perturbation: str | None,
             onset: int) -> dict[str, np.ndarray]:
    from idt_desk_sources.gym.view_study import rollout

    run = rollout(policy, seed, n, perturbation, onset)
    return {k: run[k] for k in ("s", "a", "s_next")}


def rollouts(out: Path, agents=AGENTS, seeds=(101, 1301), n: int = 20_000,
             onset: int = 8_000, progress: Callable[[str], None] = print) -> None:
    """Every run the table needs, into ``out/runs`` (a run already there is kept)."""
    from idt_desk.plugin import assets

    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    for agent in agents:
        policy = str(assets.path("policies", f"halfcheetah-v5-{agent}.zip"))
        for seed in seeds:
            for cls, pert in [("clean", None), *PERTURBATIONS.items()]:
                path = runs / f"{agent}_{seed}_{cls}.npz"
                if path.exists():
                    continue
                data = _rollout(policy, seed, n, pert, onset)
                tmp = path.with_suffix(".tmp.npz")
                np.savez_compressed(tmp, **data, onset=onset if pert else -1)
                tmp.replace(path)
                progress(f"  {path.name}")


def _bins(x: np.ndarray, lo: np.ndarray, hi: np.ndarray, bins: int) -> np.ndarray:
    d = np.floor((x - lo) / np.where(hi > lo, hi - lo, 1.0) * bins).astype(np.int64)
    return np.clip(d, 0, bins - 1)


def _code(d: np.ndarray, bins: int) -> np.ndarray:
    return d @ (bins ** np.arange(d.shape[1], dtype=np.int64))


class _View:
    """Symbols of S, A, S' fitted on a calibration run (whole episodes), per IDT of the view."""

    def __init__(self, kind: str, bins: int, k: int, cal: dict[str, np.ndarray]) -> None:
        self.kind, self.bins, self.k = kind, bins, k
        s, a = cal["s"], cal["a"]
        self.mu, self.sd = s.mean(0), np.where(s.std(0) > 0, s.std(0), 1.0)
        self.amu, self.asd = a.mean(0), np.where(a.std(0) > 0, a.std(0), 1.0)
        if kind == "pca":
            z = (s - self.mu) / self.sd
            self.ps = np.linalg.svd(z - z.mean(0), full_matrices=False)[2][:k].T
            za = (a - self.amu) / self.asd
            self.pa = np.linalg.svd(za - za.mean(0), full_matrices=False)[2][:2].T
        # Equal-width bins over the calibration run's 0.5-99.5 % range of each coordinate.
        self.lo, self.hi = {}, {}
        for name, x in self._coords(cal).items():
            self.lo[name], self.hi[name] = np.percentile(x, 0.5, 0), np.percentile(x, 99.5, 0)

    def _coords(self, run: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        zs = (run["s"] - self.mu) / self.sd
        zn = (run["s_next"] - self.mu) / self.sd
        za = (run["a"] - self.amu) / self.asd
        if self.kind == "pca":
            return {"s": zs @ self.ps, "n": zn @ self.ps, "a": za @ self.pa}
        return {"s": zs, "n": zn, "a": za}

    def symbols(self, run: dict[str, np.ndarray]) -> dict[str, tuple]:
        """Per IDT of the view: (S, A, S') int64 symbols."""
        c = self._coords(run)
        d = {k: _bins(v, self.lo[k], self.hi[k], self.bins) for k, v in c.items()}
        a = _code(d["a"], self.bins)
        if self.kind == "parts":
            return {part: (_code(d["s"][:, list(ix)], self.bins), a,
                           _code(d["n"][:, list(ix)], self.bins))
                    for part, ix in BODY_PARTS.items()}
        return {"all": (_code(d["s"], self.bins), a, _code(d["n"], self.bins))}


VIEWS = {"composite-3": ("composite", 3, 0), "composite-2": ("composite", 2, 0),
         "parts-3": ("parts", 3, 0), "parts-2": ("parts", 2, 0),
         "pca3-4": ("pca", 4, 3), "pca4-3": ("pca", 3, 4), "pca2-6": ("pca", 6, 2)}


def _load(out: Path, agent: str, seed: int, cls: str) -> dict[str, np.ndarray]:
    """One kept run: S, A, S' (and its onset, -1 for a clean run)."""
    return dict(np.load(out / "runs" / f"{agent}_{seed}_{cls}.npz"))


def _change(clean: dict[str, np.ndarray], perturbed: dict[str, np.ndarray], post: np.ndarray,
            term: str) -> tuple[float, float]:
    """A term's mean change after onset, and the clean run's spread over the same windows."""
    sd = float(np.nanstd(clean[term][post]))
    return float(np.nanmean(perturbed[term][post]) - np.nanmean(clean[term][post])), sd


def _chao_shen(counts: np.ndarray, n: int) -> float:
    """Chao–Shen entropy in bits, for windows where most symbols are seen once.

    Coverage-adjusted probabilities, Horvitz–Thompson weighted (Chao & Shen, Environmental
    and Ecological Statistics 10, 2003).
    """
    f1 = int(np.sum(counts == 1))
    coverage = 1.0 - min(f1, n - 1) / n
    p = coverage * counts / n
    return float(-np.sum(p * np.log2(p) / (1.0 - (1.0 - p) ** n)))


def chao_shen_metrics(s: np.ndarray, n: np.ndarray, a: np.ndarray, window: int,
                      stride: int) -> dict[str, np.ndarray]:
    """P, H_f, H_b, dH, K_SAS and start per window, from Chao–Shen entropies (numpy)."""
    keys = {"S": (s,), "A": (a,), "N": (n,), "SA": (s, a), "SN": (s, n), "SAN": (s, a, n)}
    starts = np.arange(0, len(s) - window + 1, stride)
    out = {k: np.empty(len(starts)) for k in ("P", "H_f", "H_b", "dH", "K_SAS")}
    for i, t in enumerate(starts):
        h = {}
        for name, cols in keys.items():
            rows = np.stack([c[t:t + window] for c in cols], axis=1)
            counts = np.unique(rows, axis=0, return_counts=True)[1]
            h[name] = _chao_shen(counts, window)
            if name == "SAN":
                out["K_SAS"][i] = len(counts)
        mi = h["SA"] + h["N"] - h["SAN"]
        denom = h["S"] + h["A"] + h["N"]
        out["P"][i] = mi / denom if denom > 0 else np.nan
        out["H_f"][i] = h["SAN"] - h["SA"]
        out["H_b"][i] = h["SAN"] - h["N"]
        out["dH"][i] = out["H_f"][i] - out["H_b"][i]
    out["start"] = starts
    return out


def analyze(out: Path, windows=(300, 600, 1000), stride: int = 50, agents=AGENTS,
            seeds=(101, 1301), views=tuple(VIEWS),
            estimators=("plug-in", "miller-madow", "chao-shen")) -> list[dict[str, Any]]:
    """The table's rows from the runs in ``out/runs``."""
    from idt_desk.plugin import sliding_metrics

    rows = []
    for agent in agents:
        def load(seed: int, cls: str, agent: str = agent) -> dict[str, np.ndarray]:
            return _load(out, agent, seed, cls)

        cal = load(seeds[0], "clean")
        for view_name in views:
            view = _View(*VIEWS[view_name], cal)
            for seed in seeds:
                split = "choice" if seed == seeds[0] else "held-out"
                clean = view.symbols(load(seed, "clean"))
                perturbed = {cls: load(seed, cls) for cls in PERTURBATIONS}
                onset = int(next(iter(perturbed.values()))["onset"])
                psym = {cls: view.symbols(r) for cls, r in perturbed.items()}
                for window in windows:
                    for est in estimators:
                        corr = None if est == "plug-in" else "miller-madow"
                        row: dict[str, Any] = {"agent": agent, "seed": seed, "split": split,
                                               "view": view_name, "estimator": est,
                                               "window": window}
                        distinct, hf0 = [], []
                        shift = {cls: 0.0 for cls in PERTURBATIONS}
                        def metrics(s, a, n, est=est, corr=corr, window=window):
                            if est == "chao-shen":
                                return chao_shen_metrics(s, n, a, window, stride)
                            return sliding_metrics(s, n, a, window, stride, corr)

                        for idt, (s, a, n) in clean.items():
                            c = metrics(s, a, n)
                            distinct.append(float(np.median(c["K_SAS"])))
                            hf0.append(float(np.mean(c["H_f"] == 0)))
                            post = c["start"] >= onset
                            for cls in PERTURBATIONS:
                                ps, pa, pn = psym[cls][idt]
                                p = metrics(ps, pa, pn)
                                for m in METRICS:
                                    dm, sd = _change(c, p, post, m)
                                    z = abs(dm) / sd if sd > 0 else (np.inf if dm else 0.0)
                                    shift[cls] = max(shift[cls], float(z))
                        row["distinct"] = float(np.median(distinct))
                        row["hf0"] = float(np.median(hf0))
                        row.update({f"shift_{k}": v for k, v in shift.items()})
                        rows.append(row)
    return rows


#: The terms of a signature: the four metrics and the paper's decomposition of predictive
#: power, MI(S;S') (the environment's passive predictability) + MI(A;S'|S) (the agent's causal
#: contribution), with the choice H(A|S).
TERMS = ("P", "H_f", "H_b", "dH", "H_A_given_S", "MI_S_S_next", "MI_A_S_next_given_S")


def signatures(out: Path, view_name: str = "parts-2", window: int = 1000, agents=AGENTS,
               seeds=(101, 1301)) -> dict[str, Any]:
    """Each run's signature, and a nearest-centroid attribution judged on the held-out seed.

    A signature is the mean change after onset of every term of :data:`TERMS` in every IDT of
    the view, in the clean run's standard deviations. Centroids (of unit-length signatures)
    are fitted on the choice seed, per agent and pooled over agents; each held-out run is
    given the class whose centroid is nearest in direction.
    """
    from idt_desk.plugin import sliding_metrics

    def metrics(s: np.ndarray, a: np.ndarray, n: np.ndarray) -> dict[str, np.ndarray]:
        c = sliding_metrics(s, n, a, window, 50)
        c["MI_S_S_next"] = c["H_S"] + c["H_S_next"] - c["H_SS_next"]
        return c

    sig: dict[tuple[str, int, str], np.ndarray] = {}
    for agent in agents:
        def load(seed: int, cls: str, agent: str = agent) -> dict[str, np.ndarray]:
            return _load(out, agent, seed, cls)

        view = _View(*VIEWS[view_name], load(seeds[0], "clean"))
        for seed in seeds:
            clean = {k: metrics(*v) for k, v in view.symbols(load(seed, "clean")).items()}
            for cls in PERTURBATIONS:
                run = load(seed, cls)
                v = []
                for idt, syms in view.symbols(run).items():
                    c, p = clean[idt], metrics(*syms)
                    post = c["start"] >= int(run["onset"])
                    for t in TERMS:
                        dm, sd = _change(c, p, post, t)
                        v.append(dm / sd if sd > 0 else 0.0)
                sig[(agent, seed, cls)] = np.asarray(v)

    def unit(v: np.ndarray) -> np.ndarray:
        return v / (np.linalg.norm(v) or 1.0)

    result: dict[str, Any] = {"view": view_name, "window": window, "terms": list(TERMS),
                              "signatures": {f"{a}_{s}_{c}": v.round(3).tolist()
                                             for (a, s, c), v in sig.items()}}
    classes = list(PERTURBATIONS)
    for scope in ("per_agent", "pooled"):
        confusion = {c: dict.fromkeys(classes, 0) for c in classes}
        for agent in agents:
            fit = [agent] if scope == "per_agent" else list(agents)
            cents = {c: unit(np.mean([unit(sig[(a, seeds[0], c)]) for a in fit], 0))
                     for c in classes}
            for c in classes:
                x = unit(sig[(agent, seeds[1], c)])
                confusion[c][max(classes, key=lambda k: float(x @ cents[k]))] += 1
        result[scope] = {"right": sum(confusion[c][c] for c in classes),
                         "of": len(agents) * len(classes), "confusion": confusion}
    return result


def _table(rows: list[dict[str, Any]], print_fn: Callable[[str], None]) -> None:
    head = (f"{'agent':>9} {'split':>8} {'view':>11} {'estimator':>12} {'W':>5} "
            f"{'distinct':>8} {'H_f=0':>6} " + " ".join(f"{k:>9}" for k in PERTURBATIONS))
    print_fn(head)
    for r in rows:
        print_fn(f"{r['agent']:>9} {r['split']:>8} {r['view']:>11} {r['estimator']:>12} "
                 f"{r['window']:>5} {r['distinct']:>8.0f} {r['hf0']:>6.2f} "
                 + " ".join(f"{r['shift_' + k]:>9.1f}" for k in PERTURBATIONS))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the command's options to ``parser`` (and ``func=run``)."""
    parser.add_argument("--out", type=Path, required=True,
                        help="folder for the runs and the table (runs already there are kept)")
    parser.add_argument("--agents", nargs="+", default=list(AGENTS),
                        help="shipped agents, e.g. sac-seed3 sac-seed7 sac-seed2")
    parser.add_argument("--seeds", nargs=2, type=int, default=[101, 1301],
                        metavar=("CHOICE", "HELD_OUT"),
                        help="the seed views are chosen on, and one never used for that")
    parser.add_argument("--steps", type=int, default=20_000, help="transitions per run")
    parser.add_argument("--onset", type=int, default=8_000, help="perturbation onset (steps)")
    parser.add_argument("--windows", nargs="+", type=int, default=[300, 600, 1000],
                        help="window lengths (stride 50)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the study from parsed arguments."""
    from idt_desk.plugin import InputError, check_int

    check_int("--steps", args.steps, 2_000, 10_000_000)
    check_int("--onset", args.onset, 1_000, args.steps - 1_000)
    unknown = [a for a in args.agents if a not in AGENTS]
    if unknown:
        raise InputError(f"--agents: no shipped agent {unknown[0]!r} (known: "
                         f"{', '.join(AGENTS)})")
    rollouts(args.out, tuple(args.agents), tuple(args.seeds), args.steps, args.onset)
    for w in args.windows:
        check_int("--windows", w, 50, args.steps - args.onset)
    rows = analyze(args.out, tuple(args.windows), agents=tuple(args.agents),
                   seeds=tuple(args.seeds))
    (args.out / "table.json").write_text(json.dumps(rows, indent=1))
    _table(rows, print)
    sig = signatures(args.out, agents=tuple(args.agents), seeds=tuple(args.seeds))
    (args.out / "signatures.json").write_text(json.dumps(sig, indent=1))
    for scope in ("per_agent", "pooled"):
        r = sig[scope]
        print(f"attribution ({sig['view']}, W {sig['window']}, centroids from seed "
              f"{args.seeds[0]}, judged on {args.seeds[1]}), {scope.replace('_', ' ')}: "
              f"{r['right']}/{r['of']} right; true -> given: " + "; ".join(
                  f"{t} -> " + ", ".join(f"{g} {n}" for g, n in row.items() if n)
                  for t, row in r["confusion"].items()))
    return 0
