"""DTC as two pipeline stages, both after `rollout` (selected by `--agent dtc`):

    rollout -> world_model -> intrinsic_reward -> advantage -> ppo_update

* `world_model` owns the ensemble (stacked params + optimizer state), the replay ring buffer and the
  per-env filter state. Each update it filters the fresh rollout with the ensemble as it stands (score before
  learning) and writes each transition's raw clean novelty into the batch as `dtc_novelty` [T, N] (float32),
  then writes the rollout (with each transition's true next observation, `next_obs`) into replay and takes
  `dtc_wm_steps` gradient steps (from `dtc_replay_ratio`) on replayed sequences, each member on its own draws.
  With `--dtc-competence progress` it then scores the rollout again with the trained ensemble, from the same
  filter state, and writes that as `dtc_novelty_after` (what the update's learning left of each novelty).
* `intrinsic_reward` owns only float32 running statistics (novelty second moment, C_fast, C_slow,
  boredom). It reads `dtc_novelty` (and `dtc_novelty_after` where present) from the batch, normalises it,
  updates competence and boredom, and adds
  `dtc_intrinsic_coef * (novelty + competence term)` to `reward` (keeping the extrinsic reward as
  `dtc_extrinsic_reward`).

The two share nothing but the batch. Novelty is produced where the model lives, so no parameters travel
through the batch; the intrinsic side is model-free and could consume novelty from any other source.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import struct

from hephaestus.agents.dtc.options import DTC_STAGES
from hephaestus.config.registry import ConfigError
from hephaestus.core.networks import undeclared_structure
from hephaestus.agents.dtc import intrinsic as intr
from hephaestus.agents.dtc import replay as rp
from hephaestus.agents.dtc import rssm
from hephaestus.core.stages import ENVS, REPLICATED, Stage, StageContext, add_intrinsic, register_stage

# Batch keys the DTC stages add ([T, N] float32).
DTC_BATCH_KEYS = {
    "dtc_novelty": "raw clean novelty of the transition under the ensemble (world_model)",
    "dtc_novelty_after": "the same after this update's world-model steps (world_model, --dtc-competence progress)",
    "dtc_intrinsic_reward": "intrinsic reward added to `reward` (intrinsic_reward)",
    "dtc_extrinsic_reward": "the environment's reward before the intrinsic part was added (intrinsic_reward)",
}


@struct.dataclass
class WorldModelState:
    params: dict  # stacked: every leaf has a leading axis of K
    opt_state: object  # stacked likewise (one optimizer per member)
    replay: rp.Replay
    h: jax.Array  # float32[K, N, deter] filter state per member and env, carried across rollouts
    first: jax.Array  # bool[N] the next rollout's first observation starts an episode


def sizes_from(config, spec) -> rssm.RSSMSizes:
    """The world model's sizes for this config and env. ConfigError where --dtc-encoder ego meets an env whose
    observation does not declare a board around a player (EnvSpec.obs_cells and obs_board)."""
    ego_layout = None
    if config.stages.dtc.encoder == "ego":
        missing = undeclared_structure("ego", spec)  # the check of the network's --encoder ego
        if missing:
            raise ConfigError(f"--dtc-encoder ego needs an env whose observation is a board around a player "
                              f"(HackMatrix); {spec.name} declares no {missing}: use --dtc-encoder flat")
        ego_layout = tuple(spec.obs_cells) + tuple(spec.obs_board)
    return rssm.RSSMSizes(obs_dim=spec.obs_dim, action_dim=spec.action_dim, discrete=spec.discrete,
                          deter=config.stages.dtc.deter_dim, groups=config.stages.dtc.stoch_groups,
                          classes=config.stages.dtc.stoch_classes, hidden=config.stages.dtc.hidden_dim,
                          unimix=config.stages.dtc.unimix, dtype=config.network.dtype,
                          mask_dim=spec.action_dim if spec.discrete and spec.has_action_mask else 0,
                          prior_scale=config.stages.dtc.prior_scale, logvar_init=config.stages.dtc.logvar_init,
                          ego_layout=ego_layout, reward_bins=config.stages.dtc.reward_bins)


def make_wm_optimizer(config):
    return optax.chain(optax.clip_by_global_norm(config.stages.dtc.wm_grad_clip), optax.adam(config.stages.dtc.wm_lr, eps=1e-8))


def make_world_model(config, spec, score: bool = True):
    """(model, init(key) -> WorldModelState, train(key, state, batch) -> (state, novelty[T,N], metrics)).
    `score=False` (the dreamer, which needs no novelty of real transitions) skips filtering the fresh rollout:
    novelty is then zeros and the filter state `h` is left as it is. `train.sample(key, replay, B)` draws B replayed
    sequences [L, B] (with `first` flags) as the gradient steps do (B = --dtc-wm-batch)."""
    sizes = sizes_from(config, spec)
    model = rssm.RSSM(sizes)
    k, n, seq_len = config.stages.dtc.ensemble_size, config.env.num_envs, config.stages.dtc.seq_len
    tx = make_wm_optimizer(config)
    action_shape = () if spec.discrete else (spec.action_dim,)
    action_dtype = jnp.int32 if spec.discrete else jnp.float32
    example = {"obs": jax.ShapeDtypeStruct((seq_len, spec.obs_dim), jnp.float32),
               "next_obs": jax.ShapeDtypeStruct((seq_len, spec.obs_dim), jnp.float32),
               "action": jax.ShapeDtypeStruct((seq_len,) + action_shape, action_dtype),
               "reward": jax.ShapeDtypeStruct((seq_len,), jnp.float32),
               "terminated": jax.ShapeDtypeStruct((seq_len,), jnp.bool_),
               "done": jax.ShapeDtypeStruct((seq_len,), jnp.bool_)}
    if sizes.mask_dim:  # the mask of each obs, for the mask head
        example["action_mask"] = jax.ShapeDtypeStruct((seq_len, sizes.mask_dim), jnp.bool_)
    wm_steps = config.stages.dtc.wm_steps(config.batch_size)

    def init(key):
        params = rssm.init_ensemble(model, key, k)
        return WorldModelState(params=params, opt_state=jax.vmap(tx.init)(params),
                               replay=rp.replay_init(config.stages.dtc.replay_capacity, example),
                               h=jnp.zeros((k, n, sizes.deter), jnp.float32), first=jnp.ones((n,), bool))

    def member_update(params, opt_state, seq, key):
        grad_fn = jax.value_and_grad(
            lambda p: rssm.member_loss(model, p, seq, key, config.stages.dtc.free_bits, config.stages.dtc.kl_dyn,
                                       config.stages.dtc.kl_rep, config.stages.dtc.head_loss_scale,
                                       config.stages.dtc.recon_loss), has_aux=True)
        (_, stats), grads = grad_fn(params)
        stats["wm/grad_norm"] = optax.tree.norm(grads)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, stats

    def sample(key, replay, batch_size=config.stages.dtc.wm_batch):
        return rp.with_first_flags(rp.replay_sample(key, replay, batch_size, config.stages.dtc.frontier_fraction,
                                                    config.stages.dtc.frontier_window, config.stages.dtc.reward_fraction,
                                                    config.stages.dtc.reward_power))

    def novelty_under(params, key, state: WorldModelState, batch):
        """The fresh rollout's clean novelty [T, N] under ensemble `params`, filtered from `state`'s carried filter
        state and episode starts; with the members' final filter states and the novelty's parts (metrics)."""
        done = jnp.logical_or(batch["terminated"], batch["truncated"])
        first = jnp.concatenate([state.first[None], done[:-1]], 0)
        return ensemble_novelty(model, params, batch["obs"], batch["action"], first, state.h, key,
                                config.stages.dtc.aleatoric_weight, config.stages.dtc.novelty_signal, batch["next_obs"])

    def train(key, state: WorldModelState, batch):
        done = jnp.logical_or(batch["terminated"], batch["truncated"])
        key_train, key_nov = jax.random.split(key)
        # Score before learning (as RND does): each fresh transition's novelty comes from the ensemble as it was
        # before it trained on that transition, so a state's first visit pays more than its tenth.
        if score:
            novelty, h_last, parts = novelty_under(state.params, key_nov, state, batch)
        else:
            novelty, h_last, parts = jnp.zeros(done.shape, jnp.float32), state.h, {}
        fresh = {"obs": batch["obs"], "next_obs": batch["next_obs"], "action": batch["action"],
                 "reward": batch["reward"], "terminated": batch["terminated"], "done": done}
        if sizes.mask_dim:
            fresh["action_mask"] = batch["action_mask"]
        replay = rp.replay_add(state.replay, rp.to_sequences(fresh, seq_len))

        def grad_step(carry, step_key):
            params, opt_state = carry
            key_sample, key_members = jax.random.split(step_key)
            member_keys = jax.random.split(key_members, k)
            if config.stages.dtc.bootstrap:  # each member its own draws: members see different data (bootstrap)
                seqs = jax.vmap(sample, in_axes=(0, None))(jax.random.split(key_sample, k), replay)
                params, opt_state, stats = jax.vmap(member_update)(params, opt_state, seqs, member_keys)
            else:
                params, opt_state, stats = jax.vmap(member_update, in_axes=(0, 0, None, 0))(
                    params, opt_state, sample(key_sample, replay), member_keys)
            return (params, opt_state), jax.tree.map(jnp.mean, stats)

        (params, opt_state), stats = jax.lax.scan(grad_step, (state.params, state.opt_state),
                                                  jax.random.split(key_train, max(wm_steps, 1)))
        if wm_steps == 0:  # novelty only (frozen model), e.g. for measuring
            params, opt_state = state.params, state.opt_state
        metrics = jax.tree.map(jnp.mean, stats)
        metrics.update({**parts, "wm/replay_count": replay.count.astype(jnp.float32),
                        "wm/steps": jnp.float32(wm_steps)})
        if score:
            metrics["dtc/novelty_raw"] = jnp.mean(novelty)
        state = WorldModelState(params=params, opt_state=opt_state, replay=replay, h=h_last, first=done[-1])
        return state, novelty, metrics

    train.sample = sample
    train.novelty_under = novelty_under
    return model, init, train


def ensemble_novelty(model, params, obs, action, first, h0, key, aleatoric_weight=1.0, signal="disagreement",
                     next_obs=None):
    """Clean novelty of every transition [T, N] (rssm.clean_novelty, or rssm.clean_surprise against `next_obs`
    for signal "surprise"), the members' final filter states [K, N, deter] and the mean disagreement and aleatoric
    variance (metrics)."""
    k = h0.shape[0]

    def member(p, h, key):
        out, h_last = rssm.observe(model, p, obs, action, first, h, key, sample=False)
        mean, var = rssm.predict_next(model, p, out, obs, action)
        return mean, var, h_last

    means, variances, h_last = jax.vmap(member)(params, h0, jax.random.split(key, k))
    parts = {"dtc/disagreement": jnp.mean(jnp.var(means, axis=0)), "dtc/aleatoric": jnp.mean(variances)}
    if signal == "surprise":
        return rssm.clean_surprise(means, variances, rssm.symlog(next_obs), aleatoric_weight), h_last, parts
    return rssm.clean_novelty(means, variances, aleatoric_weight=aleatoric_weight), h_last, parts


@register_stage("world_model")
def world_model_stage(ctx: StageContext) -> Stage:
    _, init, train = make_world_model(ctx.config, ctx.env_spec)
    progress = ctx.config.stages.dtc.competence == "progress"

    def apply(key, train_state, batch, state):
        if progress:  # a key of its own for the second scoring (the global mode's draws stay as they were)
            key, key_after = jax.random.split(key)
        new_state, novelty, metrics = train(key, state, batch)
        batch = {**batch, "dtc_novelty": novelty}
        if progress:  # what this update's learning left of each transition's novelty: local competence
            batch["dtc_novelty_after"] = train.novelty_under(new_state.params, key_after, state, batch)[0]
            metrics["dtc/novelty_after"] = jnp.mean(batch["dtc_novelty_after"])
        return train_state, batch, new_state, metrics

    # Model, optimizer and replay whole on every device (the replay's capacity may equal num_envs: it is still
    # one buffer); the per-env episode-start flags follow their envs. h [K, N, deter] has its env axis second and
    # stays replicated.
    partition = WorldModelState(params=REPLICATED, opt_state=REPLICATED, replay=REPLICATED, h=REPLICATED, first=ENVS)
    return Stage(name="world_model", apply=apply, init=init, after="rollout", reads=("next_obs",), partition=partition)


@register_stage("intrinsic_reward")
def intrinsic_reward_stage(ctx: StageContext) -> Stage:
    config = ctx.config
    stages = tuple(config.extra_stages)
    if "world_model" not in stages or stages.index("world_model") > stages.index("intrinsic_reward"):
        raise ValueError("stage 'intrinsic_reward' reads the batch's dtc_novelty: put 'world_model' before it "
                         f"(--agent dtc selects {','.join(DTC_STAGES)})")

    def apply(key, train_state, batch, state: intr.IntrinsicState):
        state, n, competence, bonus = intr.novelty_bonus(state, batch["dtc_novelty"], config.stages.dtc.intrinsic_coef,
                                                         config.stages.dtc, batch.get("dtc_novelty_after"))
        extrinsic = batch["reward"]
        abs_int, abs_ext = jnp.sum(jnp.abs(bonus)), jnp.sum(jnp.abs(extrinsic))
        metrics = {"dtc/novelty": jnp.mean(n), "dtc/c_fast": state.c_fast, "dtc/c_slow": state.c_slow,
                   "dtc/competence": competence, "dtc/boredom": state.boredom,
                   "dtc/dream_horizon": intr.dream_horizon(state.boredom, config.stages.dtc.min_horizon,
                                                           config.stages.dtc.max_horizon),
                   "dtc/intrinsic_reward": jnp.mean(bonus),
                   "dtc/intrinsic_share": abs_int / jnp.maximum(abs_int + abs_ext, 1e-8)}
        batch = {**batch, "reward": extrinsic + bonus, "intrinsic_reward": add_intrinsic(batch, bonus),
                 "dtc_intrinsic_reward": bonus,
                 "dtc_extrinsic_reward": extrinsic}
        return train_state, batch, state, metrics

    return Stage(name="intrinsic_reward", apply=apply, init=lambda key: intr.intrinsic_init(), after="rollout")
