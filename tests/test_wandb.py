"""wandb and TensorBoard sinks: offline mode writes the expected keys, disabled mode writes nothing, the run id
follows the run name, and a resumed run does not log a step twice. Never touches the network: HOME, WANDB_DIR
and WANDB_MODE point at temporary directories, and no API key is set."""

import csv
import glob
import json
import re
import os
import struct

import pytest

from hephaestus.core import sinks
from hephaestus.config.train_config import TrainConfig
from train_cli import main

TINY = ["--env", "gymnax:CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--hidden-dim", "16",
        "--num-layers", "1", "--log-interval", "2", "--num-minibatches", "2", "--update-epochs", "1",
        "--total-timesteps", "256"]


@pytest.fixture(autouse=True)
def offline_home(monkeypatch, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb_cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb_data"))
    monkeypatch.setenv("WANDB_ARTIFACT_DIR", str(tmp_path / "wandb_artifacts"))
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # never the real server
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("NETRC", raising=False)
    return home


def history(run_dir, timeout=30.0):
    """(history rows as (step, keys), all records); waits for the run's exit record, since the wandb service
    that writes the file may still be flushing when `finish()` returns."""
    import time

    files = glob.glob(os.path.join(run_dir, "*.wandb"))
    assert len(files) == 1, files
    deadline = time.time() + timeout
    while True:
        records = sinks.read_wandb_records(files[0])
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.time() > deadline:
            break
        time.sleep(0.2)
    rows = [(r.history.step.num, {i.key or "/".join(i.nested_key): i.value_json for i in r.history.item})
            for r in records if r.WhichOneof("record_type") == "history"]
    return rows, records


def test_offline_without_a_key_logs_the_expected_keys(tmp_path, capsys):
    code = main(*TINY, "--wandb", "--run-name", "w", "--checkpoint-dir", str(tmp_path / "ck"), "--save-interval", "2",
                "--tensorboard", str(tmp_path / "tb"))
    out = capsys.readouterr().out
    assert code == 0
    notes = [line for line in out.splitlines() if line.startswith("wandb:") and "logging offline" in line]
    assert len(notes) == 1 and "no API key" in notes[0] and "wandb sync" in notes[0]
    runs = glob.glob(str(tmp_path / "wandb_dir" / "wandb" / "offline-run-*"))
    assert len(runs) == 1 and runs[0].endswith(sinks.wandb_run_id("w"))
    rows, records = history(runs[0])
    rows = [(step, keys) for step, keys in rows if "update" in keys]  # the chunks' records (not the final video)
    assert [json.loads(keys["env_steps"]) for _, keys in rows] == [128, 256]
    keys = rows[-1][1]
    # the keys of metrics.jsonl, unchanged: one name per quantity
    jsonl_keys = set(json.loads((tmp_path / "ck" / "w" / "metrics.jsonl").read_text().splitlines()[-1]))
    for key in ("mean_episode_return", "entropy", "approx_kl", "total_loss", "steps_per_second", "learning_rate",
                "env_steps", "update"):
        assert key in keys and key in jsonl_keys, key
    artifacts = [r.artifact for r in records if r.WhichOneof("record_type") == "artifact"]
    assert {a.type for a in artifacts} == {"checkpoint", "model"}  # the checkpoints, the final parameters
    # TensorBoard got the same keys
    events = glob.glob(str(tmp_path / "tb" / "events.out.tfevents.*"))
    assert events
    tags = read_tb_tags(events[0])
    assert {"mean_episode_return", "steps_per_second", "update"} <= tags
    assert read_tb_steps(events[0]) == {128, 256}  # the global step is env_steps, not the update


def read_tb_tags(path):
    from tensorboardX.proto import event_pb2

    data, pos, tags = open(path, "rb").read(), 0, set()
    while pos + 12 <= len(data):
        (length,) = struct.unpack("<Q", data[pos:pos + 8])
        event = event_pb2.Event()
        event.ParseFromString(data[pos + 12:pos + 12 + length])
        pos += 12 + length + 4
        tags |= {v.tag for v in event.summary.value}
    return tags


def read_tb_steps(path):
    from tensorboardX.proto import event_pb2

    data, pos, steps = open(path, "rb").read(), 0, set()
    while pos + 12 <= len(data):
        (length,) = struct.unpack("<Q", data[pos:pos + 8])
        event = event_pb2.Event()
        event.ParseFromString(data[pos + 12:pos + 12 + length])
        pos += 12 + length + 4
        if event.summary.value:
            steps.add(event.step)
    return steps


@pytest.mark.parametrize("how", ["flag", "env"])
def test_disabled_writes_nothing(tmp_path, monkeypatch, how):
    if how == "env":
        monkeypatch.setenv("WANDB_MODE", "disabled")
        args = ["--wandb"]
    else:
        monkeypatch.setenv("WANDB_API_KEY", "x" * 40)  # a configured key, overridden by --no-wandb
        args = ["--no-wandb"]
    assert main(*TINY, *args, "--run-name", "d", "--checkpoint-dir", str(tmp_path / "ck")) == 0
    assert not (tmp_path / "wandb_dir").exists()
    assert not list((tmp_path / "ck").rglob("*wandb*"))


def test_mode_follows_flags_and_keys(monkeypatch, offline_home):
    config = TrainConfig()
    assert sinks.wandb_mode(config) is None  # no key, no flag: off
    assert sinks.wandb_mode(config.replace(wandb=True)) == "offline"
    assert sinks.wandb_mode(config.replace(wandb=False)) is None
    (offline_home / ".netrc").write_text("machine 127.0.0.1 login user password " + "y" * 40 + "\n")
    os.chmod(offline_home / ".netrc", 0o600)
    assert sinks.wandb_api_key_configured()  # the host of WANDB_BASE_URL
    assert sinks.wandb_mode(config) == "online"
    assert sinks.wandb_mode(config.replace(wandb=False)) is None
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert sinks.wandb_mode(config) == "offline"


def test_run_id_is_stable_and_valid():
    a, b = sinks.wandb_run_id("hackmatrix_s0"), sinks.wandb_run_id("hackmatrix_s0")
    assert a == b and a != sinks.wandb_run_id("hackmatrix_s1")
    odd = sinks.wandb_run_id("a/b:c?d#e%f" + "x" * 100)
    assert len(odd) <= 64 and all(c.isalnum() or c in "-_" for c in odd)


def test_unreachable_server_falls_back_to_offline_at_once(tmp_path, monkeypatch, capsys):
    import time

    monkeypatch.setenv("WANDB_API_KEY", "z" * 40)  # looks configured; the server (port 9) refuses
    config = TrainConfig.from_flat(run_name="u", wandb=True)
    t0 = time.perf_counter()
    sink = sinks.WandbSink(config, str(tmp_path / "run"), mode="online", skip_until=4)
    try:
        assert sink.mode == "offline" and time.perf_counter() - t0 < 60
        for update in (2, 4, 6):
            sink.write({"update": update, "env_steps": update * 64, "entropy": 0.5})
    finally:
        sink.close()
    assert "unreachable; logging offline" in capsys.readouterr().out
    runs = glob.glob(str(tmp_path / "wandb_dir" / "wandb" / "offline-run-*"))
    rows, _ = history(runs[0])
    # records up to the last update logged before a resume are skipped
    assert [json.loads(keys["env_steps"]) for _, keys in rows] == [6 * 64]


def test_action_groups_become_action_fractions():
    """An env that names action ranges gets `actions/<name>_frac` per update (HackMatrix: move/siphon/program)."""
    import numpy as np

    from hephaestus.config.train_config import resolve
    from hephaestus.envs.adapters import adapt_gymnax
    from hephaestus.core.ppo import make_train
    from toy_envs import RandomWalk

    env = RandomWalk()
    env.action_groups = (("left", 0, 1), ("right", 1, 2))
    adapted = adapt_gymnax(env, env.default_params, "walk")
    assert adapted.spec.action_groups == (("left", 0, 1), ("right", 1, 2))
    config, _ = resolve(TrainConfig.from_flat(env="walk", hidden_dim=16, num_layers=1, num_envs=4, num_steps=16,
                                    num_minibatches=2, update_epochs=1, log_interval=1, total_timesteps=64))
    trainer = make_train(config, adapted)
    _, metrics = trainer.train_chunk(trainer.runner_state)
    left, right = float(metrics["actions/left_frac"][0]), float(metrics["actions/right_frac"][0])
    assert 0 < left < 1 and np.isclose(left + right, 1.0)
    assert sinks.metric_key("actions/left_frac") == "actions/left_frac"
    assert sinks.metric_key("entropy") == "entropy" and sinks.metric_key("reward/kills") == "reward/kills"


def test_offline_run_follows_the_dashboard_conventions(tmp_path):
    """A 2-chunk CartPole run with an evaluation after each chunk: env_steps is every metric's step, each
    evaluation and the final one log a video under media/, the final evaluation is in the summary, and the config
    is nested by section without the option families of stages the run does not have."""
    assert main(*TINY, "--wandb", "--run-name", "v", "--checkpoint-dir", str(tmp_path / "ck"), "--eval-every", "1",
                "--eval-episodes", "2", "--final-eval-episodes", "4", "--eval-max-steps", "20", "--no-artifact") == 0
    runs = glob.glob(str(tmp_path / "wandb_dir" / "wandb" / "offline-run-*"))
    assert len(runs) == 1
    assert runs[0].endswith("-" + (tmp_path / "ck" / "v" / "wandb_run_id").read_text().strip())  # what --resume reads
    rows, records = history(runs[0])
    of = lambda kind: [getattr(r, kind) for r in records if r.WhichOneof("record_type") == kind]
    metrics = {m.glob_name or m.name: m.step_metric for m in of("metric")}
    assert metrics.get("*") == "env_steps"
    videos = [keys for _, keys in rows if any(k.startswith(("eval/video/", "final_eval/video/")) for k in keys)]
    assert len(videos) == 3 and all("env_steps" in keys for keys in videos)  # 2 periodic + the final one
    media = glob.glob(os.path.join(runs[0], "files", "media", "videos", "**", "*.mp4"), recursive=True) \
        + glob.glob(os.path.join(runs[0], "files", "media", "videos", "**", "*.gif"), recursive=True)
    assert len(media) == 3
    summary = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for s in of("summary") for i in s.update}
    final = json.loads((tmp_path / "ck" / "v" / "eval.json").read_text())
    assert summary["final_eval/return_mean"] == pytest.approx(final["metrics"]["eval/return_mean"])
    config = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for c in of("config") for i in c.update}
    config.update({i.key: json.loads(i.value_json) for r in of("run") for i in r.config.update})
    assert config["ppo"]["num_minibatches"] == 2 and config["env"]["num_envs"] == 4
    assert "num_envs" not in config and "dtc_seq_len" not in config
    assert "stages" not in config or not ({"dtc", "dreamer"} & set(config["stages"]))


def test_logged_config_keeps_the_stages_in_use():
    from hephaestus.config.train_config import resolve

    ppo, _ = resolve(TrainConfig.from_flat(env="gymnax:CartPole-v1"))
    dtc, _ = resolve(TrainConfig.from_flat(env="gymnax:CartPole-v1", agent="dtc"))
    assert "stages" not in sinks.logged_config(ppo)
    assert set(sinks.logged_config(dtc)["stages"]) == {"dtc"} and "seq_len" in sinks.logged_config(dtc)["stages"]["dtc"]


def test_offline_resume_continues_the_same_run_and_its_steps(tmp_path, capsys):
    run = ["--wandb", "--checkpoint-dir", str(tmp_path / "ck"), "--final-eval-episodes", "0", "--no-artifact"]
    assert main(*TINY, *run, "--run-name", "r") == 0
    run_id = (tmp_path / "ck" / "r" / "wandb_run_id").read_text().strip()
    assert main("--resume", str(tmp_path / "ck" / "r"), "--total-timesteps", "512", *run) == 0
    assert "wandb sync" in capsys.readouterr().out
    runs = sorted(glob.glob(str(tmp_path / "wandb_dir" / "wandb" / "offline-run-*")))
    # one wandb run, two sessions (a second session of the same second gets wandb's "-1" suffix)
    assert len(runs) == 2 and all(re.search(rf"-{re.escape(run_id)}(-1)?$", r) for r in runs), (runs, run_id)
    before, _ = history(runs[0])
    rows, _ = history(runs[1])
    assert [json.loads(keys["env_steps"]) for _, keys in rows if "update" in keys] == [384, 512]
    assert rows[0][0] == max(step for step, _ in before) + 1  # the history goes on where the first session ended


def test_a_sweep_logs_one_run_per_point_in_one_group(tmp_path):
    """A 2-point x 2-seed sweep with --wandb: one offline run per point, grouped by the sweep, each with its
    point's values in a nested config, its own curve (the mean of its seeds and each seed's) on env_steps, and
    its final evaluation in the summary."""
    from hephaestus.tools import sweep

    out = tmp_path / "lr-sweep"
    assert sweep.main([*TINY, "--wandb", "--grid", "lr=1e-3,3e-3", "--seeds", "2",
                       "--out", str(out), "--final-eval-episodes", "2", "--eval-max-steps", "20"]) == 0
    runs = sorted(glob.glob(str(tmp_path / "wandb_dir" / "wandb" / "offline-run-*")))
    assert len(runs) == 2
    per_point = {}
    for run in runs:
        rows, records = history(run)
        of = lambda kind: [getattr(r, kind) for r in records if r.WhichOneof("record_type") == kind]
        header = of("run")[0]
        config = {i.key: json.loads(i.value_json) for i in header.config.update}
        assert header.run_group == "lr-sweep" and config["sweep"]["seeds"] == 2
        lr = config["sweep"]["point"]["lr"]
        assert config["ppo"]["lr"] == lr  # the point's value, in the training run's nesting
        metrics = {m.glob_name or m.name: m.step_metric for m in of("metric")}
        assert metrics.get("*") == "env_steps"
        logged = [keys for _, keys in rows if "env_steps" in keys]
        assert [json.loads(k["env_steps"]) for k in logged] == [128, 256]
        assert {"mean_episode_return", "seed0/mean_episode_return", "seed1/mean_episode_return"} <= set(logged[-1])
        summary = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for s in of("summary") for i in s.update}
        per_point[lr] = (json.loads(logged[-1]["seed0/mean_episode_return"]), summary["final_eval/return_mean"])
    assert set(per_point) == {1e-3, 3e-3}
    # each run holds its own point's agents: the sweep's table, row by row
    table = {float(r["lr"]): r for r in csv.DictReader(open(out / "results.csv"))}
    for lr, (_, final_eval) in per_point.items():
        assert final_eval == pytest.approx(float(table[lr]["eval/return_mean_mean"]), rel=1e-5)
