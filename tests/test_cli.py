"""The training script as a user meets it: --help, bad flags, bad env names, metrics.jsonl."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "train_purejaxrl.py")


def train(*args, cwd=None):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_help_shows_the_common_flags_by_section_and_names_the_others():
    out = train("--help")
    assert out.returncode == 0
    for flag in ("--config", "--env", "--total-timesteps", "--num-envs", "--num-steps", "--env-params", "--lr",
                 "--ent-coef", "--teacher", "--hidden-dim", "--encoder", "--agent", "--seed", "--num-seeds",
                 "--run-name", "--resume", "--save-interval-minutes", "--eval-every", "--wandb"):
        assert flag in out.stdout, flag
    for rare in ("--gae-lambda", "--dtc-deter-dim", "--dreamer-entropy", "--rnd-coef", "--keep-optimizer"):
        assert rare not in out.stdout, rare
    for section in ("environment:", "PPO:", "network:", "run, checkpoints and devices:"):
        assert section in out.stdout, section
    assert "--help-all" in out.stdout and "dtc (" in out.stdout and "dreamer (" in out.stdout
    assert len(out.stdout.splitlines()) < 160  # a screen or two, against every flag's ~670 lines


def test_help_all_and_help_section_explain_every_flag():
    from hephaestus.config.train_config import options

    out = train("--help-all")
    assert out.returncode == 0
    for option in options().values():
        assert option.flag in out.stdout, option.flag
    for flag in ("--no-anneal-lr", "--config", "--startup-timeout", "--obs-dtype"):
        assert flag in out.stdout, flag
    dtc = train("--help", "dtc")
    assert dtc.returncode == 0 and "--dtc-deter-dim" in dtc.stdout and "--lr " not in dtc.stdout
    assert "--gae-lambda" in train("--help", "ppo").stdout
    bad = train("--help", "bogus")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "sections:" in bad.stderr


@pytest.mark.parametrize("args,needle", [
    (["--num-envs", "abc"], "invalid int value"),
    (["--total-timesteps", "lots"], "expected a number"),
    (["--bogus-flag"], "unrecognized arguments"),
    (["--num-envs", "3", "--num-steps", "5", "--num-minibatches", "4"], "does not divide"),
    (["--gamma", "1.5"], "--gamma must be in [0, 1]"),
    (["--env", "gymnax:CartPol-v1"], "did you mean CartPole-v1"),
    (["--env", "nonsense"], "unknown env"),
    (["--encoder", "conv"], "invalid choice: 'conv'"),
    (["--obs-dtype", "float16"], "invalid choice: 'float16'"),
    (["--cell-dim", "0"], "--cell-dim must be positive"),
    (["--env", "gymnax:CartPole-v1", "--encoder", "cells"], "needs an env that declares obs_cells"),
])
def test_bad_input_is_one_line_and_non_zero(args, needle):
    out = train(*args)
    assert out.returncode != 0
    lines = [line for line in out.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert needle in lines[0]
    assert "Traceback" not in out.stderr


def test_a_run_writes_metrics_jsonl_and_prints_progress(tmp_path):
    out = train("--env", "gymnax:CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--total-timesteps", "256",
                "--hidden-dim", "16", "--num-layers", "1", "--log-interval", "2", "--num-minibatches", "2",
                "--update-epochs", "1", "--run-name", "tiny", "--checkpoint-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "compile:" in out.stdout and "steps/s" in out.stdout and "ETA" in out.stdout
    lines = (tmp_path / "tiny" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2  # 4 updates in chunks of 2
    record = json.loads(lines[-1])
    assert record["env_steps"] == 256 and record["update"] == 4
    for key in ("wall_seconds", "steps_per_second", "mean_episode_return", "mean_episode_length", "entropy",
                "approx_kl", "clip_frac", "pg_loss", "vf_loss", "total_loss", "explained_variance", "grad_norm",
                "num_episodes"):
        assert key in record, key


def test_profile_writes_a_trace_of_the_first_chunk(tmp_path, capsys):
    """--profile DIR: a JAX profiler trace (TensorBoard's xplane and Perfetto's trace.json.gz) of one chunk."""
    from train_cli import main as train_main

    assert train_main("--env", "gymnax:CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--hidden-dim", "16",
                      "--num-layers", "1", "--num-minibatches", "2", "--update-epochs", "1", "--log-interval", "1",
                      "--total-timesteps", "128", "--no-wandb", "--final-eval-episodes", "0",
                      "--profile", str(tmp_path / "prof"), "--checkpoint-dir", str(tmp_path)) == 0
    assert "profile: trace of the first chunk" in capsys.readouterr().out
    traces = list((tmp_path / "prof").glob("plugins/profile/*/*"))
    assert any(p.name.endswith(".xplane.pb") and p.stat().st_size > 0 for p in traces), traces
    assert any(p.name.endswith(".trace.json.gz") for p in traces), traces


def test_debug_nans_stops_at_the_first_nan_in_one_line(tmp_path, capsys):
    """--debug-nans: a chunk that makes a NaN stops the run (exit 1) with one line from jax's NaN check, and jax's
    NaN checking is off again afterwards (main() may run inside the caller's process)."""
    import jax
    import jax.numpy as jnp

    from hephaestus.core.stages import Stage, register_stage
    from train_cli import main as train_main

    @register_stage("test_log_of_negative_reward")
    def nan_stage(ctx):
        def apply(key, train_state, batch, state):
            return train_state, {**batch, "reward": jnp.log(batch["reward"] - 2.0)}, state, {}

        return Stage("test_log_of_negative_reward", apply, after="rollout")

    code = train_main("--env", "gymnax:CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--hidden-dim", "16",
                      "--num-layers", "1", "--num-minibatches", "2", "--update-epochs", "1", "--log-interval", "1",
                      "--total-timesteps", "128", "--no-wandb", "--extra-stages", "test_log_of_negative_reward",
                      "--debug-nans", "--checkpoint-dir", str(tmp_path))
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 1
    # jax names the outermost operation whose output holds the NaN (inside a chunk: its scan over updates)
    assert len(err) == 1 and err[0].startswith("error: --debug-nans: invalid value (nan) encountered in "), err
    assert not jax.config.jax_debug_nans


def test_a_rounded_total_is_said_in_one_line(tmp_path, capsys):
    from train_cli import main

    args = ["--env", "gymnax:CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--hidden-dim", "16",
            "--num-layers", "1", "--num-minibatches", "2", "--update-epochs", "1", "--final-eval-episodes", "0",
            "--checkpoint-dir", str(tmp_path)]
    assert main(*args, "--total-timesteps", "100", "--run-name", "rounded") == 0
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("total timesteps:")]
    assert said == ["total timesteps: asked 100, will run 128 (2 updates of 4 envs x 16 steps, rounded up to whole "
                    "updates)"]
    assert main(*args, "--total-timesteps", "128", "--run-name", "exact") == 0
    assert "total timesteps:" not in capsys.readouterr().out  # nothing to say when the number asked runs
