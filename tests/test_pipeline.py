"""The training pipeline: rollout pairing, GAE, stages, masking, auto-scale, compile sharing."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hephaestus.core import networks as nets
from hephaestus.config.train_config import ConfigError, TrainConfig, auto_scale_for_batch_size, resolve
from hephaestus.envs.adapters import adapt_gymnax
from hephaestus.run.loop import TrainingError, run
from hephaestus.core.ppo import CORE_METRICS, gae, make_train
from toy_envs import MaskBugBandit, MaskedBandit, RandomWalk

# One worker runs this module, so its module fixture runs once (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("test_pipeline")

SMALL = dict(hidden_dim=16, num_layers=1, num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1,
             log_interval=2, total_timesteps=4 * 16 * 4)


def walk_env():
    env = RandomWalk()
    return adapt_gymnax(env, env.default_params, "walk")


def walk_trainer(**overrides):
    config, _ = resolve(TrainConfig.from_flat(env="walk", **{**SMALL, **overrides}))
    return make_train(config, walk_env())


@pytest.fixture(scope="module")
def walk():
    return walk_trainer()


def run_stages(trainer, runner, names, key=jax.random.PRNGKey(7)):
    """Apply the named stages in order from `runner`, as one_update does; returns the final batch."""
    stages = {s.name: s for s in trainer.pipeline}

    @jax.jit
    def go(runner):
        batch, train_state = None, runner.train_state
        for i, name in enumerate(names):  # fold_in: the rollout key does not depend on how many stages follow
            k = jax.random.fold_in(key, i)
            train_state, batch, _, _ = stages[name].apply(k, train_state, batch, runner.stages.get(name))
        return batch

    return jax.device_get(go(runner))


def test_each_transition_pairs_the_observation_with_its_action_logprob_and_value(walk):
    batch = run_stages(walk, walk.runner_state, ["rollout"])
    obs, action = batch["obs"], batch["action"]
    done = batch["terminated"] | batch["truncated"]
    # The next stored observation follows from this one and the action, unless the episode ended.
    for t in range(obs.shape[0] - 1):
        for n in range(obs.shape[1]):
            if not done[t, n]:
                assert obs[t + 1, n, 0] == obs[t, n, 0] + 2 * action[t, n] - 1
                assert obs[t + 1, n, 1] == obs[t, n, 1] + 1
            else:  # after an episode ends the next observation is a fresh start, not the final one
                assert obs[t + 1, n, 1] == 0
    # log-prob and value were computed from the stored observation.
    params = walk.runner_state.train_state.params
    logits, value = walk.network.apply(params, jnp.asarray(obs))
    log_prob = nets.categorical_log_prob(logits, jnp.asarray(batch["action_mask"]), jnp.asarray(action))
    np.testing.assert_allclose(log_prob, batch["log_prob"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value, batch["value"], rtol=1e-5, atol=1e-6)
    # Rewards are those of the transition (reward = position after the move).
    moved = obs[:, :, 0] + 2 * action - 1
    np.testing.assert_array_equal(batch["reward"], moved)


def test_episode_ends_split_into_termination_and_truncation_and_resets_differ(walk):
    batch = run_stages(walk, walk.runner_state, ["rollout"])
    obs, action = batch["obs"], batch["action"]
    moved = obs[:, :, 0] + 2 * action - 1
    np.testing.assert_array_equal(batch["terminated"], np.abs(moved) >= 3)
    truncated = (obs[:, :, 1] + 1 >= 6) & ~(np.abs(moved) >= 3)
    np.testing.assert_array_equal(batch["truncated"], truncated)
    assert batch["truncated"].any() and batch["terminated"].any()
    # Bootstrap values exist exactly where episodes were truncated, and equal V(final observation).
    assert np.all(batch["bootstrap_value"][~batch["truncated"]] == 0)
    t, n = np.argwhere(batch["truncated"])[0]
    final_obs = np.array([moved[t, n], obs[t, n, 1] + 1, obs[t, n, 2]], np.float32)
    expected = walk.network.apply(walk.runner_state.train_state.params, jnp.asarray(final_obs)[None], method="value")
    np.testing.assert_allclose(batch["bootstrap_value"][t, n], expected[0], rtol=1e-5)
    # Reset keys are split per env: fresh episodes do not all start in the same place.
    starts = obs[:, :, 2][obs[:, :, 1] == 0]
    assert len(np.unique(starts)) > 1


def hand_gae(reward, value, last_value, terminated, truncated, bootstrap, gamma, lam):
    T = len(reward)
    adv = np.zeros(T)
    running = 0.0
    for t in reversed(range(T)):
        done = terminated[t] or truncated[t]
        if done:
            next_v = 0.0 if terminated[t] else bootstrap[t]
        else:
            next_v = value[t + 1] if t + 1 < T else last_value
        delta = reward[t] + gamma * next_v - value[t]
        running = delta + (0.0 if done else gamma * lam * running)
        adv[t] = running
    return adv


def test_gae_matches_hand_computation_with_termination_and_truncation(walk):
    reward = np.array([1.0, 0.5, -1.0, 2.0, 0.0, 1.0], np.float32)
    value = np.array([0.3, -0.2, 0.8, 0.1, 0.4, -0.5], np.float32)
    terminated = np.array([0, 1, 0, 0, 0, 0], bool)
    truncated = np.array([0, 0, 0, 1, 0, 0], bool)
    bootstrap = np.array([0, 0, 0, 7.0, 0, 0], np.float32)
    last_value = np.float32(0.9)
    batch = {"reward": reward[:, None], "value": value[:, None], "terminated": terminated[:, None],
             "truncated": truncated[:, None], "bootstrap_value": bootstrap[:, None], "last_value": last_value[None]}
    advantage_stage = next(s for s in walk.pipeline if s.name == "advantage")
    _, out, _, _ = advantage_stage.apply(None, None, jax.tree.map(jnp.asarray, batch), None)
    gamma, lam = walk.config.ppo.gamma, walk.config.ppo.gae_lambda
    expected = hand_gae(reward, value, last_value, terminated, truncated, bootstrap, gamma, lam)
    np.testing.assert_allclose(out["advantage"][:, 0], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["target"][:, 0], expected + value, rtol=1e-5, atol=1e-6)
    # Truncation bootstraps (the 7.0 enters), termination does not.
    assert out["advantage"][3, 0] == pytest.approx(2.0 + gamma * 7.0 - 0.1, rel=1e-5)
    assert out["advantage"][1, 0] == pytest.approx(0.5 - (-0.2), rel=1e-5)
    # The functional core agrees with the stage.
    next_value = np.where(terminated | truncated, bootstrap, np.append(value[1:], last_value))
    direct = gae(jnp.asarray(reward), jnp.asarray(value), jnp.asarray(next_value), jnp.asarray(terminated),
                 jnp.asarray(terminated | truncated), gamma, lam)
    np.testing.assert_allclose(direct, expected, rtol=1e-5, atol=1e-6)


def test_an_extra_stage_inserted_by_configuration_changes_the_advantages(walk):
    bonus = 0.5
    with_bonus = walk_trainer(extra_stages=("reward_bonus",), reward_bonus_scale=bonus)
    assert [s.name for s in with_bonus.pipeline] == ["rollout", "reward_bonus", "advantage", "ppo_update"]
    plain = run_stages(walk, walk.runner_state, ["rollout", "advantage"])
    boosted = run_stages(with_bonus, walk.runner_state, ["rollout", "reward_bonus", "advantage"])
    np.testing.assert_array_equal(boosted["action"], plain["action"])
    np.testing.assert_allclose(boosted["reward"], plain["reward"] + bonus)
    # GAE is linear in rewards: the advantage difference is the GAE of a constant-bonus reward stream
    # with zero values, cut at the same episode ends.
    done = plain["terminated"] | plain["truncated"]
    zeros = jnp.zeros_like(plain["value"])
    expected = gae(jnp.full_like(zeros, bonus), zeros, zeros, jnp.asarray(plain["terminated"]), jnp.asarray(done),
                   walk.config.ppo.gamma, walk.config.ppo.gae_lambda)
    np.testing.assert_allclose(boosted["advantage"] - plain["advantage"], expected, rtol=1e-4, atol=1e-5)
    assert np.all(boosted["advantage"] - plain["advantage"] > 0)


def test_unknown_extra_stage_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown stage 'nope'"):
        walk_trainer(extra_stages=("nope",))


def test_chunk_returns_every_core_metric_and_advances_counters(walk):
    runner, metrics = walk.train_chunk(walk.init_runner_state(1))
    for key in CORE_METRICS:
        assert key in metrics and metrics[key].shape == (walk.config.run.log_interval,), key
        assert np.all(np.isfinite(metrics[key])), key
    assert int(runner.update_step) == walk.config.run.log_interval
    assert np.all(metrics["num_episodes"] > 0)
    lr = metrics["learning_rate"]
    assert lr[0] == pytest.approx(walk.config.ppo.lr) and lr[1] < lr[0]  # annealed in-graph
    # A shorter final chunk reuses the program and only advances by what was asked.
    runner, metrics = walk.train_chunk(runner, 1)
    assert int(runner.update_step) == walk.config.run.log_interval + 1


def test_runner_state_is_strongly_typed_so_a_restore_does_not_recompile(walk):
    runner = walk.init_runner_state(0)
    leaves = jax.tree_util.tree_leaves(runner)
    assert not any(getattr(x, "weak_type", False) for x in leaves)
    before = [(x.shape, x.dtype) for x in leaves]
    runner, _ = walk.train_chunk(runner)
    after = [(x.shape, x.dtype) for x in jax.tree_util.tree_leaves(runner)]
    assert before == after
    assert not any(getattr(x, "weak_type", False) for x in jax.tree_util.tree_leaves(runner))


def test_learning_rate_is_not_baked_into_the_compiled_programs():
    a, b = walk_trainer(lr=1e-3), walk_trainer(lr=3e-4, total_timesteps=2 * SMALL["total_timesteps"])
    ra, rb = a.init_runner_state(0), b.init_runner_state(0)
    text_a = a.compiled_chunk.lower(ra, np.int32(2)).as_text()
    text_b = b.compiled_chunk.lower(rb, np.int32(2)).as_text()
    assert text_a == text_b
    assert float(ra.hyper["lr"]) != float(rb.hyper["lr"])
    # The initial state's program (network, optimizer, env reset) is shared too, so the compilation cache serves
    # it to a run with other hyperparameters; the optimizer starts at the run's own learning rate.
    key = jax.random.PRNGKey(0)
    assert (a.fresh_runner_state.lower(key, ra.hyper).as_text()
            == b.fresh_runner_state.lower(key, rb.hyper).as_text())
    for trainer, runner in ((a, ra), (b, rb)):
        assert float(runner.train_state.opt_state.hyperparams["learning_rate"]) == np.float32(trainer.config.ppo.lr)
        assert float(runner.hyper["num_updates"]) == trainer.config.num_updates


def test_entropy_bonus_moves_linearly_to_ent_coef_final_as_data():
    scheduled, constant = walk_trainer(ent_coef=0.2, ent_coef_final=0.0), walk_trainer(ent_coef=0.2)
    assert float(constant.init_runner_state(0).hyper["ent_coef_final"]) == np.float32(0.2)  # none given: constant
    n = np.int32(2)
    assert (scheduled.compiled_chunk.lower(scheduled.init_runner_state(0), n).as_text()
            == constant.compiled_chunk.lower(constant.init_runner_state(0), n).as_text())
    (rs, ms), (rc, mc) = scheduled.train_chunk(scheduled.init_runner_state(0)), constant.train_chunk(constant.init_runner_state(0))
    num_updates = scheduled.config.num_updates  # 4: 0.2 at the first update, 0.05 at the last
    np.testing.assert_allclose(ms["ent_coef"], [0.2, 0.2 * (1 - 1 / num_updates)], rtol=1e-6)
    np.testing.assert_allclose(mc["ent_coef"], [0.2, 0.2], rtol=1e-6)
    # The loss reads the scheduled weight: the same first update, different parameters after the second.
    (r1s, _), (r1c, _) = (t.train_chunk(t.init_runner_state(0), 1) for t in (scheduled, constant))
    jax.tree.map(np.testing.assert_array_equal, r1s.train_state.params, r1c.train_state.params)
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(rs.train_state.params),
                                                         jax.tree.leaves(rc.train_state.params)))
    _, ms = scheduled.train_chunk(rs)
    np.testing.assert_allclose(ms["ent_coef"], [0.1, 0.05], rtol=1e-6)


def bandit_trainer(valid, env_class=MaskedBandit):
    env = env_class(valid)
    config, _ = resolve(TrainConfig.from_flat(env="bandit", **SMALL))
    return make_train(config, adapt_gymnax(env, env.default_params, "bandit"))


def test_masked_actions_are_never_taken_in_rollouts():
    trainer = bandit_trainer((1, 3))
    batch = run_stages(trainer, trainer.runner_state, ["rollout"])
    assert set(np.unique(batch["action"])) <= {1, 3}
    assert np.all(batch["reward"] == 1.0)


def test_a_fully_masked_observation_is_counted_warned_once_and_training_goes_on():
    trainer = bandit_trainer(())
    assert trainer.env.spec.fully_masked_is_bug is False  # the default: every action is then allowed
    messages = []
    result = run(trainer, message=messages.append)
    assert len(result.records) > 1 and result.records[-1]["update"] == trainer.config.num_updates  # all ran
    warnings = [m for m in messages if "no valid action" in m]
    assert len(warnings) == 1 and "every action is allowed" in warnings[0]
    batch = run_stages(trainer, trainer.init_runner_state(0), ["rollout"])
    assert len(np.unique(batch["action"])) > 1 and np.all(batch["reward"] == 0.0)  # any action, none valid


def test_a_fully_masked_observation_stops_training_where_the_env_declares_it_a_bug():
    trainer = bandit_trainer((), MaskBugBandit)
    assert trainer.env.spec.fully_masked_is_bug is True
    _, metrics = trainer.train_chunk(trainer.init_runner_state(0))  # the chunk donates its input
    assert metrics["fully_masked_rows"].sum() > 0
    with pytest.raises(TrainingError, match="no valid action.*declares that a bug"):
        run(trainer, message=lambda _: None)


def test_hackmatrix_declares_a_fully_masked_row_a_bug():
    from hephaestus.envs.hackmatrix.env import HackMatrix
    assert HackMatrix.fully_masked_is_bug is True


def test_a_fully_masked_row_means_every_action_is_allowed():
    logits = jnp.array([[2.0, 0.5, -1.0, 3.0, 0.0]])
    none = jnp.zeros((1, 5), bool)
    probs = np.exp(logits[0] - logits.max()) / np.exp(logits[0] - logits.max()).sum()
    draws = nets.categorical_sample(jax.random.PRNGKey(1), jnp.repeat(logits, 20000, 0), jnp.repeat(none, 20000, 0))
    np.testing.assert_allclose(np.bincount(np.asarray(draws), minlength=5) / 20000, probs, atol=0.015)
    log_probs = nets.categorical_log_prob(jnp.repeat(logits, 5, 0), jnp.repeat(none, 5, 0), jnp.arange(5))
    np.testing.assert_allclose(log_probs, np.log(probs), rtol=1e-5)
    np.testing.assert_allclose(nets.categorical_entropy(logits, none), [-(probs * np.log(probs)).sum()], rtol=1e-5)
    np.testing.assert_allclose(nets.categorical_entropy(jnp.zeros((1, 5)), none), [np.log(5)], rtol=1e-6)
    grad = jax.grad(lambda l: nets.categorical_log_prob(l, none, jnp.array([3])).sum())(logits)
    assert np.all(np.isfinite(grad)) and np.all(grad != 0)  # the unmasked policy is what is trained there


def test_masked_sampling_log_prob_and_entropy():
    logits = jnp.array([[2.0, 0.5, -1.0, 3.0, 0.0]])
    mask = jnp.array([[True, False, True, False, True]])
    draws = nets.categorical_sample(jax.random.PRNGKey(0), jnp.repeat(logits, 20000, 0), jnp.repeat(mask, 20000, 0))
    counts = np.bincount(np.asarray(draws), minlength=5)
    assert counts[1] == 0 and counts[3] == 0
    valid = np.array([2.0, -1.0, 0.0])
    probs = np.exp(valid - valid.max()) / np.exp(valid - valid.max()).sum()
    np.testing.assert_allclose(counts[[0, 2, 4]] / 20000, probs, atol=0.015)
    log_probs = nets.categorical_log_prob(jnp.repeat(logits, 3, 0), jnp.repeat(mask, 3, 0), jnp.array([0, 2, 4]))
    np.testing.assert_allclose(log_probs, np.log(probs), rtol=1e-5)
    entropy = nets.categorical_entropy(logits, mask)
    np.testing.assert_allclose(entropy, [-(probs * np.log(probs)).sum()], rtol=1e-5)
    uniform = nets.categorical_entropy(jnp.zeros((1, 5)), mask)
    np.testing.assert_allclose(uniform, [np.log(3)], rtol=1e-6)
    assert int(nets.fully_masked_rows(jnp.array([[False] * 5, [True] * 5]))) == 1
    assert np.isfinite(nets.categorical_entropy(jnp.zeros((1, 5)), jnp.zeros((1, 5), bool))).all()


@pytest.mark.parametrize("num_envs,expected", [
    (256, (4, 4)), (512, (8, 2)), (1024, (16, 2)), (2048, (32, 2)), (4096, (64, 2)), (8192, (64, 2))])
def test_auto_scale_table(num_envs, expected):
    assert auto_scale_for_batch_size(num_envs, 128) == expected
    config, note = resolve(TrainConfig.from_flat(num_envs=num_envs, num_steps=128))
    assert (config.ppo.num_minibatches, config.ppo.update_epochs) == expected
    if num_envs == 2048:
        assert note == "auto-scale: batch 262,144 -> 32 minibatches of 8,192 x 2 epochs = 64 gradient steps"
    if num_envs == 256:
        assert note == ""


def test_auto_scale_opt_out():
    config, note = resolve(TrainConfig.from_flat(num_envs=2048, num_steps=128, num_minibatches=8))
    assert (config.ppo.num_minibatches, config.ppo.update_epochs) == (8, 4)
    assert "off" in note and "--num-minibatches" in note
    config, note = resolve(TrainConfig.from_flat(num_envs=2048, num_steps=128, update_epochs=3))
    assert (config.ppo.num_minibatches, config.ppo.update_epochs) == (4, 3)


def test_indivisible_minibatches_are_rejected_before_compiling():
    with pytest.raises(ConfigError, match="does not divide"):
        resolve(TrainConfig.from_flat(num_envs=3, num_steps=5, num_minibatches=4))


def test_env_dependent_defaults_fill_only_what_is_not_given():
    """ent_coef/hidden_dim left unset (auto) take the env family's default (config.ENV_DEFAULTS) when the config is
    resolved, wherever it was made: in code, on the command line, and on a resume, where the checkpoint's own
    resolved values win."""
    from types import SimpleNamespace

    from hephaestus.run.checkpoint import config_of
    from hephaestus.run.cli import build_parser, config_from_args
    from hephaestus.config.train_config import ENV_DEFAULTS, FALLBACK_DEFAULTS

    settled = lambda config: resolve(config)[0]
    hackmatrix = ENV_DEFAULTS["hackmatrix"]["ent_coef"]
    assert hackmatrix != FALLBACK_DEFAULTS["ent_coef"]
    assert settled(TrainConfig.from_flat(env="hackmatrix")).ppo.ent_coef == hackmatrix
    assert settled(TrainConfig.from_flat(env="gymnax:CartPole-v1")).ppo.ent_coef == FALLBACK_DEFAULTS["ent_coef"]
    assert settled(TrainConfig.from_flat(env="hackmatrix", ent_coef=0.5)).ppo.ent_coef == 0.5
    assert settled(TrainConfig.from_flat(env="jumanji:Snake-v1")).network.hidden_dim == FALLBACK_DEFAULTS["hidden_dim"]
    # Discrete classic control: PureJaxRL's 2 x 64 (an env's full name is a key too); continuous keeps 256.
    assert settled(TrainConfig.from_flat(env="gymnax:CartPole-v1")).network.hidden_dim == 64
    assert settled(TrainConfig.from_flat(env="gymnax:Acrobot-v1")).network.hidden_dim == 64
    assert settled(TrainConfig.from_flat(env="gymnax:Pendulum-v1")).network.hidden_dim == FALLBACK_DEFAULTS["hidden_dim"]
    assert settled(TrainConfig.from_flat(env="gymnax:CartPole-v1", hidden_dim=32)).network.hidden_dim == 32
    hash(TrainConfig())
    parse = lambda *argv: settled(config_from_args(build_parser().parse_args(list(argv))))
    assert parse().ppo.ent_coef == hackmatrix                                       # --env hackmatrix is the default
    assert parse("--env", "gymnax:CartPole-v1").ppo.ent_coef == FALLBACK_DEFAULTS["ent_coef"]
    assert parse("--ent-coef", "0.2").ppo.ent_coef == 0.2
    # A run saved before the HackMatrix default changed continues with the bonus it was trained with.
    saved = SimpleNamespace(config=parse("--ent-coef", "0.01").to_dict(), run_dir="/tmp/checkpoints/old_run",
                            path="/tmp/checkpoints/old_run/8", step=8)
    resumed = lambda *argv: settled(config_from_args(build_parser().parse_args(list(argv)), config_of(saved)))
    assert resumed().ppo.ent_coef == 0.01
    assert resumed("--ent-coef", "0.05").ppo.ent_coef == 0.05


class StateProbe:
    """A hook that asks for the runner state after the chunks ending at `wanted` updates, records what it was
    given (the state's update counter, or None), and stops the loop after update `stop_at`."""

    def __init__(self, wanted=(), stop_at=None):
        self.wanted, self.stop_at, self.seen, self.end = set(wanted), stop_at, [], None

    def needs_state(self, update):
        return update in self.wanted

    def after_chunk(self, runner_state, record):
        given = None if runner_state is None else int(jax.device_get(runner_state.update_step))
        self.seen.append((record["update"], given))
        return self.stop_at is not None and record["update"] >= self.stop_at

    def at_end(self, runner_state, record):
        self.end = int(jax.device_get(runner_state.update_step))


def test_the_loop_queues_the_next_chunk_unless_a_hook_reads_the_state_and_the_result_is_the_same():
    """Dispatch ahead: after a chunk no hook needs, the next chunk is already queued (its input donated), so the
    hooks get None; a hook that asks gets the state of exactly that chunk; the trained parameters do not depend
    on which it was."""
    config = dict(total_timesteps=8 * 64)  # 8 updates of 64 env steps: 4 chunks of 2
    ahead, probe = walk_trainer(**config), StateProbe(wanted={4})
    result = run(ahead, hooks=[probe], message=lambda _: None)
    assert [r["update"] for r in result.records] == [2, 4, 6, 8]
    assert probe.seen == [(2, None), (4, 4), (6, None), (8, 8)] and probe.end == 8  # the last chunk: never ahead
    in_step = run(walk_trainer(**config), hooks=[StateProbe(wanted={2, 4, 6, 8})], message=lambda _: None)
    for a, b in zip(jax.tree.leaves(result.runner_state.train_state.params),
                    jax.tree.leaves(in_step.runner_state.train_state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_stop_lets_the_queued_chunk_finish_and_log_then_nothing_more_runs():
    probe = StateProbe(stop_at=2)
    result = run(walk_trainer(total_timesteps=8 * 64), hooks=[probe], message=lambda _: None)
    assert result.stopped_early
    assert [r["update"] for r in result.records] == [2, 4]  # the chunk queued behind update 2 ran and was logged
    assert probe.seen[-1] == (4, 4) and probe.end == 4  # and the final save would see its state


def test_the_checkpoint_hook_asks_for_the_state_only_when_a_save_is_due(tmp_path):
    from hephaestus.run.training_hooks import CheckpointHook, NanGuard, StopSignals

    by_updates = CheckpointHook(checkpointer=None, every_updates=4, start_update=0)
    assert [by_updates.needs_state(u) for u in (2, 4, 6)] == [False, True, True]
    by_clock = CheckpointHook(checkpointer=None, every_minutes=10.0)
    assert not by_clock.needs_state(2)
    by_clock.last_time -= 601
    assert by_clock.needs_state(2)
    assert not NanGuard().needs_state(2) and not StopSignals().needs_state(2)
