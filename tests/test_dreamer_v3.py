"""The dreamer's DreamerV3 options (specs/dreamer.md, "DreamerV3's options"): two-hot symlog regression (reward head,
critic), the return scale of the range-normalised advantages, the slow critic, and the actor-critic on the model
state with its filtering policy."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from hephaestus.agents.dreamer.dreamer import (actor_critic_loss, imagine_from_replay, lambda_returns,
                                               replay_returns, update_return_scale, update_slow_critic)
from hephaestus.agents.dreamer.options import DreamerOptions
from hephaestus.agents.dreamer.policy import LatentActorCritic, with_world_model
from hephaestus.agents.dtc import rssm
from hephaestus.core import networks as nets

pytestmark = pytest.mark.xdist_group("test_dreamer_v3")

SIZES = rssm.RSSMSizes(obs_dim=3, action_dim=2, discrete=True, deter=16, groups=4, classes=4, hidden=32)
HYPER = {"gamma": jnp.float32(0.9), "gae_lambda": jnp.float32(0.8), "vf_coef": jnp.float32(0.5)}


@pytest.fixture(scope="module")
def world():
    model = rssm.RSSM(SIZES)
    wm_params = rssm.init_ensemble(model, jax.random.PRNGKey(0), 1)
    length, batch = 6, 3
    seq = {"obs": jax.random.normal(jax.random.PRNGKey(2), (length, batch, 3)),
           "action": jax.random.randint(jax.random.PRNGKey(3), (length, batch), 0, 2),
           "first": jnp.zeros((length, batch), bool).at[0].set(True).at[3, 1].set(True)}
    return model, wm_params, seq


def test_two_hot_is_exact_on_bin_centres_and_its_mean_is_the_value_between_them():
    n = 255
    bins = rssm.twohot_bins(n)
    assert bins.shape == (n,) and float(bins[0]) == -20.0 and float(bins[-1]) == 20.0 and float(bins[n // 2]) == 0.0
    centres = bins[::17]
    encoded = rssm.twohot_encode(centres, n)
    np.testing.assert_array_equal(np.asarray(encoded), np.asarray(jax.nn.one_hot(jnp.arange(0, n, 17), n)))
    # Decoding a target distribution gives back its value: exactly on the centres, to float32 rounding between.
    np.testing.assert_array_equal(np.asarray(rssm.twohot_mean(jnp.log(encoded))), np.asarray(centres))
    values = jnp.array([-3.3, -0.01, 0.37, 1.0, rssm.symlog(475.0), 19.99], jnp.float32)
    target = rssm.twohot_encode(values, n)
    assert bool(jnp.all(jnp.sum(target > 0, -1) == 2)) and np.allclose(np.asarray(jnp.sum(target, -1)), 1.0)
    np.testing.assert_allclose(np.asarray(target @ bins), np.asarray(values), atol=1e-5)
    np.testing.assert_allclose(np.asarray(rssm.twohot_mean(jnp.log(target))), np.asarray(values), atol=1e-5)
    assert abs(float(rssm.symexp(rssm.twohot_mean(jnp.log(target[4])))) - 475.0) < 0.01
    # Outside [-20, 20] the target is the end bin; a zero-initialised head (uniform logits) predicts exactly 0.
    np.testing.assert_array_equal(np.asarray(rssm.twohot_encode(jnp.float32(25.0), n)), np.eye(n)[-1])
    assert float(rssm.twohot_mean(jnp.zeros((n,)))) == 0.0
    # The cross-entropy is smallest at the target itself and its gradient there is zero.
    best = float(rssm.twohot_loss(jnp.log(target[2] + 1e-30), values[2]))
    assert best < float(rssm.twohot_loss(jnp.zeros(n), values[2])) == pytest.approx(np.log(n))
    grad = jax.grad(lambda logits: rssm.twohot_loss(logits, values[2]))(jnp.log(target[2] + 1e-30))
    assert float(jnp.max(jnp.abs(grad))) < 1e-6


def test_the_two_hot_reward_head_starts_at_zero_and_learns_a_reward(world):
    _, _, seq = world
    sizes = rssm.RSSMSizes(**{**SIZES.__dict__, "reward_bins": 255})
    model = rssm.RSSM(sizes)
    params = jax.tree.map(lambda x: x[0], rssm.init_ensemble(model, jax.random.PRNGKey(0), 1))
    full = {**seq, "reward": jnp.full(seq["obs"].shape[:2], 5.0), "terminated": jnp.zeros(seq["obs"].shape[:2], bool)}
    h = jnp.zeros((4, sizes.deter))
    z = jax.nn.one_hot(jnp.zeros((4, sizes.groups), int), sizes.classes).reshape(4, -1)
    reward, _ = model.apply(params, h, z, method=rssm.RSSM.heads)
    assert model.apply(params, h, z, method=rssm.RSSM.reward_logits).shape == (4, 255)
    assert float(jnp.max(jnp.abs(reward))) == 0.0
    # The world model's reward loss is the two-hot cross-entropy: log(255) for the uniform head at the start.
    full = {**full, "reward": full["reward"].at[0].set(-2.0)}
    stats = jax.jit(lambda: rssm.member_loss(model, params, full, jax.random.PRNGKey(1))[1])()
    assert float(stats["wm/reward_loss"]) == pytest.approx(np.log(255), rel=1e-5)
    # A few steps on that loss teach the head a reward (symlog space in, symexp of it out).
    tx = optax.adam(3e-2)
    head_loss = lambda p: jnp.mean(rssm.twohot_loss(model.apply(p, h, z, method=rssm.RSSM.reward_logits),
                                                    rssm.symlog(jnp.float32(5.0))))

    def step(carry, _):
        p, opt = carry
        updates, opt = tx.update(jax.grad(head_loss)(p), opt, p)
        return (optax.apply_updates(p, updates), opt), None

    (params, _), _ = jax.jit(lambda: jax.lax.scan(step, (params, tx.init(params)), None, 40))()
    reward, _ = model.apply(params, h, z, method=rssm.RSSM.heads)
    assert abs(float(jnp.mean(rssm.symexp(reward))) - 5.0) < 0.5


@pytest.fixture(scope="module")
def two_hot_critic(world):
    model, wm_params, seq = world
    network = nets.ActorCritic(action_dim=2, discrete=True, hidden_dim=16, num_layers=1, value_bins=255)
    ac_params = network.init(jax.random.PRNGKey(1), jnp.zeros((1, 3)))
    traj, final_obs = jax.jit(lambda: imagine_from_replay(model, network, wm_params, ac_params, seq,
                                                          jax.random.PRNGKey(6), 5, False))()
    return network, ac_params, traj, final_obs


def test_the_two_hot_critic_predicts_zero_at_first_and_bootstraps_from_its_decoded_value(two_hot_critic):
    network, ac_params, traj, final_obs = two_hot_critic
    assert float(jnp.max(jnp.abs(network.apply(ac_params, traj["obs"], method="value")))) == 0.0
    # Another critic (its output layer's bias moved): the returns bootstrap from symexp of its two-hot mean.
    critic = ac_params["params"]["critic"]
    last = sorted(critic)[-1]
    bias = jnp.linspace(-1.0, 1.0, 255) * 3.0
    moved = {"params": {**ac_params["params"], "critic": {**critic, last: {**critic[last], "bias": bias}}}}
    opts = DreamerOptions(entropy=3e-4, advantage_norm="batch", critic_bins=255)
    (_, (stats, returns)), grads = jax.jit(lambda p: jax.value_and_grad(actor_critic_loss, argnums=1, has_aux=True)(
        network, p, p, traj, final_obs, traj["reward"], jnp.float32(0.0), HYPER, opts))(moved)
    values = network.apply(moved, jnp.concatenate([traj["obs"], final_obs[None]]), method="value")
    assert float(jnp.min(values)) > 1.0  # the moved bias favours high bins
    expected = lambda_returns(traj["reward"], traj["cont"], values[1:], HYPER["gamma"], HYPER["gae_lambda"])
    np.testing.assert_allclose(np.asarray(returns), np.asarray(expected), rtol=1e-5, atol=1e-5)
    assert float(optax.tree.norm(grads["params"]["critic"])) > 0 and np.isfinite(float(stats["vf_loss"]))


def test_the_return_scale_is_an_ema_of_the_percentile_range_and_divides_only_above_one(two_hot_critic):
    returns = jnp.arange(101, dtype=jnp.float32).reshape(1, 101)  # percentiles 5 and 95: 5 and 95
    first = update_return_scale(jnp.float32(0.0), jnp.bool_(False), returns, 0.99)
    assert float(first) == pytest.approx(90.0)
    later = update_return_scale(first, jnp.bool_(True), jnp.zeros((3, 4)), 0.99)
    assert float(later) == pytest.approx(0.99 * 90.0)
    # The actor's advantages are divided by max(1, S): a scale under 1 leaves them as they are, above 1 divides.
    network, ac_params, traj, final_obs = two_hot_critic
    opts = DreamerOptions(entropy=0.0, advantage_norm="range", critic_bins=255)

    @jax.jit
    def actor_grad(scale):
        grad = jax.grad(lambda p: actor_critic_loss(network, p, ac_params, traj, final_obs, traj["reward"],
                                                    scale, HYPER, opts)[0])(ac_params)
        return jnp.concatenate([g.ravel() for g in jax.tree.leaves(grad["params"]["actor"])])

    at_0, at_half, at_2, at_4 = (actor_grad(jnp.float32(s)) for s in (0.0, 0.5, 2.0, 4.0))
    assert float(jnp.max(jnp.abs(at_0))) > 0
    np.testing.assert_allclose(np.asarray(at_half), np.asarray(at_0), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(np.asarray(at_4), np.asarray(at_2) / 2, rtol=1e-4, atol=1e-9)


def test_the_slow_critic_is_an_ema_and_its_regulariser_pulls_the_critic_towards_it(world):
    model, wm_params, seq = world
    network = nets.ActorCritic(action_dim=2, discrete=True, hidden_dim=16, num_layers=1)
    ac_params = network.init(jax.random.PRNGKey(1), jnp.zeros((1, 3)))
    zeros = jax.tree.map(jnp.zeros_like, ac_params)
    moved = update_slow_critic(zeros, ac_params, 0.98)
    for s, p in zip(jax.tree.leaves(moved), jax.tree.leaves(ac_params)):
        np.testing.assert_allclose(np.asarray(s), 0.02 * np.asarray(p), rtol=1e-6)
    # A slow critic 3 above the critic everywhere: the regulariser adds weight x 1/2 x 3^2 per imagined step.
    critic = ac_params["params"]["critic"]
    last = sorted(critic)[-1]
    slow = {"params": {**ac_params["params"], "critic": {**critic, last: {**critic[last],
                                                                          "bias": critic[last]["bias"] + 3.0}}}}
    traj, final_obs = jax.jit(lambda: imagine_from_replay(model, network, wm_params, ac_params, seq,
                                                          jax.random.PRNGKey(6), 5, False))()

    def vf_loss(reg):
        opts = DreamerOptions(entropy=3e-4, advantage_norm="batch", slow_critic_reg=reg)
        return float(jax.jit(lambda: actor_critic_loss(network, ac_params, slow, traj, final_obs, traj["reward"],
                                                       jnp.float32(0.0), HYPER, opts)[1][0]["vf_loss"])())

    discount = HYPER["gamma"] * traj["cont"]
    weight = jnp.concatenate([jnp.ones_like(discount[:1]), jnp.cumprod(discount[:-1], 0)], 0)
    assert vf_loss(1.0) - vf_loss(0.0) == pytest.approx(float(jnp.mean(weight)) * 4.5, rel=1e-4)


def test_replay_returns_follow_real_rewards_and_ends_and_bootstrap_from_the_dreams():
    """One sequence of 5 steps, gamma 0.5, lambda 1: step 1 ends its episode (terminated), step 3 is cut by a
    time limit; boot is each step's dream return."""
    reward = jnp.array([1.0, 2.0, 4.0, 8.0, 16.0])[:, None]
    terminated = jnp.array([False, True, False, False, False])[:, None]
    done = jnp.array([False, True, False, True, False])[:, None]
    boot = jnp.array([10.0, 20.0, 30.0, 40.0, 50.0])[:, None]
    returns, weight = replay_returns(reward, terminated, done, boot, 0.5, 1.0)
    # R4 = boot4 (the sequence's end); R3 = boot3 (cut: the dream's); R2 = 4 + 0.5 R3; R1 = 2 (terminated); R0 = 1 + 0.5 R1
    np.testing.assert_allclose(np.asarray(returns)[:, 0], [2.0, 2.0, 24.0, 40.0, 50.0])
    np.testing.assert_array_equal(np.asarray(weight)[:, 0], [1, 1, 1, 0, 0])
    # lambda 0: one-step targets r_t + gamma boot_{t+1} inside an episode
    returns, _ = replay_returns(reward, terminated, done, boot, 0.5, 0.0)
    np.testing.assert_allclose(np.asarray(returns)[:, 0], [11.0, 2.0, 24.0, 40.0, 50.0])


def test_the_replay_value_loss_regresses_the_critic_on_real_returns_at_real_observations(world):
    model, wm_params, seq = world
    network = nets.ActorCritic(action_dim=2, discrete=True, hidden_dim=16, num_layers=1)
    ac_params = network.init(jax.random.PRNGKey(1), jnp.zeros((1, 3)))
    traj, final_obs = jax.jit(lambda: imagine_from_replay(model, network, wm_params, ac_params, seq,
                                                          jax.random.PRNGKey(6), 5, False))()
    length, batch = seq["first"].shape
    real = {"inputs": seq["obs"].reshape(length * batch, 3), "reward": jnp.ones((length, batch)),
            "terminated": jnp.zeros((length, batch), bool).at[2].set(True), "done": jnp.zeros((length, batch), bool)}
    real["done"] = real["terminated"]

    def losses(coef, replay):
        opts = DreamerOptions(entropy=3e-4, advantage_norm="batch", replay_value=coef)
        return jax.jit(lambda p: actor_critic_loss(network, p, ac_params, traj, final_obs, traj["reward"],
                                                   jnp.float32(0.0), HYPER, opts, replay)[1])(ac_params)

    plain, (with_replay, returns) = losses(0.0, None)[0], losses(0.3, real)
    # the replay term is its own loss on the critic at the real observations, weighted into the critic's loss
    targets, weight = replay_returns(real["reward"], real["terminated"], real["done"],
                                     returns[0].reshape(length, batch), HYPER["gamma"], HYPER["gae_lambda"])
    value = network.apply(ac_params, real["inputs"], method="value").reshape(length, batch)
    expected = float(jnp.sum(weight * 0.5 * (value - targets) ** 2) / jnp.sum(weight))
    assert float(with_replay["dreamer/replay_value_loss"]) == pytest.approx(expected, rel=1e-5)
    assert float(with_replay["vf_loss"]) == pytest.approx(float(plain["vf_loss"]) + 0.3 * expected, rel=1e-5)
    # the target of a terminated step is its own reward: the critic learns where real episodes end
    np.testing.assert_allclose(np.asarray(targets[2]), 1.0)


def test_the_actor_on_the_model_state_filters_as_the_world_model_and_dreams_on_states(world):
    model, wm_params, seq = world
    network = LatentActorCritic(sizes=SIZES, action_dim=2, discrete=True, hidden_dim=16, num_layers=1,
                                value_bins=255)
    assert nets.is_recurrent(network) and nets.carry_dim(network) == SIZES.deter + SIZES.stoch + 2
    params = with_world_model(nets.init_params(network, jax.random.PRNGKey(1), SIZES.obs_dim),
                              jax.tree.map(lambda x: x[0], wm_params))
    # Act through a replayed sequence: the state the policy reads is the world model's filtered posterior (mode).
    def act_step(carry, x):
        obs, first, key = x
        feat = network.apply(params, carry, obs, first, method="filter")
        carry, (_, action, _, _) = nets.act_carried(network, params, carry, obs, first, jnp.ones((3, 2), bool), key)
        return carry, (feat, action, carry)

    xs = (seq["obs"], seq["first"], jax.random.split(jax.random.PRNGKey(7), seq["obs"].shape[0]))
    _, (feats, actions, carries) = jax.jit(lambda: jax.lax.scan(act_step, nets.initial_carry(network, (3,)), xs))()
    np.testing.assert_array_equal(np.asarray(carries[..., -2:]), np.asarray(jax.nn.one_hot(actions, 2)))
    out, _ = rssm.observe(model, jax.tree.map(lambda x: x[0], wm_params), seq["obs"], actions, seq["first"],
                          jnp.zeros((3, SIZES.deter)), jax.random.PRNGKey(0), sample=False)
    np.testing.assert_allclose(np.asarray(feats), np.asarray(jnp.concatenate([out["h"], out["z"]], -1)),
                               rtol=1e-5, atol=1e-5)
    # Dreams hand the actor the state [h, z]; the loss trains actor and critic and nothing of either world model.
    opts = DreamerOptions(entropy=3e-4, advantage_norm="range", critic_bins=255, slow_critic_reg=1.0)

    def loss(ac, wm):
        traj, final = imagine_from_replay(model, network, wm, ac, seq, jax.random.PRNGKey(6), 4, False,
                                          actor_input="state")
        total = actor_critic_loss(network, ac, ac, traj, final, traj["reward"], jnp.float32(2.0), HYPER, opts)[0]
        return total, (traj["obs"], final)

    (grad_ac, grad_wm), (states, final) = jax.jit(jax.grad(loss, argnums=(0, 1), has_aux=True))(params, wm_params)
    assert states.shape[-1] == final.shape[-1] == SIZES.deter + SIZES.stoch
    assert float(optax.tree.norm(grad_wm)) == 0.0 and float(optax.tree.norm(grad_ac["params"]["world_model"])) == 0.0
    assert float(optax.tree.norm(grad_ac["params"]["actor"])) > 0 < float(optax.tree.norm(grad_ac["params"]["critic"]))


def test_the_network_spec_describes_the_actor_on_the_model_state():
    import dataclasses

    spec = nets.NetworkSpec(obs_dim=3, action_dim=2, discrete=True, hidden_dim=16, num_layers=1, value_bins=255,
                            world_model=nets.world_model_items(dataclasses.asdict(SIZES)))
    meta = spec.to_meta()
    assert meta["value_bins"] == 255 and meta["world_model"]["deter"] == SIZES.deter
    again = nets.NetworkSpec.from_meta(meta)
    assert again == spec
    built = again.build()
    assert isinstance(built, LatentActorCritic) and built.sizes == SIZES and built.value_bins == 255
    plain = nets.NetworkSpec(obs_dim=3, action_dim=2, discrete=True, hidden_dim=16, num_layers=1)
    assert "world_model" not in plain.to_meta() and "value_bins" not in plain.to_meta()


def test_the_options_reach_the_network_and_the_world_model_and_bad_values_are_refused():
    from hephaestus.config.train_config import ConfigError, TrainConfig, resolve
    from hephaestus.envs.registry import make_env

    flat = dict(env="gymnax:CartPole-v1", agent="dreamer")
    config, _ = resolve(TrainConfig.from_flat(**flat, dreamer_actor_input="state", dreamer_critic_bins=255,
                                              dtc_reward_bins=255))
    spec = nets.NetworkSpec.of(make_env("gymnax:CartPole-v1").spec, config)
    assert spec.value_bins == 255 and dict(spec.world_model)["reward_bins"] == 255
    assert isinstance(spec.build(), LatentActorCritic)
    plain, _ = resolve(TrainConfig.from_flat(**flat))
    assert nets.NetworkSpec.of(make_env("gymnax:CartPole-v1").spec, plain).world_model is None
    for bad in (dict(dreamer_critic_bins=1), dict(dtc_reward_bins=1), dict(dreamer_replay_value=-0.3),
                dict(dreamer_critic_bins=255, dreamer_symlog_critic=True)):
        with pytest.raises(ConfigError):
            resolve(TrainConfig.from_flat(**flat, **bad))
