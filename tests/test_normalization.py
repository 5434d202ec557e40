"""--normalize-obs and --scale-rewards (normalization.py): the running statistics against numpy, the network
applying them with a stopped gradient, the stages in the pipeline, and a normalised run that checkpoints its
statistics and resumes exactly."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hephaestus.core import networks as nets
from hephaestus.config.train_config import TrainConfig, resolve
from hephaestus.core.export import load_params_npz
from hephaestus.agents.normalization.stages import merge_moments
from hephaestus.core.stages import option_stages
from train_cli import assert_same_params, main, resume_cut_back_copy

PENDULUM = ["--env", "gymnax:Pendulum-v1", "--num-envs", "4", "--num-steps", "16", "--hidden-dim", "16",
            "--num-layers", "1", "--log-interval", "2", "--num-minibatches", "2", "--update-epochs", "1",
            "--no-wandb", "--final-eval-episodes", "0", "--total-timesteps", str(4 * 16 * 4)]


def test_running_moments_equal_the_statistics_of_all_data_seen():
    rng = np.random.default_rng(0)
    batches = [rng.normal(loc=3.0, scale=s, size=(7, 5, 3)).astype(np.float32) for s in (0.5, 2.0, 10.0)]
    moments = nets.initial_moments(3)
    for batch in batches:
        moments = merge_moments(moments, jnp.asarray(batch))
    everything = np.concatenate([b.reshape(-1, 3) for b in batches])
    np.testing.assert_allclose(moments["mean"], everything.mean(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(moments["var"], everything.var(0), rtol=1e-3)
    assert float(moments["count"]) == pytest.approx(len(everything), abs=1e-3)
    # scalar moments (the reward scale's): every entry a sample
    scalar = merge_moments({"mean": jnp.float32(0), "var": jnp.float32(1), "count": jnp.float32(1e-4)},
                           jnp.asarray(batches[1][..., 0]))
    assert float(scalar["var"]) == pytest.approx(float(batches[1][..., 0].var()), rel=1e-3)


def test_the_network_standardises_with_its_statistics_and_no_gradient_reaches_them():
    spec = nets.NetworkSpec(obs_dim=3, action_dim=2, discrete=True, hidden_dim=8, num_layers=1, normalize_obs=True)
    plain = nets.NetworkSpec(obs_dim=3, action_dim=2, discrete=True, hidden_dim=8, num_layers=1)
    assert nets.NetworkSpec.from_meta(spec.to_meta()) == spec and not nets.NetworkSpec.from_meta(
        {k: v for k, v in spec.to_meta().items() if k != "normalize_obs"}).normalize_obs  # older files: off
    network, plain_network = spec.build(), plain.build()
    variables = network.init(jax.random.PRNGKey(0), jnp.zeros((1, 3)))
    moments = variables[nets.OBS_NORM]["moments"]
    assert np.all(moments["mean"] == 0) and np.all(moments["var"] == 1)  # the identity before any data
    mean, var = jnp.array([1.0, -2.0, 5.0]), jnp.array([4.0, 0.25, 100.0])
    variables = {**variables, nets.OBS_NORM: {"moments": {"mean": mean, "var": var, "count": jnp.float32(9)}}}
    obs = jnp.array([[3.0, -2.5, 5.0], [1.0, 40.0, -5.0]])
    logits, value = network.apply(variables, obs)
    expected = jnp.clip((obs - mean) / jnp.sqrt(var + 1e-8), -nets.OBS_CLIP, nets.OBS_CLIP)
    assert float(expected[1, 1]) == nets.OBS_CLIP  # the clip is exercised
    plain_logits, plain_value = plain_network.apply({"params": variables["params"]}, expected)
    np.testing.assert_allclose(logits, plain_logits, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(value, plain_value, rtol=1e-6, atol=1e-6)
    grads = jax.grad(lambda v: jnp.sum(network.apply(v, obs)[1]))(variables)
    assert all(np.all(np.asarray(g) == 0) for g in jax.tree.leaves(grads[nets.OBS_NORM]))
    assert any(np.any(np.asarray(g) != 0) for g in jax.tree.leaves(grads["params"]))


def test_the_flags_add_their_stages_in_pipeline_order_and_are_off_by_default():
    from hephaestus.core.ppo import make_train

    base = TrainConfig.from_flat(env="gymnax:CartPole-v1", num_envs=4, num_steps=8, hidden_dim=8, num_layers=1,
                                 log_interval=1)
    assert option_stages(resolve(base)[0]) == ()
    assert option_stages(resolve(TrainConfig.from_flat(env="hackmatrix"))[0]) == ()
    config = resolve(base.replace(normalize_obs=True, scale_rewards=True, extra_stages=("reward_bonus",)))[0]
    trainer = make_train(config)
    assert [s.name for s in trainer.pipeline] == ["rollout", "reward_scale", "reward_bonus", "advantage",
                                                  "ppo_update", "obs_norm"]
    runner, metrics = trainer.train_chunk(trainer.runner_state, 1)
    moments = runner.train_state.params[nets.OBS_NORM]["moments"]
    # one update: the statistics took in exactly one batch of observations, after the update used the old ones
    assert float(moments["count"]) == pytest.approx(4 * 8, abs=1e-3)
    assert np.all(np.asarray(moments["var"]) > 0) and np.any(np.asarray(moments["mean"]) != 0)
    scale = runner.stages["reward_scale"]
    assert float(scale.moments["count"]) == pytest.approx(4 * 8, abs=1e-3)
    # CartPole pays 1 per step (+1 from reward_bonus, added after the scaling): the stage divided by the std
    # of the discounted returns, 1, 1.99, 2.97, ... in every env
    returns = np.cumsum(0.99 ** np.arange(8))  # G_t = 0.99 G_{t-1} + 1 (no episode of 8 steps ends)
    assert float(metrics["reward_scale/std"][0]) == pytest.approx(float(np.sqrt(returns.var() + 1e-8)), rel=1e-3)


def test_a_normalised_run_saves_its_statistics_and_resumes_exactly(tmp_path, capsys):
    args = [*PENDULUM, "--normalize-obs", "--scale-rewards", "--save-interval", "2", "--checkpoint-dir", str(tmp_path)]
    assert main(*args, "--run-name", "ref") == 0
    params, meta = load_params_npz(str(tmp_path / "ref" / "final_params.npz"))
    assert meta["network"]["normalize_obs"] is True
    assert float(params[nets.OBS_NORM]["moments"]["count"]) == pytest.approx(4 * 4 * 16, abs=1e-2)
    record = json.loads((tmp_path / "ref" / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["reward_scale/std"] > 10  # Pendulum's costs reach -16 per step: returns in the hundreds
    # the checkpoint at update 2, resumed in a copy of the run folder, ends where the uninterrupted run ended
    assert resume_cut_back_copy(tmp_path / "ref", tmp_path / "cut", 4, "--checkpoint-dir", str(tmp_path)) == 0
    assert "resume: update 2 of 4" in capsys.readouterr().out
    assert_same_params(tmp_path / "ref" / "final_params.npz", tmp_path / "cut" / "final_params.npz")
