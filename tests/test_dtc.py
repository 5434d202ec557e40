"""DTC part 1: the RSSM ensemble, on-device replay, the dual-timescale arithmetic and the two stages.

Sizes are tiny on purpose (2-core CI); each test compiles at most one small program.
"""

import dataclasses
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from hephaestus.agents.dtc.options import DTC_STAGES
from hephaestus.config.train_config import ConfigError, TrainConfig, resolve
from hephaestus.agents.dtc import intrinsic as intr
from hephaestus.agents.dtc import replay as rp
from hephaestus.agents.dtc import rssm
from hephaestus.agents.dtc.agent import ensemble_novelty

# One worker runs this module, so the ensemble and chain_visits fixtures are built once (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("test_dtc")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = rssm.RSSMSizes(obs_dim=3, action_dim=2, discrete=True, deter=16, groups=4, classes=4, hidden=32)
K = 3


@pytest.fixture(scope="module")
def ensemble():
    model = rssm.RSSM(SIZES)
    return model, rssm.init_ensemble(model, jax.random.PRNGKey(0), K)


def toy_sequences(key, length, batch, shift=0.0):
    """A deterministic toy system: obs_{t+1} = A obs_t + B[a_t], from random starts; `shift` moves the starts
    (and so every state) away from the training distribution."""
    k_start, k_act = jax.random.split(key)
    a_mat = jnp.array([[0.9, 0.1, 0.0], [-0.1, 0.9, 0.0], [0.0, 0.0, 1.0]])
    b = jnp.array([[0.2, 0.0, 0.0], [0.0, -0.2, 0.0]])
    obs0 = jax.random.uniform(k_start, (batch, 3), minval=-1, maxval=1) + shift
    actions = jax.random.randint(k_act, (length, batch), 0, 2)

    def step(o, a):
        return o @ a_mat.T + b[a], o

    _, obs = jax.lax.scan(step, obs0, actions)
    zeros = jnp.zeros((length, batch))
    return {"obs": obs, "action": actions, "reward": obs[..., 0], "terminated": zeros.astype(bool),
            "first": zeros.at[0].set(1).astype(bool)}


def test_stacked_parameters_have_an_ensemble_axis_and_members_differ(ensemble):
    model, params = ensemble
    for leaf in jax.tree.leaves(params):
        assert leaf.shape[0] == K and leaf.dtype == jnp.float32
    seq = toy_sequences(jax.random.PRNGKey(1), 4, 2)
    h0 = jnp.zeros((K, 2, SIZES.deter))
    first = seq["first"]

    def member(p, h, key):
        out, _ = rssm.observe(model, p, seq["obs"], seq["action"], first, h, key)
        return rssm.predict_next(model, p, out, seq["obs"], seq["action"])

    means, variances = jax.jit(jax.vmap(member))(params, h0, jax.random.split(jax.random.PRNGKey(2), K))
    assert means.shape == (K, 4, 2, 3) and bool(jnp.all(variances > 0))
    for i in range(K):
        for j in range(i + 1, K):
            assert float(jnp.max(jnp.abs(means[i] - means[j]))) > 1e-3


def test_logvar_init_sets_the_decoders_starting_variance_from_the_config():
    from hephaestus.agents.dtc.agent import sizes_from
    from hephaestus.envs.adapters import EnvSpec

    config = TrainConfig().replace(dtc_logvar_init=-2.0)
    assert config.stages.dtc.logvar_init == -2.0 and TrainConfig().stages.dtc.logvar_init == -8.0
    spec = EnvSpec(name="toy", obs_dim=3, action_dim=2, discrete=True)
    assert sizes_from(config, spec).logvar_init == -2.0  # the option reaches the model's sizes
    for init in (-8.0, -2.0):
        model = rssm.RSSM(dataclasses.replace(SIZES, logvar_init=init))
        params = rssm.init_ensemble(model, jax.random.PRNGKey(0), 1)
        h, z = jnp.zeros((1, SIZES.deter)), jnp.zeros((1, SIZES.stoch))
        _, logvar = model.apply(jax.tree.map(lambda x: x[0], params), h, z, method=rssm.RSSM.decode)
        assert np.allclose(np.asarray(logvar), init)


def test_head_loss_scale_weighs_the_reward_and_continuation_losses(ensemble):
    model, params = ensemble
    seq = toy_sequences(jax.random.PRNGKey(1), 4, 2)
    lead = jax.tree.map(lambda x: x[0], params)
    loss = lambda scale: rssm.member_loss(model, lead, seq, jax.random.PRNGKey(3), head_scale=scale)
    (base, stats), (scaled, _) = loss(1.0), loss(5.0)
    heads = float(stats["wm/reward_loss"] + stats["wm/cont_loss"])
    assert heads > 0 and float(scaled - base) == pytest.approx(4.0 * heads, rel=1e-4)


def test_mse_recon_loss_fits_the_mean_at_unit_weight_and_the_variance_as_the_nll_does():
    target = jnp.array([[0.0, 1.0, -2.0]])
    mean = jnp.array([[0.5, 0.0, -1.0]])
    grads = {}
    for mode in ("nll", "mse"):
        for logvar_value in (-8.0, 0.0):
            logvar = jnp.full((1, 3), logvar_value)
            loss = lambda m, lv: rssm.gaussian_fit(target, m, lv, mode)[0]
            grads[mode, logvar_value] = jax.grad(loss, argnums=(0, 1))(mean, logvar)
            nll = rssm.gaussian_fit(target, mean, logvar, mode)[1]
            assert float(nll) == pytest.approx(float(rssm.gaussian_fit(target, mean, logvar, "nll")[0]), rel=1e-6)
    # nll: the mean's gradient is its error weighed by exp(-logvar), ~3,000x larger at -8 than at 0
    np.testing.assert_allclose(grads["nll", -8.0][0], (mean - target) * np.exp(8.0), rtol=1e-5)
    # mse: the error itself, whatever the variance; and the variance learns exactly as with the nll
    for lv in (-8.0, 0.0):
        np.testing.assert_allclose(grads["mse", lv][0], mean - target, rtol=1e-6)
        np.testing.assert_allclose(grads["mse", lv][1], grads["nll", lv][1], rtol=1e-6)


def test_recon_loss_option_reaches_the_world_model_loss(ensemble):
    model, params = ensemble
    seq = toy_sequences(jax.random.PRNGKey(1), 4, 2)
    seq["next_obs"] = seq["obs"] + 0.1
    lead = jax.tree.map(lambda x: x[0], params)
    loss = lambda mode: rssm.member_loss(model, lead, seq, jax.random.PRNGKey(3), recon_loss=mode)
    (nll_total, nll_stats), (mse_total, mse_stats) = loss("nll"), loss("mse")
    # same metrics (the NLL's value either way); the "mse" total adds half of both squared errors
    assert float(mse_stats["wm/recon_nll"]) == pytest.approx(float(nll_stats["wm/recon_nll"]), rel=1e-6)
    assert float(mse_total - nll_total) > 0.5 * float(nll_stats["wm/recon_mse"]) > 0
    config = TrainConfig().replace(dtc_recon_loss="mse")
    assert config.stages.dtc.recon_loss == "mse" and TrainConfig().stages.dtc.recon_loss is None  # auto
    with pytest.raises(ValueError, match="recon_loss"):  # an auto never settled is refused, not read as mse
        loss(None)


def test_ego_view_lays_the_board_out_around_the_player_and_the_option_reaches_the_encoder():
    """--dtc-encoder ego: the encoder reads each cell's channels at its offset from the player (a 3 x 3 board, 2
    channels, the player's row and column in flat features 0 and 1 as fractions of rows - 1), zeros off the board;
    the flat features first, unchanged. The option reaches the model's sizes and its encoder's input width, and an
    env without a board refuses it in one line."""
    from hephaestus.agents.dtc.agent import sizes_from
    from hephaestus.envs.adapters import EnvSpec

    layout = (2, 9, 2, 3, 3, 0, 1)  # flat 2, 9 cells x 2 channels, a 3 x 3 board, player row/col in features 0, 1
    board = np.arange(18, dtype=np.float32).reshape(9, 2) + 1.0  # cell c holds (2c + 1, 2c + 2)
    views = {}
    for row, col in ((0, 0), (1, 1), (2, 1)):
        obs = np.concatenate([[row / 2, col / 2], board.ravel()]).astype(np.float32)
        view = np.asarray(rssm.ego_view(jnp.asarray(obs), layout))
        assert view.shape == (2 + 25 * 2,) and np.array_equal(view[:2], obs[:2])
        window = view[2:].reshape(5, 5, 2)  # offsets -2..2 in rows and columns, the player at the centre
        for d_row in range(-2, 3):
            for d_col in range(-2, 3):
                r, c = row + d_row, col + d_col
                expected = board[r * 3 + c] if 0 <= r < 3 and 0 <= c < 3 else np.zeros(2, np.float32)
                assert np.array_equal(window[d_row + 2, d_col + 2], expected), (row, col, d_row, d_col)
        views[row, col] = view
    assert not np.array_equal(views[0, 0], views[1, 1])  # the layout follows the player
    spec = EnvSpec(name="board", obs_dim=20, action_dim=2, discrete=True, obs_cells=(2, 9, 2),
                   obs_board=(3, 3, 0, 1))
    assert sizes_from(TrainConfig(), spec).ego_layout is None  # flat is the default
    sizes = sizes_from(TrainConfig().replace(dtc_encoder="ego"), spec)
    assert sizes.ego_layout == layout
    params = rssm.init_ensemble(rssm.RSSM(dataclasses.replace(SIZES, **{
        k: getattr(sizes, k) for k in ("obs_dim", "ego_layout")})), jax.random.PRNGKey(0), 1)
    assert params["params"]["encoder"]["Dense_0"]["kernel"].shape[1] == 2 + 25 * 2  # reads the view, not 20 inputs
    with pytest.raises(ConfigError, match="--dtc-encoder ego needs an env whose observation is a board"):
        sizes_from(TrainConfig().replace(dtc_encoder="ego"), EnvSpec(name="toy", obs_dim=3, action_dim=2,
                                                                      discrete=True))


def test_posterior_reads_the_observation_prior_does_not_and_imagination_needs_no_observation(ensemble):
    model, params = ensemble
    p0 = jax.tree.map(lambda x: x[0], params)
    h = jax.random.normal(jax.random.PRNGKey(3), (2, SIZES.deter))
    obs_a, obs_b = jnp.zeros((2, 3)), jnp.ones((2, 3)) * 2.0

    @jax.jit
    def heads(p0):
        post = [model.apply(p0, h, model.apply(p0, o, method=rssm.RSSM.encode), method=rssm.RSSM.post_logits)
                for o in (obs_a, obs_b)]
        prior = model.apply(p0, h, method=rssm.RSSM.prior_logits)  # a function of h alone
        # Prior-only imagination: a start state and actions, no observations anywhere.
        z0 = rssm.sample_latent(jax.random.PRNGKey(4), prior)
        dream = rssm.imagine(model, p0, h, z0, jnp.array([[0, 1], [1, 1], [0, 0]]), jax.random.PRNGKey(5))
        return post, prior, dream

    (post_a, post_b), prior, dream = heads(p0)
    assert float(jnp.max(jnp.abs(post_a - post_b))) > 1e-3
    assert prior.shape == post_a.shape
    np.testing.assert_allclose(np.exp(prior).sum(-1), 1.0, rtol=1e-5)
    assert float(jnp.min(jnp.exp(prior))) >= SIZES.unimix / SIZES.classes * 0.999  # unimix floor
    assert dream["obs_mean"].shape == (3, 2, 3) and dream["reward"].shape == (3, 2)
    assert all(bool(jnp.all(jnp.isfinite(v))) for v in dream.values())


def test_training_lowers_novelty_on_seen_transitions_below_unseen_ones(ensemble):
    model, params = ensemble
    tx = optax.adam(3e-3)
    train_seq = toy_sequences(jax.random.PRNGKey(6), 8, 16)

    def member_step(p, o, key):
        (loss, stats), grads = jax.value_and_grad(
            lambda p: rssm.member_loss(model, p, train_seq, key), has_aux=True)(p)
        updates, o = tx.update(grads, o, p)
        return optax.apply_updates(p, updates), o, stats, optax.tree.norm(grads)

    @jax.jit
    def train(params, opt_state, key):
        def body(carry, key):
            p, o = carry
            p, o, stats, gnorm = jax.vmap(member_step)(p, o, jax.random.split(key, K))
            return (p, o), (stats["wm/loss"], gnorm)

        return jax.lax.scan(body, (params, opt_state), jax.random.split(key, 300))

    def novelty(params, seq):
        h0 = jnp.zeros((K, seq["obs"].shape[1], SIZES.deter))
        return ensemble_novelty(model, params, seq["obs"], seq["action"], seq["first"], h0,
                                jax.random.PRNGKey(8))[0]

    novelty = jax.jit(novelty)
    unseen_seq = toy_sequences(jax.random.PRNGKey(9), 8, 16, shift=3.0)
    (trained, _), (losses, gnorms) = train(params, jax.vmap(tx.init)(params), jax.random.PRNGKey(7))
    losses, gnorms = np.asarray(losses), np.asarray(gnorms)
    assert np.all(np.isfinite(losses)) and np.all(losses != 0)
    assert np.all(np.isfinite(gnorms)) and np.all(gnorms > 0)
    assert losses[-10:].mean() < losses[:10].mean()  # it learns
    seen, unseen = float(novelty(trained, train_seq).mean()), float(novelty(trained, unseen_seq).mean())
    assert np.isfinite(seen) and np.isfinite(unseen)
    assert seen < unseen, (seen, unseen)


def test_clean_novelty_is_disagreement_minus_mean_variance_floored_at_zero():
    means = jnp.array([[[0.0, 1.0]], [[2.0, 1.0]]])  # K=2, one transition, 2 dims
    variances = jnp.array([[[0.5, 0.1]], [[0.5, 0.3]]])
    # dim 0: var of means = 1.0, mean var = 0.5 -> 0.5; dim 1: 0 - 0.2 -> floored at 0; mean over dims
    np.testing.assert_allclose(rssm.clean_novelty(means, variances), [0.25], rtol=1e-6)
    # --dtc-aleatoric-weight 0: plain disagreement (1.0 and 0.0 over the dims); 0.5: 1 - 0.25 and 0 - 0.1 -> 0
    np.testing.assert_allclose(rssm.clean_novelty(means, variances, aleatoric_weight=0.0), [0.5], rtol=1e-6)
    np.testing.assert_allclose(rssm.clean_novelty(means, variances, aleatoric_weight=0.5), [0.375], rtol=1e-6)
    # surprise: members' mean squared error against the outcome (0, 2 -> 2.0 on dim 0; 0, 0 -> 0 on dim 1) minus
    # their mean variance (0.5, 0.2), floored: (1.5 + 0) / 2
    target = jnp.array([[0.0, 1.0]])
    np.testing.assert_allclose(rssm.clean_surprise(means, variances, target), [0.75], rtol=1e-6)
    np.testing.assert_allclose(rssm.clean_surprise(means, variances, target, aleatoric_weight=0.0), [1.0], rtol=1e-6)


def test_replay_wraps_and_sampling_is_stratified():
    example = {"id": jax.ShapeDtypeStruct((2,), jnp.int32)}
    replay = rp.replay_init(10, example)
    written = 0
    for _ in range(2):  # 8 of 10 slots: still filling
        replay = rp.replay_add(replay, {"id": jnp.arange(written, written + 4)[:, None].repeat(2, 1)})
        written += 4
    assert int(replay.ptr) == 8 and int(replay.count) == 8
    idx, front = rp.sample_indices(jax.random.PRNGKey(0), replay, 1000, 0.5, window=20)  # window > count
    idx, front = np.asarray(idx), np.asarray(front)
    assert front.sum() == 500 and np.all(idx < 8) and np.all(idx >= 0)

    replay = rp.replay_add(replay, {"id": jnp.arange(8, 12)[:, None].repeat(2, 1)})  # wraps: 8, 9, 0, 1
    assert int(replay.ptr) == 2 and int(replay.count) == 10
    ids = np.asarray(replay.data["id"][:, 0])
    np.testing.assert_array_equal(ids, [10, 11, 2, 3, 4, 5, 6, 7, 8, 9])

    idx, front = rp.sample_indices(jax.random.PRNGKey(1), replay, 2000, 0.25, window=3)
    idx, front = np.asarray(idx), np.asarray(front)
    assert front.sum() == 500
    # the frontier is the 3 most recently written sequences (ids 9, 10, 11), across the wrap
    assert set(ids[idx[front]]) == {9, 10, 11}
    episodic = ids[idx[~front]]
    assert set(episodic) == set(range(2, 12))  # every stored sequence, none overwritten
    counts = np.bincount(episodic, minlength=12)[2:]
    assert counts.min() > 1500 / 10 * 0.6  # roughly uniform

    seqs = rp.replay_sample(jax.random.PRNGKey(2), replay, 4, 0.5, 3)
    assert seqs["id"].shape == (2, 4)  # time-major [L, B]


def test_reward_rich_draws_replay_a_rare_reward_and_leave_the_default_draws_unchanged():
    # 8 stored sequences of 2 steps in a buffer of 10: slot 5 holds the one large reward (a DeepSea treasure),
    # the others the small move costs; slots 8 and 9 are not written yet.
    rewards = jnp.full((8, 2), -0.001).at[5, 1].set(1.0)
    replay = rp.replay_add(rp.replay_init(10, {"reward": jax.ShapeDtypeStruct((2,), jnp.float32)}), {"reward": rewards})
    key = jax.random.PRNGKey(3)
    plain, _ = rp.sample_indices(key, replay, 1000, 0.5, window=4)
    # off (0) is the sampler as it was: the same key gives the same draws
    np.testing.assert_array_equal(rp.sample_indices(key, replay, 1000, 0.5, 4, reward_fraction=0.0)[0], plain)
    idx, front = rp.sample_indices(key, replay, 1000, 0.5, window=4, reward_fraction=0.25)
    idx, front = np.asarray(idx), np.asarray(front)
    assert front.sum() == 500 and np.all(idx < 8)  # the frontier share is kept; nothing unwritten is drawn
    rich = idx[500:750]
    # weights 1 against 7 x 0.001: the rare reward's slot is nearly every reward-rich draw, where the uniform
    # episodic draws take it about one time in eight
    assert np.mean(rich == 5) > 0.9
    assert np.mean(idx[750:] == 5) < 0.3
    # equal rewards everywhere (CartPole's 1 per step): the reward-rich draws are uniform
    flat = rp.replay_add(rp.replay_init(8, {"reward": jax.ShapeDtypeStruct((2,), jnp.float32)}),
                         {"reward": jnp.ones((8, 2))})
    counts = np.bincount(np.asarray(rp.sample_indices(key, flat, 4000, 0.0, 4, reward_fraction=1.0)[0]), minlength=8)
    assert counts.min() > 4000 / 8 * 0.8
    with pytest.raises(ConfigError, match="--dtc-reward-fraction"):
        resolve(TrainConfig().replace(env="gymnax:CartPole-v1", agent="dreamer", dtc_frontier_fraction=0.5,
                                      dtc_reward_fraction=0.6))
    with pytest.raises(ConfigError, match="--dtc-reward-power"):
        resolve(TrainConfig().replace(env="gymnax:CartPole-v1", agent="dreamer", dtc_reward_fraction=0.25,
                                      dtc_reward_power=0.0))


def test_reward_rich_draws_weigh_a_rare_reward_above_many_small_ones_at_power_2():
    # A whole run's replay (DeepSea's): 2,000 sequences, each with one move cost of 0.001, one with the treasure.
    # Proportional weights (power 1) give the treasure 1 / (1 + 1999 x 0.001), about a third of the reward-rich
    # draws; squared weights (the default) nearly all of them.
    rewards = jnp.zeros((2000, 8)).at[:, 3].set(-0.001).at[1234, 7].set(1.0)
    replay = rp.replay_add(rp.replay_init(2000, {"reward": jax.ShapeDtypeStruct((8,), jnp.float32)}), {"reward": rewards})
    key = jax.random.PRNGKey(4)
    share = lambda power: np.mean(np.asarray(rp.sample_indices(key, replay, 4000, 0.0, 4, reward_fraction=1.0,
                                                               reward_power=power)[0]) == 1234)
    assert 0.2 < share(1.0) < 0.5
    assert share(2.0) > 0.95
    assert rp.sample_indices(key, replay, 8, 0.0, 4, reward_fraction=1.0)[0].shape == (8,)


def test_rollout_is_cut_into_env_sequences():
    t, n, seq_len = 8, 3, 4
    x = jnp.arange(t * n).reshape(t, n)  # value = step * n + env
    seqs = rp.to_sequences({"x": x}, seq_len)["x"]
    assert seqs.shape == (t // seq_len * n, seq_len)
    np.testing.assert_array_equal(seqs[1], [1, 4, 7, 10])  # chunk 0, env 1: steps 0..3
    np.testing.assert_array_equal(seqs[n + 2], [14, 17, 20, 23])  # chunk 1, env 2: steps 4..7


def test_stored_sequences_are_the_written_slots_time_major_with_episode_starts():
    done = jnp.array([[0, 1, 0], [0, 0, 0], [1, 0, 0]], bool)  # three sequences of 3 steps
    replay = rp.replay_add(rp.replay_init(5, {"done": jax.ShapeDtypeStruct((3,), jnp.bool_),
                                              "x": jax.ShapeDtypeStruct((3,), jnp.int32)}),
                           {"done": done, "x": jnp.arange(9).reshape(3, 3)})
    data, seq = rp.stored_sequences(replay)
    assert data["x"].shape == (3, 3) and seq["x"].shape == (3, 3)  # 2 unwritten slots left out
    np.testing.assert_array_equal(seq["x"][:, 1], [3, 4, 5])  # [L, B]: sequence 1 down its column
    # step 0 always starts (a zero state); a step after an episode end starts the next episode
    np.testing.assert_array_equal(seq["first"], [[1, 1, 1], [0, 0, 1], [1, 0, 0]])
    assert rp.stored_sequences(replay, limit=2)[0]["x"].shape == (2, 3)


def test_ema_competence_and_boredom_match_hand_computed_values():
    state = intr.intrinsic_init()
    args = dict(fast_rate=0.1, slow_rate=0.005, threshold=0.01, rise=0.1, decay=0.3)
    expected_fast, expected_slow = [], []
    fast = slow = None
    for x in (1.0, 0.5, 0.2, 0.2):
        fast = x if fast is None else fast + 0.1 * (x - fast)
        slow = x if slow is None else slow + 0.005 * (x - slow)
        expected_fast.append(fast)
        expected_slow.append(slow)
    got = []
    for x in (1.0, 0.5, 0.2, 0.2):
        state, c = intr.competence_step(state, jnp.float32(x), **args)
        got.append((float(state.c_fast), float(state.c_slow), float(c), float(state.boredom)))
    got = np.array(got)
    np.testing.assert_allclose(got[:, 0], expected_fast, rtol=1e-6)  # 1, 0.95, 0.875, 0.8075
    np.testing.assert_allclose(got[:, 1], expected_slow, rtol=1e-6)  # 1, 0.9975, 0.993525, 0.98956...
    np.testing.assert_allclose(got[:, 2], np.maximum(np.array(expected_slow) - expected_fast, 0) / np.array(expected_slow),
                               rtol=1e-5)  # relative gap
    # competence: 0 (< 0.01: bored +0.1), 0.0475, 0.1185, 0.182 (learning: -0.3 each, floored at 0)
    np.testing.assert_allclose(got[:, 3], [0.1, 0.0, 0.0, 0.0], atol=1e-7)
    # not learning for a while: boredom rises by `rise` per update, capped at 1
    flat = intr.intrinsic_init()
    for i in range(12):
        flat, c = intr.competence_step(flat, jnp.float32(0.3), **args)
        assert float(c) == 0.0
        np.testing.assert_allclose(float(flat.boredom), min(0.1 * (i + 1), 1.0), atol=1e-6)

    # normalisation: running mean of x^2 over every transition seen
    s = intr.intrinsic_init()
    s, n1 = intr.normalise(s, jnp.array([1.0, 3.0]))  # m2 = 5
    s, n2 = intr.normalise(s, jnp.array([2.0, 2.0]))  # m2 = (10 + 8) / 4 = 4.5
    np.testing.assert_allclose(float(s.m2), 4.5, rtol=1e-6)
    np.testing.assert_allclose(n2, [2.0 / np.sqrt(4.5)] * 2, rtol=1e-5)
    np.testing.assert_allclose(n1, np.array([1.0, 3.0]) / np.sqrt(5.0), rtol=1e-5)


def test_norm_rate_lets_the_divisor_follow_falling_novelty_where_the_run_mean_keeps_the_early_batches():
    """--dtc-norm-rate: 100 batches of novelty 1, then 100 of 0.01 (a model that has learned). The run-mean divisor
    still remembers the early batches, so a late transition's n is 0.014, 1/70 of an early one's; at rate 0.05 the
    divisor has followed the present and the same transition's n is 0.13, nine times that."""
    def late_n(rate):
        s = intr.intrinsic_init()
        for x in [1.0] * 100 + [0.01] * 100:
            s, n = intr.normalise(s, jnp.full((8,), x), rate)
        return float(s.m2), float(n[0])
    m2_mean, n_mean = late_n(0.0)
    np.testing.assert_allclose(m2_mean, (100 * 1.0 + 100 * 1e-4) / 200, rtol=1e-5)  # the mean over all 1600
    m2_ema, n_ema = late_n(0.05)
    np.testing.assert_allclose(m2_ema, 1e-4 + (1.0 - 1e-4) * 0.95 ** 100, rtol=1e-3)  # an EMA after the switch
    assert n_mean < 0.02 and n_ema > 0.1  # 0.01 / sqrt(0.5) against 0.01 / sqrt(6e-3)
    # early in the run the count-weighted step (k / count) is larger than the rate and wins: the same as rate 0
    a = intr.normalise(intr.normalise(intr.intrinsic_init(), jnp.array([1.0, 3.0]), 0.05)[0], jnp.array([2.0, 2.0]), 0.05)
    np.testing.assert_allclose(float(a[0].m2), 4.5, rtol=1e-6)


def test_dtc_config_is_checked():
    base = dict(env="gymnax:CartPole-v1", num_envs=4, num_steps=12, extra_stages=DTC_STAGES)
    with pytest.raises(ConfigError, match="must divide"):
        resolve(TrainConfig.from_flat(**base, dtc_seq_len=5))
    with pytest.raises(ConfigError, match="less than one rollout"):
        resolve(TrainConfig.from_flat(**base, dtc_seq_len=4, dtc_replay_capacity=8))
    with pytest.raises(ConfigError, match="prior-scale"):
        resolve(TrainConfig.from_flat(**base, dtc_seq_len=4, dtc_prior_scale=-1.0))
    with pytest.raises(ConfigError, match="norm-rate"):
        resolve(TrainConfig.from_flat(**base, dtc_seq_len=4, dtc_norm_rate=1.5))
    with pytest.raises(ConfigError, match="head-loss-scale"):
        resolve(TrainConfig.from_flat(**base, dtc_seq_len=4, dtc_head_loss_scale=-1.0))
    with pytest.raises(ConfigError, match="logvar-init"):  # outside the decoder's clip it would be clipped
        resolve(TrainConfig.from_flat(**base, dtc_seq_len=4, dtc_logvar_init=6.0))
    hash(resolve(TrainConfig.from_flat(**base, dtc_seq_len=4))[0])  # still hashable


# One tiny CartPole config, shared by the in-process chunk test and the CLI run.
TINY = ["--env", "gymnax:CartPole-v1", "--agent", "dtc", "--num-envs", "4", "--num-steps", "8",
        "--total-timesteps", "96", "--log-interval", "2", "--hidden-dim", "16", "--num-layers", "1",
        "--num-minibatches", "2", "--update-epochs", "1", "--dtc-ensemble-size", "2", "--dtc-deter-dim", "16",
        "--dtc-stoch-groups", "4", "--dtc-stoch-classes", "4", "--dtc-hidden-dim", "16", "--dtc-seq-len", "8",
        "--dtc-replay-capacity", "16", "--dtc-wm-batch", "4", "--intrinsic-coef", "0.5"]


def test_dtc_stages_slot_in_after_the_rollout_and_own_their_state():
    from hephaestus.run.cli import build_parser, config_from_args
    from hephaestus.envs.registry import make_env
    from hephaestus.core.ppo import make_train

    config, _ = resolve(config_from_args(build_parser().parse_args(TINY)))
    assert config.extra_stages == DTC_STAGES
    trainer = make_train(config, make_env(config.env.name))  # builds and initialises; compiles nothing big
    assert [s.name for s in trainer.pipeline] == ["rollout", "world_model", "intrinsic_reward", "advantage",
                                                  "ppo_update"]
    stages = trainer.runner_state.stages
    for leaf in jax.tree.leaves(stages["world_model"].params):
        assert leaf.shape[0] == 2
    assert stages["world_model"].replay.data["obs"].shape == (16, 8, 4)
    assert stages["world_model"].h.shape == (2, 4, 16)
    with pytest.raises(ValueError, match="put 'world_model' before it"):
        make_train(config.replace(extra_stages=("intrinsic_reward",)), make_env(config.env.name))


@pytest.mark.heavy
def test_cli_agent_dtc_runs_end_to_end_as_one_compiled_chunk(tmp_path):
    # 3 updates in chunks of 2: the final, shorter chunk reuses the one compiled program (one compile line).
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "train_purejaxrl.py"), *TINY,
                          "--checkpoint-dir", str(tmp_path), "--run-name", "dtc", "--no-wandb"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("compile:") == 1, out.stdout
    lines = (tmp_path / "dtc" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    records = [r for r in records if "wm/loss" in r]
    assert records
    for key in ("wm/loss", "wm/recon_nll", "wm/kl", "wm/reward_loss", "wm/cont_loss", "wm/grad_norm",
                "dtc/novelty_raw", "dtc/novelty", "dtc/competence", "dtc/c_fast", "dtc/c_slow", "dtc/boredom",
                "dtc/intrinsic_reward", "dtc/intrinsic_share", "mean_episode_return"):
        assert all(key in r and np.isfinite(r[key]) for r in records), key
    assert all(r["wm/loss"] != 0 and r["wm/grad_norm"] > 0 for r in records)


# ---- issue 20: the novelty signal -------------------------------------------------------------------------------

def chain_batch(num_envs=2, length=4, episodes=2):
    """A deterministic one-hot chain: each episode walks states 0..length-1 (action 0 throughout) and ends,
    terminated, on state `length` (the pre-reset final observation); the next step starts again at 0."""
    t = np.arange(episodes * length) % length
    obs = np.eye(length + 1, dtype=np.float32)[t]
    next_obs = np.eye(length + 1, dtype=np.float32)[t + 1]
    term = (t == length - 1)
    tile = lambda x: jnp.asarray(np.repeat(x[:, None], num_envs, 1))
    return {"obs": tile(obs), "next_obs": tile(next_obs), "action": jnp.zeros((len(t), num_envs), jnp.int32),
            "reward": tile(term.astype(np.float32)), "terminated": tile(term),
            "truncated": jnp.zeros((len(t), num_envs), bool)}, term


def tiny_world_model(**changes):
    from hephaestus.agents.dtc.agent import make_world_model
    from hephaestus.envs.adapters import EnvSpec

    config = TrainConfig.from_flat(env="gymnax:CartPole-v1", num_envs=2, num_steps=8, extra_stages=DTC_STAGES,
                         dtc_ensemble_size=3, dtc_deter_dim=16, dtc_stoch_groups=4, dtc_stoch_classes=4,
                         dtc_hidden_dim=32, dtc_seq_len=4, dtc_wm_batch=4, dtc_replay_capacity=16,
                         dtc_frontier_window=8, **{"dtc_replay_ratio": 16.0, **changes})
    config = resolve(config)[0]  # the autos settled (the recon loss: nll, the world model's off HackMatrix)
    spec = EnvSpec(name="chain", obs_dim=5, discrete=True, action_dim=2)
    model, init, train = make_world_model(config, spec)
    return config, model, init, jax.jit(train)


@pytest.fixture(scope="module")
def chain_visits():
    """Novelty of the same chain batch on visits 1..12 (one world_model update per visit), and the state before
    the first visit."""
    config, model, init, train = tiny_world_model()
    batch, term = chain_batch()
    state = init(jax.random.PRNGKey(0))
    first_state, novelties = state, []
    for i in range(12):
        state, novelty, metrics = train(jax.random.PRNGKey(100 + i), state, batch)
        novelties.append(np.asarray(novelty))
    return config, model, first_state, batch, term, np.stack(novelties), metrics


def test_replay_ratio_sets_the_world_model_steps(chain_visits):
    config, *_, metrics = chain_visits
    assert config.stages.dtc.wm_steps(config.batch_size) == 16  # 16 replayed transitions per env step x 16 env steps / (4 x 4) per step
    assert float(metrics["wm/steps"]) == 16
    assert TrainConfig.from_flat(dtc_replay_ratio=0.0).stages.dtc.wm_steps(64 * 128) == 0
    assert TrainConfig.from_flat(dtc_seq_len=8, dtc_wm_batch=16, dtc_replay_ratio=1.0).stages.dtc.wm_steps(16 * 32) == 4
    with pytest.raises(ConfigError, match="replay-ratio"):
        resolve(TrainConfig.from_flat(env="gymnax:CartPole-v1", num_envs=4, num_steps=16, extra_stages=DTC_STAGES,
                            dtc_replay_ratio=-1.0))


def test_novelty_is_scored_before_the_model_learns_from_the_batch(chain_visits):
    config, model, first_state, batch, term, novelties, _ = chain_visits
    done = batch["terminated"]
    first = jnp.concatenate([first_state.first[None], done[:-1]], 0)
    dtc = config.stages.dtc
    before, _, _ = ensemble_novelty(model, first_state.params, batch["obs"], batch["action"], first, first_state.h,
                                    jax.random.PRNGKey(0), dtc.aleatoric_weight, dtc.novelty_signal, batch["next_obs"])
    np.testing.assert_allclose(novelties[0], np.asarray(before), rtol=1e-5, atol=1e-7)
    # a transition's bonus the first time it is seen is higher than after 10 visits
    assert np.all(novelties[0] > novelties[10]), (novelties[0], novelties[10])


def test_end_of_episode_novelty_falls_with_visits_like_the_others(chain_visits):
    *_, term, novelties, _ = chain_visits
    end, other = novelties[:, term].mean((1, 2)), novelties[:, ~term].mean((1, 2))
    # The last transition of each episode is trained against its true final observation (next_obs), so its
    # novelty falls like every other transition's. (Without next_obs it never fell: on visits 10-12 it was 1.4x
    # its first value, the others 0.56x; with it, 0.01x and 0.03x.)
    assert end[9:].mean() < 0.2 * end[0], end
    assert other[9:].mean() < 0.2 * other[0], other


def test_competence_is_scale_free_and_changes_the_bonus():
    args = dict(fast_rate=0.1, slow_rate=0.005, threshold=0.01, rise=0.1, decay=0.3)
    falling = (1.0, 0.8, 0.5, 0.3)
    for scale in (1.0, 1e-3):  # raw novelty in other units: the same competence (no drift with the normaliser)
        state, got = intr.intrinsic_init(), []
        for x in falling:
            state, c = intr.competence_step(state, jnp.float32(x * scale), **args)
            got.append(float(c))
        if scale == 1.0:
            reference = got
        np.testing.assert_allclose(got, reference, rtol=1e-4)
    assert reference[0] == 0.0 and reference[-1] > 0.1
    # competence is a gain on novelty: with it on, a novel transition pays more while the model is learning
    from hephaestus.agents.dtc.agent import intrinsic_reward_stage
    from hephaestus.core.stages import StageContext

    def bonus(coef):
        cfg = TrainConfig.from_flat(env="gymnax:CartPole-v1", extra_stages=DTC_STAGES, dtc_competence_coef=coef)
        stage = intrinsic_reward_stage(StageContext(config=cfg, env_spec=None, network=None))
        state = intr.intrinsic_init()
        for x in falling:
            batch = {"dtc_novelty": jnp.full((4, 2), x, jnp.float32), "reward": jnp.zeros((4, 2))}
            _, out, state, _ = stage.apply(None, None, batch, state)
        return float(out["intrinsic_reward"].mean())

    assert bonus(1.0) > 1.05 * bonus(0.0)


def test_randomized_prior_stays_fixed_differs_per_member_and_its_novelty_falls_with_visits():
    _, model, init, train = tiny_world_model(dtc_prior_scale=1.0)
    batch, _ = chain_batch()
    state = init(jax.random.PRNGKey(0))
    prior0, fit0 = (state.params["params"][name] for name in ("random_prior", "prior_fit"))
    novelties = []
    for i in range(12):
        state, novelty, _ = train(jax.random.PRNGKey(100 + i), state, batch)
        novelties.append(np.asarray(novelty))
    prior, fit = (state.params["params"][name] for name in ("random_prior", "prior_fit"))
    for before, after in zip(jax.tree.leaves(prior0), jax.tree.leaves(prior)):  # never trained
        np.testing.assert_array_equal(np.asarray(before), np.asarray(after))
    kernel = np.asarray(prior["Dense_0"]["kernel"])
    assert float(np.max(np.abs(kernel[0] - kernel[1]))) > 0.1  # each member its own draw
    assert any(float(np.max(np.abs(np.asarray(b) - np.asarray(a)))) > 0  # the correction that cancels it learns
               for b, a in zip(jax.tree.leaves(fit0), jax.tree.leaves(fit)))
    assert np.all(novelties[0] > 3 * novelties[10]), (novelties[0], novelties[10])


def test_progress_competence_pays_the_novelty_being_learned_and_not_the_novelty_left_alone():
    # learning_progress by hand: the share of each transition's novelty the update removed, and the batch's share
    raw = jnp.array([1.0, 1.0, 0.5, 0.0], jnp.float32)
    after = jnp.array([0.25, 1.0, 0.75, 0.0], jnp.float32)  # learned 3/4; untouched; rose (no progress); none at all
    per, share = intr.learning_progress(raw, after)
    np.testing.assert_allclose(np.asarray(per), [0.75, 0.0, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(float(share), 0.75 / 2.5, rtol=1e-6)
    # in the stage: two transitions of the same novelty, one learned by the update and one not; the learned one pays
    # (1 + c_t) x the other, and boredom reads the batch's share (global competence would pay both alike)
    from hephaestus.agents.dtc.agent import intrinsic_reward_stage
    from hephaestus.core.stages import StageContext

    def apply(competence, dtc_novelty_after):
        cfg = TrainConfig.from_flat(env="gymnax:CartPole-v1", extra_stages=DTC_STAGES, dtc_competence=competence,
                                    dtc_competence_coef=1.0)
        stage = intrinsic_reward_stage(StageContext(config=cfg, env_spec=None, network=None))
        batch = {"dtc_novelty": jnp.ones((2, 2), jnp.float32), "reward": jnp.zeros((2, 2)),
                 "dtc_novelty_after": dtc_novelty_after}
        if dtc_novelty_after is None:
            del batch["dtc_novelty_after"]
        _, out, _, metrics = stage.apply(None, None, batch, intr.intrinsic_init())
        return np.asarray(out["intrinsic_reward"]), float(metrics["dtc/competence"])

    learned_half = jnp.array([[0.5, 1.0], [0.5, 1.0]], jnp.float32)  # env 0's transitions learned by half, env 1's not
    bonus, competence = apply("progress", learned_half)
    np.testing.assert_allclose(bonus[:, 0], 1.5 * bonus[:, 1], rtol=1e-5)
    np.testing.assert_allclose(competence, 0.25, rtol=1e-5)
    bonus_global, _ = apply("global", None)
    np.testing.assert_allclose(bonus_global[:, 0], bonus_global[:, 1])


def test_progress_competence_scores_the_rollout_again_after_the_world_models_steps():
    from hephaestus.agents.dtc.agent import world_model_stage
    from hephaestus.envs.adapters import EnvSpec
    from hephaestus.core.stages import StageContext

    config, model, *_ = tiny_world_model(dtc_competence="progress")
    spec = EnvSpec(name="chain", obs_dim=5, discrete=True, action_dim=2)
    stage = world_model_stage(StageContext(config=config, env_spec=spec, network=None))
    batch, _ = chain_batch()
    state = stage.init(jax.random.PRNGKey(0))
    _, out, new_state, metrics = jax.jit(stage.apply)(jax.random.PRNGKey(1), None, batch, state)
    before, after = np.asarray(out["dtc_novelty"]), np.asarray(out["dtc_novelty_after"])
    # `after` is the trained ensemble's novelty from the same filter state: the update's learning shows in it
    done = batch["terminated"]
    first = jnp.concatenate([state.first[None], done[:-1]], 0)
    dtc = config.stages.dtc
    expected, _, _ = ensemble_novelty(model, new_state.params, batch["obs"], batch["action"], first, state.h,
                                      jax.random.PRNGKey(0), dtc.aleatoric_weight, dtc.novelty_signal,
                                      batch["next_obs"])
    np.testing.assert_allclose(after, np.asarray(expected), rtol=1e-5, atol=1e-7)
    assert after.mean() < 0.8 * before.mean(), (before.mean(), after.mean())  # 0.081 against 0.115
    assert float(metrics["dtc/novelty_after"]) == pytest.approx(after.mean(), rel=1e-5)
    # the global mode writes no second score; a frozen model has no progress to measure
    config_global, *_ = tiny_world_model()
    global_stage = world_model_stage(StageContext(config=config_global, env_spec=spec, network=None))
    _, out_global, _, _ = jax.jit(global_stage.apply)(jax.random.PRNGKey(1), None, batch, state)
    assert "dtc_novelty_after" not in out_global
    with pytest.raises(ConfigError, match="replay-ratio"):
        tiny_world_model(dtc_competence="progress", dtc_replay_ratio=0.0)
    with pytest.raises(ConfigError, match="scored once"):  # the dreamer has no world_model stage to score twice
        resolve(TrainConfig.from_flat(env="gymnax:CartPole-v1", num_envs=2, num_steps=8, agent="dreamer-dtc",
                                      dtc_seq_len=4, dtc_competence="progress"))
