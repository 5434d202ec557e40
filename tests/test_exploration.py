"""Issue 20: DeepSea with one action map per run, the baseline bonus stages (rnd, count_bonus), --agent, and the
bsuite-protocol DeepSea experiment run end to end at tiny size."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hephaestus.agents.bonus.stages import make_rnd, observation_hash
from hephaestus.agents.dtc.options import DTC_STAGES
from hephaestus.config.registry import AGENTS
from hephaestus.config.train_config import TrainConfig, agent_config, resolve
from hephaestus.envs.registry import UnknownEnvError, make_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_deepsea_each_run_gets_its_own_action_map_shared_by_its_envs_and_kept_across_resets():
    env = make_env("deepsea:8")
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    states, _ = jax.vmap(env.reset)(keys)
    run_a = env.init_instance(jax.random.PRNGKey(1), states)
    run_b = env.init_instance(jax.random.PRNGKey(2), states)
    maps_a, maps_b = np.asarray(run_a.action_mapping), np.asarray(run_b.action_mapping)
    assert (maps_a != maps_b).any()  # two seeds, two maps (gymnax alone gives every seed its key-0 map)
    assert all((m == maps_a[0]).all() for m in maps_a)  # one map per run
    assert set(np.unique(maps_a)) == {0, 1}
    # walk every env to the bottom (8 steps): the episode ends, the env auto-resets, the map stays
    state = run_a
    for i in range(8):
        state, step = jax.vmap(env.step)(jax.random.split(jax.random.PRNGKey(10 + i), 4), state, jnp.zeros(4, jnp.int32))
    assert bool(step.terminated.all()) and int(state.row.max()) == 0
    assert (np.asarray(state.action_mapping) == maps_a).all()
    with pytest.raises(UnknownEnvError, match="size"):
        make_env("deepsea:x")


def test_deepsea_evaluation_plays_the_map_it_is_given_not_the_envs_default():
    """An agent learns one run's map; its evaluation must play that map. A scripted player that goes right by a fixed
    map M finds the treasure in every game when the evaluator is given M as the instance, and in none on the env's
    default map (which differs from M: the chance that two maps agree on the diagonal's 6 cells is 2^-6)."""
    from hephaestus.core.evaluation import make_evaluator

    env = make_env("deepsea:6")
    states, _ = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), 2))
    default = np.asarray(env.instance_of(states))
    m = next(np.asarray(env.instance_of(env.init_instance(jax.random.PRNGKey(k), states))) for k in range(1, 20)
             if (np.diag(np.asarray(env.instance_of(env.init_instance(jax.random.PRNGKey(k), states))))
                 != np.diag(default)).any())
    right_by_m = lambda state, mask, key: jnp.asarray(m)[state.row, state.column]  # noqa: E731
    run = make_evaluator(env, None, 8, 10, scripted=right_by_m)
    key, policy = jax.random.PRNGKey(3), np.int32(0)
    on_m = run(None, key, policy, jnp.asarray(m))
    on_default = run(None, key, policy)
    assert float(np.mean(on_m["stats"]["treasure"])) == 1.0
    assert float(np.mean(on_default["stats"]["treasure"])) == 0.0


def test_a_deepsea_runs_exports_and_evaluations_carry_its_map(tmp_path, capsys):
    """train_purejaxrl.py on DeepSea: the parameter file stores the run's map (each seed's), and watch_agent.py /
    evaluate.py's loader plays it (a file without one says so and plays the default)."""
    from hephaestus.core.export import load_params_npz, save_params_npz
    from hephaestus.core.ppo import make_train
    from hephaestus.tools.saved_agent import read_agent as load_agent
    from train_cli import main

    out = tmp_path / "ckpt"
    assert main("--env", "deepsea:5", "--num-envs", "4", "--num-steps", "10", "--total-timesteps", "80",
                "--hidden-dim", "8", "--num-layers", "1", "--num-minibatches", "1", "--update-epochs", "1",
                "--num-seeds", "2", "--seed", "3", "--no-wandb", "--final-eval-episodes", "4",
                "--checkpoint-dir", str(out), "--run-name", "ds") == 0
    run_dir = out / "ds"
    params, meta = load_params_npz(str(run_dir / "final_params.npz"))
    stored = np.asarray(meta["env_instance"])
    config = resolve(TrainConfig.from_flat(env="deepsea:5", num_envs=4, num_steps=10, total_timesteps=80,
                                           hidden_dim=8, num_layers=1, num_minibatches=1, update_epochs=1,
                                           num_seeds=2, seed=3))[0]
    trainer = make_train(config, make_env("deepsea:5"))
    expected = np.asarray(trainer.runner_state.stages["rollout"].env_state.action_mapping)[:, 0]  # [seeds, 5, 5]
    assert stored.shape == (2, 5, 5) and (stored == expected).all() and (stored[0] != stored[1]).any()
    for index in (0, 1):
        _, _, env, _ = load_agent(str(run_dir / "final_params.npz"), seed_index=index)
        state, _ = env.reset(jax.random.PRNGKey(9))
        assert (np.asarray(state.action_mapping) == stored[index]).all()
    older = {k: v for k, v in meta.items() if k != "env_instance"}
    path = save_params_npz(str(tmp_path / "old.npz"), params, env=older["env"], network=older["network"],
                           num_seeds=2)
    capsys.readouterr()
    load_agent(path)
    assert "does not store the deepsea:5 instance it trained on" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["deepsea:5", "deepsea-stochastic:5"])
def test_deepsea_reports_bsuites_bad_episode_and_the_treasure_per_step(name):
    """Lane 0 always takes its cell's "right" action (the treasure path), lane 1 takes "left" at the first step
    (bad: it left the diagonal), lane 2 takes "left" at the last step only (bad, at the very end, where the
    transitions are deterministic; in the stochastic variant a failed "right" may have left the diagonal first). The
    bad flag is bsuite's; the treasure flag is the denoised reward, so reward noise does not change it."""
    env = make_env(name)
    states, _ = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), 3))
    state = env.init_instance(jax.random.PRNGKey(1), states)
    step = jax.jit(jax.vmap(env.step))
    bad, treasure = np.zeros((5, 3)), np.zeros((5, 3))
    for t in range(5):
        right = np.asarray(state.action_mapping[jnp.arange(3), state.row, state.column])
        wrong = np.asarray([False, t == 0, t == 4])
        state, out = step(jax.random.split(jax.random.PRNGKey(10 + t), 3), state, jnp.asarray(np.where(wrong, 1 - right,
                                                                                                         right)))
        bad[t], treasure[t] = out.info["episode_stats"]["bad_episode"], out.info["episode_stats"]["treasure"]
    assert bool(out.terminated.all())
    assert bad[:, 0].max() == 0 and bad[0, 1] == 1  # "right" is never bad; "left" from (0, 0) always is
    assert treasure[:, 1].max() == 0 and treasure[:, 2].max() == 0
    if name == "deepsea:5":  # deterministic: the path reaches the treasure on its last step; leaving it there is bad
        assert treasure.max(0).tolist() == [1, 0, 0] and treasure[4, 0] == 1
        assert bad.max(0).tolist() == [0, 1, 1] and bad[4, 2] == 1


def deepsea_experiment():
    from hephaestus.tools.entry_points import load_script

    return load_script(os.path.join(ROOT, "scripts", "experiments", "deepsea.py"), "deepsea_experiment")


def test_deepsea_solved_follows_bsuites_rule_for_each_variant():
    """deepsea.py's `summarise`: a seed solves at the first episode where the cumulative share of bad episodes is
    below 0.9 (deterministic), or below 0.8 counting only from episode 100 on (stochastic)."""
    deepsea = deepsea_experiment()
    episodes = np.full((1, 6), 40.0)  # 40 episodes per update: 40, 80, ..., 240 in all
    bad = np.array([[40.0, 26.0, 24.0, 30.0, 40.0, 40.0]])  # cumulative share 1.0, 0.83, 0.75, 0.75, 0.8, 0.83
    treasures = episodes - bad
    args = (np.ones((1, 4)), np.full((1, 4), np.nan), np.zeros((1, 2, 2)))
    det = deepsea.summarise(2, "x", episodes, bad, treasures, *args, False, {})
    noisy = deepsea.summarise(2, "x", episodes, bad, treasures, *args, True, {})
    assert det["seeds"][0]["solved_episode"] == 80  # 0.83 < 0.9 at episode 80
    assert noisy["seeds"][0]["solved_episode"] == 120  # 0.75 < 0.8, and 120 >= 100 episodes
    assert det["seeds"][0]["first_treasure"] == 80 and noisy["stochastic"] and not det["stochastic"]


def test_deepsea_merge_pools_disjoint_seed_ranges_of_one_experiment_into_one_row():
    """--merge of runs from different --first-seed: one row over all their seeds; the same seeds twice, or another
    agent, stay separate rows."""
    deepsea = deepsea_experiment()
    seed = lambda solved: {"solved_episode": solved, "scored": solved is not None, "first_treasure": solved,
                           "coverage": 1.0, "corr": -0.5}
    run = lambda label, ids, solved: {"size": 20, "agent": "dtc", "label": label, "ent_coef": 0.01,
                                      "stochastic": False, "env_steps_per_seed": 1000, "episodes": 50,
                                      "distinct_maps": len(ids), "seed_ids": ids, "seeds": [seed(x) for x in solved]}
    rows = deepsea.pool_seeds([run("a", [0, 1], [10, None]), run("b", [2], [30]), run("a", [2], [20]),
                               run("a", [0], [40])])
    assert [(r["label"], r["seed_ids"]) for r in rows] == [("a", [0, 1, 2]), ("b", [2]), ("a", [0])]
    assert [s["solved_episode"] for s in rows[0]["seeds"]] == [10, None, 20] and rows[0]["distinct_maps"] == 3
    assert "| 20 | a | 2/3 | 2/3 | median 15 |" in deepsea.row(rows[0])


def test_deepsea_experiment_refuses_a_bad_setting_before_training_and_plots_only_trained_rows(tmp_path):
    """A setting the pipeline's config rejects is a one-line usage error (exit 2) before any run compiles; a run of
    analytic rows only writes its table and says why there is no plot."""
    script = os.path.join(ROOT, "scripts", "experiments", "deepsea.py")
    proc = subprocess.run([sys.executable, script, "--sizes", "5", "--agents", "random", "dtc", "--frontier-fraction",
                           "2", "--out", "bad"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == ("deepsea.py: error: dtc at size 5: --dtc-frontier-fraction must be "
                                                    "in [0, 1], got 2.0")
    assert not (tmp_path / "bad.json").exists()
    deepsea = deepsea_experiment()
    assert deepsea.plot([deepsea.random_agent(5, 10, 2)], None, str(tmp_path / "r.png")).startswith("no plot")
    assert not (tmp_path / "r.png").exists()


def test_deepsea_dreamer_config_file_trains_what_the_experiment_measured():
    """configs/deepsea-dreamer.yaml is the dreamer row it cites (specs/dreamer.md): the same env, sizes, world model,
    replay and dreamer settings as deepsea.py with that row's flags, less the experiment's probe stages."""
    from hephaestus.config.files import load_config_file

    deepsea = deepsea_experiment()
    shipped = resolve(load_config_file(os.path.join(ROOT, "configs", "deepsea-dreamer.yaml")))[0]
    _, args = deepsea.parse_args(["--sizes", "10", "--agents", "dreamer", "--reward-fraction", "0.25",
                                  "--replay-capacity", "16384", "--replay-ratio", "4", "--dreamer-entropy", "0.1",
                                  "--dreamer-advantage-norm", "range", "--out", "row.json"])
    assert args.out == "row"  # --out x.json writes x.json, not x.json.json
    measured = deepsea.make_config(10, "dreamer", args.ent_coef, args)
    assert shipped.agent == measured.agent == "dreamer"
    assert shipped.stages.dtc == measured.stages.dtc and shipped.stages.dreamer == measured.stages.dreamer
    # one world-model member, the plain dreamer's own: its dreams read member 0, so more would be paid for unread
    assert measured.stages.dtc.ensemble_size == 1
    assert deepsea.make_config(10, "dreamer-dtc", args.ent_coef, args).stages.dtc.ensemble_size == 5
    assert (shipped.stages.dtc.reward_power, shipped.stages.dreamer.advantage_norm) == (2.0, "range")
    assert shipped.env == measured.env and shipped.network == measured.network
    assert (shipped.ppo.lr, shipped.ppo.anneal_lr) == (measured.ppo.lr, measured.ppo.anneal_lr) == (1e-3, False)
    assert shipped.num_updates == measured.num_updates
    assert [s for s in measured.extra_stages if not s.endswith("_probe")] == list(shipped.extra_stages)


def test_deepsea_dtc_config_file_trains_what_the_experiment_measured():
    """configs/deepsea-dtc.yaml is the DTC setting specs/dtc.md measures at N = 10 to 30 (deepsea.py with these
    flags), at size 10 and less the experiment's probe stages."""
    from hephaestus.config.files import load_config_file

    deepsea = deepsea_experiment()
    shipped = resolve(load_config_file(os.path.join(ROOT, "configs", "deepsea-dtc.yaml")))[0]
    _, args = deepsea.parse_args(["--sizes", "10", "--agents", "dtc", "--frontier-window", "64", "--frontier-fraction",
                                  "1", "--intrinsic-coef", "0.025", "--prior-scale", "1", "--replay-ratio", "4",
                                  "--wm-lr", "6e-3"])
    measured = deepsea.make_config(10, "dtc", args.ent_coef, args)
    assert shipped.agent == measured.agent == "dtc"
    assert shipped.stages.dtc == measured.stages.dtc
    assert shipped.env.name == measured.env.name and shipped.network == measured.network
    assert (shipped.env.num_envs, shipped.env.num_steps) == (measured.env.num_envs, measured.env.num_steps)
    assert (shipped.ppo.lr, shipped.ppo.anneal_lr, shipped.ppo.ent_coef) == (
        measured.ppo.lr, measured.ppo.anneal_lr, measured.ppo.ent_coef)
    assert [s for s in measured.extra_stages if not s.endswith("_probe")] == list(shipped.extra_stages)
    # the competence ablation's flags reach DTC; the disagreement agent keeps its competence off
    _, args = deepsea.parse_args(["--sizes", "20", "--agents", "dtc", "disagreement", "--competence", "progress",
                                  "--competence-coef", "2"])
    local = deepsea.make_config(20, "dtc", args.ent_coef, args).stages.dtc
    assert (local.competence, local.competence_coef) == ("progress", 2.0)
    off = deepsea.make_config(20, "disagreement", args.ent_coef, args).stages.dtc
    assert (off.competence, off.competence_coef) == ("global", 0.0)  # no second scoring pass it would not use
    assert "competence progress" in deepsea.label("dtc", args) and "gain 2" in deepsea.label("dtc", args)
    assert "competence" not in deepsea.label("disagreement", args).replace("competence off", "")


def test_training_seeds_get_different_maps():
    from hephaestus.core.ppo import make_train

    config, _ = resolve(TrainConfig.from_flat(env="deepsea:6", num_envs=2, num_steps=6, total_timesteps=12, hidden_dim=8))
    trainer = make_train(config, make_env(config.env.name))
    maps = [np.asarray(trainer.init_runner_state(s).stages["rollout"].env_state.action_mapping) for s in (0, 1)]
    assert (maps[0] != maps[1]).any() and (maps[0][0] == maps[0][1]).all()


def test_agents_select_their_stages():
    base = TrainConfig.from_flat(env="deepsea:6", extra_stages=("reward_bonus",))
    assert agent_config(base, "ppo").extra_stages == ("reward_bonus",)
    assert agent_config(base, "dtc").extra_stages == DTC_STAGES + ("reward_bonus",)
    disagreement = agent_config(base, "disagreement")
    assert disagreement.extra_stages[:2] == DTC_STAGES and disagreement.stages.dtc.competence_coef == 0.0
    assert agent_config(base, "rnd").extra_stages[0] == "rnd"
    assert agent_config(base, "count").extra_stages[0] == "count_bonus"
    assert agent_config(base, "dreamer").extra_stages[0] == "dreamer"
    assert agent_config(base, "episodic").extra_stages[0] == "episodic_novelty"
    assert set(AGENTS) == {"ppo", "dtc", "disagreement", "rnd", "count", "episodic", "dreamer", "dreamer-dtc"}


def test_count_hash_separates_deepsea_cells():
    cells = jnp.eye(30 * 30)
    buckets = np.asarray(observation_hash(cells, 1 << 20))  # the default table
    assert len(set(buckets.tolist())) >= 0.99 * 900  # almost no collisions among 900 one-hot observations
    assert int(observation_hash(cells[3], 1 << 20)) == buckets[3]  # the same observation, the same bucket


def test_rnd_scores_before_learning_and_its_error_falls_with_visits():
    from hephaestus.envs.adapters import EnvSpec

    config = TrainConfig.from_flat(rnd_hidden_dim=16, rnd_embed_dim=8, rnd_steps=4, rnd_lr=3e-3)
    init, update = make_rnd(config, EnvSpec(name="toy", obs_dim=6, discrete=True, action_dim=2))
    update = jax.jit(update)
    seen = jnp.tile(jnp.eye(6)[:3][None], (4, 1, 1))  # [T=4, N=3, 6]: three states, visited again and again
    state = init(jax.random.PRNGKey(0))
    first = None
    for _ in range(30):
        state, novelty, metrics = update(state, seen)
        first = novelty if first is None else first
    assert np.all(np.asarray(novelty) < 0.5 * np.asarray(first))
    _, unseen_novelty, _ = update(state, jnp.tile(jnp.eye(6)[3:][None], (4, 1, 1)))
    assert float(unseen_novelty.mean()) > 2 * float(novelty.mean())  # a new state is scored before it is learned


def _critic_stage(**options):
    from hephaestus.envs.adapters import EnvSpec
    from hephaestus.core.stages import StageContext, extra_stages

    config = TrainConfig.from_flat(env="deepsea:6", extra_stages=("count_bonus", "intrinsic_critic"),
                                   intrinsic_critic_hidden_dim=16, **options)
    spec = EnvSpec(name="toy", obs_dim=4, discrete=True, action_dim=2)
    return config, extra_stages(StageContext(config=config, env_spec=spec, network=None))


def test_the_intrinsic_critic_takes_the_bonus_out_of_the_reward_and_gives_it_a_non_episodic_advantage():
    from hephaestus.agents.bonus.stages import ReluMLP

    config, (count, critic) = _critic_stage(intrinsic_critic_gamma=0.9, intrinsic_critic_coef=2.0)
    assert (count.name, critic.name) == ("count_bonus", "intrinsic_critic")
    t, n = 5, 3
    rng = np.random.default_rng(0)
    obs = jnp.asarray(np.eye(4)[rng.integers(0, 4, (t, n))], jnp.float32)
    batch = {"obs": obs, "next_obs": obs, "last_obs": jnp.eye(4)[:n], "reward": jnp.full((t, n), 0.25),
             "terminated": jnp.zeros((t, n), bool).at[2].set(True), "truncated": jnp.zeros((t, n), bool)}
    _, batch, _, _ = count.apply(None, None, batch, count.init(None))
    state = critic.init(jax.random.PRNGKey(0))
    hyper = {"gae_lambda": jnp.float32(0.8)}
    _, out, new_state, metrics = critic.apply(None, None, batch, state, hyper)
    np.testing.assert_allclose(np.asarray(out["reward"]), 0.25, rtol=1e-6)  # the extrinsic reward again
    # The advantage: GAE over the intrinsic stream as one never-ending episode, with the critic before training.
    values = np.asarray(ReluMLP(16, 1).apply(state.params, jnp.concatenate([obs, batch["last_obs"][None]]))[..., 0])
    bonus = np.asarray(batch["intrinsic_reward"])
    expected, running = np.zeros((t, n)), np.zeros(n)
    for i in reversed(range(t)):  # the episode end at t=2 cuts nothing
        running = bonus[i] + 0.9 * values[i + 1] - values[i] + 0.9 * 0.8 * running
        expected[i] = running
    np.testing.assert_allclose(np.asarray(out["intrinsic_advantage"]), 2.0 * expected, rtol=1e-4, atol=1e-5)
    # The critic learns its targets: the loss falls when it sees the same batch again and again.
    losses = []
    for _ in range(20):
        _, _, state, metrics = critic.apply(None, None, batch, state, hyper)
        losses.append(float(metrics["intrinsic_critic/loss"]))
    assert losses[-1] < 0.5 * losses[0]


def test_the_advantage_stage_adds_the_intrinsic_advantage_and_keeps_the_extrinsic_target():
    from hephaestus.core.ppo import advantage_apply

    t, n = 4, 2
    batch = {"reward": jnp.ones((t, n)), "value": jnp.zeros((t, n)), "last_value": jnp.zeros((n,)),
             "bootstrap_value": jnp.zeros((t, n)), "terminated": jnp.zeros((t, n), bool),
             "truncated": jnp.zeros((t, n), bool)}
    hyper = {"gamma": jnp.float32(0.9), "gae_lambda": jnp.float32(0.9)}
    _, plain, _, _ = advantage_apply(None, None, None, batch, None, hyper)
    _, both, _, _ = advantage_apply(None, None, None, {**batch, "intrinsic_advantage": jnp.full((t, n), 3.0)},
                                    None, hyper)
    np.testing.assert_allclose(np.asarray(both["advantage"]), np.asarray(plain["advantage"]) + 3.0, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(both["target"]), np.asarray(plain["target"]))  # the critic's is extrinsic


def test_bonuses_sum_into_intrinsic_reward_and_the_critic_needs_one_before_it():
    from hephaestus.config.train_config import ConfigError

    config, (count, _) = _critic_stage()
    batch = {"next_obs": jnp.eye(4)[None], "reward": jnp.zeros((1, 4)), "intrinsic_reward": jnp.full((1, 4), 0.5)}
    _, out, _, _ = count.apply(None, None, batch, count.init(None))
    np.testing.assert_allclose(np.asarray(out["intrinsic_reward"]), 0.5 + np.asarray(out["reward"]), rtol=1e-6)
    with pytest.raises(ConfigError, match="needs an exploration bonus before it"):
        resolve(TrainConfig.from_flat(env="deepsea:6", extra_stages=("intrinsic_critic", "count_bonus")))
    with pytest.raises(ConfigError, match="intrinsic-critic-gamma"):
        resolve(TrainConfig.from_flat(env="deepsea:6", extra_stages=("count_bonus", "intrinsic_critic"),
                                      intrinsic_critic_gamma=1.0))


@pytest.mark.heavy
def test_deepsea_experiment_quick_runs_end_to_end(tmp_path):
    out = tmp_path / "ds"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "experiments", "deepsea.py"), "--quick",
                           "--sizes", "5", "--episodes", "60", "--agents", "random", "ppo", "count", "disagreement",
                           "--ppo-ent-coefs", "0.01", "0.1", "--first-seed", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads((tmp_path / "ds.json").read_text())["results"]
    agents = [r["agent"] for r in results]
    assert agents.count("ppo") == 2 and {"random", "count", "disagreement"} <= set(agents)  # tuned over 2 ent coefs
    for r in results:
        assert len(r["seeds"]) == 3
        if r.get("analytic"):
            assert r["expected_first"] == 32.0
            continue
        assert r["distinct_maps"] >= 2  # per-seed maps (3 seeds; two could coincide with 2^-25 chance)
        assert r["seed_ids"] == [1, 2, 3]  # --first-seed 1
        assert r["episodes"] >= 60
        for s in r["seeds"]:
            assert 0.0 < s["coverage"] <= 1.0
            assert s["solved_episode"] is None or s["solved_episode"] <= r["episodes"]
            assert s["scored"] == (s["solved_episode"] is not None and s["solved_episode"] < 2 ** 5 + 100)
    count = next(r for r in results if r["agent"] == "count")
    assert any(np.isfinite(s["corr"]) for s in count["seeds"])
    assert (tmp_path / "ds.png").stat().st_size > 0 and "| 5 | count |" in (tmp_path / "ds.md").read_text()
    data = json.loads((tmp_path / "ds.json").read_text())
    assert data["ppo_ent"] in (0.01, 0.1) and next(r for r in results if r["agent"] == "disagreement")["label"] == \
        "dtc, competence off (surprise)"  # the DTC family's rows name their novelty signal
    # --merge: the rows of earlier runs in one table and plot, nothing trained
    merged = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "experiments", "deepsea.py"), "--merge",
                             str(out) + ".json", str(out) + ".json", "--out", str(tmp_path / "merged")],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert merged.returncode == 0, merged.stderr[-2000:]
    assert (tmp_path / "merged.md").read_text().count("| 5 | count |") == 2
    assert (tmp_path / "merged.png").stat().st_size > 0


@pytest.mark.heavy
@pytest.mark.skipif(os.environ.get("HEPHAESTUS_EXPERIMENT_QUICK_TESTS") != "1",
                    reason="the dreamer DeepSea probe's --quick run, ~40 s on 2 cores, past CI's 15 minutes with the rest: set "
                           "HEPHAESTUS_EXPERIMENT_QUICK_TESTS=1")
def test_dreamer_deepsea_probe_quick_accounts_for_every_treasure_and_weighs_it_by_power(tmp_path):
    script = os.path.join(ROOT, "scripts", "experiments", "dreamer_deepsea_probe.py")
    proc = subprocess.run([sys.executable, script, "--quick", "--reward-fraction", "0.25", "--advantage-norm", "range",
                           "--dreamer-entropy", "0.1", "--out", str(tmp_path / "p")],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["dreamer"] == {"entropy": 0.1, "advantage_norm": "range"}  # the flags reach the trained config
    replay = data["replay"]
    # 12 updates of 16 x 32 steps cut into sequences of 8: 768, all still stored (capacity 1024), so every treasure
    # the rollouts found is one treasure transition in the replay the probe reads
    assert replay["sequences"] == 12 * 16 * 32 // 8
    assert replay["treasure_transitions"] == data["treasures_found"] > 0
    assert data["reward_head"]["treasure"]["n"] == data["treasures_found"]
    shares = replay["treasure_share_of_reward_rich_draws"]
    assert 0 < shares["power 1"] < shares["power 2"] <= 1
    assert sum(data["start_cell_action_probs"]) == pytest.approx(1.0, abs=1e-3)
    assert len(data["treasure_sequence"]) == 8 and "treasure sequence: cell" in proc.stdout
    bad = subprocess.run([sys.executable, script, "--reward-fraction", "0.9"], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert bad.returncode != 0 and "--dtc-reward-fraction" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.heavy
def test_novelty_by_visits_diagnostic_quick_runs_and_rnd_pays_most_for_rare_cells(tmp_path):
    script = os.path.join(ROOT, "scripts", "experiments", "novelty_by_visits.py")
    proc = subprocess.run([sys.executable, script, "--quick", "--out", str(tmp_path / "nv")], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((tmp_path / "nv.json").read_text())
    rows = {r["visits"]: r for r in data["rows"]}
    assert data["size"] == 6 and 0 < data["cells_visited"] <= data["reachable_cells"] == 21
    assert rows["100-999"]["dtc"] == pytest.approx(1.0) and rows["100-999"]["rnd"] == pytest.approx(1.0)
    assert sum(r["transitions"] for r in data["rows"]) <= 3 * 16 * 32  # the probes' transitions, binned once
    rare = data["rows"][0]  # the fewest visits any probed cell had
    assert rare["visits"] in ("0", "1-9") and rare["rnd"] > 2.0  # scored before learning: a rare cell pays more
    assert (tmp_path / "nv.png").stat().st_size > 0 and "| 100-999 |" in proc.stdout
    bad = subprocess.run([sys.executable, script, "--p-right", "1.5"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--p-right" in bad.stderr.strip().splitlines()[-1]
    merged = subprocess.run([sys.executable, script, "--merge", str(tmp_path / "nv.json"), str(tmp_path / "nv.json"),
                             "--out", str(tmp_path / "both")], capture_output=True, text=True, timeout=120)
    assert merged.returncode == 0, merged.stderr[-2000:]
    assert (tmp_path / "both.png").stat().st_size > 0
    assert f"| {rare['visits']} | {rare['dtc']:.2f} | {rare['dtc']:.2f} | {rare['rnd']:.2f} |" in merged.stdout
    missing = subprocess.run([sys.executable, script, "--merge", str(tmp_path / "absent.json")], capture_output=True,
                             text=True, timeout=120)
    assert missing.returncode == 2 and "absent.json" in missing.stderr.strip().splitlines()[-1]
    (tmp_path / "other.json").write_text(json.dumps({"results": []}))  # e.g. a deepsea.py OUT.json
    foreign = subprocess.run([sys.executable, script, "--merge", str(tmp_path / "other.json")], capture_output=True,
                             text=True, timeout=120)
    assert foreign.returncode == 2 and "not a result" in foreign.stderr.strip().splitlines()[-1]
