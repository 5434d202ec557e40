"""The dreamer (DTC, part 2): actor-critic learning on the world model's imagined trajectories, as one stage.

    rollout -> dreamer                                   (--agent dreamer, --agent dreamer-dtc)

`dreamer` takes the place of `advantage` and `ppo_update` (Stage.replaces). Per update it

1. trains the world model: `make_world_model` of dtc/agent.py, the same replay, losses and gradient steps as
   --agent dtc (without scoring the rollout's novelty, which only the PPO agents use);
2. takes `ac_steps` actor-critic steps. Each draws `starts` replayed sequences, filters them with every member's
   posterior (sampled latents) and starts one dream from every posterior state (starts x seq_len dreams); a
   dream rolls the prior H steps, the actor choosing each action from member 0's *decoded observation* (or, with
   --dreamer-actor-input state, its state [h, z]); member 0's heads give each imagined transition's reward
   (two-hot over symlog bins with --dtc-reward-bins) and continuation probability; lambda-returns bootstrap from
   the critic (--dreamer-bootstrap; or its slow EMA copy); the actor learns by REINFORCE on advantages
   normalised per batch of dreams (--dreamer-advantage-norm; or DreamerV3's division by the returns' 5th-95th
   percentile range), with an entropy regulariser; the critic regresses on the returns (and, with
   --dreamer-slow-critic-reg > 0, towards the slow critic; with --dreamer-replay-value > 0, also on lambda-returns
   along the replayed real sequences, DreamerV3's replay value loss), by squared error or, with
   --dreamer-critic-bins, by two-hot cross-entropy over symlog bins. With --dreamer-novelty-coef > 0 (dreamer-dtc) the
   imagined reward also holds the members' disagreement about each imagined next observation (Plan2Explore),
   normalised and gained by competence as in part 1. With --dreamer-survival-penalty p > 0 each imagined step's
   reward loses p x (1 - its continuation probability). With --dreamer-horizons (dreamer-dtc) each actor-critic step
   dreams one of several compiled lengths, the one boredom asks for (lax.switch over the same step at each
   static length).

The actor and critic are the pipeline's own actor-critic network (networks.py), on observations: in the real
env it acts on real observations through `nets.act`, exactly as PPO's does, so evaluation, watch_agent.py,
export and checkpoints treat a dreamer agent like any other; in imagination it reads the decoded observation
(symexp of the decoder's mean). With --dreamer-actor-input state the network is policy.LatentActorCritic: it
reads the model state in dreams and, in the real env, filters its observations with a copy of member 0 (which
`apply` refreshes after every update) as a recurrent policy carries its state. On envs with action masks the world model's mask head gives each imagined state
its mask (rssm.RSSM.mask_logits > 0); elsewhere every action is allowed.

No gradient reaches the world model from the actor-critic loss: dreams are built from stopped parameters and
the loss reads them as data (test_dreamer.py checks the gradient with respect to the world model is zero).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from hephaestus.core import networks as nets
from hephaestus.agents.dtc import intrinsic as intr
from hephaestus.agents.dtc import rssm
from hephaestus.agents.dtc.agent import WorldModelState, make_world_model
from hephaestus.agents.dreamer.policy import with_world_model
from hephaestus.core.stages import ENVS, REPLICATED, Stage, StageContext, register_stage

sg = jax.lax.stop_gradient


@struct.dataclass
class DreamerState:
    world: WorldModelState
    slow_params: Any  # EMA of the actor-critic's parameters (the slow critic; only its value head is read)
    slow_ready: jax.Array  # bool[]: False until the first update copies the network into slow_params
    return_scale: jax.Array  # float32[] EMA of the lambda-returns' 95th - 5th percentile
    intrinsic: intr.IntrinsicState  # novelty normaliser and competence EMAs (read only with novelty_coef > 0)


def member(params, i: int):
    return jax.tree.map(lambda x: x[i], params)


def start_states(model, wm_params, seq, key, burn_in: int = 0):
    """Every member's posterior state (sampled latents) at every step of replayed sequences seq [L, B] after the
    first `burn_in` (a replayed sequence starts from a zero state: its first states have little context):
    h [K, (L - burn_in) * B, deter], z [K, (L - burn_in) * B, stoch]."""
    k = jax.tree.leaves(wm_params)[0].shape[0]
    h0 = jnp.zeros((seq["obs"].shape[1], model.sizes.deter), jnp.float32)
    filt = lambda p, key: rssm.observe(model, p, seq["obs"], seq["action"], seq["first"], h0, key)[0]
    out = jax.vmap(filt)(wm_params, jax.random.split(key, k))
    flat = lambda x: x[:, burn_in:].reshape((k, -1) + x.shape[3:])
    return flat(out["h"]), flat(out["z"])


def policy_sample(network, ac_params, x, mask, key):
    """The actor's sampled action on inputs `x` (observations, or model states for --dreamer-actor-input state)."""
    out, raw = network.apply(ac_params, x, method="outputs")
    return nets._choose(network, ac_params, out, nets.critic_value(raw, network.value_bins), mask, key, False)[1]


def dream(model, wm_params, network, ac_params, h, z, key, horizon: int, with_novelty: bool,
          actor_input: str = "obs"):
    """Imagine `horizon` steps from start states (h [K, S, deter], z [K, S, stoch]) of all K members, the actor
    (params `ac_params`) choosing every action from member 0's decoded observation (`actor_input` "obs") or its state
    [h, z] ("state"); all members take the same actions. Returns (trajectory of [H, S, ...] arrays: obs (what the
    action was chosen from: the decoded observation or the state), mask (the actions allowed there), action, reward,
    cont (probability the episode goes on), novelty (the members' disagreement about the next observation, zeros
    unless `with_novelty`); final_obs [S, D], the actor's input after the last step)."""
    sizes = model.sizes
    lead = member(wm_params, 0)
    if actor_input == "state":
        decode_obs = lambda p, h, z: jnp.concatenate([h, z], -1)
    else:
        decode_obs = lambda p, h, z: rssm.symexp(model.apply(p, h, z, method=rssm.RSSM.decode)[0])
    num_starts = h.shape[1]
    all_allowed = jnp.ones((num_starts, sizes.action_dim if sizes.discrete else 1), bool)
    # The members' decoders' output layers folded into one quadratic form, once per dream (rssm.disagreement_form).
    disagreement = rssm.disagreement_form(*rssm.decoder_output_layer(wm_params)) if with_novelty else None

    def step(carry, step_key):
        h, z = carry
        key_act, key_z = jax.random.split(step_key)
        obs = decode_obs(lead, h[0], z[0])
        # The imagined state's mask from member 0's mask head (envs with action masks); a state where the head
        # allows nothing allows everything, as networks.effective_mask treats such rows.
        mask = model.apply(lead, h[0], z[0], method=rssm.RSSM.mask_logits) > 0 if sizes.mask_dim else all_allowed
        action = policy_sample(network, ac_params, obs, mask, key_act)
        a_vec = rssm.action_vector(action, sizes)
        h = jax.vmap(lambda p, h, z: model.apply(p, h, z, a_vec, method=rssm.RSSM.gru_step))(wm_params, h, z)
        prior = jax.vmap(lambda p, h: model.apply(p, h, method=rssm.RSSM.prior_logits))(wm_params, h)
        z = jax.vmap(rssm.sample_latent)(jax.random.split(key_z, h.shape[0]), prior)
        reward, cont_logit = model.apply(lead, h[0], z[0], method=rssm.RSSM.heads)
        if with_novelty:  # the variance of the members' decoded next observations (prior modes), as in part 1
            features = jax.vmap(lambda p, h, pr: model.apply(p, h, rssm.latent_mode(pr),
                                                             method=rssm.RSSM.decode_features))(wm_params, h, prior)
            novelty = rssm.decoded_disagreement(features, disagreement, sizes.obs_dim)
        else:
            novelty = jnp.zeros((num_starts,), jnp.float32)
        out = {"obs": obs, "mask": mask, "action": action, "reward": rssm.symexp(reward),
               "cont": jax.nn.sigmoid(cont_logit), "novelty": novelty}
        return (h, z), out

    (h, z), traj = jax.lax.scan(step, (h, z), jax.random.split(key, horizon))
    return traj, decode_obs(lead, h[0], z[0])


def imagine_from_replay(model, network, wm_params, ac_params, seq, key, horizon: int, with_novelty: bool,
                        burn_in: int = 0, actor_input: str = "obs"):
    """Dreams from every posterior state of replayed sequences `seq` [L, B] (start_states, then dream), built from
    stopped parameters: what the actor-critic loss reads as data. Returns (trajectory [H, L * B, ...], final_obs)."""
    key_start, key_dream = jax.random.split(key)
    wm_params, ac_params = sg(wm_params), sg(ac_params)
    h, z = start_states(model, wm_params, seq, key_start, burn_in)
    traj, final_obs = dream(model, wm_params, network, ac_params, h, z, key_dream, horizon, with_novelty, actor_input)
    return sg(traj), sg(final_obs)


def lambda_returns(reward, cont, next_value, gamma, lam):
    """R_t = r_t + gamma c_t ((1 - lambda) v_{t+1} + lambda R_{t+1}), with R_{H-1}'s tail R_H = v_H. All [H, S];
    `next_value[t]` is v_{t+1}."""

    def backward(tail, x):
        r, c, v = x
        ret = r + gamma * c * ((1.0 - lam) * v + lam * tail)
        return ret, ret

    _, returns = jax.lax.scan(backward, next_value[-1], (reward, cont, next_value), reverse=True)
    return returns


def replay_returns(reward, terminated, done, boot, gamma, lam):
    """Lambda-returns along replayed real sequences [L, B] (DreamerV3's replay value targets) and their weights:
    R_t = r_t + gamma ((1 - lambda) boot_{t+1} + lambda R_{t+1}) within an episode, r_t where transition t ended it
    (terminated), boot_t where a time limit cut it (its future is unknown: the dream's own return stands in, weight
    0), and R_{L-1} = boot_{L-1} (weight 0). `boot[t]` is the dreams' lambda-return from the state at step t."""
    cut = done & ~terminated
    # lambda_returns' recursion with the bootstrap as next values: a cut step's "reward" is its dream's return and
    # neither it nor a terminated step continues
    head = lambda_returns(jnp.where(cut, boot, reward)[:-1], (~done).astype(jnp.float32)[:-1], boot[1:], gamma, lam)
    returns = jnp.concatenate([head, boot[-1:]], 0)
    weight = jnp.concatenate([(~cut[:-1]).astype(jnp.float32), jnp.zeros_like(boot[:1])], 0)
    return returns, weight


def update_return_scale(scale, ready, returns, decay: float):
    """DreamerV3's return scale S: an EMA (decay `decay`) of the lambda-returns' 95th - 5th percentile (the first
    batch's range itself while not `ready`). The advantages are divided by max(1, S) (--dreamer-advantage-norm
    range). An EMA of the range is the range of the two percentiles' EMAs."""
    lo, hi = jnp.percentile(returns, jnp.array([5.0, 95.0]))
    return jnp.where(ready, decay * scale + (1 - decay) * (hi - lo), hi - lo)


def update_slow_critic(slow_params, params, decay: float):
    """The slow critic after one actor-critic step: an EMA of the network's parameters, decay `decay` (DreamerV3:
    0.98, its rate 0.02 every step)."""
    return jax.tree.map(lambda s, p: decay * s + (1 - decay) * p, slow_params, params)


def critic_targets(raw, target, bins: int, symlog_critic: bool):
    """Per-element regression loss of the critic's raw output [..., bins or 1] on the values `target` [...]: two-hot
    cross-entropy over symlog bins (bins > 0), else half the squared error (in symlog space with `symlog_critic`)."""
    if bins:
        return rssm.twohot_loss(raw, rssm.symlog(target))
    head = rssm.symlog(target) if symlog_critic else target
    return 0.5 * (raw[..., 0] - head) ** 2


def critic_values(raw, bins: int, symlog_critic: bool):
    """The value of the critic's raw output [..., bins or 1]."""
    if bins or not symlog_critic:
        return nets.critic_value(raw, bins)
    return rssm.symexp(raw[..., 0])


def actor_critic_loss(network, ac_params, slow_params, traj, final_obs, reward, return_scale, hyper, opts,
                      replay=None):
    """DreamerV3-style loss on one batch of dreams (all inputs are data: no gradient leaves through them), and with
    `replay` (--dreamer-replay-value: the replayed sequences the dreams started from, {"inputs": the critic's input
    at each start [L * B, ...], "reward", "terminated", "done": [L, B]}) the critic's replay value loss.
    Returns (total, (stats, returns))."""
    bins = opts.critic_bins
    out, raw = network.apply(ac_params, traj["obs"], method="outputs")
    log_prob, entropy, _ = nets._score(network, ac_params, out, None, traj["mask"], traj["action"], None)
    value_of = lambda r: critic_values(r, bins, opts.symlog_critic)
    value = value_of(raw)
    slow_value = value_of(network.apply(slow_params, jnp.concatenate([traj["obs"], final_obs[None]]),
                                        method="outputs")[1]) if opts.reads_slow_critic else None
    if opts.bootstrap == "slow":
        next_value = slow_value[1:]
    else:  # DreamerV3: the critic itself, as data (its final value is read from final_obs)
        final_value = value_of(network.apply(ac_params, final_obs, method="outputs")[1])
        next_value = sg(jnp.concatenate([value[1:], final_value[None]]))
    returns = lambda_returns(reward, traj["cont"], next_value, hyper["gamma"], hyper["gae_lambda"])
    # A dream's step t counts as much as the chance that the episode is still going then (discounted).
    discount = hyper["gamma"] * traj["cont"]
    weight = sg(jnp.concatenate([jnp.ones_like(discount[:1]), jnp.cumprod(discount[:-1], 0)], 0))
    if opts.advantage_norm not in ("batch", "range") or opts.entropy is None:  # auto, never settled by resolve
        raise ValueError(f"dreamer options not settled (advantage_norm {opts.advantage_norm!r}, entropy "
                         f"{opts.entropy!r}): resolve(config) first")
    if opts.advantage_norm == "batch":  # PPO's: mean 0 and std 1 over this batch of dreams
        raw_adv = returns - value
        advantage = sg((raw_adv - jnp.mean(raw_adv)) / (jnp.std(raw_adv) + 1e-8))
    else:  # DreamerV3's: divided by the return range (an EMA), so small advantages are not amplified
        advantage = sg((returns - value) / jnp.maximum(1.0, return_scale))
    actor_loss = -jnp.mean(weight * (advantage * log_prob + opts.entropy * entropy))
    critic_error = critic_targets(raw, sg(returns), bins, opts.symlog_critic)
    if opts.slow_critic_reg > 0:  # DreamerV3's regulariser: the critic also regresses on the slow critic's values
        critic_error = critic_error + opts.slow_critic_reg * critic_targets(raw, sg(slow_value[:-1]), bins,
                                                                              opts.symlog_critic)
    critic_loss = jnp.mean(weight * critic_error)
    replay_stats = {}
    if replay is not None:  # starts are time-major (start_states): start t * B + b is replayed step t of sequence b
        shape = replay["reward"].shape
        targets, replay_weight = replay_returns(replay["reward"], replay["terminated"], replay["done"],
                                                sg(returns[0]).reshape(shape), hyper["gamma"], hyper["gae_lambda"])
        replay_raw = network.apply(ac_params, replay["inputs"], method="outputs")[1]
        replay_error = critic_targets(replay_raw.reshape(shape + replay_raw.shape[1:]), sg(targets), bins,
                                      opts.symlog_critic)
        replay_loss = jnp.sum(replay_weight * replay_error) / jnp.maximum(jnp.sum(replay_weight), 1.0)
        critic_loss = critic_loss + opts.replay_value * replay_loss
        replay_stats = {"dreamer/replay_value_loss": replay_loss, "dreamer/replay_return": jnp.mean(targets)}
    total = actor_loss + hyper["vf_coef"] * critic_loss
    stats = {**replay_stats, "pg_loss": actor_loss, "vf_loss": critic_loss, "total_loss": total, "entropy": jnp.mean(entropy),
             "dreamer/imagined_return": jnp.mean(returns[0]), "dreamer/imagined_reward": jnp.mean(reward),
             "dreamer/imagined_cont": jnp.mean(traj["cont"]), "dreamer/value": jnp.mean(value)}
    if slow_value is not None:
        stats["dreamer/slow_value"] = jnp.mean(slow_value)
    return total, (stats, returns)


def horizon_index(boredom, horizons: tuple[int, ...], min_horizon: int, max_horizon: int):
    """Which of the sorted compiled `horizons` a dream takes: the longest not above the boredom-driven horizon
    (intrinsic.dream_horizon: max - boredom x (max - min)), the shortest if all are above it. int32[]."""
    target = intr.dream_horizon(boredom, min_horizon, max_horizon)
    return jnp.maximum(jnp.sum(jnp.asarray(horizons, jnp.float32) <= target) - 1, 0).astype(jnp.int32)


def make_dreamer(config, spec, network):
    """(init(key) -> DreamerState, apply(key, train_state, batch, state, hyper) -> stage outputs)."""
    opts, dtc = config.stages.dreamer, config.stages.dtc
    model, wm_init, wm_train = make_world_model(config, spec, score=False)
    ac_steps = opts.ac_steps(dtc.wm_steps(config.batch_size))
    with_novelty = opts.novelty_coef > 0
    horizons = tuple(sorted(set(opts.horizons))) or (opts.horizon,)

    def init(key):
        # The slow critic's shape only (zeros, no key used): the first actor-critic step copies the network in.
        shapes = jax.eval_shape(lambda k: nets.init_params(network, k, spec.obs_dim), key)
        params = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        return DreamerState(world=wm_init(key), slow_params=params, slow_ready=jnp.bool_(False),
                            return_scale=jnp.float32(0.0), intrinsic=intr.intrinsic_init())

    def imagined_reward(state: DreamerState, traj):
        if not with_novelty:
            return state, traj["reward"], {}
        intrinsic, _, competence, bonus = intr.novelty_bonus(state.intrinsic, traj["novelty"], opts.novelty_coef, dtc)
        metrics = {"dtc/novelty_raw": jnp.mean(traj["novelty"]), "dtc/intrinsic_reward": jnp.mean(bonus),
                   "dtc/competence": competence, "dtc/c_fast": intrinsic.c_fast, "dtc/c_slow": intrinsic.c_slow,
                   "dtc/boredom": intrinsic.boredom}
        return state.replace(intrinsic=intrinsic), traj["reward"] + bonus, metrics

    def ac_step(carry, step_key, hyper):
        train_state, state = carry
        key_seq, key_dream = jax.random.split(step_key)
        seq = wm_train.sample(key_seq, state.world.replay, opts.starts)  # drawn as the world model's are
        learn = lambda horizon: lambda operands: learn_from_dreams(operands, seq, key_dream, hyper, horizon)
        if len(horizons) == 1:
            return learn(horizons[0])((train_state, state))
        # Boredom picks one of the compiled lengths: each branch is the same learning step at its own static
        # horizon, so a short dream costs a short scan (a mask over one long scan would save nothing).
        index = horizon_index(state.intrinsic.boredom, horizons, dtc.min_horizon, dtc.max_horizon)
        return jax.lax.switch(index, [learn(h) for h in horizons], (train_state, state))

    def learn_from_dreams(operands, seq, key_dream, hyper, horizon: int):
        """One actor-critic step on dreams of `horizon` steps from the replayed `seq`."""
        train_state, state = operands
        traj, final_obs = imagine_from_replay(model, network, state.world.params, train_state.params, seq, key_dream,
                                              horizon, with_novelty, opts.burn_in, opts.actor_input)
        state, reward, novelty_metrics = imagined_reward(state, traj)
        if opts.survival_penalty > 0:  # the continuation head's chance that the episode ends here costs this much
            reward = reward - opts.survival_penalty * (1.0 - traj["cont"])
        slow = state.slow_params
        if opts.reads_slow_critic:  # the first step's slow critic is the network itself
            slow = jax.tree.map(lambda s, p: jnp.where(state.slow_ready, s, p), slow, train_state.params)
        replay = None
        if opts.replay_value > 0:  # the replayed steps the dreams started from (after the burn-in), as data
            real = {k: seq[k][opts.burn_in:] for k in ("obs", "reward", "terminated", "done")}
            inputs = (traj["obs"][0] if opts.actor_input == "state"  # the start states [h, z] themselves
                      else real["obs"].reshape((-1,) + real["obs"].shape[2:]))
            replay = {"inputs": inputs, "reward": real["reward"], "terminated": real["terminated"],
                      "done": real["done"]}
        grad_fn = jax.value_and_grad(actor_critic_loss, argnums=1, has_aux=True)
        (_, (stats, returns)), grads = grad_fn(network, train_state.params, slow, traj, final_obs, reward,
                                               state.return_scale, hyper, opts, replay)
        stats["grad_norm"] = optax.tree.norm(grads)
        train_state = train_state.apply_gradients(grads=grads)
        scale = update_return_scale(state.return_scale, state.slow_ready, returns, opts.return_decay)
        if opts.reads_slow_critic:
            slow = update_slow_critic(slow, train_state.params, opts.slow_critic_decay)
        state = state.replace(slow_params=slow, slow_ready=jnp.bool_(True), return_scale=scale)
        return (train_state, state), {**stats, **novelty_metrics, "dreamer/return_scale": scale,
                                      "dreamer/horizon": jnp.float32(horizon)}

    def apply(key, train_state, batch, state: DreamerState, hyper):
        key_wm, key_ac = jax.random.split(key)
        world, _, wm_metrics = wm_train(key_wm, state.world, batch)
        state = state.replace(world=world)
        (train_state, state), stats = jax.lax.scan(lambda c, k: ac_step(c, k, hyper), (train_state, state),
                                                   jax.random.split(key_ac, ac_steps))
        metrics = {**wm_metrics, **jax.tree.map(jnp.mean, stats), "dreamer/ac_steps": jnp.float32(ac_steps)}
        if opts.actor_input == "state":  # the acting policy filters with the world model as trained now
            train_state = train_state.replace(params=with_world_model(train_state.params, member(world.params, 0)))
        return train_state, batch, state, metrics

    return init, apply


@register_stage("dreamer")
def dreamer_stage(ctx: StageContext) -> Stage:
    init, apply = make_dreamer(ctx.config, ctx.env_spec, ctx.network)
    world = WorldModelState(params=REPLICATED, opt_state=REPLICATED, replay=REPLICATED, h=REPLICATED, first=ENVS)
    partition = DreamerState(world=world, slow_params=REPLICATED, slow_ready=REPLICATED, return_scale=REPLICATED,
                             intrinsic=REPLICATED)
    return Stage(name="dreamer", apply=apply, init=init, after="rollout", reads=("next_obs",), partition=partition,
                 replaces=("advantage", "ppo_update"), takes_hyper=True)
