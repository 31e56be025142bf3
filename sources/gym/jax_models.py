"""SBX (JAX) models as Stable-Baselines3 zips, and SBX checkpoints across JAX releases.

:func:`export_sbx` copies a trained SBX SAC or TQC, layer by layer, into an ordinary
Stable-Baselines3 SAC or sb3-contrib TQC (what IDT Desk ships and the frozen source loads);
:func:`load_checkpoint` reads an SBX checkpoint back for ``idt-desk train --resume``, its
weights kept when it was pickled under another JAX release.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["export_sbx", "load_checkpoint"]


def export_sbx(model: Any, env: Any) -> Any:
    """A Stable-Baselines3-family model holding the weights of SBX SAC or TQC ``model``.

    SAC goes to SB3's ``SAC``, TQC to sb3-contrib's ``TQC`` (same architecture, on the CPU).
    SBX stores each ``Dense`` kernel as (in, out); SAC's critics are stacked on a leading axis,
    TQC's are one train state each (``qf1_state``, ``qf2_state``). SB3 stores ``Linear``
    weights as (out, in) and one ``qf<i>`` Sequential per critic. The hyperparameters are the
    defaults with the SBX run's train frequency and gradient steps, and TQC's quantiles.
    """
    import numpy as np
    import torch

    pol = model.policy
    common = {"device": "cpu", "seed": 0, "buffer_size": 1, "train_freq": model.train_freq,
              "gradient_steps": model.gradient_steps}
    if hasattr(pol, "qf1_state"):  # TQC
        import sb3_contrib

        out = sb3_contrib.TQC(
            "MlpPolicy", env, top_quantiles_to_drop_per_net=pol.top_quantiles_to_drop_per_net,
            policy_kwargs={"n_quantiles": pol.n_quantiles, "n_critics": pol.n_critics},
            **common)
        states = [getattr(pol, f"qf{k + 1}_state") for k in range(pol.n_critics)]
        critics = {"critic": [(s.params["params"], None) for s in states],
                   "critic_target": [(s.target_params["params"], None) for s in states]}
    else:
        import stable_baselines3 as sb3

        out = sb3.SAC("MlpPolicy", env, **common)
        critics = {}
        for prefix, params in (("critic", pol.qf_state.params),
                               ("critic_target", pol.qf_state.target_params)):
            (stacked,) = params["params"].values()  # VmapContinuousCritic_0
            n = np.asarray(stacked["Dense_0"]["kernel"]).shape[0]
            critics[prefix] = [(stacked, k) for k in range(n)]

    def dense(layer: dict[str, Any], k: int | None = None) -> tuple[Any, Any]:
        w, b = np.asarray(layer["kernel"]), np.asarray(layer["bias"])
        if k is not None:
            w, b = w[k], b[k]
        return torch.as_tensor(w.T.copy()), torch.as_tensor(b.copy())

    actor = pol.actor_state.params["params"]
    state: dict[str, Any] = {}
    for name, key in (("latent_pi.0", "Dense_0"), ("latent_pi.2", "Dense_1"),
                      ("mu", "Dense_2"), ("log_std", "Dense_3")):
        state[f"actor.{name}.weight"], state[f"actor.{name}.bias"] = dense(actor[key])
    for prefix, nets in critics.items():
        for i, (params, k) in enumerate(nets):
            for j in range(3):
                w, b = dense(params[f"Dense_{j}"], k)
                state[f"{prefix}.qf{i}.{2 * j}.weight"] = w
                state[f"{prefix}.qf{i}.{2 * j}.bias"] = b
    expected = set(out.policy.state_dict())
    if expected != set(state):
        raise ValueError(f"SBX model does not match the default MlpPolicy: missing "
                         f"{sorted(expected - set(state))}, extra {sorted(set(state) - expected)}")
    out.policy.load_state_dict(state)
    log_ent = float(np.asarray(model.ent_coef_state.params["log_ent_coef"]))
    with torch.no_grad():
        out.log_ent_coef.fill_(log_ent)
    out.num_timesteps = int(model.num_timesteps)
    return out


#: Model items that hold an SBX model's networks and their optimiser states.
_SBX_STATE_ITEMS = ("policy", "actor", "qf", "ent_coef_state")


class _StandIn:
    """What a name that this JAX no longer has unpickles as (it is never called)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _StandIn:
        return _StandIn()

    def __setstate__(self, state: Any) -> None:
        pass


def _unpickle_with_stand_ins(blob: bytes) -> tuple[Any, list[str]]:
    """Unpickle ``blob``, each global this environment lacks read as :class:`_StandIn`."""
    import io
    import pickle

    missing: list[str] = []

    class _Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            try:
                return super().find_class(module, name)
            except (AttributeError, ImportError):
                missing.append(f"{module}.{name}")
                return _StandIn

    return _Unpickler(io.BytesIO(blob)).load(), missing


def load_checkpoint(cls: Any, path: Path, env: Any) -> Any:
    """Load a checkpoint's model; an SBX model pickled under another JAX keeps its weights.

    Stable-Baselines3 replaces an item of a saved model that it cannot unpickle with a fresh
    one and only warns. An SBX model pickles its policy whole, jitted functions included, so
    a checkpoint written by another JAX release (a GPU machine's, say) can fail on a name
    inside JAX that has nothing to do with the weights (jax 0.11's ``jax._src.api.Inline``
    under jax 0.10): resumed as loaded, training would go on from random weights. Here the
    failed items are unpickled again with stand-ins for the missing names, and every train
    state's parameters, target parameters, optimiser state and step count are copied into
    the freshly built model (the optimiser state only where it holds arrays; the tree
    structures must match). A failed item that holds none of these is refused.
    """
    import base64
    import re
    import warnings
    import zipfile

    import jax
    import numpy as np

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = cls.load(path, env=env, device="cpu")
    failed = sorted({m.group(1) for w in caught
                     if (m := re.search(r"Could not deserialize object (\w+)", str(w.message)))})
    for w in caught:  # the rest is not ours to swallow
        if "Could not deserialize object" not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if not failed:
        return model
    if not set(failed) <= set(_SBX_STATE_ITEMS) or not hasattr(model.policy, "actor_state"):
        raise ValueError(f"{path}: could not read {', '.join(failed)} (saved by other library "
                         "versions?): resuming would lose them")
    data = json.loads(zipfile.ZipFile(path).read("data"))

    def arrays(tree: Any) -> Any:
        return jax.tree_util.tree_map(lambda x: jax.numpy.asarray(np.asarray(x)), tree)

    names: set[str] = set()
    copied: list[str] = []
    for item in failed:
        old, missing = _unpickle_with_stand_ins(base64.b64decode(data[item][":serialized:"]))
        names.update(missing)
        holders = ([(model, "ent_coef_state", old)] if item == "ent_coef_state" else
                   [(model.policy, k, v) for k, v in vars(old).items()
                    if k.endswith("_state") and item == "policy"])
        for owner, name, state in holders:
            new = getattr(owner, name)
            fields = {f: getattr(state, f) for f in ("params", "target_params")
                      if hasattr(new, f)}
            for f, value in fields.items():
                if (jax.tree_util.tree_structure(value)
                        != jax.tree_util.tree_structure(getattr(new, f))):
                    raise ValueError(f"{path}: {name}.{f} does not match this model's networks")
                fields[f] = arrays(value)
            try:  # the optimiser's moments too, where they are arrays in the same layout
                opt_state = arrays(state.opt_state)
                if (jax.tree_util.tree_structure(opt_state)
                        == jax.tree_util.tree_structure(new.opt_state)):
                    fields["opt_state"], fields["step"] = opt_state, state.step
            except (TypeError, ValueError):  # a stand-in inside: the optimiser starts afresh
                pass
            setattr(owner, name, new.replace(**fields))
            copied.append(name)
    if hasattr(model, "actor") and hasattr(model.policy, "actor"):
        model.actor = model.policy.actor
    print(f"{path}: pickled by another JAX (this one lacks {', '.join(sorted(names))}); "
          f"carried over by their parameters: {', '.join(copied)}", file=sys.stderr)
    return model
