"""The fault wrapper: each kind does what it says, on its component only, from its onset to its
end, seeded; the caller sees the commanded action. Each is checked against an independent
reference: the same env driven by hand (the action, the observation or the model changed
directly)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from idt_desk.gym.faults import CLASS_OF, Fault, FaultWrapper, component_names, faults_of

ENV = "HalfCheetah-v5"


def _actions(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (n, 6))


def _run(env, actions, seed: int = 0):
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for a in actions:
        obs, _r, term, trunc, _i = env.step(a)
        out.append(obs)
        if term or trunc:
            obs, _ = env.reset()
    return np.array(out)


def test_the_components_are_named_from_the_model():
    names = component_names(gym.make(ENV))
    assert names["sensor"][:3] == ("rootz", "rooty", "bthigh")
    assert names["sensor"][8] == "rootx_vel" and len(names["sensor"]) == 17
    assert names["actuator"] == ("bthigh", "bshin", "bfoot", "fthigh", "fshin", "ffoot")
    assert "torso" in names["body"] and "bshin" in names["joint"]
    # Hopper's actuators have no names in its XML: each is named by the joint it drives, and
    # a fault on one drives that joint.
    hopper = gym.make("Hopper-v5")
    assert component_names(hopper)["actuator"] == ("thigh_joint", "leg_joint", "foot_joint")
    env = FaultWrapper(hopper, Fault("actuator_offset", "leg_joint", 0.5, onset=0))
    env.reset(seed=0)
    env.step(np.zeros(3, dtype=np.float32))
    np.testing.assert_allclose(env.unwrapped.data.ctrl, [0.0, 0.5, 0.0])
    env.close()


@pytest.mark.parametrize("kind", ["sensor_offset", "sensor_stuck", "sensor_noise",
                                  "sensor_dropout"])
def test_a_sensor_fault_changes_what_is_read_of_its_variable_only(kind):
    acts = _actions(60)
    clean = _run(gym.make(ENV), acts)
    size = {"sensor_offset": 0.3, "sensor_stuck": 0.0, "sensor_noise": 0.2,
            "sensor_dropout": 0.5}[kind]
    env = FaultWrapper(gym.make(ENV), Fault(kind, "bshin", size, onset=20, end=40, seed=7))
    seen = _run(env, acts)
    j = 3  # bshin's angle
    others = np.delete(np.arange(17), j)
    # The truth is untouched (the same actions drive it): what is read differs, only at j,
    # only from the onset (observation 20 is S of step 20) to the end.
    np.testing.assert_array_equal(seen[:, others], clean[:, others])
    np.testing.assert_array_equal(seen[:20, j], clean[:20, j])
    np.testing.assert_array_equal(seen[40:, j], clean[40:, j])
    d = seen[20:40, j] - clean[20:40, j]
    if kind == "sensor_offset":
        np.testing.assert_allclose(d, 0.3, atol=1e-12)
    elif kind == "sensor_stuck":
        assert np.all(seen[20:40, j] == clean[20, j])
    elif kind == "sensor_noise":
        ref = np.random.default_rng(7).normal(0.0, 0.2, 20)
        np.testing.assert_allclose(d, ref, atol=1e-12)
    else:
        u = np.random.default_rng(7).random(20)
        np.testing.assert_array_equal(seen[20:40, j] == 0.0, u < 0.5)


@pytest.mark.parametrize(("kind", "size"), [("actuator_gain", 0.5), ("actuator_offset", 0.2),
                                            ("actuator_noise", 0.1), ("actuator_stuck", 0.0)])
def test_an_actuator_fault_drives_the_env_with_the_faulty_action(kind, size):
    acts = _actions(50)
    j = 4  # fshin
    want = acts.copy()
    if kind == "actuator_gain":
        want[20:, j] *= 0.5
    elif kind == "actuator_offset":
        want[20:, j] += 0.2
    elif kind == "actuator_noise":
        want[20:, j] += np.random.default_rng(3).normal(0.0, 0.1, 30)
    else:
        want[20:, j] = acts[20, j]
    ref = _run(gym.make(ENV), want)  # the faulty actions applied by hand
    env = FaultWrapper(gym.make(ENV), Fault(kind, "fshin", size, onset=20, seed=3))
    passed = acts.copy()
    seen = _run(env, passed)
    np.testing.assert_array_equal(passed, acts)  # the caller's action is not changed
    np.testing.assert_allclose(seen, ref, atol=1e-12)
    assert CLASS_OF[kind] == "actuator" and env.on and "fshin" in env.on[0]


def test_a_force_is_the_push_xfrc_applied_gives_and_stops_at_its_end():
    acts = _actions(60)
    env = FaultWrapper(gym.make(ENV), Fault("force", "bfoot", 8.0, axis="x", onset=10, end=30))
    seen = _run(env, acts)
    ref_env = gym.make(ENV)
    obs, _ = ref_env.reset(seed=0)
    body = component_names(ref_env)["body"].index("bfoot")
    ref = [obs]
    for t, a in enumerate(acts):
        ref_env.unwrapped.data.xfrc_applied[:] = 0.0
        if 10 <= t < 30:
            ref_env.unwrapped.data.xfrc_applied[body, 0] = 8.0
        ref.append(ref_env.step(a)[0])
    np.testing.assert_allclose(seen, np.array(ref), atol=1e-12)
    assert not np.allclose(seen[31:], _run(gym.make(ENV), acts)[31:])  # it did push


@pytest.mark.parametrize(("kind", "component", "size"), [
    ("mass", "torso", 1.5), ("friction", None, 0.5), ("damping", None, 2.0),
    ("gravity", None, 1.1)])
def test_a_change_of_the_dynamics_is_the_model_changed_by_hand_and_restored(kind, component,
                                                                            size):
    acts = _actions(40)
    env = FaultWrapper(gym.make(ENV), Fault(kind, component, size, onset=15, end=30))
    model = env.unwrapped.model
    before = (model.body_mass.copy(), model.geom_friction.copy(), model.dof_damping.copy(),
              model.opt.gravity.copy())
    seen = _run(env, acts)
    after = (model.body_mass, model.geom_friction, model.dof_damping, model.opt.gravity)
    for b, a in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)  # restored at its end
    ref_env = gym.make(ENV)
    m = ref_env.unwrapped.model
    obs, _ = ref_env.reset(seed=0)
    ref = [obs]
    for t, a in enumerate(acts):
        on = 15 <= t < 30
        m.body_mass[:], m.body_inertia[:] = before[0], env.unwrapped.model.body_inertia
        m.geom_friction[:], m.dof_damping[:], m.opt.gravity[:] = before[1:]
        if on and kind == "mass":
            m.body_mass[1] *= size
            m.body_inertia[1] *= size
        elif on and kind == "friction":
            m.geom_friction[:, 0] *= size
        elif on and kind == "damping":
            m.dof_damping[:] *= size
        elif on:
            m.opt.gravity[:] *= size
        ref.append(ref_env.step(a)[0])
    np.testing.assert_allclose(seen, np.array(ref), atol=1e-12)
    assert not np.allclose(seen[16:31], _run(gym.make(ENV), acts)[16:31])


def test_onsets_count_steps_across_episodes_and_a_reset_keeps_a_physical_fault():
    env = FaultWrapper(gym.make(ENV, max_episode_steps=10), Fault("gravity", None, 1.5, onset=15))
    env.reset(seed=0)
    g0 = env.unwrapped.model.opt.gravity.copy()
    for t in range(30):
        *_, term, trunc, info = env.step(np.zeros(6))
        assert bool(info["faults"]) == (t + 1 >= 15)
        if term or trunc:
            env.reset()
    np.testing.assert_allclose(env.unwrapped.model.opt.gravity, 1.5 * g0)
    assert env.steps == 30 and faults_of(env)[0].kind == "gravity"
    env.close()
    np.testing.assert_array_equal(env.unwrapped.model.opt.gravity, g0)


def test_bad_faults_are_refused_in_one_line():
    cases = [(lambda: Fault("bitflip", 0, 1.0), "not one of"),
             (lambda: Fault("sensor_noise", None, 0.1), "name its component"),
             (lambda: Fault("gravity", "torso", 1.1), "no component"),
             (lambda: Fault("mass", "torso", -1.0), "factor > 0"),
             (lambda: Fault("sensor_dropout", 0, 1.5), "probability"),
             (lambda: Fault("force", "torso", 5.0, axis="w"), "axis"),
             (lambda: Fault("sensor_offset", 0, float("nan")), "finite"),
             (lambda: Fault("sensor_offset", 0, 1.0, onset=10, end=5), "after the onset"),
             (lambda: FaultWrapper(gym.make(ENV), Fault("actuator_gain", "tail", 0.5)),
              "no actuator named 'tail'"),
             (lambda: FaultWrapper(gym.make(ENV), Fault("sensor_offset", 17, 0.5)),
              "out of range"),
             (lambda: FaultWrapper(gym.make("Pendulum-v1"), Fault("gravity", None, 1.1)),
              "no MuJoCo model"),
             (lambda: FaultWrapper(gym.make(ENV), "gravity"), "Fault objects")]
    for make, words in cases:
        with pytest.raises((ValueError, TypeError), match=words) as err:
            make()
        assert "\n" not in str(err.value)


def test_the_monitor_sees_the_commanded_action_and_a_sensor_on_a_classic_env():
    """Around a Box env without MuJoCo the signal faults work (components obs_j, act_j)."""
    env = FaultWrapper(gym.make("Pendulum-v1"), Fault("sensor_offset", "obs_2", 1.0, onset=0),
                       Fault("actuator_gain", "act_0", 0.0, onset=0))
    obs, _ = env.reset(seed=0)
    ref = gym.make("Pendulum-v1")
    r_obs, _ = ref.reset(seed=0)
    for _ in range(5):
        obs, *_ = env.step(np.array([2.0], dtype=np.float32))
        r_obs, *_ = ref.step(np.array([0.0], dtype=np.float32))
    np.testing.assert_allclose(obs[:2], r_obs[:2], atol=1e-6)
    np.testing.assert_allclose(obs[2], r_obs[2] + 1.0, atol=1e-5)
