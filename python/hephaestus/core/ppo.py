"""PPO, fully jitted: `make_train(config)` -> initial runner state + `train_chunk(runner_state)`.

Read top to bottom: `PPOContext` (what every function reads besides its arguments), the rollout stage (a `lax.scan`
over `num_steps` of vectorised env steps), the advantage stage (GAE, a reverse `lax.scan`), the PPO loss and update
stage (`update_epochs` x `num_minibatches` scans over a fresh shuffle of indices each epoch), `one_update`, which
threads one batch through the stage list, `chunk`, which scans `log_interval` updates, and `make_train`, which builds
the context and the stage list. The stage functions are module-level and pure over the context, so each can be
called and tested on its own; extra stages (stages.py) slot in between without touching this file. No host
callbacks: metrics come back as arrays and the Python loop logs them.

--recurrent: the rollout state also holds each env's policy carry and whether its next observation starts an
episode; the batch stores those flags (`first`) and each env's carry at the rollout's start (`carry0`), and the
update's minibatches are whole env sequences (`to_sequences`, `sequence_minibatch`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax import struct

from hephaestus.core import rollout_metrics
from hephaestus.envs import episode_stats
from hephaestus.core import networks as nets
from hephaestus.config.train_config import ConfigError, TrainConfig, env_params_of, has_teacher, resolve_for_env
from hephaestus.core.distributed import Sharder, mesh_for
from hephaestus.envs.adapters import AdaptedEnv
from hephaestus.envs.registry import make_env, make_training_env
from hephaestus.core.obs_storage import ObsStorage, storage_for
from hephaestus.core.stored_programs import ProgramStore
from hephaestus.core.runner_state import (SEED_AXES, RunnerState, fresh_agent, fresh_agents, initial_hyper,  # noqa: F401
                                     make_optimizer, strongly_typed, with_optimizer_hyperparams)
from hephaestus.core.stages import ENVS, REPLICATED, Stage, StageContext, build_pipeline, extra_stages
from hephaestus.core.trainer import Trainer

# Per-update metrics every run returns (stages add their own keys).
CORE_METRICS = ("mean_episode_return", "mean_episode_length", "num_episodes", "entropy", "approx_kl",
                "clip_frac", "pg_loss", "vf_loss", "total_loss", "explained_variance", "grad_norm",
                "learning_rate", "ent_coef", "fully_masked_rows")


@dataclass(frozen=True)
class PPOContext:
    """Everything the PPO functions read besides their arguments, fixed when the program is built. The loss and
    the update need only the network and the sizes; the rollout also needs the env fields."""

    network: Any  # the actor-critic (networks.py)
    num_envs: int
    num_steps: int
    num_minibatches: int = 1
    update_epochs: int = 1
    normalize_advantages: bool = True
    clip_value_loss: bool = True
    anneal_lr: bool = False
    log_interval: int = 1
    num_seeds: int = 1
    hyper: dict = field(default_factory=dict)  # the config's data hyperparameters: stages called without `hyper`
    storage: ObsStorage = ObsStorage("float32")  # how the batch stores observations (obs_storage.py)
    shard: Sharder | None = None  # None: one device
    env: AdaptedEnv | None = None  # the rollout's env, and its reset and step vmapped over envs and jitted
    v_reset: Callable | None = None
    v_step: Callable | None = None
    stats: tuple = ()  # declared per-episode statistics (EnvSpec.episode_stats, episode_stats.py)
    # The env step's info["reward_terms"] keys -> reward/<key> metrics: read from the step's output shapes when the
    # rollout is first traced (rollout_metrics.reward_terms), not before, so a start whose chunk is read back from
    # its stored export (stored_programs.py) never traces the step. A tuple where the caller knows them.
    reward_terms_probe: Callable[[], tuple[str, ...]] | tuple[str, ...] = ()
    action_groups: tuple = ()  # (name, lo, hi) ranges of discrete actions -> actions/<name>_frac metrics
    store_next_obs: bool = False  # an extra stage reads batch["next_obs"]
    # --teacher: the env's scripted policy `(env_state, action_mask, key) -> action` (AdaptedEnv.scripted_policies).
    # The rollout stores its action for every state (batch["teacher_action"]) and the loss adds the cross-entropy
    # from it, weighted by the annealed hyper["teacher_coef"] (kickstarting). None: no teacher, nothing computed.
    teacher: Callable | None = None

    @cached_property
    def reward_terms(self) -> tuple[str, ...]:
        probe = self.reward_terms_probe
        return tuple(probe() if callable(probe) else probe)

    def __post_init__(self):
        if self.shard is None:
            object.__setattr__(self, "shard", Sharder(None, self.num_envs, self.num_steps))

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps


# ---------------------------------------------------------------------------------------------
# Stage 1: rollout. Each stored transition pairs the observation the action was chosen from with that action, its
# log-probability and value; the env's auto-reset observation goes to the *next* transition, and the pre-reset
# final observation is only used for the truncation bootstrap.


@struct.dataclass
class RolloutState:
    env_state: Any
    obs: jax.Array  # [N, obs_dim] observation the next action is chosen from
    action_mask: jax.Array  # [N, A]
    episode_return: jax.Array  # [N] running return of the episode in progress
    episode_length: jax.Array  # [N]
    last_mean_return: jax.Array  # [] carried so an update where no episode ends still reports a value
    last_mean_length: jax.Array  # []
    episode_stats: dict  # stat name -> [N] running value of the episode in progress (EnvSpec.episode_stats)
    # --recurrent: the policy's state before `obs` [N, carry_dim], and whether `obs` starts an episode [N] (the
    # previous step's done: the policy resets its state there). None for a feed-forward policy, so its runner
    # state, checkpoints and programs are what they were without the option.
    carry: Any = None
    first: Any = None


# How the rollout state is laid out over devices (Stage.partition): per-env leaves follow their envs.
ROLLOUT_PARTITION = RolloutState(env_state=ENVS, obs=ENVS, action_mask=ENVS, episode_return=ENVS,
                                 episode_length=ENVS, last_mean_return=REPLICATED, last_mean_length=REPLICATED,
                                 episode_stats=ENVS, carry=ENVS, first=ENVS)


def rollout_init(ctx: PPOContext, key) -> RolloutState:
    env_state, first = ctx.v_reset(jax.random.split(key, ctx.num_envs))
    if ctx.env.init_instance is not None:  # e.g. DeepSea: one action map per run, drawn from the run's key
        env_state = ctx.env.init_instance(jax.random.fold_in(key, 1), env_state)
    zeros, scalar = jnp.zeros((ctx.num_envs,), jnp.float32), jnp.float32(0.0)
    recurrent = nets.is_recurrent(ctx.network)
    return RolloutState(env_state=env_state, obs=first.obs, action_mask=first.action_mask, episode_return=zeros,
                        episode_length=zeros.astype(jnp.int32), last_mean_return=scalar, last_mean_length=scalar,
                        episode_stats=episode_stats.zeros(ctx.stats, zeros.shape, jnp),
                        carry=nets.initial_carry(ctx.network, (ctx.num_envs,)),
                        first=jnp.ones((ctx.num_envs,), bool) if recurrent else None)


def final_value(network, params, carry, final_obs):
    """The critic's value of the observation an episode was truncated on: for a recurrent policy, seen after the
    carry of the episode's last step."""
    if nets.is_recurrent(network):
        return network.apply(params, carry, final_obs, method="value_step")
    return network.apply(params, final_obs, method="value")


def rollout_apply(ctx: PPOContext, key, train_state, batch, rs: RolloutState):
    network, storage, shard, params = ctx.network, ctx.storage, ctx.shard, train_state.params
    recurrent = nets.is_recurrent(network)
    carry0 = rs.carry  # --recurrent: each env's sequence starts from this state (the PPO update replays from it)

    def env_step(carry, step_key):
        rs, sums = carry
        key_act, key_env = jax.random.split(step_key)
        # The policy acts on the observation as the batch stores it (identical for exact storage), so the
        # stored log-probabilities and values are those of the stored observations.
        stored_obs = storage.to_storage(rs.obs)
        policy_carry, (env_action, action, log_prob, value) = nets.act_carried(
            network, params, rs.carry, storage.from_storage(stored_obs), rs.first, rs.action_mask, key_act,
            greedy=False)
        env_state, step = ctx.v_step(shard.constrain_envs(jax.random.split(key_env, ctx.num_envs)), rs.env_state,
                                     env_action)
        # Truncated episodes bootstrap from the critic's value of the observation they ended on. The critic
        # pass runs only on steps where some env truncated (a real branch: not under vmap, where it runs on every
        # step), and never for an env that cannot truncate (EnvSpec.may_truncate).
        if ctx.env is not None and not ctx.env.spec.may_truncate:
            bootstrap = jnp.zeros((ctx.num_envs,), jnp.float32)
        else:
            bootstrap = jax.lax.cond(
                jnp.any(step.truncated),
                lambda: jnp.where(step.truncated, final_value(network, params, policy_carry, step.final_obs), 0.0),
                lambda: jnp.zeros((ctx.num_envs,), jnp.float32))
        done = jnp.logical_or(step.terminated, step.truncated)
        ep_return, ep_length = rs.episode_return + step.reward, rs.episode_length + 1
        ep_stats = episode_stats.accumulate(ctx.stats, rs.episode_stats, step.info.get("episode_stats", {}), jnp)
        sums = rollout_metrics.add_step(sums, ctx.stats, ctx.action_groups, done, ep_return, ep_length, ep_stats,
                                        step.info.get("reward_terms", {}), rs.action_mask, action,
                                        step.info.get("curriculum_start"))
        transition = {"obs": stored_obs, "action_mask": rs.action_mask, "action": action, "log_prob": log_prob,
                      "value": value, "reward": step.reward, "terminated": step.terminated,
                      "truncated": step.truncated, "bootstrap_value": bootstrap}
        if ctx.teacher is not None:  # what the scripted teacher would do in the state the action was chosen in
            key_teacher = jax.random.fold_in(step_key, 2)  # a stream of its own: the other keys stay as without it
            transition["teacher_action"] = jax.vmap(ctx.teacher)(
                rs.env_state, rs.action_mask, jax.random.split(key_teacher, ctx.num_envs)).astype(jnp.int32)
        if ctx.store_next_obs:  # the pre-reset observation the action led to (episode ends included)
            transition["next_obs"] = step.final_obs.astype(jnp.float32)
        if recurrent:  # where the policy reset its state: the update replays the sequence with the same resets
            transition["first"] = rs.first
        rs = rs.replace(env_state=env_state, obs=step.obs, action_mask=step.action_mask,
                        episode_return=jnp.where(done, 0.0, ep_return), episode_length=jnp.where(done, 0, ep_length),
                        episode_stats={k: jnp.where(done, 0.0, v) for k, v in ep_stats.items()},
                        carry=policy_carry, first=done if recurrent else None)
        return (shard.constrain_state("rollout", rs), sums), shard.constrain_envs(transition)

    sums = rollout_metrics.zero_sums(ctx.stats, ctx.reward_terms, ctx.action_groups)
    (rs, sums), batch = jax.lax.scan(env_step, (shard.constrain_state("rollout", rs), sums),
                                     jax.random.split(key, ctx.num_steps))
    if recurrent:
        _, (_, batch["last_value"]) = network.apply(params, rs.carry, rs.obs, rs.first, method="step")
        batch["carry0"] = carry0  # [N, carry_dim]
    else:
        batch["last_value"] = network.apply(params, rs.obs, method="value")
    if ctx.store_next_obs:  # the observation the next rollout starts from (intrinsic_critic's last next state)
        batch["last_obs"] = rs.obs.astype(jnp.float32)
    metrics = rollout_metrics.to_metrics(sums, rs.last_mean_return, rs.last_mean_length, ctx.batch_size)
    if ctx.teacher is not None:  # how often the sampled policy already does what the teacher would
        metrics["teacher_agreement"] = jnp.mean((batch["action"] == batch["teacher_action"]).astype(jnp.float32))
    rs = rs.replace(last_mean_return=metrics["mean_episode_return"], last_mean_length=metrics["mean_episode_length"])
    return train_state, shard.constrain_batch(batch), rs, metrics


# ---------------------------------------------------------------------------------------------
# Stage 2: advantage (GAE). The trace is cut at every episode end; the next value is the bootstrap value on
# truncation and zero on termination. This stage and the update read the data hyperparameters from `hyper`:
# one_update passes the agent's RunnerState.hyper (traced, per seed); called on their own they use ctx.hyper.


def gae(reward, value, next_value, terminated, done, gamma, gae_lambda):
    """Generalised advantage estimation over [T, ...] arrays, as a reverse scan.

    delta_t = r_t + gamma * next_value_t * (1 - terminated_t) - value_t
    A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}
    """

    def backward(carry, x):
        r, v, nv, term, d = x
        delta = r + gamma * nv * (1.0 - term) - v
        carry = delta + gamma * gae_lambda * (1.0 - d) * carry
        return carry, carry

    xs = (reward, value, next_value, terminated.astype(jnp.float32), done.astype(jnp.float32))
    _, advantage = jax.lax.scan(backward, jnp.zeros_like(value[0]), xs, reverse=True)
    return advantage


def advantage_apply(ctx: PPOContext, key, train_state, batch, state, hyper=None):
    hyper = ctx.hyper if hyper is None else hyper
    done = jnp.logical_or(batch["terminated"], batch["truncated"])
    next_value = jnp.concatenate([batch["value"][1:], batch["last_value"][None]], axis=0)
    next_value = jnp.where(done, batch["bootstrap_value"], next_value)
    advantage = gae(batch["reward"], batch["value"], next_value, batch["terminated"], done, hyper["gamma"],
                    hyper["gae_lambda"])
    target = advantage + batch["value"]
    ev = 1.0 - jnp.var(target - batch["value"]) / jnp.maximum(jnp.var(target), 1e-8)  # explained variance
    if "intrinsic_advantage" in batch:  # intrinsic_critic: the bonus's own (non-episodic) advantage joins the policy's
        advantage = advantage + batch["intrinsic_advantage"]
    return train_state, {**batch, "advantage": advantage, "target": target}, state, {"explained_variance": ev}


# ---------------------------------------------------------------------------------------------
# Stage 3: PPO update, one code path for 1..D devices. The batch is viewed as [D, T * N/D] rows (device d holds
# envs d*N/D..); each epoch every row gets its own permutation of *indices* and minibatch i takes slice i of every
# row, so env data never moves between devices and the batch is never copied whole. The loss is the mean over the
# global minibatch, so its gradient is the mean of the per-device gradients (one all-reduce per minibatch).
# Observations stay in their storage dtype until a minibatch is gathered; losses and reductions are float32.

TRAIN_KEYS = ("obs", "action_mask", "action", "log_prob", "value", "advantage", "target")
TEACHER_KEYS = ("teacher_action",)  # with --teacher


def ppo_loss(ctx: PPOContext, params, mb, hyper):
    """Clipped-surrogate PPO loss of one minibatch -> (total, stats); with a teacher, plus hyper["teacher_coef"]
    times the cross-entropy from the teacher's actions."""
    if "carry0" in mb:  # --recurrent: whole sequences [T, B, ...], the cell replayed from each one's stored state
        scored = nets.evaluate_sequences(ctx.network, params, mb["carry0"], mb["obs"], mb["first"], mb["action_mask"],
                                         mb["action"], mb.get("teacher_action"))
    else:
        scored = nets.evaluate(ctx.network, params, mb["obs"], mb["action_mask"], mb["action"],
                               mb.get("teacher_action"))
    log_prob, entropy, value = scored[:3]
    log_ratio = log_prob - mb["log_prob"]
    ratio = jnp.exp(log_ratio)
    adv = mb["advantage"]
    if ctx.normalize_advantages:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    clip_eps = hyper["clip_eps"]
    pg_loss = -jnp.mean(jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv))
    if ctx.clip_value_loss:
        value_clipped = mb["value"] + jnp.clip(value - mb["value"], -clip_eps, clip_eps)
        vf_loss = 0.5 * jnp.mean(jnp.maximum((value - mb["target"]) ** 2, (value_clipped - mb["target"]) ** 2))
    else:
        vf_loss = 0.5 * jnp.mean((value - mb["target"]) ** 2)
    entropy = jnp.mean(entropy)
    total = pg_loss + hyper["vf_coef"] * vf_loss - hyper["ent_coef"] * entropy
    stats = {"pg_loss": pg_loss, "vf_loss": vf_loss, "entropy": entropy,
             "approx_kl": jnp.mean((ratio - 1.0) - log_ratio),
             "clip_frac": jnp.mean((jnp.abs(ratio - 1.0) > clip_eps).astype(jnp.float32))}
    if "teacher_action" in mb:
        stats["teacher_xent"] = -jnp.mean(scored[3])
        total = total + hyper["teacher_coef"] * stats["teacher_xent"]
    stats["total_loss"] = total
    return total, stats


def to_rows(ctx: PPOContext, x):
    """[T, N, ...] -> [D, T * N/D, ...]: row d holds device d's envs, step-major."""
    d = ctx.shard.num_devices
    x = x.reshape((ctx.num_steps, d, ctx.num_envs // d) + x.shape[2:])
    return ctx.shard.constrain(jnp.swapaxes(x, 0, 1).reshape((d, ctx.batch_size // d) + x.shape[3:]), "data")


def epoch_order(ctx: PPOContext, key, rows: int | None = None):
    """One epoch's minibatch indices, int32[num_minibatches, D, rows / num_minibatches]: each row shuffled on its own
    (a per-row sort, local to its device). One row takes the same numbers from a 1-D shuffle: a faster program (the
    [1, rows] sort cost 1.7x per chunk at 4 CartPole envs on CPU), and the flat one-device update's stream.
    `rows`: entries per row (default: the row's transitions; --recurrent: its envs)."""
    d = ctx.shard.num_devices
    rows = ctx.batch_size // d if rows is None else rows
    order = (jax.random.permutation(key, rows)[None] if d == 1 else jax.random.permutation(  # [D, rows]
        key, ctx.shard.constrain(jnp.broadcast_to(jnp.arange(rows), (d, rows)), "data"), axis=1, independent=True))
    order = order.reshape(d, ctx.num_minibatches, rows // ctx.num_minibatches).swapaxes(0, 1)
    return ctx.shard.constrain(order, None, "data")


def minibatch(ctx: PPOContext, rowed, idx):
    """Gather the rows' entries `idx` [D, minibatch/D] (row-local) -> one minibatch [minibatch, ...]."""
    mb = jax.tree.map(lambda x: jax.vmap(lambda r, i: jnp.take(r, i, axis=0))(x, idx), rowed)
    mb = jax.tree.map(lambda x: ctx.shard.constrain(x.reshape((-1,) + x.shape[2:]), "data"),
                      ctx.shard.constrain(mb, "data"))
    return {**mb, "obs": ctx.storage.from_gather(mb["obs"])}


# --recurrent: a minibatch is whole env sequences. The batch is viewed as [D, N/D envs, T, ...] (each env's steps
# in time order) and each epoch shuffles the envs of every row, as PureJaxRL's ppo_rnn does; the loss replays the
# cell over each sequence from the state it started the rollout with (batch["carry0"]), resetting where it did.
SEQUENCE_KEYS = ("first",)


def to_sequences(ctx: PPOContext, x):
    """[T, N, ...] -> [D, N/D, T, ...]: row d holds device d's envs, each a sequence in time order."""
    d = ctx.shard.num_devices
    x = x.reshape((ctx.num_steps, d, ctx.num_envs // d) + x.shape[2:])
    return ctx.shard.constrain(jnp.moveaxis(x, 0, 2), "data")


def carries_to_rows(ctx: PPOContext, carry):
    """The rollout's initial carries [N, carry_dim] -> [D, N/D, carry_dim], beside `to_sequences`' envs."""
    d = ctx.shard.num_devices
    return ctx.shard.constrain(carry.reshape((d, ctx.num_envs // d) + carry.shape[1:]), "data")


def sequence_minibatch(ctx: PPOContext, seqs, idx):
    """Gather the rows' envs `idx` [D, envs/D] (row-local) -> one minibatch of sequences [T, B, ...] (carry0:
    [B, carry_dim])."""
    mb = jax.tree.map(lambda x: jax.vmap(lambda r, i: jnp.take(r, i, axis=0))(x, idx), seqs)
    mb = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), mb)  # [B, T, ...] and [B, carry_dim]
    mb = {k: (v if k == "carry0" else ctx.shard.constrain(jnp.swapaxes(v, 0, 1), None, "data")) for k, v in mb.items()}
    return {**mb, "carry0": ctx.shard.constrain(mb["carry0"], "data"), "obs": ctx.storage.from_gather(mb["obs"])}


def ppo_update_apply(ctx: PPOContext, key, train_state, batch, state, hyper=None):
    hyper = ctx.hyper if hyper is None else hyper
    grad_fn = jax.value_and_grad(partial(ppo_loss, ctx), has_aux=True)
    if nets.is_recurrent(ctx.network):
        keys = TRAIN_KEYS + TEACHER_KEYS + SEQUENCE_KEYS
        data = {k: to_sequences(ctx, batch[k]) for k in keys if k in batch}
        data["carry0"] = carries_to_rows(ctx, batch["carry0"])
        gather = partial(sequence_minibatch, ctx)
        order = partial(epoch_order, ctx, rows=ctx.num_envs // ctx.shard.num_devices)
    else:
        data = {k: to_rows(ctx, batch[k]) for k in TRAIN_KEYS + TEACHER_KEYS if k in batch}
        gather, order = partial(minibatch, ctx), partial(epoch_order, ctx)
    data["obs"] = ctx.storage.to_gather(data["obs"])

    def minibatch_step(train_state, idx):
        (_, stats), grads = grad_fn(train_state.params, gather(data, idx), hyper)
        grads = ctx.shard.replicate(grads)
        stats["grad_norm"] = optax.tree.norm(grads)
        return train_state.apply_gradients(grads=grads), stats

    epoch = lambda train_state, epoch_key: jax.lax.scan(minibatch_step, train_state, order(epoch_key))
    train_state, stats = jax.lax.scan(epoch, train_state, jax.random.split(key, ctx.update_epochs))
    return train_state, batch, state, jax.tree.map(jnp.mean, stats)


# ---------------------------------------------------------------------------------------------
# One update threads a batch through the stages; a chunk scans `log_interval` of them.


def one_update(ctx: PPOContext, pipeline: list[Stage], runner: RunnerState, _=None):
    key, *stage_keys = jax.random.split(runner.key, len(pipeline) + 1)
    hyper, lr = runner.hyper, runner.hyper["lr"]
    progress = runner.update_step.astype(jnp.float32) / hyper["num_updates"]  # 0 at the first update
    if ctx.anneal_lr:
        lr = lr * jnp.maximum(1.0 - progress, 0.0)
    # The entropy bonus moves linearly from ent_coef to ent_coef_final (equal unless --ent-coef-final is given).
    ent_coef = hyper["ent_coef"] + (hyper["ent_coef_final"] - hyper["ent_coef"]) * jnp.minimum(progress, 1.0)
    hyper = {**hyper, "ent_coef": ent_coef}
    train_state = with_optimizer_hyperparams(runner.train_state, lr, hyper["max_grad_norm"])
    batch, stage_states, metrics = None, dict(runner.stages), {"learning_rate": lr, "ent_coef": ent_coef}
    if ctx.teacher is not None:  # --teacher: its weight falls linearly to 0 over the first teacher_fraction
        hyper["teacher_coef"] = hyper["teacher_coef"] * jnp.maximum(1.0 - progress / hyper["teacher_fraction"], 0.0)
        metrics["teacher_coef"] = hyper["teacher_coef"]
    for stage, stage_key in zip(pipeline, stage_keys):
        data = {"hyper": hyper} if stage.takes_hyper else {}
        train_state, batch, stage_states[stage.name], stage_metrics = stage.apply(
            stage_key, train_state, batch, stage_states[stage.name], **data)
        batch = ctx.shard.constrain_batch(batch)  # keep every stage's output split over envs
        metrics.update(stage_metrics)
    return runner.replace(train_state=train_state, stages=stage_states, key=key,
                          update_step=runner.update_step + 1), metrics


def chunk(ctx: PPOContext, pipeline: list[Stage], runner: RunnerState, num_updates: jax.Array):
    """`log_interval` scan slots; slots past `num_updates` are skipped by a real branch, so a final, shorter
    chunk reuses the same compiled program instead of compiling another."""
    # Through jit, the update is traced once: eval_shape caches the trace the cond below reuses (tracing the
    # HackMatrix step takes seconds). The inner jit is inlined into the chunk's program.
    update = partial(one_update, ctx, pipeline)
    update = jax.jit(update if ctx.num_seeds == 1 else jax.vmap(update, (SEED_AXES, None), (SEED_AXES, 0)))
    metric_shapes = jax.eval_shape(update, runner, None)[1]

    def maybe_update(runner, slot):
        skip = lambda r: (r, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), metric_shapes))
        return jax.lax.cond(slot < num_updates, lambda r: update(r, None), skip, runner)

    runner, metrics = jax.lax.scan(maybe_update, ctx.shard.constrain_runner(runner), jnp.arange(ctx.log_interval))
    # Pin the output layout to the input's, so the next chunk reuses this program; metrics replicated so every
    # host can read them.
    return ctx.shard.constrain_runner(runner), ctx.shard.replicate(metrics)


# ---------------------------------------------------------------------------------------------
# Building it: the context, the stage list, the compiled chunk and the fresh agents.

def teacher_policy(config: TrainConfig, env: AdaptedEnv) -> Callable | None:
    """--teacher's scripted policy from the env (AdaptedEnv.scripted_policies), or None without one. ConfigError
    (one line) for a name the env does not have."""
    if not has_teacher(config):
        return None
    try:
        return env.scripted_policy(config.ppo.teacher)
    except ValueError as err:
        raise ConfigError(f"--teacher {config.ppo.teacher}: {err}") from None


def make_train(config: TrainConfig, env: AdaptedEnv | None = None, compile_ahead: bool = False,
               store_programs_in: str | None = None) -> Trainer:
    """The run's compiled pieces and its fresh state. `store_programs_in`: a directory (train.py passes the
    compilation cache's) where the chunk and the fresh-agent program are exported and read back by later starts
    (stored_programs.py).
    `compile_ahead`: start compiling the chunk (for the fresh
    state's shapes, in a background thread) before building that state; `loop.run` picks it up."""
    # Devices first: an indivisible --num-envs is a one-line error before anything is built or compiled.
    mesh = mesh_for(config)
    num_envs, num_seeds = config.env.num_envs, config.run.num_seeds
    env = env or make_training_env(config.env)
    eval_env = make_env(config.env.name) if env_params_of(config.env) else env  # evaluations play the defaults
    config, spec = resolve_for_env(config, env.spec), env.spec  # settles the encoder and observation storage
    network = nets.make_network(spec, config)  # raises ConfigError for --encoder cells on an env without cells
    extras = extra_stages(StageContext(config=config, env_spec=spec, network=network))
    shard = Sharder(mesh, num_envs, config.env.num_steps, num_seeds=num_seeds,
                    partitions={"rollout": ROLLOUT_PARTITION, **{s.name: s.partition for s in extras}})
    # Both jitted, so each is traced once (the reward-term probe's trace is reused; a HackMatrix step takes seconds
    # to trace). Run op by op, a HackMatrix reset took 29 s of eager dispatch at start-up; compiled whole, 4 s.
    v_reset = jax.jit(jax.vmap(env.reset))
    v_step = jax.jit(shard.per_device(jax.vmap(env.step)))  # with several devices: each steps its own envs
    ctx = PPOContext(
        network=network, num_envs=num_envs, num_steps=config.env.num_steps, num_minibatches=config.ppo.num_minibatches,
        update_epochs=config.ppo.update_epochs, normalize_advantages=config.ppo.normalize_advantages,
        clip_value_loss=config.ppo.clip_value_loss, anneal_lr=config.ppo.anneal_lr, log_interval=config.run.log_interval,
        num_seeds=num_seeds, hyper=initial_hyper(config),
        # How the rollout buffer stores observations (--obs-dtype, obs_storage.py): the batch's largest array.
        storage=storage_for(config.network.obs_dtype, spec), shard=shard, env=env, v_reset=v_reset,
        v_step=v_step, stats=spec.episode_stats,
        reward_terms_probe=partial(rollout_metrics.reward_terms, v_reset, v_step, spec, num_envs),
        # Named action ranges (EnvSpec.action_groups, e.g. HackMatrix move/siphon/program).
        action_groups=tuple(getattr(spec, "action_groups", ())) if spec.discrete else (),
        store_next_obs=any(key in stage.reads for stage in extras for key in ("next_obs", "last_obs")),
        teacher=teacher_policy(config, env))
    core = {"rollout": Stage("rollout", partial(rollout_apply, ctx), partial(rollout_init, ctx),
                             partition=ROLLOUT_PARTITION),
            "advantage": Stage("advantage", partial(advantage_apply, ctx), takes_hyper=True),
            "ppo_update": Stage("ppo_update", partial(ppo_update_apply, ctx), takes_hyper=True)}
    pipeline = build_pipeline(core, extras)
    compiled_chunk = jax.jit(partial(chunk, ctx, pipeline), donate_argnums=0)

    # Fresh agents: one program (network, optimizer, env reset, stages) taking the hyperparameters as arguments, so
    # runs differing in --lr share it in the compilation cache; --num-seeds S maps it over S agents (fresh_agents).
    optimizer = make_optimizer(config)
    fresh = partial(fresh_agent, network, optimizer, pipeline, spec.obs_dim)
    fresh_runner_state = jax.jit(fresh if num_seeds == 1 else partial(fresh_agents, fresh))

    return Trainer(config=config, env=env, network=network, pipeline=pipeline, compiled_chunk=compiled_chunk,
                   fresh_runner_state=fresh_runner_state, sharder=shard, context=ctx, eval_env=eval_env,
                   compile_ahead=compile_ahead, optimizer=optimizer,
                   programs=ProgramStore.for_run(config, store_programs_in) if store_programs_in else None)
