"""Observation normalisation (--normalize-obs) and reward scaling (--scale-rewards), as two pipeline stages.

    rollout -> reward_scale -> [other stages after rollout] -> advantage -> ppo_update -> obs_norm

(stages.option_stages adds them.)

* `reward_scale` (after the rollout, before any intrinsic reward is added and before GAE): every env carries its
  discounted return G <- gamma * G * (1 - done) + r through the rollout; the running variance of G over all
  envs and steps so far gives the scale, and the batch's rewards are divided by its std (the rewards only, not
  shifted: a shift would change which episodes are better). As in gym's NormalizeReward and SB3's VecNormalize,
  but per batch: the statistics take in the whole rollout first, then the rollout is scaled with them.
  Episode returns in the metrics are computed by the rollout, so they stay in the env's units.
* `obs_norm` (after the PPO update): the running mean and variance of the observations, held in the network's
  variables (networks.OBS_NORM), take in the rollout's observations. Updating *after* the update keeps the
  behaviour policy and the policy the PPO loss scores identical within an update (the stored log-probabilities
  were computed with the statistics the loss uses); the next rollout acts with the new ones.

Both keep their statistics in the runner state (the stage state, or the network's variables), so checkpoints
save them and a resume continues exactly. Running moments merge with the parallel form of Welford's update
(Chan et al.), in float32 (a batch at a time, so the count's rounding only shifts weights by ~1e-7).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from hephaestus.core.networks import OBS_NORM
from hephaestus.core.obs_storage import storage_for
from hephaestus.core.stages import ENVS, REPLICATED, Stage, StageContext, register_stage

EPS = 1e-8


def merge_moments(moments: dict, x: jax.Array) -> dict:
    """`moments` ({"mean", "var", "count"}, over the last axis of x or scalars) updated with the samples `x`
    [..., D] (or [...] for scalar moments): all leading axes are samples. Also RND's input statistics (bonus.py)."""
    x = x.astype(jnp.float32)
    axes = tuple(range(x.ndim - moments["mean"].ndim))
    n = jnp.float32(x.size // max(1, moments["mean"].size))
    batch_mean, batch_var = jnp.mean(x, axis=axes), jnp.var(x, axis=axes)
    count = moments["count"] + n
    delta = batch_mean - moments["mean"]
    mean = moments["mean"] + delta * n / count
    m2 = moments["var"] * moments["count"] + batch_var * n + delta**2 * moments["count"] * n / count
    return {"mean": mean, "var": m2 / count, "count": count}


# ------------------------------------------------------------------------------------------------ reward scaling
@struct.dataclass
class RewardScaleState:
    discounted_return: jax.Array  # float32[num_envs], each env's running discounted return (reset where done)
    moments: dict  # running mean/var/count of the discounted returns (scalars)


@register_stage("reward_scale")
def reward_scale_stage(ctx: StageContext) -> Stage:
    gamma = float(ctx.config.ppo.gamma)  # the config's gamma: a sweep over gamma keeps the scale of its base value
    num_envs = ctx.config.env.num_envs

    def init(key):
        return RewardScaleState(discounted_return=jnp.zeros((num_envs,), jnp.float32),
                                moments={"mean": jnp.float32(0), "var": jnp.float32(1), "count": jnp.float32(1e-4)})

    def apply(key, train_state, batch, state: RewardScaleState):
        done = batch["terminated"] | batch["truncated"]

        def accumulate(g, step):
            reward, done_t = step
            g = gamma * g + reward
            return jnp.where(done_t, 0.0, g), g  # the return including this reward; reset after an episode end

        carried, returns = jax.lax.scan(accumulate, state.discounted_return, (batch["reward"], done))
        moments = merge_moments(state.moments, returns)
        scale = jnp.sqrt(moments["var"] + EPS)
        batch = {**batch, "reward": batch["reward"] / scale}
        metrics = {"reward_scale/std": scale, "reward_scale/scaled_reward_mean": jnp.mean(batch["reward"])}
        return train_state, batch, RewardScaleState(discounted_return=carried, moments=moments), metrics

    return Stage("reward_scale", apply, init, after="rollout",
                 partition=RewardScaleState(discounted_return=ENVS, moments=REPLICATED))


# ------------------------------------------------------------------------------------- observation normalisation
@register_stage("obs_norm")
def obs_norm_stage(ctx: StageContext) -> Stage:
    storage = storage_for(ctx.config.network.obs_dtype, ctx.env_spec)

    def apply(key, train_state, batch, state):
        params = train_state.params
        moments = merge_moments(params[OBS_NORM]["moments"], storage.from_storage(batch["obs"]))
        train_state = train_state.replace(params={**params, OBS_NORM: {"moments": moments}})
        metrics = {"obs_norm/mean_abs_mean": jnp.mean(jnp.abs(moments["mean"])),
                   "obs_norm/mean_std": jnp.mean(jnp.sqrt(moments["var"]))}
        return train_state, batch, state, metrics

    return Stage("obs_norm", apply, after="ppo_update")

