"""Sweeps: the PPO float hyperparameters are data (one compiled program for any values), the grid and random
search expand as documented, and a tiny sweep runs end to end with its points vmapped in one program."""

import csv
import json

import jax
import numpy as np
import pytest

from hephaestus.tools import sweep as sw
from hephaestus.config.train_config import DATA_HYPERPARAMETERS, TrainConfig, resolve
from train_cli import main as train_main

TINY = ["--env", "gymnax:CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--hidden-dim", "16",
        "--num-layers", "1", "--log-interval", "2", "--num-minibatches", "2", "--update-epochs", "2", "--no-wandb",
        "--total-timesteps", str(4 * 64)]


def test_grid_expansion_random_search_and_grouping():
    grid = sw.parse_grid(["ent-coef=0.0,0.01,0.03", "lr=1e-3,3e-4", "hidden_dim=16,32"])
    assert grid == {"ent_coef": [0.0, 0.01, 0.03], "lr": [1e-3, 3e-4], "hidden_dim": [16, 32]}
    points = sw.expand_grid(grid)
    assert len(points) == 12 and points[0] == {"ent_coef": 0.0, "lr": 1e-3, "hidden_dim": 16}
    assert points[1] == {"ent_coef": 0.0, "lr": 1e-3, "hidden_dim": 32}  # the last name varies fastest
    assert sw.split_point(points[1]) == ({"hidden_dim": 32}, {"ent_coef": 0.0, "lr": 1e-3})
    groups = sw.group_points(points)  # hidden_dim changes shapes: one program per width, 6 points each
    assert [g.static for g in groups] == [{"hidden_dim": 16}, {"hidden_dim": 32}]
    assert all(len(g.points) == 6 for g in groups)
    space = sw.parse_space(["lr=1e-4:1e-2:log", "ent-coef=0:0.05"])
    drawn = sw.sample_space(space, 50, seed=3)
    assert drawn == sw.sample_space(space, 50, seed=3) and drawn != sw.sample_space(space, 50, seed=4)
    lrs = np.array([p["lr"] for p in drawn])
    assert lrs.min() >= 1e-4 and lrs.max() <= 1e-2 and np.median(lrs) < 2e-3  # log-uniform: median near 1e-3
    assert all(0 <= p["ent_coef"] <= 0.05 for p in drawn)
    for bad, needle in ((["bogus=1"], "not a training hyperparameter"), (["seed=1,2"], "not a training"),
                        (["lr"], "expected NAME=V1")):
        with pytest.raises(sw.SweepError, match=needle):
            sw.parse_grid(bad)
    with pytest.raises(sw.SweepError, match="LOW <= HIGH"):
        sw.parse_space(["lr=1e-2:1e-4"])


def test_float_hyperparameters_are_data_not_program_constants():
    from hephaestus.core.ppo import make_train

    config = resolve(TrainConfig.from_flat(env="gymnax:CartPole-v1", num_envs=4, num_steps=16, hidden_dim=16, num_layers=1,
                                 log_interval=2, num_minibatches=2, update_epochs=1))[0]
    other = config.replace(lr=1e-3, gamma=0.9, gae_lambda=0.8, clip_eps=0.3, vf_coef=1.0, ent_coef=0.1,
                           ent_coef_final=0.02, max_grad_norm=2.0)
    a, b = make_train(config), make_train(other)
    for name in DATA_HYPERPARAMETERS:
        # no --ent-coef-final: the bonus is constant at --ent-coef
        expected = config.ppo.ent_coef if name == "ent_coef_final" else getattr(config.ppo, name)
        assert float(a.runner_state.hyper[name]) == np.float32(expected)
        assert float(b.runner_state.hyper[name]) == np.float32(getattr(other.ppo, name))
    assert float(b.runner_state.train_state.opt_state.hyperparams["max_grad_norm"]) == 2.0
    n = np.int32(2)
    assert a.compiled_chunk.lower(a.runner_state, n).as_text() == b.compiled_chunk.lower(b.runner_state, n).as_text()


def test_tiny_sweep_vmaps_its_points_and_each_agent_is_the_single_run(tmp_path, capsys):
    out = tmp_path / "sweep"
    code = sw.main([*TINY, "--grid", "ent-coef=0.0,0.05", "--grid", "lr=1e-3", "--seeds", "2", "--seed", "1",
                    "--final-eval-episodes", "6", "--eval-episodes", "3", "--eval-max-steps", "40", "--eval-every", "2",
                    "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "2 point(s) x 2 seed(s) in 1 program(s)" in printed
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert [(float(r["ent_coef"]), float(r["lr"])) for r in rows] == [(0.0, 1e-3), (0.05, 1e-3)]
    assert all(r["seeds"] == "2" and np.isfinite(float(r["mean_episode_return_mean"])) for r in rows)
    table = (out / "results.md").read_text()
    # the final greedy evaluation heads the table: every agent evaluated, each point's seeds summarised
    assert table.count("±") >= 4 and "| ent_coef | lr | eval/return_mean | eval/length_mean |" in table
    assert all(0 < float(r["eval/length_mean_mean"]) <= 40 for r in rows)
    evaluated = json.loads((out / "g" / "eval.json").read_text())
    assert evaluated["agent_seeds"] == [1, 2, 1, 2]
    # the table's eval/ columns are the final evaluation's (6 episodes), not the last periodic one's (3)
    final_returns = evaluated["metrics"]["per_seed"]["eval/return_mean"]
    for p, row in enumerate(rows):
        assert float(row["eval/return_mean_mean"]) == pytest.approx(np.mean(final_returns[2 * p:2 * p + 2]), rel=1e-5)
    image = __import__("matplotlib.image", fromlist=["imread"]).imread(out / "curves.png")
    assert image.shape[0] > 100 and image[..., :3].std() > 0.01  # written and not blank
    # Agent order: point 0 seeds 1, 2, then point 1 seeds 1, 2. Agent 3 (ent 0.05, seed 2) is the single run.
    records = [json.loads(line) for line in (out / "g" / "metrics.jsonl").read_text().splitlines()]
    assert train_main(*TINY, "--ent-coef", "0.05", "--lr", "1e-3", "--seed", "2", "--run-name", "single",
                      "--checkpoint-dir", str(tmp_path), "--final-eval-episodes", "6", "--eval-episodes", "3",
                      "--eval-max-steps", "40") == 0
    single = [json.loads(line) for line in (tmp_path / "single" / "metrics.jsonl").read_text().splitlines()]
    for sweep_record, single_record in zip(records, single):
        for key in ("mean_episode_return", "entropy", "pg_loss", "total_loss", "learning_rate",
                    "ent_coef"):  # a point's --ent-coef stays its own throughout (no --ent-coef-final)
            assert sweep_record["per_seed"][key][3] == pytest.approx(single_record[key], rel=1e-4, abs=1e-6), key
    # ... and its final evaluation is the single run's: same parameters, same seed's evaluation key
    single_eval = json.loads((tmp_path / "single" / "eval.json").read_text())
    assert evaluated["metrics"]["per_seed"]["eval/return_mean"][3] == pytest.approx(
        single_eval["metrics"]["eval/return_mean"], rel=1e-4)
    # ... and its parameters are saved as row 3 of the group's parameter file, labelled with its point and seed.
    from hephaestus.core.export import agent_label, load_params_npz, select_seed

    swept, swept_meta = load_params_npz(str(out / "g" / "final_params.npz"))
    alone, _ = load_params_npz(str(tmp_path / "single" / "final_params.npz"))
    assert swept_meta["num_seeds"] == 4 and agent_label(swept_meta, 3) == "ent_coef=0.05, lr=0.001, seed 2"
    row = select_seed(swept, swept_meta, 3)[0]
    assert jax.tree.structure(row) == jax.tree.structure(alone)
    for saved, single_value in zip(jax.tree.leaves(row), jax.tree.leaves(alone)):
        np.testing.assert_allclose(saved, single_value, rtol=1e-4, atol=1e-6)
    # ... and the points really differ: the entropy bonus changes the loss (and the saved parameters).
    assert records[-1]["per_seed"]["total_loss"][1] != pytest.approx(records[-1]["per_seed"]["total_loss"][3])
    first = select_seed(swept, swept_meta, 1)[0]
    assert any(not np.allclose(a, b) for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(row)))


def test_a_full_disk_ends_a_sweep_with_one_line_naming_the_write_and_what_is_complete(tmp_path, capsys,
                                                                                       monkeypatch):
    """A write that fails (disk full) during training, at the parameter file or at the summary is one line and a
    non-zero exit, never a traceback: the failed write and its reason, the program it stopped, the programs whose
    results are complete."""
    import errno

    from hephaestus.core import sinks

    def no_space(path):
        def raise_(*args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return raise_

    argv = [*TINY, "--grid", "ent-coef=0.0,0.05", "--final-eval-episodes", "0", "--eval-every", "0"]
    cases = (  # (what fails, the words the line must hold)
        ((sinks.JsonlSink, "write", no_space("m")), ("metrics.jsonl failed (No space left on device) after update",
                                                     "program g did not finish")),
        ((sw, "save_params_npz", no_space("final_params.npz")), ("writing final_params.npz failed (No space left",
                                                                 "program g did not finish")),
        ((sw, "summarise", no_space("results.csv")), ("writing results.csv failed", "summary (results.csv",
                                                      "complete: ")),
    )
    for (target, name, replacement), needles in cases:
        with monkeypatch.context() as patch:
            patch.setattr(target, name, replacement)
            with pytest.raises(SystemExit) as exit_:
                sw.main([*argv, "--out", str(tmp_path / name)])
        assert exit_.value.code == 1  # a fault while working, not bad input
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: sweep: writing "), err
        assert all(needle in err[0] for needle in needles), (needles, err[0])
    assert err[0].endswith(f"complete: {tmp_path / 'summarise' / 'g'}")
    assert (tmp_path / "summarise" / "g" / "final_params.npz").is_file()  # the finished program's work is kept


def test_bad_sweep_input_is_one_line(capsys):
    for argv, needle in ((["--out", "x"], "give --grid"), (["--grid", "gamma=2", "--out", "x"], "--gamma must be"),
                         (["--grid", "lr=1e-3", "--seeds", "0", "--out", "x"], "--seeds must be positive"),
                         (["--grid", "env.max_step_in_episode=10,20", "--out", "x"],
                          "no parameter 'max_step_in_episode' (did you mean max_steps_in_episode"),
                         (["--grid", "env-params=a=1", "--out", "x"], "sweep one env parameter as env.NAME")):
        with pytest.raises(SystemExit) as exit_:
            sw.main(["--env", "gymnax:CartPole-v1", *argv])
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err


def test_env_parameters_are_swept_as_env_dot_name_each_value_its_own_program():
    points = sw.expand_grid(sw.parse_grid(["env.curriculum_share=0,0.5", "ent-coef=0.03,0.1"]))
    assert points[1] == {"env.curriculum_share": 0, "ent_coef": 0.1}
    groups = sw.group_points(points)  # env parameters are static: one program per value, ent-coef vmapped
    assert [g.static for g in groups] == [{"env.curriculum_share": 0}, {"env.curriculum_share": 0.5}]
    base = TrainConfig().replace(env_params=("distance_coef=0", "curriculum_share=0.25"))
    config = sw.point_config(base, points[3])
    assert config.env.env_params == ("distance_coef=0", "curriculum_share=0.5") and config.ppo.ent_coef == 0.1
    sw.check_env_params(base, points)  # builds hackmatrix with each set: no error
    with pytest.raises(sw.SweepError, match="curriculum_share must be in"):
        sw.check_env_params(base, [{"env.curriculum_share": 2}])


def test_checkpoint_from_before_the_hyperparameters_were_data_resumes_exactly(tmp_path):
    """A checkpoint whose RunnerState.hyper holds only lr and num_updates and whose optimizer injects only the
    learning rate (the layout before the other hyperparameters became data) resumes, and the run ends with the
    parameters of an uninterrupted run."""
    from hephaestus.run import checkpoint as ck
    from hephaestus.run.cli import build_parser, config_from_args
    from hephaestus.core.export import load_params_npz
    from hephaestus.core.ppo import make_train

    args = [*TINY, "--save-interval", "2", "--checkpoint-dir", str(tmp_path)]
    assert train_main(*args, "--run-name", "ref") == 0
    config = resolve(config_from_args(build_parser().parse_args(args + ["--run-name", "ref"])))[0]
    trainer = make_train(config)
    runner = ck.restore(ck.locate(str(tmp_path / "ref" / "2")), trainer).runner_state
    opt = runner.train_state.opt_state
    old = runner.replace(hyper={k: runner.hyper[k] for k in ("lr", "num_updates")},
                         train_state=runner.train_state.replace(opt_state=opt._replace(
                             hyperparams={"learning_rate": opt.hyperparams["learning_rate"]})))
    saver = ck.Checkpointer(str(tmp_path / "old"), trainer)
    saver.save(old)
    saver.close()
    assert train_main("--resume", str(tmp_path / "old")) == 0
    a, _ = load_params_npz(str(tmp_path / "ref" / "final_params.npz"))
    b, _ = load_params_npz(str(tmp_path / "old" / "final_params.npz"))
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y)
