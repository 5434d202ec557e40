"""A plain PureJaxRL-style PPO (one function, no stages, no masks, no truncation bootstrap), used only as the
speed baseline in scripts/bench.py. Same network, optimizer and loss as hephaestus.core.ppo for discrete gymnax
envs, so the difference measured is what the pipeline's generality costs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax.training.train_state import TrainState

from hephaestus.core.networks import ActorCritic


def make_reference_train(env, env_params, num_envs, num_steps, num_minibatches, update_epochs, hidden_dim,
                         num_layers, lr=2.5e-4, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, vf_coef=0.5,
                         ent_coef=0.01, max_grad_norm=0.5):
    num_actions = env.action_space(env_params).n
    network = ActorCritic(action_dim=num_actions, discrete=True, hidden_dim=hidden_dim, num_layers=num_layers)
    batch_size = num_envs * num_steps
    minibatch_size = batch_size // num_minibatches

    def init(key):
        key, k_net, k_env = jax.random.split(key, 3)
        obs_dim = env.observation_space(env_params).shape[0]
        params = network.init(k_net, jnp.zeros((1, obs_dim)))
        tx = optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(lr, eps=1e-5))
        train_state = TrainState.create(apply_fn=network.apply, params=params, tx=tx)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_env, num_envs), env_params)
        return train_state, env_state, obs, key

    def update(runner, _):
        train_state, env_state, obs, key = runner

        def env_step(carry, _):
            env_state, obs, key = carry
            key, k_act, k_env = jax.random.split(key, 3)
            logits, value = network.apply(train_state.params, obs)
            action = jax.random.categorical(k_act, logits)
            log_prob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], 1)[:, 0]
            next_obs, env_state, reward, terminated, truncated, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(k_env, num_envs), env_state, action, env_params)
            done = jnp.logical_or(terminated, truncated)
            return (env_state, next_obs, key), (obs, action, log_prob, value, reward, done)

        (env_state, obs, key), (b_obs, b_act, b_logp, b_val, b_rew, b_done) = jax.lax.scan(
            env_step, (env_state, obs, key), None, num_steps)
        last_value = network.apply(train_state.params, obs)[1]

        def gae_step(carry, x):
            adv, next_value = carry
            done, value, reward = x
            delta = reward + gamma * next_value * (1 - done) - value
            adv = delta + gamma * gae_lambda * (1 - done) * adv
            return (adv, value), adv

        _, advantages = jax.lax.scan(gae_step, (jnp.zeros_like(last_value), last_value),
                                     (b_done.astype(jnp.float32), b_val, b_rew), reverse=True)
        targets = advantages + b_val

        def loss_fn(params, mb):
            obs, act, old_logp, old_val, adv, target = mb
            logits, value = network.apply(params, obs)
            log_p = jax.nn.log_softmax(logits)
            logp = jnp.take_along_axis(log_p, act[:, None], 1)[:, 0]
            ratio = jnp.exp(logp - old_logp)
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv).mean()
            v_clip = old_val + jnp.clip(value - old_val, -clip_eps, clip_eps)
            vf = 0.5 * jnp.maximum((value - target) ** 2, (v_clip - target) ** 2).mean()
            ent = -(jnp.exp(log_p) * log_p).sum(-1).mean()
            return pg + vf_coef * vf - ent_coef * ent

        def epoch(carry, _):
            train_state, key = carry
            key, k_perm = jax.random.split(key)
            perm = jax.random.permutation(k_perm, batch_size)
            data = (b_obs, b_act, b_logp, b_val, advantages, targets)
            data = jax.tree.map(lambda x: x.reshape((batch_size,) + x.shape[2:]), data)
            data = jax.tree.map(lambda x: jnp.take(x, perm, 0).reshape((num_minibatches, minibatch_size) + x.shape[1:]),
                                data)

            def mb_step(train_state, mb):
                grads = jax.grad(loss_fn)(train_state.params, mb)
                return train_state.apply_gradients(grads=grads), None

            train_state, _ = jax.lax.scan(mb_step, train_state, data)
            return (train_state, key), None

        (train_state, key), _ = jax.lax.scan(epoch, (train_state, key), None, update_epochs)
        return (train_state, env_state, obs, key), b_rew.sum()

    def chunk(runner, num_updates):
        return jax.lax.scan(update, runner, None, num_updates)

    return init, jax.jit(chunk, static_argnums=1, donate_argnums=0)
