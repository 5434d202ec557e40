"""The public Python API (hephaestus/api.py): train a tiny CartPole run with `hephaestus.train`, load it with
`hephaestus.load_agent`, act on single and batched observations; greedy picks what watch_agent.py's player picks;
a masked env (HackMatrix) never gets an invalid action; the README's Python example runs."""

import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hephaestus

pytestmark = pytest.mark.xdist_group("test_api")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The doc commands' tiny run (tests/test_doc_commands.py TINY_TRAIN), as keywords: one compiled program for both.
TINY = dict(num_envs=2, num_steps=16, total_timesteps=6.4e1, num_minibatches=1, update_epochs=1, hidden_dim=16,
            num_layers=1, log_interval=1, save_interval=1, wandb=False, final_eval_episodes=2, eval_episodes=2,
            eval_max_steps=20)


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("api")
    return hephaestus.train(env="gymnax:CartPole-v1", checkpoint_dir=str(out), run_name="api", **TINY)


def test_import_hephaestus_loads_no_jax():
    code = "import sys, hephaestus; hephaestus.__version__; print('jax' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr[-2000:]


def test_train_returns_the_final_parameters_and_the_run_dir(cartpole_run):
    run = cartpole_run
    assert os.path.isfile(os.path.join(run.run_dir, "final_params.npz"))
    assert run.config.env.name == "gymnax:CartPole-v1" and run.config.env.num_envs == 2
    assert run.meta["update"] == 2 and [r["update"] for r in run.metrics] == [1, 2]  # 64 steps of 2 x 16
    agent = hephaestus.load_agent(run.run_dir)  # the run directory, as watch_agent.py takes it
    got, want = jax.tree.leaves(agent.params), jax.tree.leaves(run.params)
    assert len(got) == len(want) > 0
    for a, b in zip(got, want):
        np.testing.assert_array_equal(np.asarray(a), b)
    assert run.agent().path == agent.path == os.path.join(run.run_dir, "final_params.npz")


def test_train_refuses_an_unknown_option_in_one_line():
    from hephaestus.config.train_config import ConfigError

    with pytest.raises(ConfigError, match="train\\(\\): unknown option 'total_timestep' \\(did you mean total_timesteps\\?\\)"):
        hephaestus.train(total_timestep=100)
    with pytest.raises(ConfigError, match="num_envs is 2.5, expected int"):
        hephaestus.train(num_envs=2.5)


def test_act_on_single_and_batched_observations(cartpole_run):
    agent = hephaestus.load_agent(cartpole_run.run_dir)
    assert agent.env.spec.name == "gymnax:CartPole-v1" and agent.num_seeds == 1
    obs = jax.random.normal(jax.random.PRNGKey(3), (4, 3, agent.spec.obs_dim))
    batched = agent.act(obs)
    assert batched.shape == (4, 3) and batched.dtype == jnp.int32
    singles = np.array([[int(agent.act(obs[i, j])) for j in range(3)] for i in range(4)])
    np.testing.assert_array_equal(np.asarray(batched), singles)
    # greedy is the argmax of the network's logits
    logits, _ = agent.network.apply(agent.params, obs)
    np.testing.assert_array_equal(np.asarray(batched), np.argmax(np.asarray(logits), -1))
    # sampled with a key: reproducible by the key, valid, and not always the greedy action
    key = jax.random.PRNGKey(7)
    many = jnp.broadcast_to(obs[0, 0], (256, agent.spec.obs_dim))
    sampled = np.asarray(agent.act(many, key))
    np.testing.assert_array_equal(sampled, np.asarray(agent.act(many, key)))
    assert set(np.unique(sampled)) == {0, 1}
    state, step = agent.env.reset(jax.random.PRNGKey(0))  # an env step: its observation (and mask) in one call
    assert int(agent.act(step)) == int(agent.act(step.obs))
    with pytest.raises(ValueError, match="observations have 4 values; got shape"):
        agent.act(np.zeros(5))


def test_greedy_actions_are_watch_agents(cartpole_run):
    """The API's greedy actions on the observations of a watch_agent.py replay are the ones the replay played."""
    from hephaestus.tools.watch import Player, describe_action

    player = Player(os.path.join(cartpole_run.run_dir, "final_params.npz"))
    frames = []
    player.episodes(2, 30, seed=5, on_frame=lambda frame: frames.append(frame))
    seen, played = [], []
    for before, after in zip(frames, frames[1:]):
        if after.step == before.step + 1:  # a step of one episode: the action chosen on `before.obs`
            seen.append(before.obs)
            played.append(after.action)
    assert len(played) >= 10
    agent = hephaestus.load_agent(cartpole_run.run_dir)
    actions = agent.act(np.stack(seen))
    assert [describe_action(player.present.action_names, a) for a in np.asarray(actions)] == played


def test_masked_env_never_gets_an_invalid_action(tmp_path):
    """HackMatrix: acting on its env steps (their action masks) picks only valid actions, where the same network
    unmasked picks invalid ones; a bare observation without a mask is refused."""
    from test_watch import fresh_params

    agent = hephaestus.load_agent(fresh_params(tmp_path / "hm.npz", "hackmatrix"))
    env = agent.env
    assert env.spec.has_action_mask
    _, steps = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), 64))
    actions = np.asarray(agent.act(steps))
    masks = np.asarray(steps.action_mask)
    assert actions.shape == (64,)
    assert masks[np.arange(64), actions].all()
    sampled = np.asarray(agent.act(steps, jax.random.PRNGKey(1)))
    assert masks[np.arange(64), sampled].all()
    unmasked = np.asarray(agent.act(steps.obs, mask=np.ones_like(masks)))
    assert not masks[np.arange(64), unmasked].all()  # the mask is what keeps the actions valid
    with pytest.raises(ValueError, match="hackmatrix has action masks"):
        agent.act(steps.obs)


def test_make_env_takes_env_params():
    env = hephaestus.make_env("gymnax:CartPole-v1", max_steps_in_episode=7)
    assert env.raw_params.max_steps_in_episode == 7 and env.spec.obs_dim == 4
    with pytest.raises(hephaestus.LoadError, match="unknown gymnax env"):
        hephaestus.make_env("gymnax:CartPol-v1")


def readme_python_examples():
    """The README's ```python blocks that use the API (`hephaestus.load_agent`)."""
    readme = open(os.path.join(ROOT, "README.md")).read()
    return [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "hephaestus.load_agent" in b]


# The README's example, as written there: the same budget rule as the doc commands (a tiny run).
API_EXAMPLE = """\
import jax, hephaestus

run = hephaestus.train(env="gymnax:CartPole-v1", total_timesteps=20_000)  # the training flags, as keywords
agent = hephaestus.load_agent(run.run_dir)  # or a params file or a step folder, as watch_agent.py takes
state, step = agent.env.reset(jax.random.PRNGKey(0))
print(agent.act(step), agent.act(step, key=jax.random.PRNGKey(1)))  # greedy (the step's mask applies), sampled
"""


@pytest.mark.heavy
@pytest.mark.parametrize("example", list(dict.fromkeys([API_EXAMPLE, *readme_python_examples()])),
                         ids=lambda text: "readme" if text != API_EXAMPLE else "api-example")
def test_api_example_runs(example, tmp_path):
    """Run as written, in a fresh folder, with `hephaestus.train` given the tiny budget on top (as the doc
    commands get TINY_TRAIN appended)."""
    prelude = ("import hephaestus.api as _api\n_train = _api.train\n"
               f"_api.train = lambda config=None, **options: _train(config, **{{**options, **{TINY!r}}})\n")
    result = subprocess.run([sys.executable, "-c", prelude + example], cwd=tmp_path, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"^[01] [01]$", result.stdout, re.M), result.stdout[-2000:]
    assert (tmp_path / "checkpoints" / "gymnax-CartPole-v1_s0" / "final_params.npz").is_file()


def test_every_experiment_writes_under_checkpoints_by_default(tmp_path, monkeypatch, capsys):
    """scripts/experiments/ share one harness (hephaestus/tools/experiment.py): each takes --out, whose default lies
    under checkpoints/experiments/ (made when used), never the working directory; a folder given that does not
    exist is a one-line error before any work; each loads agents through the API, not the viewer."""
    from hephaestus.tools import experiment

    scripts = sorted(f for f in os.listdir(os.path.join(ROOT, "scripts", "experiments")) if f.endswith(".py"))
    assert len(scripts) >= 12
    for name in scripts:
        text = open(os.path.join(ROOT, "scripts", "experiments", name)).read()
        # --out from the harness: add_out on the script's own parser, or the harness's parser, which adds it
        assert (f'add_out(p, "{name[:-3]}"' in text or f'parser("{name[:-3]}"' in text) and \
            "check_out(p, args.out" in text, name
        assert "hephaestus.tools.watch" not in text, name
    monkeypatch.chdir(tmp_path)
    p = experiment.parser("toy", "a toy experiment")
    args = p.parse_args([])
    assert args.out == os.path.join("checkpoints", "experiments", "toy")
    out = experiment.check_out(p, args.out, "toy")
    assert (tmp_path / "checkpoints" / "experiments").is_dir()
    assert experiment.write_json(out, {"a": 1}) == out + ".json" and os.listdir(tmp_path) == ["checkpoints"]
    assert experiment.check_out(p, "elsewhere.json", "toy") == "elsewhere"
    with pytest.raises(SystemExit) as exit_:
        experiment.check_out(p, str(tmp_path / "missing" / "x"), "toy")
    assert exit_.value.code == 2 and "directory does not exist" in capsys.readouterr().err
