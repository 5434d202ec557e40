"""Evaluation: the one policy (networks.act), declared episode statistics in training (episode/) and in
evaluation episodes (eval/), the loop's --eval-every, eval.json, and scripts/evaluate.py and plot_runs.py."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hephaestus.envs import episode_stats
from hephaestus.core import networks as nets
from hephaestus.config.train_config import ConfigError, TrainConfig, resolve
from hephaestus.envs.adapters import adapt_gymnax
from hephaestus.core.evaluation import make_evaluator, policy_index, summarise
from hephaestus.run.loop import run
from hephaestus.core.ppo import make_train
from hephaestus.core.sinks import chunk_reduce
from toy_envs import StatWalk

# One worker runs this module, so its module fixtures run once (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("test_evaluation")

SMALL = dict(hidden_dim=16, num_layers=1, num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1,
             log_interval=2, total_timesteps=4 * 16 * 4)
TINY = ("--env", "gymnax:CartPole-v1", "--num-envs", "4", "--num-steps", "8", "--total-timesteps", "64",
        "--log-interval", "2", "--hidden-dim", "16", "--num-layers", "1", "--num-minibatches", "2",
        "--update-epochs", "1", "--no-wandb")


def stat_walk():
    env = StatWalk()
    return adapt_gymnax(env, env.default_params, "statwalk")


def walk_trainer(**overrides):
    config, _ = resolve(TrainConfig.from_flat(env="statwalk", **{**SMALL, **overrides}))
    return make_train(config, stat_walk())


@pytest.fixture(scope="module")
def walk():
    return walk_trainer()


# ------------------------------------------------------------------------------------------------ the policy
def test_random_action_is_uniform_over_valid_actions_and_within_bounds():
    """networks.random_action, the baseline evaluate.py --random measures: valid actions only, each about equally
    often; continuous actions inside their bounds."""
    mask = jnp.zeros((4000, 5), bool).at[:, 1].set(True).at[:, 3].set(True)
    action = np.asarray(nets.random_action(jax.random.PRNGKey(0), mask, True))
    assert set(np.unique(action)) == {1, 3} and abs((action == 1).mean() - 0.5) < 0.05
    cont = np.asarray(nets.random_action(jax.random.PRNGKey(1), jnp.ones((500, 1), bool), False, (-0.1, -2.0),
                                         (0.1, 2.0)))
    assert cont.shape == (500, 2) and (np.abs(cont) <= [0.1, 2.0]).all() and cont[:, 1].std() > 0.5


def test_greedy_act_is_the_argmax_over_valid_actions_and_sampling_respects_the_mask():
    net = nets.ActorCritic(action_dim=6, discrete=True, hidden_dim=8, num_layers=1)
    params = net.init(jax.random.PRNGKey(0), jnp.zeros((1, 3)))
    obs = jax.random.normal(jax.random.PRNGKey(1), (64, 3)) * 50.0
    mask = jax.random.bernoulli(jax.random.PRNGKey(2), 0.5, (64, 6)).at[:, 2].set(True)
    logits, value = net.apply(params, obs)
    env_action, action, log_prob, v = nets.act(net, params, obs, mask, jax.random.PRNGKey(3), greedy=True)
    expected = np.argmax(np.where(np.asarray(mask), np.asarray(logits), -np.inf), axis=-1)
    np.testing.assert_array_equal(action, expected)
    np.testing.assert_array_equal(env_action, action)
    assert np.all(np.asarray(mask)[np.arange(64), np.asarray(action)])
    # the best logit overall is often masked out: greedy is not the plain argmax
    assert np.any(np.argmax(np.asarray(logits), axis=-1) != expected)
    np.testing.assert_allclose(log_prob, nets.categorical_log_prob(logits, mask, action), rtol=1e-6)
    np.testing.assert_array_equal(v, value)
    sampled = nets.act(net, params, obs, mask, jax.random.PRNGKey(4), greedy=False)[1]
    assert np.all(np.asarray(mask)[np.arange(64), np.asarray(sampled)])


def test_unimix_floors_every_valid_action_keeps_the_greedy_choice_and_round_trips_through_the_meta():
    """--unimix: the network's policy is (1 - u) softmax + u / n, so a policy whose logits all but rule an action
    out still gives it about u / n; masked actions stay at 0, greedy actions are the unmixed argmax, and the
    setting travels with checkpoints and exports (NetworkSpec meta; older files mean 0)."""
    u = 0.1
    plain = nets.NetworkSpec(obs_dim=3, action_dim=6, discrete=True, hidden_dim=8, num_layers=1)
    mixed = nets.NetworkSpec(**{**vars(plain), "unimix": u})
    net, mix_net = plain.build(), mixed.build()
    params = net.init(jax.random.PRNGKey(0), jnp.zeros((1, 3)))
    # an actor 1000 times the initial one: near-deterministic logits
    params = {"params": {**params["params"], "actor": jax.tree.map(lambda w: w * 1000.0, params["params"]["actor"])}}
    obs = jax.random.normal(jax.random.PRNGKey(1), (64, 3))
    logits, value = net.apply(params, obs)
    mixed_out, mixed_value = mix_net.apply(params, obs)  # unimix adds no parameters
    probs = np.asarray(jax.nn.softmax(logits, axis=-1))
    np.testing.assert_allclose(np.exp(np.asarray(mixed_out)), (1 - u) * probs + u / 6, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(mixed_value, value)
    assert probs.min() < 1e-4  # without the mix some action is all but ruled out ...
    mask = jnp.ones((64, 6), bool).at[:, 0].set(False)
    log_p = np.stack([np.asarray(nets.categorical_log_prob(mixed_out, mask, jnp.full((64,), a))) for a in range(6)], -1)
    assert np.all(np.exp(log_p[:, 1:]) >= u / 6 * 0.99) and np.all(np.exp(log_p[:, 0]) == 0.0)  # ... not with it
    np.testing.assert_allclose(np.exp(log_p).sum(-1), 1.0, rtol=1e-5)
    greedy = nets.act(mix_net, params, obs, mask, jax.random.PRNGKey(2), greedy=True)[1]
    np.testing.assert_array_equal(greedy, nets.act(net, params, obs, mask, jax.random.PRNGKey(2), greedy=True)[1])
    assert np.asarray(nets.categorical_entropy(mixed_out, mask)).min() > np.asarray(
        nets.categorical_entropy(logits, mask)).min()
    assert nets.NetworkSpec.from_meta(mixed.to_meta()).unimix == u
    assert nets.NetworkSpec.from_meta({k: v for k, v in mixed.to_meta().items() if k != "unimix"}).unimix == 0.0
    config = resolve(TrainConfig.from_flat(env="statwalk", **SMALL, unimix=0.05))[0]
    assert nets.NetworkSpec.of(stat_walk().spec, config).unimix == 0.05
    with pytest.raises(ConfigError, match="--unimix must be in"):
        resolve(TrainConfig.from_flat(env="statwalk", **SMALL, unimix=1.0))


def test_continuous_act_clips_what_the_env_receives_and_greedy_is_the_mean():
    net = nets.ActorCritic(action_dim=2, discrete=False, hidden_dim=8, num_layers=1, action_low=(-0.1, -2.0),
                           action_high=(0.1, 2.0))
    params = net.init(jax.random.PRNGKey(0), jnp.zeros((1, 3)))
    params = jax.tree.map(lambda x: x * 30.0, params)  # means far outside the bounds
    obs = jax.random.normal(jax.random.PRNGKey(1), (32, 3))
    mean, _ = net.apply(params, obs)
    env_action, action, _, _ = nets.act(net, params, obs, None, None, greedy=True)
    np.testing.assert_array_equal(action, mean)
    bounds = np.array([[-0.1, -2.0], [0.1, 2.0]], np.float32)
    np.testing.assert_array_equal(env_action, np.clip(mean, bounds[0], bounds[1]))
    env_action, action, log_prob, _ = nets.act(net, params, obs, None, jax.random.PRNGKey(2), greedy=False)
    assert np.all(np.abs(np.asarray(env_action)[:, 0]) <= bounds[1, 0]) and np.any(np.abs(np.asarray(action)[:, 0]) > 0.1)
    np.testing.assert_allclose(nets.evaluate(net, params, obs, None, action)[0], log_prob, rtol=1e-5)


# ------------------------------------------------------------------------------------------------ training
def test_training_reports_declared_stats_of_the_episodes_that_ended(walk):
    rollout = next(s for s in walk.pipeline if s.name == "rollout")
    runner = walk.init_runner_state(3)
    _, batch, _, metrics = jax.jit(rollout.apply)(jax.random.PRNGKey(5), runner.train_state, None,
                                                  runner.stages["rollout"])
    batch, metrics = jax.device_get((batch, metrics))
    obs, action = batch["obs"], batch["action"]
    done = batch["terminated"] | batch["truncated"]
    pos = obs[:, :, 0] + 2 * action - 1
    right, reach, hit, reach2, reach3, reach_max, ended = 0, 0.0, 0, 0, 0, 0.0, 0
    for n in range(obs.shape[1]):  # a fresh state: every episode that ends here started in this rollout
        start = 0
        for t in np.flatnonzero(done[:, n]):
            r = float(np.abs(pos[start:t + 1, n]).max())
            right += int(action[start:t + 1, n].sum())
            reach += r
            reach2, reach3, reach_max = reach2 + (r >= 2), reach3 + (r >= 3), max(reach_max, r)
            hit += int(batch["terminated"][t, n])
            ended += 1
            start = t + 1
    assert ended == metrics["num_episodes"] > 0 and 0 < hit < ended
    assert metrics["episode/right_moves_per_episode"] == right
    assert metrics["episode/reach"] == reach and metrics["episode/reach_max"] == reach_max
    assert metrics["episode/reach>=2"] == reach2 and metrics["episode/reach>=3"] == reach3
    assert metrics["episode/hit_bound_rate"] == hit
    # the record divides the sums by the chunk's episodes
    record = chunk_reduce({k: np.array([v, v]) for k, v in metrics.items()})
    assert record["episode/right_moves_per_episode"] == pytest.approx(right / ended)
    assert record["episode/hit_bound_rate"] == pytest.approx(hit / ended)
    assert record["episode/reach_max"] == reach_max


def test_a_checkpoint_from_before_a_new_statistic_resumes_everything_but_it(walk, tmp_path):
    """An env that declares a statistic more than when the run was saved (HackMatrix's programs_owned, 2 Dec)
    resumes the run's env states, statistics, weights and optimizer as they were; only the new statistic's
    running values start at 0, and a note says so."""
    from hephaestus.run import checkpoint as ck
    from hephaestus.envs.episode_stats import EpisodeStat

    rollout = next(s for s in walk.pipeline if s.name == "rollout")
    runner = walk.init_runner_state(3)
    _, _, mid_rollout, _ = jax.jit(rollout.apply)(jax.random.PRNGKey(5), runner.train_state, None,
                                                  runner.stages["rollout"])
    params = jax.tree.map(lambda x: x + 0.5, runner.train_state.params)  # not the fresh init's
    saved = runner.replace(train_state=runner.train_state.replace(params=params),
                           stages={**runner.stages, "rollout": mid_rollout})
    assert float(jnp.sum(mid_rollout.episode_stats["right_moves"])) > 0  # episodes in progress carry counts
    saver = ck.Checkpointer(str(tmp_path / "run"), walk, export_params=False)
    saver.save(saved)
    saver.complete()

    class LeftWalk(StatWalk):
        episode_stats = StatWalk.episode_stats + (EpisodeStat("left_moves", "sum"),)

        def step_env(self, key, state, action, params):
            obs, state, reward, terminated, info = super().step_env(key, state, action, params)
            stats = {**info["episode_stats"], "left_moves": (action == 0).astype(jnp.float32)}
            return obs, state, reward, terminated, {**info, "episode_stats": stats}

    env = LeftWalk()
    newer = make_train(walk.config, adapt_gymnax(env, env.default_params, "statwalk"))
    restored = ck.restore(ck.locate(str(tmp_path / "run")), newer)
    out = restored.runner_state
    assert not restored.exact
    assert [n for n in restored.notes if "left_moves" in n and "count from 0" in n] == restored.notes
    got, want = out.stages["rollout"], mid_rollout
    np.testing.assert_array_equal(got.episode_stats["left_moves"], 0.0)
    for name in ("right_moves", "reach", "hit_bound"):
        np.testing.assert_array_equal(got.episode_stats[name], want.episode_stats[name])
    for a, b in zip(jax.tree.leaves((got.env_state, got.obs, got.episode_return, out.train_state)),
                    jax.tree.leaves((want.env_state, want.obs, want.episode_return, saved.train_state))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ------------------------------------------------------------------------------------------------ evaluation
def test_evaluation_runs_k_episodes_to_their_end_or_the_cap(walk):
    env, params = stat_walk(), walk.runner_state.train_state.params
    full = jax.device_get(make_evaluator(env, walk.network, 7, 50)(params, jax.random.PRNGKey(0), policy_index("greedy")))
    assert full["return"].shape == (7,) and full["finished"].all()
    assert np.all((full["length"] >= 1) & (full["length"] <= 6))  # the walk truncates at 6 steps
    # an episode that did not hit the bound ran to the step limit; the flag and the level agree
    hit = full["stats"]["hit_bound"] > 0
    assert np.all(full["length"][~hit] == 6) and np.all(full["stats"]["reach"][hit] == 3)
    assert np.all(full["stats"]["right_moves"] <= full["length"])
    capped = jax.device_get(make_evaluator(env, walk.network, 7, 2)(params, jax.random.PRNGKey(0), policy_index("greedy")))
    assert capped["length"].max() <= 2
    assert np.all(capped["finished"] == (capped["stats"]["hit_bound"] > 0))  # ended within 2 steps: hit
    m = summarise(capped, env.spec.episode_stats, "eval/")
    assert m["eval/capped_rate"] == pytest.approx(1 - capped["finished"].mean())
    assert m["eval/episodes"] == 7 and m["eval/return_max"] == capped["return"].max()
    assert m["eval/hit_bound_rate"] == pytest.approx(np.mean(capped["stats"]["hit_bound"] > 0))
    assert m["eval/reach>=2"] == pytest.approx(np.mean(capped["stats"]["reach"] >= 2))


def test_eval_json_keeps_each_episodes_statistics(walk, tmp_path):
    """eval.json's per_episode record carries every declared statistic game by game, so a rate can be broken
    down (e.g. which HackMatrix games looped on UNDO); the summary's rates are their means."""
    from hephaestus.core.evaluation import write_eval_json

    env, params = stat_walk(), walk.runner_state.train_state.params
    out = jax.device_get(make_evaluator(env, walk.network, 7, 4)(params, jax.random.PRNGKey(4), policy_index("sampled")))
    metrics = summarise(out, env.spec.episode_stats, "eval/")
    data = json.loads(open(write_eval_json(str(tmp_path / "e.json"), metrics, {"eval/": out}, {})).read())
    stats = data["per_episode"]["eval/"]["stats"]
    assert set(stats) == {s.name for s in env.spec.episode_stats}
    np.testing.assert_array_equal(stats["right_moves"], out["stats"]["right_moves"])
    assert np.mean(stats["right_moves"]) == pytest.approx(data["metrics"]["eval/right_moves_per_episode"])
    assert np.mean(np.array(stats["reach"]) >= 2) == pytest.approx(data["metrics"]["eval/reach>=2"])


def test_evaluation_is_a_pure_function_of_params_and_key_and_vmaps(walk):
    env, params = stat_walk(), walk.runner_state.train_state.params
    program = make_evaluator(env, walk.network, 5, 50)
    sampled = policy_index("sampled")
    a = jax.device_get(program(params, jax.random.PRNGKey(1), sampled))
    b = jax.device_get(program(params, jax.random.PRNGKey(1), sampled))
    jax.tree.map(np.testing.assert_array_equal, a, b)
    keys = jnp.stack([jax.random.PRNGKey(1), jax.random.PRNGKey(2)])
    both = jax.device_get(jax.vmap(program, in_axes=(None, 0, None))(params, keys, sampled))
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(x[0], y), both, a)


def test_one_compiled_program_plays_every_policy_and_its_argument_chooses(walk):
    """The policy is data: greedy, sampled and random episodes come from one compile, and the random branch of an
    agent's program is the network-free random program, episode for episode (same keys, same draws)."""
    from hephaestus.core.evaluation import POLICIES

    env, params = stat_walk(), walk.runner_state.train_state.params
    program, key = make_evaluator(env, walk.network, 16, 20), jax.random.PRNGKey(3)
    out = {p: jax.device_get(program(params, key, policy_index(p))) for p in POLICIES}
    assert program._cache_size() == 1
    alone = jax.device_get(make_evaluator(env, None, 16, 20)(None, key, policy_index("random")))
    jax.tree.map(np.testing.assert_array_equal, out["random"], alone)
    moves = {p: out[p]["stats"]["right_moves"] for p in POLICIES}
    assert not np.array_equal(moves["greedy"], moves["sampled"]) and not np.array_equal(moves["greedy"], moves["random"])
    with pytest.raises(ValueError, match="policy must be one of"):
        policy_index("best")


def test_loop_evaluates_after_the_chunk_that_crosses_eval_every_without_changing_training():
    plain = walk_trainer()
    evaluated = walk_trainer(eval_every=3, eval_episodes=4, eval_max_steps=20)
    quiet = lambda _: None
    r1, r2 = run(plain, message=quiet), run(evaluated, message=quiet)
    assert [("eval/return_mean" in r) for r in r2.records] == [False, True]  # updates 2 and 4: 4 crosses 3
    record = r2.records[1]
    for key in ("eval/return_std", "eval/length_mean", "eval/capped_rate", "eval/hit_bound_rate",
                "eval/reach>=3", "eval/right_moves_per_episode", "episode/reach"):
        assert key in record, key
    jax.tree.map(np.testing.assert_array_equal, jax.device_get(r1.runner_state.train_state.params),
                 jax.device_get(r2.runner_state.train_state.params))


# ------------------------------------------------------------------------------------------------ scripts
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    from train_cli import main

    base = tmp_path_factory.mktemp("eval_run")
    assert main(*TINY, "--run-name", "cp_s0", "--checkpoint-dir", str(base), "--eval-every", "2",
                "--eval-episodes", "3", "--eval-max-steps", "30", "--final-eval-episodes", "5") == 0
    return base / "cp_s0"


def test_a_run_ends_with_an_evaluation_in_eval_json(finished_run):
    data = json.loads((finished_run / "eval.json").read_text())
    assert data["episodes"] == 5 and data["update"] == 2 and data["policies"] == ["greedy"]
    assert data["batch"] == 3  # two calls of the periodic evaluation's program (3 episodes each), cut to 5
    assert len(data["per_episode"]["eval/"]["return"]) == 5
    assert data["metrics"]["eval/return_mean"] == pytest.approx(np.mean(data["per_episode"]["eval/"]["return"]))
    records = [json.loads(line) for line in (finished_run / "metrics.jsonl").read_text().splitlines()]
    assert "eval/return_mean" in records[-1] and records[-1]["eval/episodes"] == 3


def test_evaluate_script_end_to_end_and_bad_input(finished_run, tmp_path, capsys):
    from hephaestus.tools.evaluate_agent import main

    out = tmp_path / "e.json"
    assert main([str(finished_run), "--episodes", "4", "--max-steps", "15", "--sampled", "--batch-size", "3",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "eval: 4 episodes" in text and "eval_sampled: 4 episodes" in text
    data = json.loads(out.read_text())
    assert data["policies"] == ["greedy", "sampled"] and max(data["per_episode"]["eval/"]["length"]) <= 15
    assert len(data["per_episode"]["eval_sampled/"]["return"]) == 4
    assert main(["--random", "--env", "gymnax:CartPole-v1", "--episodes", "3", "--max-steps", "10"]) == 0
    assert "random policy" in capsys.readouterr().out
    # --env-params: the agent plays a variant of its env (here CartPole cut at 3 steps), recorded in the JSON
    assert main([str(finished_run), "--episodes", "4", "--env-params", "max_steps_in_episode=3",
                 "--json", str(out)]) == 0
    assert "with max_steps_in_episode=3" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert max(data["per_episode"]["eval/"]["length"]) == 3 and data["env_params"] == {"max_steps_in_episode": "3"}
    for argv in ([str(tmp_path / "missing")], [str(finished_run), "--episodes", "0"], ["--random"],
                 [str(finished_run), "--json", str(tmp_path / "no" / "e.json")],
                 ["--scripted", "exit-rush"], ["--scripted", "exit-rush", "--env", "gymnax:CartPole-v1"],
                 [str(finished_run), "--scripted", "exit-rush", "--env", "hackmatrix"],
                 ["--scripted", "exit-rush", "--env", "hackmatrix", "--sampled"],
                 [str(finished_run), "--env-params", "max_step=3"], [str(finished_run), "--env-params", "gravity"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("evaluate.py: error:") and err.count("\n") == 1, err


def test_evaluate_over_several_seeds_is_each_seed_s_evaluation_and_their_spread(finished_run, tmp_path, capsys):
    from hephaestus.tools.evaluate_agent import main

    one = []
    for seed in (0, 3):
        assert main([str(finished_run), "--episodes", "6", "--max-steps", "40", "--seed", str(seed),
                     "--json", str(tmp_path / f"s{seed}.json")]) == 0
        one.append(json.loads((tmp_path / f"s{seed}.json").read_text()))
    capsys.readouterr()
    assert main([str(finished_run), "--episodes", "6", "--max-steps", "40", "--seeds", "0,3",
                 "--json", str(tmp_path / "both.json")]) == 0
    text = capsys.readouterr().out
    assert "seed 0: greedy" in text and "seed 3: greedy" in text and "over 2 seeds (0,3" in text
    both = json.loads((tmp_path / "both.json").read_text())
    assert both["seeds"] == [0, 3] and both["num_seeds"] == 2 and "seed" not in both
    per_seed = [o["metrics"]["eval/return_mean"] for o in one]
    assert per_seed[0] != per_seed[1]  # the seeds play different games
    m = both["metrics"]
    assert m["per_seed"]["eval/return_mean"] == per_seed
    assert m["eval/return_mean"] == pytest.approx(np.mean(per_seed))
    assert m["eval/return_mean/std"] == pytest.approx(np.std(per_seed, ddof=1))
    assert f"eval: return_mean {np.mean(per_seed):.3f} ± {np.std(per_seed, ddof=1):.3f}, length_mean" in text
    assert both["per_episode"]["eval/"]["return"] == [o["per_episode"]["eval/"]["return"] for o in one]
    assert main([str(finished_run), "--seed", "1", "--seeds", "0,1"]) == 2
    for bad in ("0,0", "a,1"):  # refused by the parser: its one line, exit 2
        with pytest.raises(SystemExit) as stop:
            main([str(finished_run), "--seeds", bad])
        assert stop.value.code == 2
    errs = capsys.readouterr().err.splitlines()
    assert errs[0] == "evaluate.py: error: give --seed or --seeds, not both" and len(errs) == 3
    assert all(e.startswith("evaluate.py: error: argument --seeds: ") for e in errs[1:]), errs


def test_evaluate_curve_appends_a_line_per_evaluation_that_plot_runs_draws(finished_run, tmp_path, capsys):
    """--curve: one JSON line per call with the agent's env_steps and the metrics (no per-episode lists), the
    eval seeds' values under per_eval_seed so that plot_runs does not band over them as training seeds."""
    from hephaestus.tools.evaluate_agent import main
    from hephaestus.tools.plotting import load_records, seed_series

    curve, full = tmp_path / "greedy_s0.jsonl", tmp_path / "e.json"
    assert main([str(finished_run), "--episodes", "5", "--max-steps", "30", "--seed", "2", "--json", str(full),
                 "--curve", str(curve)]) == 0
    assert main([str(finished_run), "--episodes", "5", "--max-steps", "30", "--seeds", "0,2",
                 "--curve", str(curve)]) == 0
    assert f"appended to {curve}" in capsys.readouterr().out
    one, both = [json.loads(line) for line in curve.read_text().splitlines()]
    assert one["env_steps"] == 64 and one["update"] == 2 and one["seed"] == 2 and "per_episode" not in one
    assert one["eval/return_mean"] == json.loads(full.read_text())["metrics"]["eval/return_mean"]
    assert both["seeds"] == [0, 2] and "per_seed" not in both
    assert both["per_eval_seed"]["eval/return_mean"][1] == one["eval/return_mean"]
    assert both["eval/return_mean"] == pytest.approx(np.mean(both["per_eval_seed"]["eval/return_mean"]))
    records = load_records(str(curve))  # one env_steps: the later evaluation is the point
    assert len(records) == 1 and len(seed_series(records, "eval/return_mean")) == 1
    for argv, code in (([str(finished_run), "--curve", str(tmp_path / "no" / "c.jsonl")], 2),
                       (["--random", "--env", "gymnax:CartPole-v1", "--curve", str(curve)], 2),
                       ([str(finished_run), "--episodes", "3", "--max-steps", "10", "--curve", str(tmp_path)], 2)):  # a folder: refused before playing
        assert main(argv) == code, argv
        err = capsys.readouterr().err
        assert err.startswith("evaluate.py: error:") and err.count("\n") == 1, err
    assert len(curve.read_text().splitlines()) == 2


def write_run(path, curve, per_seed=None):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for i, y in enumerate(curve):
            record = {"update": i + 1, "env_steps": 100 * (i + 1), "eval/return_mean": y}
            if per_seed is not None:
                record["per_seed"] = {"eval/return_mean": per_seed[i]}
            f.write(json.dumps(record) + "\n")


def test_plot_runs_groups_seeds_and_writes_a_png(tmp_path, capsys):
    from PIL import Image

    from hephaestus.tools.plotting import main

    write_run(tmp_path / "a_s0", [0, 1, 2])
    write_run(tmp_path / "a_s1", [1, 2, 4])
    write_run(tmp_path / "b_s0", [3, 3, 3])
    write_run(tmp_path / "multi", [1, 2, 3], per_seed=[[0, 2], [1, 3], [2, 4]])
    out = tmp_path / "fig.png"
    runs = [str(tmp_path / r) for r in ("a_s0", "a_s1", "b_s0")]
    assert main(runs + ["--group", f"many={tmp_path / 'multi'}", "--metric", "eval/return_mean",
                        "--hline", "eval/return_mean=0.5:random policy", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "a (2 seeds)" in text and "b (1 seeds)" in text and "many (2 seeds)" in text
    image = np.asarray(Image.open(out).convert("RGB"), np.float32)
    assert image.shape[0] > 100 and image.std() > 5 and len(np.unique(image.reshape(-1, 3), axis=0)) > 20
    for argv in ([str(tmp_path / "nope"), "--metric", "x", "--out", str(out)],
                 [runs[0], "--metric", "not/there", "--out", str(out)],
                 [runs[0], "--metric", "eval/return_mean", "--out", str(tmp_path / "fig.pdf")],
                 ["--group", "bad", "--metric", "eval/return_mean", "--out", str(out)],
                 [runs[0], "--metric", "eval/return_mean", "--hline", "eval/return_mean=x", "--out", str(out)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("plot_runs.py: error:") and err.count("\n") == 1, err


def test_plot_band_comes_from_per_seed_values(tmp_path):
    from hephaestus.tools.plotting import curve, load_records, seed_series

    write_run(tmp_path / "multi", [1, 2, 3], per_seed=[[0, 2], [1, 3], [2, 6]])
    series = seed_series(load_records(str(tmp_path / "multi" / "metrics.jsonl")), "eval/return_mean")
    x, mean, low, high, counts = curve(series, "minmax")
    np.testing.assert_array_equal(x, [100, 200, 300])
    np.testing.assert_allclose(mean, [1, 2, 4]) and np.testing.assert_allclose(high, [2, 3, 6])
    _, _, low, high, _ = curve(series, "std")
    np.testing.assert_allclose(high - mean, [1, 1, 2])
    assert episode_stats.fmt_threshold(2.0) == "2"
    from hephaestus.tools.plotting import parse_hlines

    assert parse_hlines(["eval/stage_reached>=2=0.16:random policy", "x=1"]) == {
        "eval/stage_reached>=2": [(0.16, "random policy")], "x": [(1.0, "baseline")]}


def test_plot_takes_a_slice_of_the_agents_of_a_sweep_program(tmp_path, capsys):
    """RUN[A:B]: the agents of one sweep point (point-major agents) as one curve."""
    from hephaestus.tools.plotting import main, split_agents

    assert split_agents("sw/g[3:6]") == ("sw/g", slice(3, 6)) and split_agents("sw/g") == ("sw/g", slice(None))
    write_run(tmp_path / "g", [1, 2, 3], per_seed=[[0, 2, 10, 12], [1, 3, 11, 13], [2, 4, 12, 14]])
    out = tmp_path / "fig.png"
    assert main(["--group", f"first={tmp_path / 'g'}[0:2]", "--group", f"second={tmp_path / 'g'}[2:]",
                 "--metric", "eval/return_mean", "--out", str(out)]) == 0
    assert "first (2 seeds), second (2 seeds)" in capsys.readouterr().out
    from hephaestus.tools.plotting import curve, load_records, seed_series

    records = load_records(str(tmp_path / "g" / "metrics.jsonl"))
    _, mean, _, _, _ = curve(seed_series(records, "eval/return_mean")[2:], "minmax")
    np.testing.assert_allclose(mean, [11, 12, 13])


def test_a_group_keeps_its_colour_in_every_panel_when_another_lacks_a_metric(tmp_path):
    import matplotlib.pyplot as plt

    from hephaestus.tools.plotting import draw

    write_run(tmp_path / "plain", [1, 2, 3])
    write_run(tmp_path / "taught", [2, 3, 4])
    with open(tmp_path / "taught" / "metrics.jsonl", "a") as f:  # a metric only the second group has
        f.write(json.dumps({"update": 4, "env_steps": 400, "eval/return_mean": 5, "teacher_agreement": 0.6}) + "\n")
    fig, drawn = draw({"plain": [str(tmp_path / "plain")], "taught": [str(tmp_path / "taught")]},
                      ["eval/return_mean", "teacher_agreement"])
    both, alone = ({line.get_label().split(" (")[0]: line.get_color() for line in ax.get_lines()} for ax in fig.axes)
    plt.close(fig)
    assert drawn["teacher_agreement"] == {"taught": 1} and both["taught"] != both["plain"]
    assert alone == {"taught": both["taught"]}
