"""How far two float32 evaluations of one network may lie apart, from the arithmetic alone.

An exported policy is checked by evaluating the same weights in two frameworks (JAX and
torch), or in one framework batched and row by row. Neither gives the exact real value: each
dot product is summed in float32 in an order (and with FMA or not) that the library, the
batch's size and the CPU choose, so the last bits differ from machine to machine (one action
of 64 was 1.28e-6 off an ``atol`` of 1e-6 on one CPU and not on another). A fixed tolerance is
then either loose or flaky. This module derives the tolerance instead.

The standard bound for a float32 dot product of ``n`` terms plus a bias, summed in any order
(Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §3.1), is
``|fl(w·x + b) − (w·x + b)| ≤ γ(n+1) (|w|·|x| + |b|)`` with ``γ(k) = k u / (1 − k u)`` and
``u = 2⁻²⁴`` float32's unit roundoff. An error already in ``x`` (bounded by ``d``) passes
through as ``|w|·d``; ReLU and tanh are 1-Lipschitz and pass it unchanged. Summed layer by
layer over the exact values, this bounds each evaluation's distance from the exact output;
two evaluations lie at most twice that apart, and each is checked against the
exact value computed here in float64. A wrong export (another layer's weights, a
missing bias, the critics swapped) moves an output by orders of magnitude more.
"""

from __future__ import annotations

import numpy as np

#: float32's unit roundoff.
U = 2.0 ** -24
#: A float32 tanh (glibc, SLEEF, XLA) is within a few units in the last place: 4 allowed.
TANH_ULPS = 4


def gamma(k: int) -> float:
    """Higham's γ(k) = k u / (1 − k u): k float32 roundings compounded."""
    return k * U / (1 - k * U)


def linear_layers(module) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (W, b) of every ``torch.nn.Linear`` in a module, in order, as float64."""
    import torch

    return [(m.weight.detach().double().numpy(), m.bias.detach().double().numpy())
            for m in module.modules() if isinstance(m, torch.nn.Linear)]


def mlp_bound(layers: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """The exact output of a ReLU MLP (ReLU between layers, none after the last) and a bound
    on how far one float32 evaluation of it may lie from it, per row and output."""
    h = np.asarray(x, dtype=np.float64)
    d = np.zeros_like(h)
    for k, (w, b) in enumerate(layers):
        aw = np.abs(w)
        d = d @ aw.T + gamma(w.shape[1] + 1) * ((np.abs(h) + d) @ aw.T + np.abs(b))
        h = h @ w.T + b
        if k < len(layers) - 1:
            h = np.maximum(h, 0.0)
    return h, d


def squashed_action(layers: list[tuple[np.ndarray, np.ndarray]], obs: np.ndarray,
                    scale: float) -> tuple[np.ndarray, np.ndarray]:
    """A tanh-squashed actor's exact deterministic action (the mean through tanh, times
    ``scale`` for symmetric bounds) and how far one float32 evaluation may lie from it, per
    row and output: the mean within the MLP's bound, then a float32 tanh and the rescaling
    (three more roundings)."""
    mean, d = mlp_bound(layers, obs)
    return scale * np.tanh(mean), scale * (d + (TANH_ULPS + 3) * U)
