"""scripts/watch_agent.py as a user meets it: parameter files in, a GIF or a terminal replay out, one-line errors.

Parameters come from `export.save_params_npz` on freshly initialised CartPole and HackMatrix networks. A saved
GIF holds `steps + 1` frames per episode (reset frame + one per step), all episodes one after the other.
"""

import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest
from PIL import Image

from hephaestus.config.train_config import TrainConfig, resolve
from hephaestus.envs.registry import make_env
from hephaestus.core.export import network_meta, save_params_npz
from hephaestus.core.networks import make_network
from hephaestus.tools.watch import CAPTION_H, WatchError, resolve_params_path

# One worker runs this module, so its HackMatrix and CartPole runs (module fixtures) are made once (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("test_watch")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "watch_agent.py")


def watch(*args, cwd=None):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, cwd=cwd or ROOT,
                          timeout=300)


def fresh_params(path, env_name, hidden=16):
    env = make_env(env_name)
    config, _ = resolve(TrainConfig.from_flat(env=env_name, hidden_dim=hidden, num_layers=1), env.spec)
    network = make_network(env.spec, config)
    params = network.init(jax.random.PRNGKey(0), np.zeros((1, env.spec.obs_dim), np.float32))
    return save_params_npz(str(path), params, env=env_name, network=network_meta(env.spec, config))


def episode_steps(stdout):
    return [int(m) for m in re.findall(r"^episode \d+: (\d+) steps", stdout, re.M)]


def gif_frames(path):
    with Image.open(path) as im:
        frames = []
        for i in range(im.n_frames):
            im.seek(i)
            frames.append(np.asarray(im.convert("RGB")))
    return frames


# ------------------------------------------------------------------------------------------------ paths
def test_paths_resolve_to_one_parameter_file(tmp_path):
    run = tmp_path / "checkpoints" / "run"
    (run / "10").mkdir(parents=True)
    for step in (3, 10):
        (run / f"params_{step}.npz").write_bytes(b"x")
    assert resolve_params_path(str(run)) == str(run / "params_10.npz")  # newest export of a run
    assert resolve_params_path(str(run / "10")) == str(run / "params_10.npz")  # step dir -> export beside it
    (run / "10" / "state").mkdir()
    assert resolve_params_path(str(run / "10" / "state")) == str(run / "params_10.npz")
    (tmp_path / "run_s0").mkdir()  # a run name ending in a digit is not a step directory
    with pytest.raises(WatchError, match="no final_params.npz or params_<n>.npz"):
        resolve_params_path(str(tmp_path / "run_s0"))
    assert resolve_params_path(str(run / "params_3.npz")) == str(run / "params_3.npz")
    (run / "final_params.npz").write_bytes(b"x")
    assert resolve_params_path(str(run)) == str(run / "final_params.npz")
    older = tmp_path / "checkpoints" / "older"
    older.mkdir()
    (older / "final_params.npz").write_bytes(b"x")
    os.utime(older / "final_params.npz", (1, 1))
    assert resolve_params_path(None, latest=True, checkpoints_dir=str(tmp_path / "checkpoints")) == \
        str(run / "final_params.npz")
    (run / "20").mkdir()
    with pytest.raises(WatchError, match="without params_20.npz"):
        resolve_params_path(str(run / "20"))
    with pytest.raises(WatchError, match="no such file"):
        resolve_params_path(str(tmp_path / "nope"))
    with pytest.raises(WatchError, match="--latest"):
        resolve_params_path(None, latest=True, checkpoints_dir=str(tmp_path / "empty"))


def bad_input(tmp_path, kind):
    if kind == "missing":
        return tmp_path / "nope" / "final_params.npz", "no such file"
    if kind == "junk":
        target = tmp_path / "junk.npz"
        target.write_bytes(b"not a zip")
        return target, "not a readable"
    if kind == "other_npz":
        target = tmp_path / "other.npz"
        np.savez(target, x=np.zeros(3))
        return target, "not a Hephaestus parameter file"
    if kind == "mismatch":  # metadata that does not describe the arrays
        target = tmp_path / "mismatch.npz"
        fresh_params(target, "gymnax:CartPole-v1", hidden=16)
        arrays = dict(np.load(target))
        arrays["__meta__"] = np.array(str(arrays["__meta__"]).replace('"hidden_dim": 16', '"hidden_dim": 32'))
        np.savez(target, **arrays)
        return target, "parameters do not match the network"
    target = tmp_path / "typo.npz"
    save_params_npz(str(target), {"params": {"w": np.zeros(2, np.float32)}}, env="gymnax:CartPol-v1",
                    network={"obs_dim": 4, "action_dim": 2, "discrete": True, "hidden_dim": 16, "num_layers": 1,
                             "activation": "tanh"})
    return target, "did you mean CartPole-v1"


def one_line(stderr, needle):
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert needle in lines[0] and lines[0].startswith("error:")
    assert "Traceback" not in stderr


@pytest.mark.parametrize("kind", ["missing", "other_npz"])
def test_bad_input_to_the_script_is_a_one_line_error(tmp_path, kind):
    target, needle = bad_input(tmp_path, kind)
    out = watch(str(target), "--episodes", "1")
    assert out.returncode == 2
    one_line(out.stderr, needle)


@pytest.mark.parametrize("kind", ["junk", "unknown_env", "mismatch"])
def test_bad_input_is_a_one_line_error(tmp_path, kind, capsys):
    from hephaestus.tools.watch import main

    target, needle = bad_input(tmp_path, kind)
    assert main([str(target), "--episodes", "1"], compile_cache=False) == 2
    one_line(capsys.readouterr().err, needle)


# ------------------------------------------------------------------------------------------------ CartPole
def test_cartpole_agent_plays_into_a_gif(tmp_path):
    # Freshly initialised params: training a chunk first costs a PPO compile (15-30 s on a busy 2-core box)
    # and exercises nothing here that test_export's round trip does not.
    run = tmp_path / "run"
    fresh_params(run / "final_params.npz", "gymnax:CartPole-v1")
    gif = tmp_path / "cartpole.gif"
    out = watch(str(run), "--episodes", "2", "--max-steps", "12", "--save", str(gif), "--fps", "20")
    assert out.returncode == 0, out.stderr
    steps = episode_steps(out.stdout)
    assert len(steps) == 2 and all(1 <= s <= 12 for s in steps)
    frames = gif_frames(gif)
    assert len(frames) == sum(s + 1 for s in steps)
    assert f"saved {len(frames)} frames" in out.stdout and "summary over 2 episode(s)" in out.stdout
    assert frames[1].std() > 10 and len(np.unique(frames[1].reshape(-1, 3), axis=0)) > 3  # not blank


# ------------------------------------------------------------------------------------------------ HackMatrix
SPLIT = "=" * 20 + " next run " + "=" * 20

# Runs scripts/watch_agent.py twice in one interpreter (as `python watch_agent.py ...` would, via runpy), so the
# HackMatrix env step is compiled once for both the GIF and the terminal replay.
TWICE = """
import runpy, sys
for i, argv in enumerate(sys.argv[2:4]):
    sys.argv = [sys.argv[1]] + argv.split("|") if i == 0 else [SCRIPT] + argv.split("|")
    try:
        runpy.run_path(SCRIPT, run_name="__main__")
    except SystemExit as exit:
        print(f"exit code {exit.code}", flush=True)
    print(SPLIT, flush=True)
"""


@pytest.fixture(scope="module")
def hackmatrix_runs(tmp_path_factory):
    run = tmp_path_factory.mktemp("hm") / "run"
    (run / "5").mkdir(parents=True)  # a checkpoint step directory; its export lies beside it
    fresh_params(run / "params_5.npz", "hackmatrix")
    gif = run.parent / "hm.gif"
    gif_args = "|".join([str(run / "5"), "--episodes", "2", "--max-steps", "6", "--save", str(gif)])
    term_args = "|".join([str(run), "--episodes", "1", "--max-steps", "3", "--sample", "--seed", "1"])
    code = f"SCRIPT = {SCRIPT!r}\nSPLIT = {SPLIT!r}\n" + TWICE
    out = subprocess.run([sys.executable, "-c", code, SCRIPT, gif_args, term_args], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    parts = out.stdout.split(SPLIT)
    assert len(parts) == 3, out.stdout + out.stderr
    return gif, parts[0], parts[1], out.stderr


@pytest.mark.heavy
def test_hackmatrix_agent_plays_into_a_gif(hackmatrix_runs):
    gif, stdout, _, stderr = hackmatrix_runs
    assert "exit code 0" in stdout, stderr
    steps = episode_steps(stdout)
    assert len(steps) == 2
    frames = gif_frames(gif)
    assert len(frames) == sum(s + 1 for s in steps)
    assert frames[0].shape == (18 + 440, 384, 3)
    assert frames[0].std() > 10
    assert "highest stage" in stdout and "programs used" in stdout


def test_hackmatrix_terminal_prints_board_and_summary(hackmatrix_runs):
    _, _, stdout, stderr = hackmatrix_runs
    assert "exit code 0" in stdout, stderr
    assert "5 |" in stdout and "0 |" in stdout  # the text board, row 5 on top
    assert re.search(r"^action: \S+ +reward [+-]", stdout, re.M)
    assert "HP " in stdout and "credits" in stdout and "stage" in stdout
    assert re.search(r"^episode 1: \d+ steps, return [+-]\d", stdout, re.M)
    assert "summary over 1 episode(s)" in stdout
    # the same per-episode statistics evaluate.py and training's eval/ report, from the env's declaration
    assert re.search(r"^eval: 1 episodes: return [+-]\d", stdout, re.M)
    assert "stage_reached>=2" in stdout and "siphons_used" in stdout
    # the key to the board's cell codes, under every board
    assert stdout.count("legend: @ you") == stdout.count("5 |") > 0 and "$S data siphon" in stdout


def test_mp4_has_every_frame(tmp_path):
    pytest.importorskip("imageio_ffmpeg")
    import imageio_ffmpeg

    from hephaestus.tools.watch import write_mp4

    frames = [np.full((50, 70, 3), 20 * i, np.uint8) for i in range(7)]
    path = str(tmp_path / "clip.mp4")
    write_mp4(path, frames, fps=5)
    import warnings

    reader = imageio_ffmpeg.read_frames(path)
    with warnings.catch_warnings():  # ffmpeg started after jax is loaded: os.fork() warning, harmless (it execs)
        warnings.filterwarnings("ignore", message=".*os.fork", category=RuntimeWarning)
        meta = next(reader)
    assert tuple(meta["size"]) == (80, 64)  # padded to multiples of 16
    assert sum(1 for _ in reader) == 7


def test_window_needs_a_display(tmp_path, monkeypatch, capsys):
    from hephaestus.tools.watch import main

    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    target = tmp_path / "p.npz"
    target.write_bytes(b"x")
    assert main([str(target), "--window"], compile_cache=False) == 2
    one_line(capsys.readouterr().err, "--window needs a display")


def test_window_view_draws_frames(monkeypatch):
    """The window view on matplotlib's Agg backend (no screen here), pretending it is interactive."""
    import matplotlib

    from hephaestus.tools import watch

    matplotlib.use("Agg")
    monkeypatch.setattr(watch, "has_display", lambda: True)
    monkeypatch.setattr(matplotlib, "get_backend", lambda: "TkAgg")

    class Stub:
        def rgb(self, frame):
            return np.full((30, 40, 3), frame.step * 10, np.uint8)

    view = watch.WindowView(Stub(), fps=1000)
    for step in range(3):
        assert not view(watch.Frame(1, step, None, np.zeros(2), action="up" if step else None))
    assert view.im.get_array().shape == (30, 40, 3) and int(view.im.get_array()[0, 0, 0]) == 20
    view.close()


def test_env_flag_fills_in_only_what_the_file_lacks(tmp_path, capsys):
    from hephaestus.tools.watch import main

    env = make_env("gymnax:CartPole-v1")
    config, _ = resolve(TrainConfig.from_flat(env="", hidden_dim=8, num_layers=1), env.spec)
    network = make_network(env.spec, config)
    params = network.init(jax.random.PRNGKey(0), np.zeros((1, 4), np.float32))
    path = save_params_npz(str(tmp_path / "noenv.npz"), params, env="", network=network_meta(env.spec, config))
    assert main([path], compile_cache=False) == 2
    one_line(capsys.readouterr().err, "pass --env")
    assert main([path, "--env", "gymnax:CartPole-v1", "--episodes", "1", "--max-steps", "2"], compile_cache=False) == 0
    out = capsys.readouterr().out
    assert "observation (4 values)" in out and re.search(r"^action: (left|right)", out, re.M)
    assert re.search(r"^episode 1: \d+ steps", out, re.M)


# ------------------------------------------------------------------------------------------------ env step
def test_step_without_auto_reset_stops_on_the_state_the_episode_ended_in():
    """AdaptedEnv.step_no_reset (what watch_agent.py steps): the terminal observation and state, not a reset;
    the auto-resetting step is the same step followed by a reset where the episode ended."""
    from toy_envs import RandomWalk, WalkParams

    from hephaestus.envs.adapters import adapt_gymnax

    env = adapt_gymnax(RandomWalk(), WalkParams(max_steps_in_episode=50), "walk")
    step_no_reset, step = jax.jit(env.step_no_reset), jax.jit(env.step)
    state, first = env.reset(jax.random.PRNGKey(0))
    right, key = np.int32(1), jax.random.PRNGKey(1)
    for t in range(1, 10):
        before = state
        state, out = step_no_reset(key, before, right)
        assert int(state.pos) == int(before.pos) + 1 and int(state.time) == t
        np.testing.assert_array_equal(out.obs, out.final_obs)
        np.testing.assert_array_equal(out.obs, [state.pos, state.time, state.start])
        reset_state, auto = step(key, before, right)
        np.testing.assert_array_equal(auto.final_obs, out.obs)
        assert bool(auto.terminated) == bool(out.terminated) and float(auto.reward) == float(out.reward)
        if out.terminated:
            break
        np.testing.assert_array_equal(auto.obs, out.obs)  # mid-episode the two steps agree
    assert bool(out.terminated) and int(state.pos) == 3  # stopped on the bound, where the walk ended
    assert int(reset_state.time) == 0 and float(auto.obs[1]) == 0.0  # the auto-reset step started a new walk
    # truncation: the time limit's last state, flagged truncated, not reset either
    env = adapt_gymnax(RandomWalk(), WalkParams(max_steps_in_episode=2, bound=100), "walk")
    state, _ = env.reset(jax.random.PRNGKey(0))
    for _ in range(2):
        state, out = env.step_no_reset(key, state, right)
    assert bool(out.truncated) and not bool(out.terminated) and int(state.time) == 2 and float(out.obs[1]) == 2.0


# ------------------------------------------------------------------------------------------------ presentation
def presented_walk():
    """StatWalk with its own Presentation, as an env declares one (HackMatrix does, envs/hackmatrix)."""
    from toy_envs import StatWalk

    from hephaestus.envs.presentation import Presentation

    class PresentedWalk(StatWalk):
        presentation = Presentation(
            action_names=("west", "east"),
            outcome=lambda info: "fell off " + ("east" if info["episode_stats"]["right_moves"] else "west"),
            status=lambda state: f"walker at {int(state.pos)}",
            text=lambda state, obs: "." * (int(state.pos) + 4) + "W",
            rgb=lambda state, obs: np.full((20, 30, 3), 40 * (int(state.pos) + 3), np.uint8),
            episode_note=lambda stats: f"reach {int(stats['reach'])}")

    return PresentedWalk()


def test_watch_shows_an_env_through_its_declared_presentation(tmp_path, monkeypatch, capsys):
    from hephaestus.tools import saved_agent, watch
    from hephaestus.envs.adapters import adapt_gymnax

    raw = presented_walk()
    env = adapt_gymnax(raw, raw.default_params, "presented-walk")
    monkeypatch.setattr(saved_agent, "load_env", lambda name: env)  # where watch's loader builds the env
    config = TrainConfig.from_flat(env="presented-walk", hidden_dim=8, num_layers=1)
    params = make_network(env.spec, config).init(jax.random.PRNGKey(0), np.zeros((1, 3), np.float32))
    path = save_params_npz(str(tmp_path / "p.npz"), params, env="presented-walk",
                           network=network_meta(env.spec, config))

    assert watch.main([path, "--episodes", "3", "--max-steps", "10", "--sample"], compile_cache=False) == 0
    out = capsys.readouterr().out
    actions = re.findall(r"^action: (\S+)", out, re.M)
    assert actions and set(actions) <= {"west", "east"}
    walkers = re.findall(r"^walker at (-?\d+)$", out, re.M)
    assert len(walkers) == len(actions) + 3  # a status line on every frame, the reset frames included
    assert re.search(r"^\.+W$", out, re.M)  # the env's text picture
    lines = re.findall(r"^episode \d+: \d+ steps, return [+-][\d.]+, (.+), reach (\d)$", out, re.M)
    assert len(lines) == 3
    for outcome, reach in lines:  # a walk ends on the bound (|pos| = 3) or at the 6-step time limit
        assert re.fullmatch(r"fell off (east|west)", outcome) and reach == "3" or outcome == "time limit"
    assert re.search(r"^all episodes: reach [0-3]$", out, re.M)

    gif = tmp_path / "walk.gif"
    assert watch.main([path, "--episodes", "2", "--max-steps", "10", "--save", str(gif)], compile_cache=False) == 0
    steps = episode_steps(capsys.readouterr().out)
    frames = gif_frames(gif)
    assert len(frames) == sum(s + 1 for s in steps)
    assert frames[0].shape == (CAPTION_H + 20, 30, 3)  # the env's frame under the caption bar
    shades = {int(f[-1, -1, 0]) for f in frames}
    assert shades <= {40 * k for k in range(7)} and len(shades) > 1  # drawn from the walker's position


def test_generic_presentation_for_a_jumanji_env(tmp_path, capsys):
    """jumanji Snake declares no presentation: action indices, "terminated", no status line, the observation's
    values as text and its bar plot as frames."""
    from hephaestus.tools.watch import main

    path = fresh_params(tmp_path / "final_params.npz", "jumanji:Snake-v1")
    gif = tmp_path / "snake.gif"
    assert main([path, "--episodes", "2", "--max-steps", "4", "--save", str(gif)], compile_cache=False) == 0
    steps = episode_steps(capsys.readouterr().out)
    frames = gif_frames(gif)
    assert len(steps) == 2 and len(frames) == sum(s + 1 for s in steps)
    assert frames[0].shape == (CAPTION_H + 200, 384, 3) and frames[1].std() > 10  # the observation's bars
    assert main([path, "--episodes", "1", "--max-steps", "3"], compile_cache=False) == 0
    out = capsys.readouterr().out
    assert re.search(r"^action: [0-3] +reward", out, re.M) and "observation (721 values)" in out
    assert re.search(r"^episode 1: \d+ steps, return [+-][\d.]+, (terminated|out of steps)$", out, re.M)


def test_watch_module_names_no_env():
    """With the behavioural tests above: what watch.py shows of an env comes from its Presentation, so the
    module names no env and none of HackMatrix's game terms."""
    import hephaestus.tools.watch

    source = open(hephaestus.tools.watch.__file__).read().lower()
    for word in ("hackmatrix", "siphon", "program", "stage", "credits", "cartpole", "gymnax", "jumanji"):
        assert word not in source, word


@pytest.mark.heavy
def test_eval_game_replays_the_game_evaluate_played(tmp_path):
    """watch_agent.py --eval-game G replays game G of evaluate.py's greedy games, step for step: the same length,
    return and statistics for every game, across two batches (--batch-size 3 of 6 games: the batch's own key)."""
    import json

    from hephaestus.core.evaluation import GameKeys
    from hephaestus.tools.watch import Player

    params = fresh_params(tmp_path / "final_params.npz", "hackmatrix")
    report = tmp_path / "eval.json"
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "evaluate.py"), str(params),
                          "--episodes", "6", "--batch-size", "3", "--max-steps", "40", "--seed", "7",
                          "--json", str(report)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr
    games = json.loads(report.read_text())["per_episode"]["eval/"]
    assert len(set(np.round(games["return"], 4))) > 1  # different games, so agreeing on each one means something
    player = Player(str(params))
    for g in range(6):
        [result] = player.episodes(1, 40, 7, lambda frame: None, keys=GameKeys(7, g, 3))
        assert result.steps == games["length"][g], g
        assert result.total_reward == pytest.approx(games["return"][g], abs=1e-3), g
        assert result.stats["stage_reached"] == games["stats"]["stage_reached"][g], g
    # the script's flag: one line for what cannot be replayed
    bad = watch(str(params), "--eval-game", "0", "--sample")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "greedy" in bad.stderr
