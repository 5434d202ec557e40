"""PPO, fully jitted: `make_train(config)` -> initial runner state + `train_chunk(runner_state)`.

Read top to bottom: the rollout stage (a `lax.scan` over `num_steps` of vectorised env steps), the
advantage stage (GAE, a reverse `lax.scan`), the PPO update stage (`update_epochs` x `num_minibatches`
scans over a fresh shuffle of indices each epoch), then `one_update`, which threads one batch through the
stage list, and `train_chunk`, which scans `log_interval` updates. Extra stages (stages.py) slot in between
without touching this file. No host callbacks: metrics come back as arrays and the Python loop logs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from flax.training.train_state import TrainState

from hephaestus import episode_stats
from hephaestus import networks as nets
from hephaestus.config import DATA_HYPERPARAMETERS, TrainConfig, resolve_obs_dtype
from hephaestus.distributed import Sharder, mesh_for
from hephaestus.envs.adapters import AdaptedEnv
from hephaestus.envs.registry import make_env
from hephaestus.obs_storage import storage_for
from hephaestus.stages import Stage, StageContext, build_pipeline

# Per-update metrics every run returns (stages add their own keys).
CORE_METRICS = ("mean_episode_return", "mean_episode_length", "num_episodes", "entropy", "approx_kl",
                "clip_frac", "pg_loss", "vf_loss", "total_loss", "explained_variance", "grad_norm",
                "learning_rate", "fully_masked_rows")


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


@struct.dataclass
class RunnerState:
    train_state: TrainState
    stages: dict  # stage name -> that stage's own state
    key: jax.Array
    update_step: jax.Array  # int32[], PPO updates done so far
    hyper: dict  # float32 scalars kept as data (DATA_HYPERPARAMETERS, anneal horizon), not baked into the program


# With --num-seeds S > 1 every leaf of the runner state carries a leading [S] seed axis except the update counter:
# the agents step in lockstep, so one scalar counts for all (checkpoints, the loop and the schedule read it).
SEED_AXES = RunnerState(train_state=0, stages=0, key=0, update_step=None, hyper=0)


def strongly_typed(tree):
    """Every leaf as its own strongly typed device array. A restored checkpoint is always strongly typed;
    starting that way means a resumed run reuses the compiled program. Fresh buffers per leaf also keep
    donation valid where initialisers returned one shared buffer for several leaves (e.g. Adam's zeros)."""
    return jax.tree.map(lambda x: jnp.asarray(np.array(x)), tree)


def with_optimizer_hyperparams(train_state: TrainState, lr: jax.Array, max_grad_norm: jax.Array) -> TrainState:
    """`train_state` whose optimizer (optax.inject_hyperparams) steps with `lr` and clips at `max_grad_norm`."""
    opt_state = train_state.opt_state
    hyperparams = {**opt_state.hyperparams, "learning_rate": lr, "max_grad_norm": max_grad_norm}
    return train_state.replace(opt_state=opt_state._replace(hyperparams=hyperparams))


def make_optimizer(config: TrainConfig):
    # inject_hyperparams keeps the learning rate and the clip norm in the optimizer *state*, so runs that differ
    # only in --lr or --max-grad-norm share one compiled program (and the persistent compilation cache).
    def chain(learning_rate, max_grad_norm):
        return optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(learning_rate, eps=1e-5))

    return optax.inject_hyperparams(chain)(learning_rate=config.lr, max_grad_norm=config.max_grad_norm)


def initial_hyper(config: TrainConfig, **overrides) -> dict:
    """An agent's `RunnerState.hyper`: the data hyperparameters (config values, or `overrides`) and the anneal
    horizon, as Python floats (the caller makes them float32 arrays)."""
    unknown = set(overrides) - set(DATA_HYPERPARAMETERS)
    if unknown:
        raise ValueError(f"not data hyperparameters: {', '.join(sorted(unknown))}")
    hyper = {name: float(getattr(config, name)) for name in DATA_HYPERPARAMETERS}
    hyper.update({k: float(v) for k, v in overrides.items()})
    hyper["num_updates"] = float(config.num_updates)
    return hyper


@dataclass
class Trainer:
    config: TrainConfig
    env: AdaptedEnv
    network: Any
    pipeline: list
    runner_state: RunnerState
    train_chunk: Callable  # (runner_state, num_updates=log_interval) -> (runner_state, metrics[log_interval])
    compiled_chunk: Callable  # the jitted (runner_state, num_updates) -> ..., for AOT lowering and benchmarks
    init_runner_state: Callable[[int], RunnerState]  # seed -> fresh runner state (placed on the mesh)
    init_agents: Callable  # (seeds, hyperparameter overrides per agent) -> fresh runner state (sweeps)
    fresh_runner_state: Callable  # the jitted (key, hyper) -> runner state it places, for AOT lowering
    mesh: Any = None  # jax.sharding.Mesh over the `data` axis, or None with one device (distributed.py)
    sharder: Sharder | None = None  # the sharding rules; `sharder.place(runner)` puts a restored state on the mesh

    def __iter__(self):  # `runner_state, train_chunk = make_train(config)`
        return iter((self.runner_state, self.train_chunk))


def make_train(config: TrainConfig, env: AdaptedEnv | None = None) -> Trainer:
    # Devices first: an indivisible --num-envs is a one-line error before anything is built or compiled.
    # With one device `shard` is the identity everywhere and the program is the single-device one.
    mesh = mesh_for(config)
    num_seeds = config.num_seeds
    shard = Sharder(mesh, config.num_envs, config.num_steps, num_seeds=num_seeds)
    env = env or make_env(config.env)
    spec = env.spec
    network = nets.make_network(spec, config)  # raises ConfigError for --encoder cells on an env without cells
    # How the rollout buffer stores observations (--obs-dtype, obs_storage.py): the batch's largest array.
    storage = storage_for(resolve_obs_dtype(config, spec), spec)
    tx = make_optimizer(config)
    num_envs, num_steps = config.num_envs, config.num_steps
    # Both jitted, so each is traced once: the eval_shape calls below cache the traces that rollout_init and the
    # rollout reuse (tracing a HackMatrix step takes seconds). Run op by op, a HackMatrix reset took 29 s of
    # eager dispatch at start-up; compiled whole, 4 s.
    v_reset = jax.jit(jax.vmap(env.reset))
    v_step = jax.jit(shard.per_device(jax.vmap(env.step)))  # with several devices: each steps its own envs
    # The info entries an env step reports (reward terms, stage) fix which extra metrics a rollout sums.
    env_keys_shape = jax.eval_shape(lambda: jax.random.split(jax.random.PRNGKey(0), num_envs))
    env_state_shape, _ = jax.eval_shape(v_reset, env_keys_shape)
    action_shape = jax.ShapeDtypeStruct((num_envs,) if spec.discrete else (num_envs, spec.action_dim),
                                        jnp.int32 if spec.discrete else jnp.float32)
    step_info = jax.eval_shape(v_step, env_keys_shape, env_state_shape, action_shape)[1].info
    # Declared per-episode statistics (EnvSpec.episode_stats, episode_stats.py) -> episode/<report key>.
    stats = spec.episode_stats
    # Named action ranges (EnvSpec.action_groups, e.g. HackMatrix move/siphon/program) -> actions/<name>_frac.
    action_groups = tuple(getattr(spec, "action_groups", ())) if spec.discrete else ()

    # ---------------------------------------------------------------------------------------------
    # Stage 1: rollout. Each stored transition pairs the observation the action was chosen from with
    # that action, its log-probability and value; the env's auto-reset observation goes to the *next*
    # transition, and the pre-reset final observation is only used for the truncation bootstrap.

    def rollout_init(key):
        env_state, first = v_reset(jax.random.split(key, num_envs))
        if env.init_instance is not None:  # e.g. DeepSea: one action map per run, drawn from the run's key
            env_state = env.init_instance(jax.random.fold_in(key, 1), env_state)
        zeros = jnp.zeros((num_envs,), jnp.float32)
        return RolloutState(env_state=env_state, obs=first.obs, action_mask=first.action_mask,
                            episode_return=zeros, episode_length=jnp.zeros((num_envs,), jnp.int32),
                            last_mean_return=jnp.float32(0.0), last_mean_length=jnp.float32(0.0),
                            episode_stats=episode_stats.zeros(stats, (num_envs,), jnp))

    def rollout_apply(key, train_state, batch, rs: RolloutState):
        params = train_state.params

        def env_step(carry, step_key):
            rs, sums = carry
            key_act, key_env = jax.random.split(step_key)
            # The policy acts on the observation as the batch stores it (identical for exact storage), so the
            # stored log-probabilities and values are those of the stored observations.
            stored_obs = storage.to_storage(rs.obs)
            env_action, action, log_prob, value = nets.act(network, params, storage.from_storage(stored_obs), rs.action_mask,
                                                           key_act, greedy=False)
            env_keys = shard.constrain_envs(jax.random.split(key_env, num_envs))
            env_state, step = v_step(env_keys, rs.env_state, env_action)
            # Truncated episodes bootstrap from the critic's value of the observation they ended on. The
            # critic pass runs only on steps where some env truncated (a real branch: not under vmap).
            bootstrap = jax.lax.cond(
                jnp.any(step.truncated),
                lambda: jnp.where(step.truncated, network.apply(params, step.final_obs, method="value"), 0.0),
                lambda: jnp.zeros((num_envs,), jnp.float32))
            done = jnp.logical_or(step.terminated, step.truncated)
            ep_return = rs.episode_return + step.reward
            ep_length = rs.episode_length + 1
            ep_stats = episode_stats.accumulate(stats, rs.episode_stats, step.info.get("episode_stats", {}), jnp)
            ended = episode_stats.report_values(stats, ep_stats, jnp)  # per env, counted where done
            sums = {
                "return": sums["return"] + jnp.sum(jnp.where(done, ep_return, 0.0)),
                "length": sums["length"] + jnp.sum(jnp.where(done, ep_length, 0)).astype(jnp.float32),
                "episodes": sums["episodes"] + jnp.sum(done).astype(jnp.float32),
                "masked": sums["masked"] + nets.fully_masked_rows(rs.action_mask).astype(jnp.float32),
                **{f"reward/{k}": sums[f"reward/{k}"] + jnp.sum(v) for k, v in step.info.get("reward_terms", {}).items()},
                **{f"episode/{k}": (jnp.maximum(sums[f"episode/{k}"], jnp.max(jnp.where(done, v, 0.0)))
                                    if episode_stats.is_max_key(k) else sums[f"episode/{k}"] + jnp.sum(jnp.where(done, v, 0.0)))
                   for k, v in ended.items()},
                **{f"actions/{g}_frac": sums[f"actions/{g}_frac"] + jnp.sum((action >= lo) & (action < hi)).astype(jnp.float32)
                   for g, lo, hi in action_groups},
            }
            transition = {"obs": stored_obs, "action_mask": rs.action_mask, "action": action, "log_prob": log_prob,
                          "value": value, "reward": step.reward, "terminated": step.terminated,
                          "truncated": step.truncated, "bootstrap_value": bootstrap}
            if store_next_obs:  # the pre-reset observation the action led to (episode ends included)
                transition["next_obs"] = step.final_obs.astype(jnp.float32)
            rs = rs.replace(env_state=env_state, obs=step.obs, action_mask=step.action_mask,
                            episode_return=jnp.where(done, 0.0, ep_return),
                            episode_length=jnp.where(done, 0, ep_length),
                            episode_stats={k: jnp.where(done, 0.0, v) for k, v in ep_stats.items()})
            return (shard.constrain_envs(rs), sums), shard.constrain_envs(transition)

        sums0 = {"return": jnp.float32(0), "length": jnp.float32(0), "episodes": jnp.float32(0),
                 "masked": jnp.float32(0)}
        sums0.update({f"reward/{k}": jnp.float32(0) for k in step_info.get("reward_terms", {})})
        sums0.update({f"episode/{k}": jnp.float32(0) for k in episode_stats.report_keys(stats)})
        sums0.update({f"actions/{g}_frac": jnp.float32(0) for g, _, _ in action_groups})
        (rs, sums), batch = jax.lax.scan(env_step, (shard.constrain_envs(rs), sums0), jax.random.split(key, num_steps))
        batch["last_value"] = network.apply(params, rs.obs, method="value")
        batch = shard.constrain_batch(batch)

        episodes = sums["episodes"]
        mean_return = jnp.where(episodes > 0, sums["return"] / jnp.maximum(episodes, 1), rs.last_mean_return)
        mean_length = jnp.where(episodes > 0, sums["length"] / jnp.maximum(episodes, 1), rs.last_mean_length)
        rs = rs.replace(last_mean_return=mean_return, last_mean_length=mean_length)
        steps = jnp.float32(num_steps * num_envs)
        metrics = {"mean_episode_return": mean_return, "mean_episode_length": mean_length,
                   "num_episodes": episodes, "fully_masked_rows": sums["masked"],
                   **{k: v / steps for k, v in sums.items() if k.startswith(("reward/", "actions/"))},
                   # sums over the episodes that ended (maxes for *_max keys); sinks.chunk_reduce divides them by
                   # the chunk's num_episodes
                   **{k: v for k, v in sums.items() if k.startswith("episode/")}}
        return train_state, batch, rs, metrics

    # ---------------------------------------------------------------------------------------------
    # Stage 2: advantage (GAE). The trace is cut at every episode end; the next value is the bootstrap
    # value on truncation and zero on termination.

    # The core stages below read the data hyperparameters from `hyper`: one_update passes the agent's
    # RunnerState.hyper (traced, per seed); called on their own (tests) they use the config's values.
    config_hyper = initial_hyper(config)

    def advantage_apply(key, train_state, batch, state, hyper=config_hyper):
        done = jnp.logical_or(batch["terminated"], batch["truncated"])
        next_value = jnp.concatenate([batch["value"][1:], batch["last_value"][None]], axis=0)
        next_value = jnp.where(done, batch["bootstrap_value"], next_value)
        advantage = gae(batch["reward"], batch["value"], next_value, batch["terminated"], done,
                        hyper["gamma"], hyper["gae_lambda"])
        target = advantage + batch["value"]
        residual_var = jnp.var(target - batch["value"])
        explained_variance = 1.0 - residual_var / jnp.maximum(jnp.var(target), 1e-8)
        batch = {**batch, "advantage": advantage, "target": target}
        return train_state, batch, state, {"explained_variance": explained_variance}

    # ---------------------------------------------------------------------------------------------
    # Stage 3: PPO update. Each epoch shuffles *indices*; minibatches gather rows by index, so the batch
    # (whose observations dominate memory) is never copied whole. Observations stay in their storage dtype
    # until a minibatch is decoded; losses and reductions are float32.

    batch_size, num_minibatches = config.batch_size, config.num_minibatches
    minibatch_size = batch_size // num_minibatches
    train_keys = ("obs", "action_mask", "action", "log_prob", "value", "advantage", "target")

    def loss_fn(params, mb, hyper):
        log_prob, entropy, value = nets.evaluate(network, params, mb["obs"], mb["action_mask"], mb["action"])
        log_ratio = log_prob - mb["log_prob"]
        ratio = jnp.exp(log_ratio)
        adv = mb["advantage"]
        if config.normalize_advantages:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        clip_eps = hyper["clip_eps"]
        pg_loss = -jnp.mean(jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv))
        if config.clip_value_loss:
            value_clipped = mb["value"] + jnp.clip(value - mb["value"], -clip_eps, clip_eps)
            vf_loss = 0.5 * jnp.mean(jnp.maximum((value - mb["target"]) ** 2, (value_clipped - mb["target"]) ** 2))
        else:
            vf_loss = 0.5 * jnp.mean((value - mb["target"]) ** 2)
        entropy = jnp.mean(entropy)
        total = pg_loss + hyper["vf_coef"] * vf_loss - hyper["ent_coef"] * entropy
        stats = {"pg_loss": pg_loss, "vf_loss": vf_loss, "entropy": entropy, "total_loss": total,
                 "approx_kl": jnp.mean((ratio - 1.0) - log_ratio),
                 "clip_frac": jnp.mean((jnp.abs(ratio - 1.0) > clip_eps).astype(jnp.float32))}
        return total, stats

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def ppo_update_apply(key, train_state, batch, state, hyper=config_hyper):
        flat = {k: batch[k].reshape((batch_size,) + batch[k].shape[2:]) for k in train_keys}

        flat["obs"] = storage.to_gather(flat["obs"])

        def minibatch_step(train_state, idx):
            mb = jax.tree.map(lambda x: jnp.take(x, idx, axis=0), flat)
            mb["obs"] = storage.from_gather(mb["obs"])
            (_, stats), grads = grad_fn(train_state.params, mb, hyper)
            stats["grad_norm"] = optax.tree.norm(grads)
            return train_state.apply_gradients(grads=grads), stats

        def epoch(train_state, epoch_key):
            order = jax.random.permutation(epoch_key, batch_size).reshape(num_minibatches, minibatch_size)
            return jax.lax.scan(minibatch_step, train_state, order)

        train_state, stats = jax.lax.scan(epoch, train_state, jax.random.split(key, config.update_epochs))
        return train_state, batch, state, jax.tree.map(jnp.mean, stats)

    # With D devices: each device shuffles its own shard. The batch is viewed as [D, T * N/D] (a local
    # reshape: device d holds envs d*N/D..), every row gets its own permutation, and minibatch i takes slice i
    # of every row. The loss is still the mean over the global minibatch, so its gradient is the average of the
    # per-device gradients: GSPMD turns that into one all-reduce per minibatch, and env data never moves.
    num_devices = shard.num_devices
    rows = batch_size // num_devices
    row_minibatch = rows // num_minibatches

    def sharded_ppo_update_apply(key, train_state, batch, state, hyper=config_hyper):
        def to_rows(x):  # [T, N, ...] -> [D, T * N/D, ...]
            x = x.reshape((num_steps, num_devices, num_envs // num_devices) + x.shape[2:])
            return shard.constrain(jnp.swapaxes(x, 0, 1).reshape((num_devices, rows) + x.shape[3:]), "data")

        rowed = {k: to_rows(batch[k]) for k in train_keys}
        rowed["obs"] = storage.to_gather(rowed["obs"])

        def minibatch_step(train_state, idx):  # idx [D, minibatch/D]: row-local indices
            mb = jax.tree.map(lambda x: jax.vmap(lambda r, i: jnp.take(r, i, axis=0))(x, idx), rowed)
            mb = jax.tree.map(lambda x: shard.constrain(x.reshape((minibatch_size,) + x.shape[2:]), "data"),
                              shard.constrain(mb, "data"))
            mb["obs"] = storage.from_gather(mb["obs"])
            (_, stats), grads = grad_fn(train_state.params, mb, hyper)
            grads = shard.replicate(grads)
            stats["grad_norm"] = optax.tree.norm(grads)
            return train_state.apply_gradients(grads=grads), stats

        def epoch(train_state, epoch_key):
            keys = shard.constrain(jax.random.split(epoch_key, num_devices), "data")
            order = jax.vmap(lambda k: jax.random.permutation(k, rows))(keys)  # [D, rows]
            order = order.reshape(num_devices, num_minibatches, row_minibatch).swapaxes(0, 1)
            return jax.lax.scan(minibatch_step, train_state, shard.constrain(order, None, "data"))

        train_state, stats = jax.lax.scan(epoch, train_state, jax.random.split(key, config.update_epochs))
        return train_state, batch, state, jax.tree.map(jnp.mean, stats)

    # Core stages whose apply takes the agent's data hyperparameters (`hyper=`).
    HYPER_STAGES = ("advantage", "ppo_update")
    core = {"rollout": Stage("rollout", rollout_apply, rollout_init),
            "advantage": Stage("advantage", advantage_apply),
            "ppo_update": Stage("ppo_update", sharded_ppo_update_apply if shard.active else ppo_update_apply)}
    pipeline = build_pipeline(StageContext(config=config, env_spec=spec, network=network), core)
    store_next_obs = any("next_obs" in stage.reads for stage in pipeline)  # read by rollout_apply when traced

    # ---------------------------------------------------------------------------------------------
    # One update threads a batch through the stages; a chunk scans `n` updates.

    def one_update(runner: RunnerState, _):
        key, *stage_keys = jax.random.split(runner.key, len(pipeline) + 1)
        hyper = runner.hyper
        if config.anneal_lr:
            frac = 1.0 - runner.update_step.astype(jnp.float32) / hyper["num_updates"]
            lr = hyper["lr"] * jnp.maximum(frac, 0.0)
        else:
            lr = hyper["lr"]
        train_state = with_optimizer_hyperparams(runner.train_state, lr, hyper["max_grad_norm"])
        batch, stage_states, metrics = None, dict(runner.stages), {"learning_rate": lr}
        for stage, stage_key in zip(pipeline, stage_keys):
            data = {"hyper": hyper} if stage.name in HYPER_STAGES else {}
            train_state, batch, stage_states[stage.name], stage_metrics = stage.apply(
                stage_key, train_state, batch, stage_states[stage.name], **data)
            batch = shard.constrain_batch(batch)  # keep every stage's output split over envs
            metrics.update(stage_metrics)
        runner = runner.replace(train_state=train_state, stages=stage_states, key=key,
                                update_step=runner.update_step + 1)
        return runner, metrics

    def chunk(runner: RunnerState, num_updates: jax.Array):
        """`log_interval` scan slots; slots past `num_updates` are skipped by a real branch, so a final,
        shorter chunk reuses the same compiled program instead of compiling another."""
        # Through jit, the update is traced once: eval_shape caches the trace the cond below reuses (tracing the
        # HackMatrix step takes seconds). The inner jit is inlined into the chunk's program.
        update = jax.jit(one_update if num_seeds == 1 else
                         jax.vmap(one_update, in_axes=(SEED_AXES, None), out_axes=(SEED_AXES, 0)))
        metric_shapes = jax.eval_shape(update, runner, None)[1]

        def maybe_update(runner, slot):
            skip = lambda r: (r, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), metric_shapes))
            return jax.lax.cond(slot < num_updates, lambda r: update(r, None), skip, runner)

        runner, metrics = jax.lax.scan(maybe_update, shard.constrain_runner(runner), jnp.arange(config.log_interval))
        # Pin the output layout to the input's, so the next chunk reuses this program; metrics replicated so
        # every host can read them.
        return shard.constrain_runner(runner), shard.replicate(metrics)

    compiled_chunk = jax.jit(chunk, donate_argnums=0)

    def train_chunk(runner: RunnerState, num_updates: int | None = None):
        n = config.log_interval if num_updates is None else num_updates
        if not 0 < n <= config.log_interval:
            raise ValueError(f"a chunk runs 1..{config.log_interval} updates, not {n}")
        return compiled_chunk(runner, jnp.int32(n))

    # One program for the network, the optimizer, the env reset and the stages, not one compile per op. The
    # hyperparameters come in as arguments (the optimizer's initial learning rate replaced by them), so runs that
    # differ in --lr or --total-timesteps share this program, reset included, in the compilation cache.
    def fresh_agent(key: jax.Array, hyper: dict) -> RunnerState:
        key, key_net, *stage_keys = jax.random.split(key, len(pipeline) + 2)
        params = network.init(key_net, jnp.zeros((1, spec.obs_dim), jnp.float32))
        train_state = with_optimizer_hyperparams(TrainState.create(apply_fn=network.apply, params=params, tx=tx),
                                                 hyper["lr"], hyper["max_grad_norm"])
        stages = {s.name: s.init(k) for s, k in zip(pipeline, stage_keys)}
        return RunnerState(train_state=train_state, stages=stages, key=key, update_step=jnp.int32(0), hyper=hyper)

    # With --num-seeds S > 1, S agents: the same function vmapped over a [S] stack of keys and hyperparameters.
    fresh_runner_state = jax.jit(fresh_agent if num_seeds == 1 else
                                 jax.vmap(fresh_agent, in_axes=(0, 0), out_axes=SEED_AXES))

    def init_agents(seeds, hypers=None) -> RunnerState:
        """The fresh state of `num_seeds` agents: agent i starts from PRNGKey(seeds[i]) (the key of a single run
        with that seed) with the data hyperparameters `hypers[i]` (a dict overriding the config's values, e.g.
        a sweep point; default none). With --num-seeds 1 the state has no seed axis."""
        hypers = list(hypers) if hypers is not None else [{}] * len(seeds)
        if len(seeds) != num_seeds or len(hypers) != num_seeds:
            raise ValueError(f"{len(seeds)} seeds and {len(hypers)} hyperparameter sets for {num_seeds} agents")
        rows = [initial_hyper(config, **h) for h in hypers]
        if num_seeds == 1:
            key, hyper = jax.random.PRNGKey(seeds[0]), {k: jnp.float32(v) for k, v in rows[0].items()}
        else:
            key = jnp.stack([jax.random.PRNGKey(s) for s in seeds])
            hyper = {k: jnp.asarray([r[k] for r in rows], jnp.float32) for k in rows[0]}
        return shard.place(strongly_typed(fresh_runner_state(key, hyper)))

    def init_runner_state(seed: int) -> RunnerState:
        """The fresh state of the run's agents: one agent seeded `seed`, or with --num-seeds S agents seeded
        seed, seed+1, ..., seed+S-1 stacked on a leading axis (agent i's key is PRNGKey(seed + i), the key of a
        single-seed run with that seed)."""
        return init_agents([seed + i for i in range(num_seeds)])

    return Trainer(config=config, env=env, network=network, pipeline=pipeline,
                   runner_state=init_runner_state(config.seed), train_chunk=train_chunk,
                   compiled_chunk=compiled_chunk, init_runner_state=init_runner_state, init_agents=init_agents,
                   fresh_runner_state=fresh_runner_state, mesh=mesh, sharder=shard)


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
