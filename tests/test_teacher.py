"""--teacher (kickstarting from an env's scripted policy) and the scripted policies themselves."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hephaestus.config.train_config import ConfigError, TrainConfig, resolve
from hephaestus.envs.adapters import adapt_gymnax
from hephaestus.core.ppo import make_train
from toy_envs import RandomWalk

# One worker runs this module, so its module fixture runs once (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("test_teacher")

SMALL = dict(hidden_dim=16, num_layers=1, num_envs=8, num_steps=16, num_minibatches=2, update_epochs=2,
             log_interval=4, total_timesteps=8 * 16 * 8, lr=1e-2)


def toward_origin(state, mask, key):
    """A teacher that reads the env's state: step right left of the origin, else left (the reward, the position
    after the move, pulls the other way: right, always)."""
    return (state.pos < 0).astype(jnp.int32)


def walk_env():
    env = RandomWalk()
    return dataclasses.replace(adapt_gymnax(env, env.default_params, "walk"),
                               scripted_policies={"toward-origin": toward_origin})


def trainer(**overrides):
    config, _ = resolve(TrainConfig.from_flat(env="walk", **{**SMALL, **overrides}))
    return make_train(config, walk_env())


@pytest.fixture(scope="module")
def taught():
    return trainer(teacher="toward-origin", teacher_coef=5.0, teacher_fraction=1.0)


def test_the_rollout_stores_the_teachers_action_for_the_state_each_action_was_chosen_in(taught):
    rollout = next(s for s in taught.pipeline if s.name == "rollout")
    _, batch, _, metrics = jax.jit(rollout.apply)(jax.random.PRNGKey(3), taught.runner_state.train_state, None,
                                                  taught.runner_state.stages["rollout"])
    batch = jax.device_get(batch)
    np.testing.assert_array_equal(batch["teacher_action"], (batch["obs"][..., 0] < 0).astype(np.int32))
    assert float(metrics["teacher_agreement"]) == pytest.approx(np.mean(batch["action"] == batch["teacher_action"]))


def test_the_teacher_pulls_the_policy_to_its_actions_and_its_weight_falls_to_zero(taught):
    runner, metrics = taught.train_chunk(taught.init_runner_state(0))
    runner, later = taught.train_chunk(runner)
    num_updates = taught.config.num_updates  # 8, weight 5 (1 - u / 8) at update u
    coef = np.concatenate([metrics["teacher_coef"], later["teacher_coef"]])
    np.testing.assert_allclose(coef, 5.0 * (1 - np.arange(num_updates) / num_updates), rtol=1e-6)
    assert later["teacher_xent"][-1] < 0.7 * metrics["teacher_xent"][0]
    assert later["teacher_agreement"][-1] > metrics["teacher_agreement"][0]
    # Without the teacher's weight the same program learns what the reward says: always right, away from the
    # teacher (measured: agreement 0.35 against 0.64 taught, cross-entropy 1.57 against 0.38).
    untaught = trainer(teacher="toward-origin", teacher_coef=0.0)
    n = np.int32(4)
    assert (untaught.compiled_chunk.lower(untaught.init_runner_state(0), n).as_text()
            == taught.compiled_chunk.lower(taught.init_runner_state(0), n).as_text())
    runner, first = untaught.train_chunk(untaught.init_runner_state(0))
    runner, last = untaught.train_chunk(runner)
    # ... and the agent of a run without a teacher, to float rounding (another program: the loss adds 0 x the
    # cross-entropy; the teacher's draws take no key from the others, so the episodes are the same)
    plain = trainer()
    alone, _ = plain.train_chunk(plain.init_runner_state(0))
    alone, _ = plain.train_chunk(alone)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), runner.train_state.params,
                 alone.train_state.params)
    assert last["teacher_agreement"][-1] < later["teacher_agreement"][-1] - 0.15
    assert last["teacher_xent"][-1] > first["teacher_xent"][0] > later["teacher_xent"][-1]


def test_a_teacher_the_env_does_not_have_is_a_one_line_error():
    with pytest.raises(ConfigError, match="--teacher exit-rush: walk has no such scripted policy; it has toward-origin"):
        trainer(teacher="exit-rush")
    with pytest.raises(ConfigError, match="--teacher-fraction must be in"):
        trainer(teacher="toward-origin", teacher_fraction=0.0)
    with pytest.raises(ConfigError, match="--teacher-coef must be >= 0"):
        trainer(teacher="toward-origin", teacher_coef=-1.0)


def test_hackmatrix_learns_from_exit_rush_collector_by_default_and_none_turns_it_off():
    from hephaestus.config.train_config import has_teacher

    def settled(**flags):
        return resolve(TrainConfig.from_flat(**flags))[0]

    assert settled(env="hackmatrix").ppo.teacher == "exit-rush-collector"  # configs/hackmatrix-tpu.yaml's, since 2 Dec
    assert settled(env="hackmatrix", teacher="exit-rush-siphon").ppo.teacher == "exit-rush-siphon"
    for config in (settled(env="gymnax:CartPole-v1"), settled(env="hackmatrix", teacher="none"),
                   settled(env="hackmatrix", agent="dreamer")):  # the dreamer has no PPO update to join
        assert config.ppo.teacher == "none" and not has_teacher(config)
    with pytest.raises(ConfigError, match="--teacher exit-rush needs the PPO update; --agent dreamer replaces it"):
        settled(env="hackmatrix", agent="dreamer", teacher="exit-rush")


def test_a_checkpoint_from_before_the_teacher_resumes_without_one():
    from hephaestus.run.checkpoint import stored_config

    values = {"env": "hackmatrix", "ent_coef": 0.1, "hidden_dim": 256}  # a stored config with no teacher field
    assert stored_config(values, "test").ppo.teacher == "none"
    assert stored_config({**values, "teacher": "exit-rush"}, "test").ppo.teacher == "exit-rush"
