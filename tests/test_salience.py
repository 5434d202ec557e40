"""Salience pooling (--encoder salience, networks.SaliencePool / SalienceEncoder): a synthetic task where one
relevant token among many decides the label, the pooling's invariants, and the encoder through the pipeline
(training, export, resume checks) on the toy cell env of test_encoder.py. No HackMatrix compile."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from hephaestus.run import checkpoint as ck
from hephaestus.core import networks as nets
from hephaestus.config.train_config import ConfigError, TrainConfig, resolve
from hephaestus.core.export import network_from_meta, network_meta
from test_encoder import SMALL, cell_env, trainer

TOKENS, CHANNELS, FLAT = 12, 4, 2


def marked_batch(key, n):
    """Tokens [n, 12, 4]: channel 0 marks one token at a random place, channel 1 is a N(0, 1) value on every token,
    2-3 noise; the target is the marked token's value. Flat features: noise. Any weight left on an unmarked token
    mixes its value into the prediction, so the regression keeps pulling the weight onto the mark."""
    k_mark, k_value, k_noise, k_flat = jax.random.split(key, 4)
    mark = jax.random.randint(k_mark, (n,), 0, TOKENS)
    value = jax.random.normal(k_value, (n, TOKENS))
    board = jnp.concatenate([jax.nn.one_hot(mark, TOKENS)[..., None], value[..., None],
                             jax.random.normal(k_noise, (n, TOKENS, 2))], axis=-1)
    x = jnp.concatenate([jax.random.normal(k_flat, (n, FLAT)), board.reshape(n, -1)], axis=1)
    return x, value[jnp.arange(n), mark], mark


class Regressor(nets.nn.Module):
    @nets.nn.compact
    def __call__(self, x):
        enc = nets.SalienceEncoder((FLAT, TOKENS, CHANNELS), cell_dim=8, heads=1, name="encoder")
        return nets.nn.Dense(1)(enc(x))[..., 0], enc.weights(x)


def test_one_relevant_token_among_many_gets_most_of_the_weight():
    model, opt = Regressor(), optax.adam(1e-2)
    x0, _, _ = marked_batch(jax.random.PRNGKey(0), 8)
    params = model.init(jax.random.PRNGKey(1), x0)
    state = opt.init(params)

    @jax.jit
    def step(params, state, key):
        x, y, _ = marked_batch(key, 256)
        grads = jax.grad(lambda p: jnp.mean((model.apply(p, x)[0] - y) ** 2))(params)
        updates, state = opt.update(grads, state)
        return optax.apply_updates(params, updates), state

    x, y, mark = marked_batch(jax.random.PRNGKey(99), 2048)
    weight_on_mark = lambda p: float(jnp.mean(model.apply(p, x)[1][jnp.arange(len(mark)), 0, mark]))
    assert weight_on_mark(params) < 0.2  # untrained: about uniform (1/12)
    for key in jax.random.split(jax.random.PRNGKey(2), 300):
        params, state = step(params, state, key)
    prediction, weights = model.apply(params, x)
    assert weights.shape == (2048, 1, TOKENS)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-5)
    assert float(jnp.mean((prediction - y) ** 2) / jnp.var(y)) < 0.05  # R^2 > 0.95
    assert weight_on_mark(params) > 0.75  # the marked token holds most of the weight, wherever it is


def test_pooling_is_a_weighted_sum_of_the_tokens_and_follows_them_when_permuted():
    pool = nets.SaliencePool(heads=3, hidden=8)
    tokens = jax.random.normal(jax.random.PRNGKey(0), (5, 7, 6))
    context = jax.random.normal(jax.random.PRNGKey(1), (5, 2))
    params = pool.init(jax.random.PRNGKey(2), tokens, context)
    pooled, weights = pool.apply(params, tokens, context)
    assert pooled.shape == (5, 3 * 6) and weights.shape == (5, 3, 7)
    np.testing.assert_allclose(pooled.reshape(5, 3, 6), jnp.einsum("bhl,bld->bhd", weights, tokens), rtol=1e-5,
                               atol=1e-6)
    perm = jnp.array([3, 0, 6, 1, 5, 2, 4])
    pooled_p, weights_p = pool.apply(params, tokens[:, perm], context)
    np.testing.assert_allclose(pooled_p, pooled, rtol=1e-5, atol=1e-6)  # a set summary: order does not matter
    np.testing.assert_allclose(weights_p, weights[..., perm], rtol=1e-5, atol=1e-6)
    # The context changes what is salient.
    assert not np.allclose(pool.apply(params, tokens, context + 1.0)[1], weights)


def test_salience_network_shapes_export_and_resume_check(tmp_path):
    spec = cell_env().spec
    config, _ = resolve(TrainConfig.from_flat(env="cellwalk", **{**SMALL, "encoder": "salience",
                                                                 "salience_heads": 2}), spec)
    net = nets.make_network(spec, config)
    params = net.init(jax.random.PRNGKey(0), jnp.zeros((1, spec.obs_dim)))
    # The MLPs read the flat features and 2 heads x cell_dim 4, not every cell.
    assert params["params"]["actor"]["Dense_0"]["kernel"].shape == (3 + 2 * 4, 16)
    assert params["params"]["encoder"]["position"].shape == (4, 4)
    x = jax.random.uniform(jax.random.PRNGKey(3), (5, spec.obs_dim))
    logits, value = net.apply(params, x)
    assert logits.shape == (5, 2) and value.shape == (5,)
    weights = net.apply(params, x, method=nets.ActorCritic.salience)
    assert weights.shape == (5, 2, 4)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-5)
    meta = network_meta(spec, config)
    assert meta["encoder"] == "salience" and meta["salience_heads"] == 2 and meta["obs_cells"] == [3, 4, 3]
    rebuilt = network_from_meta({"network": meta})
    np.testing.assert_allclose(rebuilt.apply(params, x)[0], logits, rtol=1e-6)

    tr = trainer(encoder="salience", salience_heads=2)
    saver = ck.Checkpointer(str(tmp_path / "run"), tr, export_params=False, message=lambda _: None)
    saver.save(tr.runner_state)
    saver.close()
    found = ck.locate(str(tmp_path / "run"))
    ck.restore(found, tr)
    with pytest.raises(ck.CheckpointError, match="salience_heads is 2 in the checkpoint, 3 in this run"):
        ck.check_compatible(found, tr.config, network_meta(spec, tr.config.replace(salience_heads=3)))
    before = np.asarray(tr.runner_state.train_state.params["params"]["encoder"]["position"])
    runner, metrics = tr.train_chunk(tr.runner_state)  # donates its input
    assert all(np.isfinite(np.asarray(v)).all() for v in jax.tree.leaves(metrics))
    assert not np.allclose(before, runner.train_state.params["params"]["encoder"]["position"])  # it learns


def test_salience_needs_an_env_with_cells_and_positive_heads():
    with pytest.raises(ConfigError, match="--encoder salience needs an env that declares obs_cells"):
        resolve(TrainConfig.from_flat(env="gymnax:CartPole-v1", encoder="salience"),
                nets.NetworkSpec(obs_dim=4, action_dim=2, discrete=True, hidden_dim=8, num_layers=1))
    with pytest.raises(ConfigError, match="--salience-heads must be positive"):
        resolve(TrainConfig.from_flat(salience_heads=0))
