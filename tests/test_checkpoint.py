"""Checkpoints: exact resume after SIGKILL and SIGTERM, refusals that touch nothing, NaN guard, inspection.

The runs are tiny CartPole configs. A straight run is compared with a run killed in a subprocess and resumed:
the final parameters must be bit-identical.
"""

import json
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from hephaestus.run import checkpoint as ck
from hephaestus.run import training_hooks as hooks
from hephaestus.core.export import load_params_npz
from train_cli import assert_same_params, main

# One worker runs this module, so its module fixture runs once (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("test_checkpoint")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "train_purejaxrl.py")
TINY = ["--env", "gymnax:CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--hidden-dim", "16",
        "--num-layers", "1", "--log-interval", "2", "--num-minibatches", "2", "--update-epochs", "1", "--no-wandb"]
LONG_UPDATES = 300  # long enough that a subprocess is still running when its first checkpoint lands
LONG = TINY + ["--total-timesteps", str(LONG_UPDATES * 64)]


@pytest.fixture(autouse=True)
def no_wandb(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)


def params_of(path):
    params, meta = load_params_npz(path)
    return jax.tree.leaves(params), meta


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The uninterrupted reference run."""
    base = tmp_path_factory.mktemp("straight")
    os.environ["WANDB_MODE"] = "disabled"
    try:
        code = main(*LONG, "--run-name", "ref", "--checkpoint-dir", str(base), "--save-interval", "100")
    finally:
        os.environ.pop("WANDB_MODE", None)
    assert code == 0
    return base / "ref"


def snapshot(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.stat(path)
            out[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
    return out


def start_subprocess(*args):
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "python"), "WANDB_MODE": "disabled",
           "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, SCRIPT, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)


def wait_for_checkpoint(proc, run_dir, timeout=240):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if ck._step_dirs(str(run_dir)):
            return
        if proc.poll() is not None:
            raise AssertionError(f"run ended before a checkpoint: {proc.stdout.read()}")
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("no checkpoint appeared")


def test_straight_run_writes_checkpoints_and_exports(straight):
    steps = ck._step_dirs(str(straight))
    assert steps == [100, 200, 300]  # --keep-checkpoints 3
    assert sorted(p.name for p in straight.glob("params_*.npz")) == ["params_100.npz", "params_200.npz",
                                                                    "params_300.npz"]
    _, meta = params_of(straight / "final_params.npz")
    assert meta["update"] == LONG_UPDATES and meta["network"]["hidden_dim"] == 16
    found = ck.locate(str(straight))
    assert found.step == 300 and found.meta["config"]["num_envs"] == 4 and found.meta["version"]
    assert not list(straight.glob("*.tmp*"))


def test_sigkill_then_resume_is_bit_identical(straight, tmp_path, capsys):
    proc = start_subprocess(*LONG, "--run-name", "r", "--checkpoint-dir", str(tmp_path), "--save-interval", "10")
    wait_for_checkpoint(proc, tmp_path / "r")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    saved = ck.locate(str(tmp_path / "r")).step
    assert 0 < saved < LONG_UPDATES
    capsys.readouterr()
    assert main("--resume", str(tmp_path / "r")) == 0
    out = capsys.readouterr().out
    assert f"resume: update {saved} of {LONG_UPDATES}" in out
    assert out.count("compile:") == 1
    assert_same_params(tmp_path / "r" / "final_params.npz", straight / "final_params.npz")
    updates = [json.loads(line)["update"] for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert updates == sorted(set(updates)) and updates[-1] == LONG_UPDATES  # appended, no update twice


def test_sigterm_saves_and_exits_then_resume_is_bit_identical(straight, tmp_path, capsys):
    """In-process (a subprocess start costs ~20 s here): a watcher thread sends this process a real SIGTERM once
    the first checkpoint is on disk, as a spot preemption would; the handler installed by the run catches it."""
    import threading

    run_dir = tmp_path / "t"
    handler_before = signal.getsignal(signal.SIGTERM)

    def preempt():
        deadline = time.time() + 240
        while not ck._step_dirs(str(run_dir)) and time.time() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)

    watcher = threading.Thread(target=preempt, daemon=True)
    watcher.start()
    code = main(*LONG, "--run-name", "t", "--checkpoint-dir", str(tmp_path), "--save-interval", "50")
    watcher.join(timeout=5)
    out = capsys.readouterr().out
    assert code == 143, out
    assert "SIGTERM received: saving and exiting" in out and "stopped by SIGTERM after update" in out
    stopped = int(out.split("stopped by SIGTERM after update ")[1].split(";")[0])
    assert ck.locate(str(run_dir)).step == stopped < LONG_UPDATES
    _, meta = params_of(run_dir / "final_params.npz")
    assert meta["update"] == stopped
    assert signal.getsignal(signal.SIGTERM) == handler_before  # the run's handlers are removed after it
    assert main("--resume", str(run_dir)) == 0
    assert_same_params(run_dir / "final_params.npz", straight / "final_params.npz")


@pytest.mark.parametrize("case", ["missing", "empty", "truncated", "other_env", "other_network", "older_step",
                                  "fresh_over_existing"])
def test_bad_checkpoints_are_one_line_errors_and_touch_nothing(straight, tmp_path, capsys, case):
    import shutil

    root = tmp_path / "ck"
    shutil.copytree(straight, root / "ref")
    (root / "empty").mkdir()
    args = {"missing": ["--resume", str(root / "nope")],
            "empty": ["--resume", str(root / "empty")],
            "truncated": ["--resume", str(root / "ref")],
            "other_env": ["--resume", str(root / "ref"), "--env", "gymnax:Acrobot-v1"],
            "other_network": ["--resume", str(root / "ref"), "--hidden-dim", "32"],
            "older_step": ["--resume", str(root / "ref" / "200"), "--total-timesteps", "30000"],
            "fresh_over_existing": LONG + ["--run-name", "ref", "--checkpoint-dir", str(root)]}[case]
    if case == "truncated":
        for path in (root / "ref" / "300" / "state").rglob("*"):
            if path.is_file() and path.parent.name == "d":
                with open(path, "r+b") as f:
                    f.truncate(10)
    before = snapshot(root)
    capsys.readouterr()
    code = main(*args)
    captured = capsys.readouterr()
    err = captured.err
    assert code not in (0, None)
    if case in ("fresh_over_existing", "older_step"):  # refused from the run folder alone, before any setup
        assert "setup:" not in captured.out, captured.out
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    needle = {"missing": "no such file", "empty": "no checkpoints", "truncated": "unreadable",
              "other_env": "checkpoint is for env 'gymnax:CartPole-v1'", "other_network": "hidden_dim is 16",
              "older_step": "older than", "fresh_over_existing": "already has checkpoints"}[case]
    assert needle in lines[0]
    assert snapshot(root) == before


def test_changed_num_envs_keeps_weights_and_resets_optimizer(straight, tmp_path, capsys):
    import shutil

    shutil.copytree(straight, tmp_path / "ref")
    capsys.readouterr()
    code = main("--resume", str(tmp_path / "ref"), "--num-envs", "8",
                "--total-timesteps", str((LONG_UPDATES + 2) * 128))
    out = capsys.readouterr().out
    assert code == 0
    notes = [line for line in out.splitlines() if "--num-envs changed" in line]
    assert len(notes) == 1 and "optimizer state reset" in notes[0] and "4 -> 8" in notes[0]


def test_restore_keeps_every_leaf_and_its_type(straight):
    from hephaestus.config.train_config import resolve
    from hephaestus.core.ppo import make_train

    found = ck.locate(str(straight / "300"))
    config, _ = resolve(ck.config_of(found))
    trainer = make_train(config)
    restored = ck.restore(found, trainer)
    assert restored.exact and int(restored.runner_state.update_step) == 300
    fresh_leaves = jax.tree.leaves(trainer.runner_state)
    for a, b in zip(fresh_leaves, jax.tree.leaves(restored.runner_state)):
        assert a.shape == b.shape and a.dtype == b.dtype and not b.weak_type
    assert jax.tree.structure(trainer.runner_state) == jax.tree.structure(restored.runner_state)
    params, _ = load_params_npz(str(straight / "final_params.npz"))
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(restored.runner_state.train_state.params)):
        np.testing.assert_array_equal(a, np.asarray(b))


def test_nan_guard_stops_without_saving_the_bad_state(tmp_path, capsys):
    import jax.numpy as jnp

    from hephaestus.core.stages import Stage, register_stage

    @register_stage("test_nan_after_4")
    def nan_stage(ctx):
        def apply(key, train_state, batch, count):
            bad = jnp.where(count >= 4, jnp.nan, 0.0)
            return train_state, {**batch, "reward": batch["reward"] + bad}, count + 1, {}

        return Stage("test_nan_after_4", apply, init=lambda key: jnp.int32(0), after="rollout")

    code = main(*TINY, "--total-timesteps", str(20 * 64), "--extra-stages", "test_nan_after_4",
                "--save-interval", "2", "--run-name", "nan", "--checkpoint-dir", str(tmp_path))
    err = capsys.readouterr().err
    assert code == 1
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "non-finite" in lines[0] and "update" in lines[0], err
    steps = ck._step_dirs(str(tmp_path / "nan"))
    assert steps and max(steps) <= 4
    assert not (tmp_path / "nan" / "final_params.npz").exists()
    _, raw = ck.read_state(str(tmp_path / "nan"))
    assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(raw["train_state"]["params"]))


def test_inspect_checkpoint(straight, tmp_path, capsys):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        import inspect_checkpoint
    finally:
        sys.path.pop(0)
    assert inspect_checkpoint.main([str(straight)]) == 0
    out = capsys.readouterr().out
    assert "update 300" in out and "gymnax:CartPole-v1" in out and "params.actor.Dense_0.kernel" in out
    assert "loads: ok" in out and "mean_episode_return" in out
    with pytest.raises(SystemExit) as exit_:
        inspect_checkpoint.main([str(tmp_path / "nope")])
    assert exit_.value.code != 0
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no such file" in err


def test_save_interval_by_minutes_and_by_updates(monkeypatch):
    from types import SimpleNamespace

    class FakeCheckpointer:
        run_dir = "/nonexistent"

        def __init__(self):
            self.saved = []

        def save(self, runner, record):
            self.saved.append(int(runner.update_step))
            return None

        def wait(self):
            pass

    now = [1000.0]
    monkeypatch.setattr(ck.time, "monotonic", lambda: now[0])
    fake = FakeCheckpointer()
    hook = hooks.CheckpointHook(fake, every_updates=0, every_minutes=10, message=lambda text: None)
    for update, minutes in ((2, 3), (4, 9.9), (6, 10.1), (8, 15), (10, 20.2)):
        now[0] = 1000.0 + minutes * 60
        hook.after_chunk(SimpleNamespace(update_step=np.int32(update)), {"update": update})
    assert fake.saved == [6, 10]
    fake = FakeCheckpointer()
    hook = hooks.CheckpointHook(fake, every_updates=5, message=lambda text: None, start_update=40)
    for update in (42, 44, 46, 48, 50, 52):
        hook.after_chunk(SimpleNamespace(update_step=np.int32(update)), {"update": update})
    assert fake.saved == [46, 52]


def test_second_ctrl_c_exits_at_once():
    """First SIGINT only sets the stop flag; a second one ends the process with 130 from the handler."""
    code = (
        "import os, signal, sys, time\n"
        "from hephaestus.run.training_hooks import StopSignals\n"
        "stop = StopSignals(message=print).install()\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "time.sleep(0.2)\n"
        "assert stop.after_chunk(None, {}) and stop.exit_code == 130\n"
        "print('first handled', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "time.sleep(5)\n"
        "print('not reached')\n")
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "python")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 130, out.stderr
    assert "first handled" in out.stdout and "SIGINT received" in out.stdout and "not reached" not in out.stdout
    assert "Ctrl-C again to quit at once" in out.stderr and "second Ctrl-C: exiting now" in out.stderr


def test_a_signal_during_a_chunk_stops_after_it_and_the_save_is_not_called_final(tmp_path):
    """Ctrl-C while chunk k runs: chunk k+1, already queued behind it, is the last (no chunk is queued after the
    signal), and the save at the end names the signal instead of calling itself final."""
    from hephaestus.config.train_config import TrainConfig, resolve
    from hephaestus.envs.registry import make_training_env
    from hephaestus.run.loop import run
    from hephaestus.core.ppo import make_train

    config, _ = resolve(TrainConfig.from_flat(env="gymnax:CartPole-v1", num_envs=4, num_steps=16, hidden_dim=16,
                                              num_layers=1, num_minibatches=2, update_epochs=1, log_interval=1,
                                              total_timesteps=64 * 10))
    trainer = make_train(config, make_training_env(config.env))

    class SignalAfterFirstChunk:  # the signal arrives while chunk 2 (queued behind chunk 1) runs
        def needs_state(self, update):
            return False

        def after_chunk(self, runner_state, record):
            if record["update"] == 1:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.1)
            return False

        def at_end(self, runner_state, record):
            pass

    class FakeCheckpointer:
        run_dir = str(tmp_path)
        saved = []

        def save(self, runner, record):
            return str(tmp_path / str(int(runner.update_step)))

        def complete(self):
            pass

        def export(self, *args):
            pass

    said = []
    stop = hooks.StopSignals(message=said.append).install()
    try:
        save = hooks.CheckpointHook(FakeCheckpointer(), every_updates=100, message=said.append, stop=stop)
        result = run(trainer, hooks=[stop, SignalAfterFirstChunk(), save], message=lambda text: None)
    finally:
        stop.uninstall()
    assert [r["update"] for r in result.records] == [1, 2] and result.stopped_early
    assert any("(stopped by SIGINT)" in line for line in said) and not any("(final)" in line for line in said)
