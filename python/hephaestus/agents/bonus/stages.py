"""Baseline exploration bonuses as pipeline stages, both after `rollout` and both scored on the observation each
transition led to (`next_obs`, the pre-reset one where an episode ended):

* `rnd` (--agent rnd): Random Network Distillation (Burda et al. 2018). A fixed, randomly initialised target
  network embeds the normalised next observation; a predictor learns to match it. A transition's novelty is the
  predictor's squared error *before* it trains on this batch; it is divided by a running RMS of the error (the
  same normaliser as DTC's, dtc/intrinsic.py) and added to `reward` times `rnd_coef`. The predictor then takes
  `rnd_steps` full-batch Adam steps on the batch.
* `count_bonus` (--agent count): a tabular count of visits per observation (hashed into `count_table_size`
  buckets): reward += `count_coef` / sqrt(n(next_obs)), n counting this batch. The oracle on small discrete envs
  such as DeepSea, meaningless on continuous observations.

* `episodic_novelty` (--agent episodic): Never Give Up's episodic bonus (Badia et al. 2020). Each env keeps a
  memory of the embeddings of the observations it reached this episode (`episodic_capacity` slots, a ring; emptied
  when the episode ends). Each transition's next observation is embedded (a fixed random projection of
  symlog(obs)), its k nearest neighbours in its env's memory are found by an exact top-k over the whole memory,
  and its novelty is 1 / (sqrt(sum_i K(d_i)) + c), K(d) = eps / (max(d^2 / mean d^2 - xi, 0) + eps), mean d^2 a
  running mean of the neighbours' squared distances; 0 where sqrt(sum K) + c > max_similarity, and 0 on an
  episode's first step (nothing to compare with). Then the embedding joins the memory. Divided by a running RMS
  and times `episodic_coef` it is added to `reward`. It pays for reaching states unlike this episode's others, so
  it asks for coverage within an episode; on envs whose every step is a new state (DeepSea) it is a constant.

Batch keys written ([T, N] float32): `rnd_novelty` (raw error), `count_visits` (n after this batch),
`episodic_novelty` (the raw episodic bonus) and `intrinsic_reward` (the bonus added to `reward`; DTC's stage
writes it too).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from hephaestus.agents.dtc import intrinsic as intr
from hephaestus.agents.dtc.rssm import symlog
from hephaestus.agents.normalization.stages import merge_moments
from hephaestus.core.stages import ENVS, REPLICATED, Stage, StageContext, add_intrinsic, register_stage


class ReluMLP(nn.Module):
    """Two ReLU layers and a linear output: RND's target and predictor, the intrinsic critic (out=1)."""

    hidden: int
    out: int

    @nn.compact
    def __call__(self, x):
        for _ in range(2):
            x = nn.relu(nn.Dense(self.hidden)(x))
        return nn.Dense(self.out)(x)


@struct.dataclass
class RNDState:
    target: dict
    predictor: dict
    opt_state: object
    obs_count: jax.Array  # float32[] observations folded into the running mean/var
    obs_mean: jax.Array  # float32[obs_dim]
    obs_var: jax.Array  # float32[obs_dim]
    norm: intr.IntrinsicState  # running second moment of the error


def make_rnd(config, spec):
    """(init(key) -> RNDState, apply(state, next_obs [T, N, D]) -> (state, novelty [T, N], metrics))."""
    target_net = ReluMLP(config.stages.rnd.hidden_dim, config.stages.rnd.embed_dim)
    predictor_net = ReluMLP(config.stages.rnd.hidden_dim, config.stages.rnd.embed_dim)
    tx = optax.adam(config.stages.rnd.lr)
    dim = spec.obs_dim

    def init(key):
        k_t, k_p = jax.random.split(key)
        x = jnp.zeros((1, dim), jnp.float32)
        target, predictor = target_net.init(k_t, x), predictor_net.init(k_p, x)
        return RNDState(target=target, predictor=predictor, opt_state=tx.init(predictor), obs_count=jnp.float32(0),
                        obs_mean=jnp.zeros((dim,), jnp.float32), obs_var=jnp.ones((dim,), jnp.float32),
                        norm=intr.intrinsic_init())

    def error(predictor, target, x):
        return jnp.mean((predictor_net.apply(predictor, x) - target_net.apply(target, x)) ** 2, -1)

    def apply(state: RNDState, next_obs):
        flat = next_obs.reshape((-1, dim)).astype(jnp.float32)
        moments = merge_moments({"mean": state.obs_mean, "var": state.obs_var, "count": state.obs_count}, flat)
        count, mean, var = moments["count"], moments["mean"], moments["var"]
        x = jnp.clip((flat - mean) / jnp.sqrt(var + 1e-8), -5.0, 5.0)
        novelty = error(state.predictor, state.target, x)  # score before learning

        def step(carry, _):
            predictor, opt_state = carry
            loss, grads = jax.value_and_grad(lambda p: jnp.mean(error(p, state.target, x)))(predictor)
            updates, opt_state = tx.update(grads, opt_state, predictor)
            return (optax.apply_updates(predictor, updates), opt_state), loss

        (predictor, opt_state), losses = jax.lax.scan(step, (state.predictor, state.opt_state), None,
                                                      length=config.stages.rnd.steps)
        norm, _ = intr.normalise(state.norm, novelty)
        state = RNDState(target=state.target, predictor=predictor, opt_state=opt_state, obs_count=count,
                         obs_mean=mean, obs_var=var, norm=norm)
        return state, novelty.reshape(next_obs.shape[:2]), {"rnd/loss": losses[-1], "rnd/novelty_raw": jnp.mean(novelty)}

    return init, apply


def _add_bonus(batch, bonus, prefix):
    extrinsic = batch["reward"]
    abs_int, abs_ext = jnp.sum(jnp.abs(bonus)), jnp.sum(jnp.abs(extrinsic))
    metrics = {f"{prefix}/intrinsic_reward": jnp.mean(bonus),
               f"{prefix}/intrinsic_share": abs_int / jnp.maximum(abs_int + abs_ext, 1e-8)}
    return {**batch, "reward": extrinsic + bonus, "intrinsic_reward": add_intrinsic(batch, bonus)}, metrics


@register_stage("rnd")
def rnd_stage(ctx: StageContext) -> Stage:
    config = ctx.config
    init, update = make_rnd(config, ctx.env_spec)

    def apply(key, train_state, batch, state):
        state, novelty, metrics = update(state, batch["next_obs"])
        n = novelty / jnp.sqrt(state.norm.m2 + intr.EPS)
        batch, bonus_metrics = _add_bonus({**batch, "rnd_novelty": novelty}, config.stages.rnd.coef * n, "rnd")
        return train_state, batch, state, {**metrics, **bonus_metrics}

    return Stage(name="rnd", apply=apply, init=init, after="rollout", reads=("next_obs",))


def observation_hash(obs, table_size: int, key=jax.random.PRNGKey(20)):
    """Bucket of each observation [..., D] -> int32[...]: obs rounded to 1e-3, dotted with fixed random 32-bit
    multipliers (wrapping uint32 arithmetic), mixed, modulo table_size."""
    dim = obs.shape[-1]
    weights = jax.random.bits(key, (dim,), jnp.uint32) | jnp.uint32(1)
    q = jnp.round(obs.astype(jnp.float32) * 1000.0).astype(jnp.int32).astype(jnp.uint32)
    h = jnp.sum(q * weights, axis=-1, dtype=jnp.uint32)
    h = (h ^ (h >> 16)) * jnp.uint32(0x45D9F3B)
    h = h ^ (h >> 16)
    return (h % jnp.uint32(table_size)).astype(jnp.int32)


@register_stage("count_bonus")
def count_bonus_stage(ctx: StageContext) -> Stage:
    config = ctx.config
    size = config.stages.count.table_size

    def apply(key, train_state, batch, counts):
        bucket = observation_hash(batch["next_obs"], size)
        counts = counts.at[bucket.reshape(-1)].add(1)
        visits = counts[bucket].astype(jnp.float32)
        batch, metrics = _add_bonus({**batch, "count_visits": visits}, config.stages.count.coef / jnp.sqrt(visits), "count")
        metrics["count/buckets_used"] = jnp.sum(counts > 0).astype(jnp.float32)
        return train_state, batch, counts, metrics

    return Stage(name="count_bonus", apply=apply, init=lambda key: jnp.zeros((size,), jnp.int32), after="rollout",
                 reads=("next_obs",))


def nearest_sq_distances(query, memory, filled, k: int):
    """Exact k nearest neighbours by squared Euclidean distance, per env: query [N, d], memory [N, C, d], filled [N]
    (slots below it hold entries) -> (squared distances [N, k] ascending, valid [N, k]); where an env holds fewer
    than k entries the rest are inf and not valid. One top-k over every slot: exact, static shapes."""
    sq = jnp.sum((memory - query[:, None, :]) ** 2, -1)  # [N, C]
    sq = jnp.where(jnp.arange(memory.shape[1])[None, :] < filled[:, None], sq, jnp.inf)
    nearest = -jax.lax.top_k(-sq, k)[0]
    return nearest, jnp.isfinite(nearest)


def episodic_novelty(sq, valid, mean_sq, opts):
    """NGU's episodic novelty [N] of observations whose k nearest neighbours in their episode's memory are at
    squared distances `sq` [N, k] (`valid` marks real ones), `mean_sq` the running mean of such distances: 1 /
    (sqrt(sum K) + c); 0 where that similarity passes `max_similarity` or the memory is empty."""
    scaled = jnp.maximum(sq / jnp.maximum(mean_sq, intr.EPS) - opts.cluster_distance, 0.0)
    kernel = jnp.where(valid, opts.kernel_epsilon / (scaled + opts.kernel_epsilon), 0.0)
    similarity = jnp.sqrt(jnp.sum(kernel, -1)) + opts.pseudo_count
    novelty = jnp.where(similarity > opts.max_similarity, 0.0, 1.0 / similarity)
    return jnp.where(jnp.any(valid, -1), novelty, 0.0)


@struct.dataclass
class EpisodicState:
    projection: jax.Array  # float32[obs_dim, embed_dim] fixed random projection (the embedding)
    memory: jax.Array  # float32[N, capacity, embed_dim] this episode's embeddings, per env (a ring)
    filled: jax.Array  # int32[N] embeddings written this episode (slots below min(filled, capacity) hold entries)
    sq_mean: jax.Array  # float32[] running mean of the neighbours' squared distances
    sq_count: jax.Array  # float32[] neighbour distances folded into sq_mean
    norm: intr.IntrinsicState  # running second moment of the novelty


def make_episodic(config, spec):
    """(init(key) -> EpisodicState, apply(state, next_obs [T, N, D], done [T, N]) -> (state, novelty [T, N],
    metrics)). The transitions are taken in time order: each is scored against its env's memory, then joins it;
    where `done` the env's memory empties after it."""
    opts, n = config.stages.episodic, config.env.num_envs
    capacity = opts.capacity

    def init(key):
        # N(0, 1 / embed_dim) entries keep squared distances about as they are (Johnson-Lindenstrauss).
        projection = jax.random.normal(key, (spec.obs_dim, opts.embed_dim), jnp.float32) / jnp.sqrt(opts.embed_dim)
        return EpisodicState(projection=projection, memory=jnp.zeros((n, capacity, opts.embed_dim), jnp.float32),
                             filled=jnp.zeros((n,), jnp.int32), sq_mean=jnp.float32(0.0), sq_count=jnp.float32(0.0),
                             norm=intr.intrinsic_init())

    def apply(state: EpisodicState, next_obs, done):
        embedded = jnp.matmul(symlog(next_obs.astype(jnp.float32)), state.projection,
                              precision=jax.lax.Precision.HIGHEST)  # [T, N, d]

        def step(carry, x):
            memory, filled, sq_mean, sq_count = carry
            query, ended = x
            sq, valid = nearest_sq_distances(query, memory, jnp.minimum(filled, capacity), opts.k)
            seen = jnp.sum(valid).astype(jnp.float32)
            total = sq_count + seen
            step_mean = jnp.sum(jnp.where(valid, sq, 0.0)) / jnp.maximum(seen, 1.0)
            sq_mean = jnp.where(seen > 0, sq_mean + (step_mean - sq_mean) * seen / jnp.maximum(total, 1.0), sq_mean)
            novelty = episodic_novelty(sq, valid, sq_mean, opts)
            memory = memory.at[jnp.arange(memory.shape[0]), filled % capacity].set(query)
            filled = jnp.where(ended, 0, filled + 1)
            return (memory, filled, sq_mean, total), novelty

        carry = (state.memory, state.filled, state.sq_mean, state.sq_count)
        (memory, filled, sq_mean, sq_count), novelty = jax.lax.scan(step, carry, (embedded, done))
        norm, _ = intr.normalise(state.norm, novelty)
        state = state.replace(memory=memory, filled=filled, sq_mean=sq_mean, sq_count=sq_count, norm=norm)
        metrics = {"episodic/novelty_raw": jnp.mean(novelty), "episodic/sq_distance_mean": sq_mean,
                   "episodic/memory_fill": jnp.mean(jnp.minimum(filled, capacity).astype(jnp.float32)) / capacity}
        return state, novelty, metrics

    return init, apply


@register_stage("episodic_novelty")
def episodic_novelty_stage(ctx: StageContext) -> Stage:
    config = ctx.config
    init, update = make_episodic(config, ctx.env_spec)

    def apply(key, train_state, batch, state):
        done = jnp.logical_or(batch["terminated"], batch["truncated"])
        state, novelty, metrics = update(state, batch["next_obs"], done)
        n = novelty / jnp.sqrt(state.norm.m2 + intr.EPS)
        batch, bonus_metrics = _add_bonus({**batch, "episodic_novelty": novelty}, config.stages.episodic.coef * n,
                                          "episodic")
        return train_state, batch, state, {**metrics, **bonus_metrics}

    # Each env's memory and count follow their env over devices; the projection and the running means are global.
    partition = EpisodicState(projection=REPLICATED, memory=ENVS, filled=ENVS, sq_mean=REPLICATED,
                              sq_count=REPLICATED, norm=REPLICATED)
    return Stage(name="episodic_novelty", apply=apply, init=init, after="rollout", reads=("next_obs",),
                 partition=partition)


@struct.dataclass
class IntrinsicCriticState:
    params: dict
    opt_state: object


@register_stage("intrinsic_critic")
def intrinsic_critic_stage(ctx: StageContext) -> Stage:
    """After the bonus stages (validated in IntrinsicCriticOptions): the bonus leaves `reward` and gets its own
    critic and non-episodic return. The intrinsic stream is treated as one episode that never ends: the state after
    obs[t] is obs[t + 1] (the next episode's first observation where an episode ended) and after the last step the
    rollout's current observation (`last_obs`). Its GAE advantage, computed before the critic trains on this batch
    and times `coef`, is added to PPO's extrinsic advantage by the advantage stage (`intrinsic_advantage`)."""
    from hephaestus.core.ppo import gae

    opts = ctx.config.stages.intrinsic_critic
    mlp = ReluMLP(opts.hidden_dim, 1)
    value_of = lambda params, x: mlp.apply(params, x)[..., 0]  # noqa: E731
    tx = optax.adam(opts.lr)
    dim = ctx.env_spec.obs_dim

    def init(key):
        params = mlp.init(key, jnp.zeros((1, dim), jnp.float32))
        return IntrinsicCriticState(params=params, opt_state=tx.init(params))

    def apply(key, train_state, batch, state: IntrinsicCriticState, hyper):
        intrinsic = batch["intrinsic_reward"]
        obs = batch["obs"].astype(jnp.float32)
        stream = jnp.concatenate([obs, batch["last_obs"].astype(jnp.float32)[None]], axis=0)  # [T + 1, N, D]
        values = value_of(state.params, stream)
        never = jnp.zeros(intrinsic.shape, bool)
        advantage = gae(intrinsic, values[:-1], values[1:], never, never, opts.gamma, hyper["gae_lambda"])
        target = jax.lax.stop_gradient(advantage + values[:-1])

        def step(carry, _):
            params, opt_state = carry
            loss, grads = jax.value_and_grad(lambda p: 0.5 * jnp.mean((value_of(p, obs) - target) ** 2))(params)
            updates, opt_state = tx.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), loss

        (params, opt_state), losses = jax.lax.scan(step, (state.params, state.opt_state), None, length=opts.steps)
        explained = 1.0 - jnp.var(target - values[:-1]) / jnp.maximum(jnp.var(target), 1e-8)
        batch = {**batch, "reward": batch["reward"] - intrinsic, "intrinsic_advantage": opts.coef * advantage}
        metrics = {"intrinsic_critic/value": jnp.mean(values), "intrinsic_critic/loss": losses[-1],
                   "intrinsic_critic/explained_variance": explained,
                   "intrinsic_critic/advantage_std": jnp.std(advantage)}
        return train_state, batch, IntrinsicCriticState(params=params, opt_state=opt_state), metrics

    return Stage(name="intrinsic_critic", apply=apply, init=init, after="rollout", reads=("next_obs", "last_obs"),
                 takes_hyper=True)
