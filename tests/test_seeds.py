"""--num-seeds: several agents trained by one vmapped program (specs/pipeline.md, "Many seeds in one program").

One tiny CartPole multi-seed run (3 seeds, 4 updates, checkpoints at 2 and 4) is shared by the tests: its seeds
must match single-seed runs of the same seeds, it must resume bit-identically, and its files must hold every seed.
"""

import json

import jax
import numpy as np
import pytest

from hephaestus.run import checkpoint as ck
from hephaestus.core.export import load_params_npz, select_seed
from hephaestus.core.sinks import iqm, loggable, seeds_reduce
from train_cli import main

# One worker runs this module, so its module fixture runs once (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("test_seeds")

SEED, SEEDS = 5, 3
TINY = ["--env", "gymnax:CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--hidden-dim", "16",
        "--num-layers", "1", "--log-interval", "2", "--num-minibatches", "2", "--update-epochs", "2", "--no-wandb",
        "--total-timesteps", str(4 * 64), "--save-interval", "2"]
EVAL = ["--eval-every", "2", "--eval-episodes", "4", "--eval-max-steps", "30", "--final-eval-episodes", "6"]


@pytest.fixture(autouse=True)
def no_wandb(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))


@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    base = tmp_path_factory.mktemp("seeds")
    assert main(*TINY, *EVAL, "--seed", str(SEED), "--num-seeds", str(SEEDS), "--run-name", "multi",
                "--checkpoint-dir", str(base)) == 0
    return base / "multi"


def records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_each_seed_reproduces_its_single_seed_run(multi, tmp_path):
    params, meta = load_params_npz(str(multi / "final_params.npz"))
    assert meta["num_seeds"] == SEEDS and meta["update"] == 4
    multi_records = records(multi)
    for i in range(SEEDS):
        assert main(*TINY, "--seed", str(SEED + i), "--run-name", f"s{i}", "--checkpoint-dir", str(tmp_path)) == 0
        single, single_meta = load_params_npz(str(tmp_path / f"s{i}" / "final_params.npz"))
        assert single_meta["num_seeds"] == 1
        for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(single)):
            assert a.shape == (SEEDS,) + b.shape
            np.testing.assert_allclose(a[i], b, rtol=1e-5, atol=1e-6)
        # The per-seed metrics are that seed's single-run metrics.
        for mr, sr in zip(multi_records, records(tmp_path / f"s{i}")):
            for key in ("mean_episode_return", "mean_episode_length", "num_episodes", "pg_loss", "entropy"):
                assert mr["per_seed"][key][i] == pytest.approx(sr[key], rel=1e-4, abs=1e-6), key
    # Seeds are independent agents, not copies.
    first = jax.tree.leaves(params)[0]
    assert not np.allclose(first[0], first[1])


def test_metrics_hold_mean_std_iqm_and_per_seed_values(multi):
    rs = records(multi)
    assert [r["update"] for r in rs] == [2, 4] and rs[-1]["env_steps"] == 4 * 64  # env steps of one agent
    for r in rs:
        for key, values in r["per_seed"].items():
            assert len(values) == SEEDS
            assert r[key] == pytest.approx(np.mean(values)), key
        returns = r["per_seed"]["mean_episode_return"]
        assert r["mean_episode_return/std"] == pytest.approx(np.std(returns, ddof=1))
        assert r["mean_episode_return/iqm"] == pytest.approx(np.mean(returns))  # 3 values: nothing trimmed
        assert "mean_episode_length/std" in r and "entropy/std" not in r


def test_every_seed_is_evaluated_as_its_single_seed_run_would_be(multi):
    """--eval-every and the final evaluation of a --num-seeds run: one vmapped program evaluates every agent, agent
    i with the key of a single run seeded SEED + i; the record holds the mean over seeds and per-seed values."""
    from hephaestus.envs.registry import make_env
    from hephaestus.core.evaluation import Evaluator, eval_key
    from hephaestus.core.export import network_from_meta

    rs = records(multi)
    for r in rs:  # updates 2 and 4, both multiples of --eval-every 2
        values = r["per_seed"]["eval/return_mean"]
        assert len(values) == SEEDS and r["eval/return_mean"] == pytest.approx(np.mean(values))
        assert r["eval/episodes"] == 4 and "eval/return_mean/std" in r
    data = json.loads((multi / "eval.json").read_text())
    assert data["num_seeds"] == SEEDS and data["episodes"] == 6
    returns = np.array(data["per_episode"]["eval/"]["return"])
    assert returns.shape == (SEEDS, 6)
    assert data["metrics"]["per_seed"]["eval/return_mean"] == pytest.approx(returns.mean(1).tolist())
    # Seed by seed, the same numbers as a one-agent evaluation of that agent's parameters with its own key.
    params, meta = load_params_npz(str(multi / "final_params.npz"))
    env, network = make_env("gymnax:CartPole-v1"), network_from_meta(meta)
    single = Evaluator(env, network, episodes=6, max_steps=30, batch=4)
    for i in range(SEEDS):
        one, _ = select_seed(params, meta, i)
        _, raw = single(one, eval_key(SEED + i, 4))
        np.testing.assert_array_equal(raw["eval/"]["return"], returns[i])


def test_seeds_reduce_iqm_and_logged_keys():
    metrics = {"mean_episode_return": np.array([[1.0, 2.0, 3.0, 10.0], [4.0, 5.0, 6.0, 100.0]]),
               "num_episodes": np.array([[1.0, 1.0, 2.0, 0.0], [3.0, 1.0, 0.0, 0.0]]),
               "entropy": np.array([[0.5, 0.5, 0.5, 0.5], [0.7, 0.7, 0.7, 0.7]])}
    r = seeds_reduce(metrics)
    assert r["per_seed"]["mean_episode_return"] == [4.0, 5.0, 6.0, 100.0]  # the latest value per seed
    assert r["per_seed"]["num_episodes"] == [4.0, 2.0, 2.0, 0.0]  # summed over the chunk per seed
    assert r["mean_episode_return"] == pytest.approx(28.75)
    assert r["mean_episode_return/iqm"] == pytest.approx(5.5)  # middle two of four
    assert iqm([1, 2, 3, 4, 5, 6, 7, 100]) == pytest.approx(4.5)
    logged = loggable(r)
    assert logged["mean_episode_return/std"] == pytest.approx(np.std([4, 5, 6, 100], ddof=1))
    assert "mean_episode_return/iqm" in logged and not any("per_seed" in k for k in logged)
    assert [logged[f"seed{i}/mean_episode_return"] for i in range(4)] == [4.0, 5.0, 6.0, 100.0]
    assert "seed0/entropy" not in logged  # per seed: the headline, episode and evaluation keys only


def test_checkpoint_holds_every_seed_and_resumes_bit_identically(multi, tmp_path, capsys):
    found = ck.locate(str(multi))
    assert found.step == 4 and found.meta["config"]["num_seeds"] == SEEDS
    # Branch from the checkpoint at update 2 into a new run: the same 2 updates must give the same bits.
    assert main("--resume", str(multi / "2"), "--run-name", "resumed", "--checkpoint-dir", str(tmp_path)) == 0
    assert "resume: update 2 of 4" in capsys.readouterr().out
    a, _ = load_params_npz(str(multi / "final_params.npz"))
    b, _ = load_params_npz(str(tmp_path / "resumed" / "final_params.npz"))
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y)
    assert records(tmp_path / "resumed")[-1]["per_seed"] == records(multi)[-1]["per_seed"]


def test_resume_with_another_seed_count_is_a_one_line_error(multi, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        from hephaestus.run import train
        train.main(["--resume", str(multi), "--num-seeds", "2", "--run-name", "other",
                    "--checkpoint-dir", str(tmp_path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds 3 seed(s)" in err[0] and "--num-seeds 3" in err[0]
    assert not (tmp_path / "other").exists()


def test_seed_index_picks_that_seeds_parameters(multi, capsys):
    from hephaestus.tools.watch import Player, main as watch_main

    params, meta = load_params_npz(str(multi / "final_params.npz"))
    player = Player(str(multi / "final_params.npz"), seed_index=2)
    for mine, all_seeds in zip(jax.tree.leaves(player.params), jax.tree.leaves(params)):
        np.testing.assert_array_equal(np.asarray(mine), all_seeds[2])
    one, index = select_seed(params, meta, None)
    assert index == 0 and np.array_equal(jax.tree.leaves(one)[0], jax.tree.leaves(params)[0][0])
    assert watch_main([str(multi), "--seed-index", "3", "--episodes", "1"], compile_cache=False) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--seed-index 3 is out of range" in err[0] and "0..2" in err[0]


@pytest.mark.heavy
def test_two_dtc_agents_train_in_one_program():
    from hephaestus.run.cli import build_parser, config_from_args
    from hephaestus.config.train_config import resolve
    from hephaestus.core.ppo import make_train
    from test_dtc import TINY as DTC_TINY

    config, _ = resolve(config_from_args(build_parser().parse_args(DTC_TINY + ["--num-seeds", "2"])))
    trainer = make_train(config)
    stages = trainer.runner_state.stages
    assert stages["world_model"].h.shape == (2, 2, 4, 16)  # [seeds, ensemble, envs, deter]
    runner, metrics = trainer.train_chunk(trainer.runner_state)
    metrics = jax.device_get(metrics)
    assert int(runner.update_step) == 2
    for key in ("wm/loss", "dtc/intrinsic_reward", "mean_episode_return"):
        assert metrics[key].shape == (2, 2) and np.all(np.isfinite(metrics[key])), key
    wm = jax.tree.leaves(jax.device_get(runner.stages["world_model"].params))[0]
    assert not np.allclose(wm[0], wm[1])  # each agent its own world model


def test_num_seeds_flag_is_documented_and_checked(capsys):
    from hephaestus.run import train
    from hephaestus.run.cli import build_parser

    assert "--num-seeds" in build_parser().format_help()
    with pytest.raises(SystemExit) as exit_:
        train.main(["--env", "gymnax:CartPole-v1", "--num-seeds", "0"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --num-seeds must be positive, got 0"]
