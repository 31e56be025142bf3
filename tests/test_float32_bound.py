"""The float32 bound the export tests use: it holds, and it is tight enough to catch a slip."""

from __future__ import annotations

import numpy as np
import pytest

from tests.float32_bound import linear_layers, mlp_bound, squashed_action

torch = pytest.importorskip("torch")


def _actor(seed: int):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(17, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 6))


def test_float32_evaluations_lie_within_the_bound_batched_or_row_by_row():
    net = _actor(0)
    obs = np.random.default_rng(1).normal(size=(64, 17)).astype(np.float32)
    exact, bound = squashed_action(linear_layers(net), obs, 3.0)
    with torch.no_grad():
        batched = 3.0 * torch.tanh(net(torch.from_numpy(obs))).numpy()
        rows = np.concatenate([3.0 * torch.tanh(net(torch.from_numpy(obs[i:i + 1]))).numpy()
                               for i in range(len(obs))])
    assert np.all(np.abs(batched - exact) <= bound)
    assert np.all(np.abs(rows - exact) <= bound)
    # The bound is a few per mille of the action's ±3 at most: far below a wrong export's gap.
    assert bound.max() < 3e-2


def test_a_slip_in_the_weights_breaks_the_bound():
    net = _actor(0)
    obs = np.random.default_rng(1).normal(size=(64, 17)).astype(np.float32)
    layers = linear_layers(net)
    exact, bound = squashed_action(layers, obs, 3.0)
    # One layer's weights 1 % off (a rounding to bfloat16 is 0.4 %): some action leaves it.
    slipped = [(w * 1.01 if k == 1 else w, b) for k, (w, b) in enumerate(layers)]
    wrong, _ = squashed_action(slipped, obs, 3.0)
    assert np.any(np.abs(wrong - exact) > bound)
    # A missing bias too.
    no_bias = [(w, b * 0 if k == 2 else b) for k, (w, b) in enumerate(layers)]
    assert np.any(np.abs(squashed_action(no_bias, obs, 3.0)[0] - exact) > bound)


def test_the_bound_grows_with_the_inner_dimension_and_the_input():
    w = np.ones((1, 100))
    _, small = mlp_bound([(w, np.zeros(1))], np.ones((1, 100)))
    _, wide = mlp_bound([(np.ones((1, 1000)), np.zeros(1))], np.ones((1, 1000)))
    _, big = mlp_bound([(w, np.zeros(1))], 10 * np.ones((1, 100)))
    assert wide[0, 0] > 10 * small[0, 0] * 0.99 and big[0, 0] == pytest.approx(10 * small[0, 0])
