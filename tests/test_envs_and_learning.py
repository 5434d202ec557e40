"""Real environments through the adapter: CartPole learns, jumanji (masked) and Pendulum (continuous) run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hephaestus.config.train_config import TrainConfig, resolve
from hephaestus.envs.registry import UnknownEnvError, make_env
from hephaestus.run.loop import run
from hephaestus.core.ppo import make_train


def test_short_cartpole_run_learns():
    config, _ = resolve(TrainConfig.from_flat(env="gymnax:CartPole-v1", num_envs=4, num_steps=128, total_timesteps=100_000,
                                    hidden_dim=64, num_minibatches=4, update_epochs=4, log_interval=14))
    result = run(make_train(config), message=lambda _: None)
    returns = [r["mean_episode_return"] for r in result.records]  # 14 chunks of 14 updates (7,168 env steps)
    assert result.records[-1]["env_steps"] >= 100_000
    # A random CartPole policy averages ~22: the first chunk is near it, and PPO's chunks over the second half of
    # 1e5 steps average well past 150. (Over the second half, not the last chunk alone: PPO on CartPole dips
    # between 500 and ~200 from chunk to chunk, and a chunk's mean weighs its short episodes most; one machine
    # measured [58, 148, 357, ..., 323, 500].)
    assert returns[0] < 100, returns
    assert np.mean(returns[len(returns) // 2:]) > 150, returns


def test_jumanji_snake_with_action_masks_runs_a_few_updates():
    env = make_env("jumanji:Snake-v1")
    assert env.spec.discrete and env.spec.has_action_mask and env.spec.action_dim == 4
    assert env.spec.obs_dim == 12 * 12 * 5 + 1  # grid + step_count, mask taken out
    config, _ = resolve(TrainConfig.from_flat(env="jumanji:Snake-v1", num_envs=4, num_steps=32, total_timesteps=4 * 32 * 2,
                                    hidden_dim=32, num_layers=1, num_minibatches=2, update_epochs=1, log_interval=2))
    trainer = make_train(config, env)
    runner, metrics = trainer.train_chunk(trainer.runner_state)
    assert int(runner.update_step) == 2
    assert np.all(np.isfinite(metrics["total_loss"])) and metrics["fully_masked_rows"].sum() == 0


def test_jumanji_step_count_reaches_the_network_divided_by_the_time_limit():
    """Snake's observation carries its raw step count (0..4000); the adapter divides it by the env's time limit,
    as jumanji's own networks do, so no input is thousands of times larger than the rest."""
    env = make_env("jumanji:Snake-v1")
    state, step = env.reset(jax.random.PRNGKey(0))
    assert float(step.obs[-1]) == 0.0 and float(jnp.max(jnp.abs(step.obs))) <= 1.0
    for i in range(3):
        state, step = env.step(jax.random.PRNGKey(i), state, jnp.argmax(step.action_mask))
    assert not bool(step.terminated | step.truncated)
    assert float(step.obs[-1]) == pytest.approx(3 / env.raw_env.time_limit, rel=1e-6)
    assert float(step.final_obs[-1]) == pytest.approx(3 / env.raw_env.time_limit, rel=1e-6)


def test_continuous_pendulum_runs_and_clips_actions_to_bounds():
    env = make_env("gymnax:Pendulum-v1")
    assert not env.spec.discrete and env.spec.action_low == (-2.0,) and env.spec.action_high == (2.0,)
    config, _ = resolve(TrainConfig.from_flat(env="gymnax:Pendulum-v1", num_envs=4, num_steps=32, total_timesteps=4 * 32 * 2,
                                    hidden_dim=32, num_layers=1, num_minibatches=2, update_epochs=1, log_interval=2))
    trainer = make_train(config, env)
    rollout = trainer.pipeline[0]
    runner = trainer.init_runner_state(0)
    # A wide policy samples out of bounds; the env must still only ever see clipped torques. Pendulum's
    # reward penalises torque**2, so an unclipped torque of magnitude > 2 would push reward below the bound.
    params = jax.tree.map(lambda x: x, runner.train_state.params)
    params["params"]["log_std"] = params["params"]["log_std"] + 2.0
    _, batch, _, _ = jax.jit(rollout.apply)(jax.random.PRNGKey(0), runner.train_state.replace(params=params), None,
                                            runner.stages["rollout"])
    assert np.abs(np.asarray(batch["action"])).max() > 2.0  # raw samples exceed the bounds...
    max_cost = np.pi ** 2 + 0.1 * 8.0 ** 2 + 0.001 * 2.0 ** 2
    assert np.asarray(batch["reward"]).min() >= -max_cost - 1e-4  # ...but the env saw clipped actions
    runner, metrics = trainer.train_chunk(trainer.init_runner_state(1))
    assert np.all(np.isfinite(metrics["total_loss"]))


def test_unknown_env_names_suggest_close_matches():
    with pytest.raises(UnknownEnvError, match="did you mean CartPole-v1"):
        make_env("gymnax:CartPol-v1")
    with pytest.raises(UnknownEnvError, match="unknown jumanji env"):
        make_env("jumanji:Nope-v0")
    with pytest.raises(UnknownEnvError, match="unknown env"):
        make_env("atari:Pong")


def test_env_params_change_the_training_env_and_evaluations_play_the_defaults():
    """--env-params sets the training env's parameters, read as the types of the env's own fields; a name or value
    that does not fit is a one-line EnvParamError (a kind of UnknownEnvError); evaluations play the defaults."""
    from hephaestus.envs.registry import EnvParamError

    env = make_env("hackmatrix", curriculum_share="0.5", undo_across_stages="0", max_steps_in_episode="200")
    assert env.raw_params.curriculum_share == 0.5 and env.raw_params.undo_across_stages is False
    assert env.raw_params.max_steps_in_episode == 200
    with pytest.raises(EnvParamError, match=r"no parameter 'curiculum_share' \(did you mean curriculum_share"):
        make_env("hackmatrix", curiculum_share="0.5")
    with pytest.raises(EnvParamError, match="curriculum_max_stage must be in 2..8"):
        make_env("hackmatrix", curriculum_max_stage="9")
    with pytest.raises(EnvParamError, match=r"curriculum_program_prob must be in \[0, 1/7\]"):
        make_env("hackmatrix", curriculum_program_prob="0.5")
    assert make_env("hackmatrix", program_acquired_coef="0.5").raw_params.program_acquired_coef == 0.5
    with pytest.raises(EnvParamError, match="program_acquired_coef must be finite and >= 0"):
        make_env("hackmatrix", program_acquired_coef="-1")
    assert make_env("hackmatrix", program_played_coef="2").raw_params.program_played_coef == 2.0
    with pytest.raises(EnvParamError, match="program_played_coef must be finite and >= 0"):
        make_env("hackmatrix", program_played_coef="-0.5")
    with pytest.raises(EnvParamError, match="max_steps_in_episode is '2.5', expected an int"):
        make_env("gymnax:CartPole-v1", max_steps_in_episode="2.5")
    with pytest.raises(UnknownEnvError, match="has no parameters"):
        make_env("deepsea:6", size="3")

    config, _ = resolve(TrainConfig().replace(env="gymnax:CartPole-v1", num_envs=4, num_steps=32,
                                              total_timesteps=4 * 32, env_params=("max_steps_in_episode=12",)))
    trainer = make_train(config)
    assert trainer.env.raw_params.max_steps_in_episode == 12
    assert trainer.eval_env.raw_params.max_steps_in_episode == 500
    _, metrics = trainer.train_chunk(trainer.runner_state, 1)
    # training episodes end at the overridden limit: every env finishes at least two in 32 steps
    assert float(metrics["mean_episode_length"][0]) <= 12 and float(metrics["num_episodes"][0]) >= 8


def test_hackmatrix_names_its_action_groups_for_the_action_fractions():
    spec = make_env("hackmatrix").spec
    assert spec.action_groups == (("move", 0, 4), ("siphon", 4, 5), ("program", 5, 28))
    assert spec.discrete and spec.action_dim == 28 and spec.has_action_mask
    # The observation's structure, read from the env for the cells encoder: 33 flat + 36 cells x 42 channels.
    flat, cells, channels = spec.obs_cells
    assert flat + cells * channels == spec.obs_dim and cells == 36
