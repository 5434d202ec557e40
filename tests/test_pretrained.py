"""The shipped agents (checkpoints/pretrained/<name>/, tracked in git): each loads and plays as its claim says,
with nothing trained; the export that makes one from a run; the wandb path that fetches a run's parameters, parsed
and refused offline in one line."""

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from hephaestus.core import export
from hephaestus.tools import saved_agent
from hephaestus.tools.saved_agent import LoadError, fetch_wandb_params, parse_wandb_path
from train_cli import main as train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRETRAINED = os.path.join(ROOT, "checkpoints", "pretrained")
SHIPPED = sorted(os.path.basename(d) for d in glob.glob(os.path.join(PRETRAINED, "*")) if os.path.isdir(d))

# What each shipped agent must do in greedy games: (episodes, the eval/ key, its least value, most moves a game).
# The HackMatrix claim of the results table (stage 1 cleared in >= 90% of 1000 games) is checked here on 100 games at
# >= 85%, each cut at 300 moves (stage 1 is cleared long before; a game cut there counts as not cleared if it was not).
CLAIMS = {"cartpole": (20, "eval/return_mean", 475.0, 1000),
          "deepsea-dtc": (20, "eval/treasure_rate", 1.0, 1000),
          "hackmatrix": (100, "eval/stage_reached>=2", 0.85, 300)}


def evaluate(path, episodes, tmp_path, max_steps=1000):
    from hephaestus.tools.evaluate_agent import main

    out = tmp_path / "eval.json"
    assert main([path, "--episodes", str(episodes), "--max-steps", str(max_steps), "--json", str(out)]) == 0
    return json.loads(out.read_text())["metrics"]


def test_the_hackmatrix_cartpole_and_deepsea_agents_are_shipped():
    assert {"hackmatrix", "cartpole", "deepsea-dtc"} <= set(SHIPPED)
    for name in SHIPPED:  # tracked: a fresh clone has them (the rest of checkpoints/ is ignored)
        for path in glob.glob(os.path.join(PRETRAINED, name, "*")):
            ignored = subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT)
            assert ignored.returncode == 1, f"{path} is ignored by git"


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_agent_loads_and_plays_as_claimed(name, tmp_path):
    folder = os.path.join(PRETRAINED, name)
    params, meta = export.load_params_npz(os.path.join(folder, "final_params.npz"))
    assert all(k.startswith("params") for k in export.flatten_params(params))  # parameters only: no optimizer
    assert meta["num_seeds"] == 1 and meta["config"]["env"] == meta["env"]
    info = json.loads(open(os.path.join(folder, saved_agent.AGENT_JSON)).read())
    assert info["env"] == meta["env"] and info["env_steps"] == meta["env_steps"]
    episodes, key, least, max_steps = CLAIMS.get(name, (10, "eval/episodes", 10, 1000))
    metrics = evaluate(folder, episodes, tmp_path, max_steps)
    assert metrics[key] >= least, (name, key, metrics[key])


def test_watch_plays_the_shipped_cartpole_agent(capsys):
    from hephaestus.tools.watch import main

    assert main([os.path.join(PRETRAINED, "cartpole"), "--episodes", "1", "--max-steps", "500"],
                compile_cache=False) == 0
    assert "episode 1: 500 steps, return +500.000" in capsys.readouterr().out


def test_export_pretrained_writes_one_agent_without_optimizer_state(tmp_path, capsys):
    run = ["--env", "gymnax:CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--hidden-dim", "16",
           "--num-layers", "1", "--log-interval", "2", "--num-minibatches", "2", "--update-epochs", "1",
           "--total-timesteps", "128", "--num-seeds", "2", "--final-eval-episodes", "3", "--run-name", "two",
           "--checkpoint-dir", str(tmp_path)]
    assert train(*run) == 0
    from hephaestus.tools.inspect_checkpoint import main

    out = tmp_path / "pretrained" / "two"
    assert main([str(tmp_path / "two"), "--export-pretrained", str(out), "--seed-index", "1"]) == 0
    params, meta = export.load_params_npz(str(out / "final_params.npz"))
    both, _ = export.load_params_npz(str(tmp_path / "two" / "final_params.npz"))
    kernel = lambda tree: np.asarray(tree["params"]["actor"]["Dense_0"]["kernel"])
    np.testing.assert_array_equal(kernel(params), kernel(both)[1])  # row 1 of the --num-seeds file
    assert meta["num_seeds"] == 1 and meta["config"]["seed"] == 1
    info = json.loads((out / "agent.json").read_text())
    assert info["seed_index"] == 1 and info["final_evaluation"]["episodes"] == 3
    assert sorted(os.listdir(out)) == ["agent.json", "final_params.npz"]
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path / "nothing"), "--export-pretrained", str(tmp_path / "x")])
    assert exit_.value.code == 2 and "no such file" in capsys.readouterr().err


def test_wandb_paths_parse_and_fail_in_one_line_offline(monkeypatch, tmp_path, capsys):
    assert parse_wandb_path("wandb:me/proj/abc123")[0] == "me/proj/abc123-params:latest"
    assert parse_wandb_path("wandb:me/proj/run-x-checkpoint:v3")[0] == "me/proj/run-x-checkpoint:v3"
    for bad in ("wandb:me/proj", "wandb:me//x", "wandb:a/b/c/d", "wandb:me/proj/name:"):
        with pytest.raises(LoadError):
            parse_wandb_path(bad)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("NETRC", raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # never the real server
    with pytest.raises(LoadError, match="no wandb API key"):
        fetch_wandb_params("wandb:me/proj/abc123", cache_dir=str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    with pytest.raises(LoadError, match="unreachable"):
        fetch_wandb_params("wandb:me/proj/abc123", cache_dir=str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, "wandb", None)  # wandb not installed
    with pytest.raises(LoadError, match="pip install wandb"):
        fetch_wandb_params("wandb:me/proj/abc123")
    from hephaestus.tools.watch import main

    assert main(["wandb:me/proj"], compile_cache=False) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "wandb:ENTITY/PROJECT/RUN_ID" in err
