"""The PPO parts on their own (ppo.py): the loss against a hand computation, GAE and the advantage stage against a
numpy reference, the row-based update's minibatch indexing, and the update on a tiny linear network. No env and
no Trainer: each part is called with a `PPOContext` holding only what it reads."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training.train_state import TrainState

from hephaestus.core import networks as nets
from hephaestus.core.distributed import Sharder
from hephaestus.core.obs_storage import ObsStorage
from hephaestus.core.ppo import (PPOContext, TRAIN_KEYS, advantage_apply, epoch_order, gae, minibatch, ppo_loss,
                            ppo_update_apply, to_rows)

HYPER = {"clip_eps": 0.2, "vf_coef": 0.5, "ent_coef": 0.01, "gamma": 0.9, "gae_lambda": 0.8}


class Linear(nn.Module):
    """A linear actor-critic with the interface networks.act/evaluate read: logits and a value."""

    action_dim: int = 3
    discrete: bool = True

    @nn.compact
    def __call__(self, obs):
        return nn.Dense(self.action_dim, name="pi")(obs), nn.Dense(1, name="v")(obs)[..., 0]


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def tiny_minibatch(ratios, network, params, normalize=False):
    """4 samples whose new/old probability ratios are `ratios` (old log-probs set from the current policy)."""
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(4, 2)).astype(np.float32)
    action = np.array([0, 1, 2, 1], np.int32)
    mask = np.ones((4, 3), bool)
    log_prob, _, _ = nets.evaluate(network, params, obs, mask, action)
    return {"obs": obs, "action_mask": mask, "action": action,
            "log_prob": np.asarray(log_prob) - np.log(np.asarray(ratios, np.float32)),
            "value": np.array([0.5, -0.2, 1.0, 0.0], np.float32),
            "advantage": np.array([1.0, -2.0, 0.5, 3.0], np.float32),
            "target": np.array([1.5, 0.3, -1.0, 0.4], np.float32)}


def hand_loss(mb, params, ratios, clip_value):
    """The PPO loss computed by hand in numpy from the linear network's parameters."""
    p = jax.tree.map(np.asarray, params)["params"]
    logits = mb["obs"] @ p["pi"]["kernel"] + p["pi"]["bias"]
    value = (mb["obs"] @ p["v"]["kernel"] + p["v"]["bias"])[:, 0]
    logp = log_softmax(logits)
    entropy = -(np.exp(logp) * logp).sum(-1).mean()
    r, adv, eps = np.asarray(ratios, np.float64), mb["advantage"], HYPER["clip_eps"]
    pg = -np.mean(np.minimum(r * adv, np.clip(r, 1 - eps, 1 + eps) * adv))
    unclipped = (value - mb["target"]) ** 2
    v_clip = mb["value"] + np.clip(value - mb["value"], -eps, eps)
    vf = 0.5 * np.mean(np.maximum(unclipped, (v_clip - mb["target"]) ** 2) if clip_value else unclipped)
    total = pg + HYPER["vf_coef"] * vf - HYPER["ent_coef"] * entropy
    return {"pg_loss": pg, "vf_loss": vf, "entropy": entropy, "total_loss": total,
            "approx_kl": np.mean((r - 1) - np.log(r)), "clip_frac": np.mean(np.abs(r - 1) > eps)}


@pytest.mark.parametrize("clip_value", [True, False])
def test_clipped_loss_matches_a_hand_computation(clip_value):
    network = Linear()
    params = network.init(jax.random.PRNGKey(0), jnp.zeros((1, 2)))
    ratios = [1.5, 0.7, 1.1, 0.95]  # two outside [0.8, 1.2]: clip_frac 0.5
    mb = tiny_minibatch(ratios, network, params)
    ctx = PPOContext(network=network, num_envs=4, num_steps=1, normalize_advantages=False, clip_value_loss=clip_value)
    total, stats = ppo_loss(ctx, params, mb, HYPER)
    want = hand_loss(mb, params, ratios, clip_value)
    assert want["clip_frac"] == 0.5
    for k, v in want.items():
        np.testing.assert_allclose(float(stats[k]), v, rtol=1e-5, atol=1e-6, err_msg=k)
    np.testing.assert_allclose(float(total), want["total_loss"], rtol=1e-5)


def test_value_clipping_changes_the_value_loss_and_advantages_are_normalised_per_minibatch():
    network = Linear()
    params = network.init(jax.random.PRNGKey(0), jnp.zeros((1, 2)))
    ratios = [1.0, 1.0, 1.0, 1.0]
    mb = tiny_minibatch(ratios, network, params)
    loss = lambda **kw: ppo_loss(PPOContext(network=network, num_envs=4, num_steps=1, **kw), params, mb, HYPER)[1]
    clipped = loss(clip_value_loss=True, normalize_advantages=False)
    plain = loss(clip_value_loss=False, normalize_advantages=False)
    assert float(clipped["vf_loss"]) > float(plain["vf_loss"])  # the clipped value is further from its target here
    # ratio 1 everywhere: pg_loss is minus the mean advantage; normalised advantages have mean 0.
    np.testing.assert_allclose(float(plain["pg_loss"]), -np.mean(mb["advantage"]), rtol=1e-6)
    assert abs(float(plain["approx_kl"])) < 1e-6 and float(plain["clip_frac"]) == 0.0
    normalised = loss(clip_value_loss=False, normalize_advantages=True)
    assert abs(float(normalised["pg_loss"])) < 1e-6


def gae_reference(reward, value, next_value, terminated, done, gamma, lam):
    adv = np.zeros_like(value)
    last = np.zeros_like(value[0])
    for t in reversed(range(len(reward))):
        delta = reward[t] + gamma * next_value[t] * (1 - terminated[t]) - value[t]
        last = delta + gamma * lam * (1 - done[t]) * last
        adv[t] = last
    return adv


def random_rollout(rng, t=7, n=3):
    terminated = rng.random((t, n)) < 0.15
    truncated = (rng.random((t, n)) < 0.15) & ~terminated
    value = rng.normal(size=(t, n)).astype(np.float32)
    return {"reward": rng.normal(size=(t, n)).astype(np.float32), "value": value,
            "terminated": terminated, "truncated": truncated,
            "bootstrap_value": np.where(truncated, rng.normal(size=(t, n)), 0).astype(np.float32),
            "last_value": rng.normal(size=(n,)).astype(np.float32)}


def test_gae_and_the_advantage_stage_match_a_numpy_reference():
    rng = np.random.default_rng(3)
    batch = random_rollout(rng)
    done = batch["terminated"] | batch["truncated"]
    assert batch["terminated"].any() and batch["truncated"].any()
    # gae on its own, with an arbitrary next value
    next_value = rng.normal(size=batch["value"].shape).astype(np.float32)
    got = gae(batch["reward"], batch["value"], next_value, batch["terminated"], done, 0.9, 0.8)
    np.testing.assert_allclose(got, gae_reference(batch["reward"], batch["value"], next_value, batch["terminated"],
                                                  done, 0.9, 0.8), rtol=1e-5, atol=1e-6)
    # the stage: the next value is the following step's value, last_value after the last step, and the
    # bootstrap value where the episode ended (0 on termination, V(final obs) on truncation)
    nv = np.concatenate([batch["value"][1:], batch["last_value"][None]])
    nv = np.where(done, batch["bootstrap_value"], nv)
    want = gae_reference(batch["reward"], batch["value"], nv, batch["terminated"], done, 0.9, 0.8)
    ctx = PPOContext(network=None, num_envs=3, num_steps=7, hyper=HYPER)
    _, out, _, metrics = advantage_apply(ctx, None, None, batch, None)
    np.testing.assert_allclose(out["advantage"], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["target"], want + batch["value"], rtol=1e-5, atol=1e-6)
    residual = np.var(want) / np.var(want + batch["value"])
    np.testing.assert_allclose(float(metrics["explained_variance"]), 1 - residual, rtol=1e-4)


def numbered_batch(t, n, dtype=np.float32):
    """obs[t, e, 0] = t * n + e: each sample's own number."""
    ids = np.arange(t * n, dtype=np.float32).reshape(t, n)
    return {"obs": np.stack([ids, -ids], -1).astype(dtype)}


@pytest.mark.parametrize("storage", ["float32", "bfloat16"])
def test_row_update_with_one_device_uses_every_sample_once_per_epoch(storage):
    t, n, m = 8, 4, 4
    ctx = PPOContext(network=None, num_envs=n, num_steps=t, num_minibatches=m, storage=ObsStorage(storage))
    assert ctx.shard.num_devices == 1
    rowed = {"obs": ctx.storage.to_gather(to_rows(ctx, jnp.asarray(numbered_batch(t, n, jnp.dtype(storage))["obs"])))}
    orders = []
    for key in (jax.random.PRNGKey(0), jax.random.PRNGKey(1)):
        order = epoch_order(ctx, key)
        assert order.shape == (m, 1, t * n // m)
        seen = np.concatenate([np.asarray(minibatch(ctx, rowed, order[i])["obs"][:, 0]) for i in range(m)])
        assert minibatch(ctx, rowed, order[0])["obs"].dtype == jnp.float32
        np.testing.assert_array_equal(np.sort(seen), np.arange(t * n))  # every sample exactly once
        orders.append(seen)
    assert not np.array_equal(orders[0], orders[1])  # a fresh shuffle per epoch key
    # One row: the numbers of the general per-row shuffle, and the stream of the flat one-device update this
    # path replaced.
    key = jax.random.PRNGKey(1)
    general = jax.random.permutation(key, jnp.arange(t * n)[None], axis=1, independent=True)
    np.testing.assert_array_equal(np.asarray(epoch_order(ctx, key)).ravel(), np.asarray(general).ravel())
    np.testing.assert_array_equal(np.asarray(epoch_order(ctx, key)).ravel(), jax.random.permutation(key, t * n))
    assert not np.array_equal(orders[0], np.arange(t * n))


def test_rows_keep_each_devices_envs_and_every_minibatch_takes_an_equal_share_of_each_row():
    t, n, m, d = 4, 8, 2, 2
    shard = Sharder(None, n, t)
    shard.num_devices = d  # the row arithmetic of 2 devices, on one (constraints are no-ops without a mesh)
    ctx = PPOContext(network=None, num_envs=n, num_steps=t, num_minibatches=m, shard=shard)
    rowed = {"obs": to_rows(ctx, jnp.asarray(numbered_batch(t, n)["obs"]))}
    env_of = lambda ids: np.asarray(ids).astype(int) % n
    assert set(env_of(rowed["obs"][0, :, 0])) == {0, 1, 2, 3} and set(env_of(rowed["obs"][1, :, 0])) == {4, 5, 6, 7}
    order = epoch_order(ctx, jax.random.PRNGKey(0))
    assert order.shape == (m, d, t * n // d // m)
    seen = []
    for i in range(m):
        ids = np.asarray(minibatch(ctx, rowed, order[i])["obs"][:, 0])
        half = len(ids) // 2
        assert (env_of(ids[:half]) < 4).all() and (env_of(ids[half:]) >= 4).all()
        seen.append(ids)
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(t * n))


def test_update_on_a_tiny_linear_network_lowers_the_loss():
    t, n = 8, 4
    network = Linear()
    params = network.init(jax.random.PRNGKey(0), jnp.zeros((1, 2)))
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(t, n, 2)).astype(np.float32)
    mask = np.ones((t, n, 3), bool)
    _, action, log_prob, value = nets.act(network, params, obs, mask, jax.random.PRNGKey(2))
    batch = {"obs": obs, "action_mask": mask, "action": action, "log_prob": log_prob, "value": value,
             "advantage": rng.normal(size=(t, n)).astype(np.float32),
             "target": rng.normal(size=(t, n)).astype(np.float32)}
    ctx = PPOContext(network=network, num_envs=n, num_steps=t, num_minibatches=2, update_epochs=4, hyper=HYPER)
    state = TrainState.create(apply_fn=network.apply, params=params, tx=optax.adam(3e-2))
    flat = {k: jnp.asarray(batch[k]).reshape((t * n,) + batch[k].shape[2:]) for k in TRAIN_KEYS}
    full_loss = lambda p: float(ppo_loss(ctx, p, flat, HYPER)[0])
    before = full_loss(params)
    new_state, out_batch, _, stats = jax.jit(lambda s, b: ppo_update_apply(ctx, jax.random.PRNGKey(3), s, b, None))(
        state, batch)
    assert int(new_state.step) == 4 * 2  # one optimizer step per minibatch per epoch
    assert full_loss(new_state.params) < before - 1e-3
    assert out_batch is batch or set(out_batch) == set(batch)
    for k in ("pg_loss", "vf_loss", "entropy", "total_loss", "approx_kl", "clip_frac", "grad_norm"):
        assert stats[k].shape == () and np.isfinite(float(stats[k])), k
    assert float(stats["grad_norm"]) > 0 and float(stats["approx_kl"]) > 0
