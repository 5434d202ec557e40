"""Watch a trained agent play, on a laptop (CPU jax is enough): `scripts/watch_agent.py`.

The parameters come from a laptop export (`export.py`: `final_params.npz` or `params_<update>.npz`), which names
the environment and the network shape, so the agent replays in the very environment it was trained on.

* `resolve_params_path` turns a file, a run directory, a checkpoint step directory or `--latest` into one
  `.npz` file.
* `load_agent` reads a parameter file and checks it against the env and network it names (evaluate.py uses it
  too).
* `Player` jits the one policy (`networks.act`: greedy = argmax over the valid actions, or sampled) and the env
  step *once*, and plays episodes; the summary ends with the env's declared episode statistics, as
  evaluate.py prints them. gymnax-style envs (HackMatrix, gymnax) are stepped without auto-reset, so the last frame of
  an episode is the state it ended in; other families go through the adapter and show `final_obs`.
* Frames: an episode of `n` steps gives `n + 1` frames (the reset state, then the state after each step).
  A saved GIF/MP4 holds the frames of all episodes one after the other, each with a caption line (episode,
  step, action, reward), so `sum(steps_i + 1)` frames in all.
* Views: terminal (text board redrawn in place), window (matplotlib), file (`.gif` with pillow, `.mp4` with
  imageio-ffmpeg).

Errors a user can cause (bad path, not a parameter file, unknown env, no display, ...) raise `WatchError`
with a one-line message; the script prints it and exits 1.
"""

from __future__ import annotations

import os
import re
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from hephaestus import episode_stats

PARAMS_RE = re.compile(r"params_(\d+)\.npz")
FINAL = "final_params.npz"
CAPTION_H = 18


class WatchError(Exception):
    """A problem the user can fix; the message is one line."""


# ------------------------------------------------------------------------------------------------ paths
def _params_in_dir(directory: str) -> str | None:
    """final_params.npz if present, else the params_<n>.npz with the largest n, else None."""
    final = os.path.join(directory, FINAL)
    if os.path.isfile(final):
        return final
    steps = []
    for name in os.listdir(directory):
        m = PARAMS_RE.fullmatch(name)
        if m:
            steps.append((int(m.group(1)), name))
    if steps:
        return os.path.join(directory, max(steps)[1])
    return None


def resolve_params_path(path: str | None, latest: bool = False, checkpoints_dir: str = "checkpoints") -> str:
    """One parameter file from what the user gave (see `scripts/watch_agent.py --help`)."""
    if latest:
        if not os.path.isdir(checkpoints_dir):
            raise WatchError(f"--latest: no {checkpoints_dir}/ directory here")
        found = []
        for run in os.listdir(checkpoints_dir):
            run_dir = os.path.join(checkpoints_dir, run)
            if os.path.isdir(run_dir):
                params = _params_in_dir(run_dir)
                if params:
                    found.append((os.path.getmtime(params), params))
        if not found:
            raise WatchError(f"--latest: no final_params.npz or params_<n>.npz under {checkpoints_dir}/")
        return max(found)[1]
    if not path:
        raise WatchError("give a parameter file or run directory, or --latest")
    if os.path.isfile(path):
        return path
    if not os.path.isdir(path):
        raise WatchError(f"{path}: no such file or directory")
    found = _params_in_dir(path)
    if found:
        return found
    # a checkpoint step directory (`<run>/<step>/`, or a folder inside it): its export lies beside it
    clean = os.path.normpath(os.path.abspath(path))
    for step_dir in (clean, os.path.dirname(clean)):
        name = os.path.basename(step_dir)
        if name.isdigit():
            beside = os.path.join(os.path.dirname(step_dir), f"params_{int(name)}.npz")
            if os.path.isfile(beside):
                return beside
            raise WatchError(f"{path}: checkpoint step directory without {os.path.basename(beside)} beside it")
    raise WatchError(f"{path}: no final_params.npz or params_<n>.npz in this directory")


# ------------------------------------------------------------------------------------------------ loading
def load_env(name: str):
    """The adapted env by name, with one-line errors."""
    from hephaestus.envs.registry import UnknownEnvError, make_env

    try:
        return make_env(name)
    except UnknownEnvError as err:
        raise WatchError(str(err)) from None
    except Exception as err:  # noqa: BLE001 - e.g. an optional env family that is not installed
        raise WatchError(f"cannot build env {name!r}: {type(err).__name__}: {err}".splitlines()[0]) from None


def load_agent(params_path: str, env_override: str | None = None, seed_index: int | None = None):
    """(params, metadata, adapted env, network) of a parameter file (seed `seed_index` of a multi-seed file),
    checked against each other: the env it
    names (else `env_override`), the network its metadata describes, the arrays' shapes. watch_agent.py and
    evaluate.py load agents through this."""
    import jax
    import jax.numpy as jnp

    from hephaestus.export import ExportError, load_params_npz, network_from_meta, select_seed

    try:
        params, meta = load_params_npz(params_path)
        # A --num-seeds file holds every seed's agent: take one (--seed-index, default 0).
        params, _ = select_seed(params, meta, seed_index, params_path)
    except ExportError as err:
        raise WatchError(str(err)) from None
    file_env = meta.get("env")
    if file_env and env_override and env_override != file_env:
        print(f"note: {params_path} was trained on {file_env}; ignoring --env {env_override}", file=sys.stderr)
    env_name = file_env or env_override
    if not env_name:
        raise WatchError(f"{params_path}: the file names no environment; pass --env")
    net = meta.get("network") or {}
    missing = [k for k in ("obs_dim", "action_dim", "discrete", "hidden_dim", "num_layers") if k not in net]
    if missing:
        raise WatchError(f"{params_path}: network metadata lacks {', '.join(missing)}")
    env = load_env(env_name)
    spec = env.spec
    if spec.obs_dim != net["obs_dim"] or spec.action_dim != net["action_dim"] or spec.discrete != net["discrete"]:
        raise WatchError(
            f"{params_path}: network expects obs {net['obs_dim']} / actions {net['action_dim']}, but "
            f"{env_name} has obs {spec.obs_dim} / actions {spec.action_dim} (trained on another version?)")
    if not spec.discrete and not net.get("action_low"):  # files that do not carry the bounds: the env's
        net = {**net, "action_low": list(spec.action_low), "action_high": list(spec.action_high)}
        meta = {**meta, "network": net}
    network = network_from_meta(meta)
    # The arrays must fit the network the metadata describes (shapes only; nothing is computed).
    expected = jax.eval_shape(network.init, jax.random.PRNGKey(0), jnp.zeros((1, spec.obs_dim), jnp.float32))
    want = {jax.tree_util.keystr(k): tuple(v.shape) for k, v in jax.tree_util.tree_leaves_with_path(expected)}
    got = {jax.tree_util.keystr(k): tuple(np.shape(v)) for k, v in jax.tree_util.tree_leaves_with_path(params)}
    if want != got:
        bad = sorted(set(want) ^ set(got)) or sorted(k for k in want if want[k] != got[k])
        raise WatchError(f"{params_path}: parameters do not match the network in its metadata "
                         f"(first difference: {bad[0]})")
    return jax.tree.map(jnp.asarray, params), meta, env, network


# ------------------------------------------------------------------------------------------------ actions
def action_names(env_name: str, action_dim: int, discrete: bool) -> list[str] | None:
    if not discrete:
        return None
    if env_name == "hackmatrix":
        from hephaestus.envs.hackmatrix.constants import PROGRAM_NAMES

        names = ["up", "down", "left", "right", "siphon"] + list(PROGRAM_NAMES)
        return names[:action_dim] + [str(i) for i in range(len(names), action_dim)]
    if env_name == "gymnax:CartPole-v1":
        return ["left", "right"]
    return [str(i) for i in range(action_dim)]


def describe_action(names, action) -> str:
    a = np.asarray(action)
    if names is not None and a.ndim == 0:
        i = int(a)
        return names[i] if 0 <= i < len(names) else str(i)
    return np.array2string(a, precision=2, separator=",")


# ------------------------------------------------------------------------------------------------ env
_ENV_FUNCTIONS: dict = {}


def _env_functions(env_name: str, env):
    """(raw_stepping, reset, step, render_rgb or None), jitted once per env name and process, so several
    replays in one process (or a greedy and a sampled one) share one compiled env step."""
    if env_name in _ENV_FUNCTIONS:
        return _ENV_FUNCTIONS[env_name]
    import jax
    import jax.numpy as jnp

    from hephaestus.envs.adapters import split_observation

    spec = env.spec
    raw_env, raw_params = env.raw_env, env.raw_params
    raw_stepping = env_name.partition(":")[0] in ("hackmatrix", "gymnax") and raw_env is not None
    if raw_stepping:
        # No auto-reset: the episode's last frame is the state it ended in.
        scalar_action = not spec.discrete and not getattr(raw_env.action_space(raw_params), "shape", ())

        def reset(key):
            obs_tree, state = raw_env.reset_env(key, raw_params)
            obs, mask = split_observation(obs_tree)
            if mask is None:
                mask = jnp.ones((spec.action_dim if spec.discrete else 1,), bool)
            return state, obs, mask

        def step(key, state, action):
            env_action = action.reshape(()) if scalar_action else action
            obs_tree, state, reward, done, info = raw_env.step_env(key, state, env_action, raw_params)
            done = jnp.asarray(done, bool)
            truncated = jnp.logical_and(jnp.asarray(raw_env.is_truncated(state, raw_params), bool), ~done)
            obs, mask = split_observation(obs_tree)
            if mask is None:
                mask = jnp.ones((spec.action_dim if spec.discrete else 1,), bool)
            extras = {k: info[k] for k in ("reward_terms", "stage", "victory", "invalid_action", "episode_stats")
                      if k in info}
            return state, obs, mask, jnp.asarray(reward, jnp.float32), done, truncated, extras
    else:
        def reset(key):
            state, first = env.reset(key)
            return state, first.obs, first.action_mask

        def step(key, state, action):
            state, out = env.step(key, state, action)
            # the adapter has already reset a finished episode: show the observation it ended on
            return state, out.final_obs, out.action_mask, out.reward, out.terminated, out.truncated, out.info

    render = None
    if env_name == "hackmatrix" and raw_stepping:
        from hephaestus.envs.hackmatrix.render_rgb import render_rgb

        render = jax.jit(render_rgb)
    _ENV_FUNCTIONS[env_name] = (raw_stepping, jax.jit(reset), jax.jit(step), render)
    return _ENV_FUNCTIONS[env_name]



# ------------------------------------------------------------------------------------------------ player
@dataclass
class Frame:
    """What one view shows: the state (or observation) after `step` steps of episode `episode`."""

    episode: int
    step: int
    env_state: Any
    obs: np.ndarray
    action: str | None = None
    reward: float = 0.0
    total_reward: float = 0.0
    reward_terms: dict = field(default_factory=dict)
    stage: int | None = None
    done: str | None = None  # outcome on the last frame of an episode


@dataclass
class EpisodeResult:
    steps: int
    total_reward: float
    outcome: str  # won | died | terminated | invalid action | time limit | out of steps
    highest_stage: int | None
    programs: dict  # program name -> times used (HackMatrix)
    stats: dict = field(default_factory=dict)  # declared episode statistics (episode_stats.py) of this episode
    finished: bool = True  # ended by the env (not by --max-steps or a stop)


class Player:
    """Loads a parameter file and plays episodes with the jitted policy and env step."""

    def __init__(self, params_path: str, env_override: str | None = None, greedy: bool = True,
                 seed_index: int | None = None):
        self.params, self.meta, self.env, self.network = load_agent(params_path, env_override, seed_index)
        self.seed_index = 0 if seed_index is None else seed_index
        from hephaestus.export import num_seeds_of

        self.num_seeds = num_seeds_of(self.meta)
        self.env_name = self.env.spec.name
        self.spec = spec = self.env.spec
        self.greedy = greedy
        self.names = action_names(self.env_name, spec.action_dim, spec.discrete)
        self.is_hackmatrix = self.env_name == "hackmatrix"
        self._build()

    # -- the compiled functions (jit once; every step reuses them) --------------------------------------
    def _build(self):
        import jax

        from hephaestus import networks as nets

        network, greedy = self.network, self.greedy

        def policy(params, key, obs, mask):  # the env action of the one policy (networks.act)
            return nets.act(network, params, obs, mask, key, greedy)[0]

        self._policy = jax.jit(policy)
        self.raw_stepping, self._reset, self._step, self._render_rgb = _env_functions(self.env_name, self.env)

    def _act(self, params, key, state, obs, mask):
        import jax

        k_act, k_env = jax.random.split(key)
        action = self._policy(params, k_act, obs, mask)
        return (action,) + tuple(self._step(k_env, state, action))

    # -- playing ----------------------------------------------------------------------------------------
    def episodes(self, num_episodes: int, max_steps: int, seed: int, on_frame: Callable[[Frame], bool | None],
                 on_end: Callable[[int, EpisodeResult], None] | None = None) -> list[EpisodeResult]:
        """Play; call `on_frame` for each frame (returning True stops early) and `on_end` after each episode."""
        import jax

        key = jax.random.PRNGKey(seed)
        results = []
        for ep in range(num_episodes):
            key, k_reset = jax.random.split(key)
            state, obs, mask = self._reset(k_reset)
            total, stage, programs = 0.0, self._stage(state, {}), {}
            stats = episode_stats.zeros(self.spec.episode_stats, (), np)
            frame = Frame(ep + 1, 0, state, np.asarray(obs), stage=stage)
            if on_frame(frame):
                break
            outcome, steps, stop = "out of steps", 0, False
            for t in range(max_steps):
                key, k = jax.random.split(key)
                action, state, obs, mask, reward, terminated, truncated, info = self._act(
                    self.params, k, state, obs, mask)
                steps = t + 1
                reward = float(reward)
                total += reward
                name = describe_action(self.names, action)
                if self.is_hackmatrix and int(action) >= 5:
                    programs[name] = programs.get(name, 0) + 1
                if self.spec.episode_stats:
                    stats = episode_stats.accumulate(self.spec.episode_stats, stats,
                                                     jax.device_get(info["episode_stats"]), np)
                st = self._stage(state, info)
                if st is not None:
                    stage = st if stage is None else max(stage, st)
                done = None
                if bool(terminated):
                    done = self._terminal_outcome(state, info)
                elif bool(truncated):
                    done = "time limit"
                elif steps == max_steps:
                    done = "out of steps"
                terms = {k: float(v) for k, v in (info.get("reward_terms") or {}).items()}
                frame = Frame(ep + 1, steps, state, np.asarray(obs), name, reward, total, terms, st, done)
                if on_frame(frame):
                    stop = True
                    outcome = "stopped"
                    break
                if done:
                    outcome = done
                    break
            result = EpisodeResult(steps, total, outcome, stage, programs, {k: float(v) for k, v in stats.items()},
                                   outcome not in ("out of steps", "stopped"))
            results.append(result)
            if on_end:
                on_end(ep + 1, result)
            if stop:
                break
        return results

    def _stage(self, state, info):
        if "stage" in info:
            return int(info["stage"])
        if self.is_hackmatrix and self.raw_stepping:
            return int(state.stage)
        return None

    def _terminal_outcome(self, state, info) -> str:
        if self.is_hackmatrix:
            if "victory" in info and bool(info["victory"]):
                return "won"
            if "invalid_action" in info and bool(info["invalid_action"]):
                return "invalid action"
            if self.raw_stepping and int(state.hp) <= 0:
                return "died"
            if float((info.get("reward_terms") or {}).get("victory", 0.0)) > 0:
                return "won"
            return "died"
        return "terminated"

    # -- pictures and text ------------------------------------------------------------------------------
    def text(self, frame: Frame) -> str:
        if self.is_hackmatrix and self.raw_stepping:
            from hephaestus.envs.hackmatrix.render import render_text

            return render_text(frame.env_state)
        obs = np.asarray(frame.obs).ravel()
        shown = np.array2string(obs[:16], precision=3, suppress_small=True, max_line_width=100)
        return f"observation ({obs.size} values): {shown}{' ...' if obs.size > 16 else ''}"

    def rgb(self, frame: Frame) -> np.ndarray:
        if self._render_rgb is not None and self.raw_stepping:
            return np.asarray(self._render_rgb(frame.env_state))
        if self.raw_stepping:
            img = gymnax_rgb(self.env.raw_env, self.env.raw_params, frame.env_state)
            if img is not None:
                return img
        return obs_bar_image(frame.obs)


# ------------------------------------------------------------------------------------------------ images
def cartpole_rgb(state, params, width: int = 384, height: int = 240) -> np.ndarray:
    """CartPole drawn with pillow: track, cart, pole (gymnax's own renderer needs gymnasium)."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (width, height), (245, 245, 245))
    d = ImageDraw.Draw(img)
    x_lim = float(getattr(params, "x_threshold", 2.4))
    scale = width / (2 * x_lim * 1.2)
    track_y = int(height * 0.7)
    d.line([(0, track_y), (width, track_y)], fill=(60, 60, 60), width=2)
    for edge in (-x_lim, x_lim):
        ex = width / 2 + edge * scale
        d.line([(ex, track_y - 10), (ex, track_y + 10)], fill=(200, 60, 60), width=2)
    cx = width / 2 + float(state.x) * scale
    cw, ch = 50, 26
    d.rectangle([cx - cw / 2, track_y - ch / 2, cx + cw / 2, track_y + ch / 2], fill=(40, 40, 40))
    length = 2 * float(getattr(params, "length", 0.5)) * scale
    theta = float(state.theta)
    top = (cx + length * np.sin(theta), track_y - length * np.cos(theta))
    d.line([(cx, track_y), top], fill=(200, 140, 70), width=8)
    d.ellipse([cx - 4, track_y - 4, cx + 4, track_y + 4], fill=(120, 120, 200))
    return np.asarray(img)


_GYMNAX_VIS_FAILED: set = set()


def gymnax_rgb(env, params, state) -> np.ndarray | None:
    """gymnax's own picture of a state where it has one (CartPole: drawn here), else None."""
    name = getattr(env, "name", "")
    if name == "CartPole-v1":
        return cartpole_rgb(state, params)
    if name in _GYMNAX_VIS_FAILED:
        return None
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        from gymnax.visualize.visualizer import Visualizer

        # gymnax's Visualizer, drawn on an off-screen figure (no pyplot: a --window replay keeps its backend)
        vis = Visualizer.__new__(Visualizer)
        vis.env, vis.env_params, vis.state_seq, vis.reward_seq = env, params, [state], None
        vis.fig = Figure(figsize=(4, 3.3), dpi=96)
        vis.ax = vis.fig.subplots()
        canvas = FigureCanvasAgg(vis.fig)
        vis.init()
        vis.update(0)
        vis.ax.set_title(name, fontsize=11)
        canvas.draw()
        return np.asarray(canvas.buffer_rgba())[..., :3].copy()
    except Exception:  # noqa: BLE001 - no renderer for this env (or its extra dependency is missing)
        _GYMNAX_VIS_FAILED.add(name)
        return None


def obs_bar_image(obs, width: int = 384, height: int = 200) -> np.ndarray:
    """A plain bar plot of the observation vector (tanh-squashed around a middle line)."""
    obs = np.asarray(obs, np.float32).ravel()
    img = np.full((height, width, 3), 245, np.uint8)
    mid = height // 2
    img[mid, :] = (120, 120, 120)
    n = max(obs.size, 1)
    bar_w = max(width // n, 1)
    for i, v in enumerate(obs[: width // bar_w]):
        h = int(round(np.tanh(float(v) / 2.0) * (mid - 4)))
        x0, x1 = i * bar_w, max(i * bar_w + bar_w - 1, i * bar_w + 1)
        if h >= 0:
            img[mid - h:mid, x0:x1] = (60, 110, 200)
        else:
            img[mid:mid - h, x0:x1] = (210, 90, 60)
    return img


def captioned(img: np.ndarray, caption: str) -> np.ndarray:
    """The frame with a caption bar on top (drawn with the built-in bitmap font)."""
    from hephaestus.envs.hackmatrix.render_rgb import draw_text_np

    img = np.asarray(img, np.uint8)
    bar = np.zeros((CAPTION_H, img.shape[1], 3), np.uint8)
    draw_text_np(bar, caption, 4, 3, (235, 235, 235))
    return np.concatenate([bar, img[..., :3]], axis=0)


def caption_for(frame: Frame) -> str:
    text = f"EP {frame.episode} STEP {frame.step}"
    if frame.action is not None:
        text += f" {frame.action} {frame.reward:+.2f}"
    if frame.done:
        text += f" {frame.done}"
    return text


# ------------------------------------------------------------------------------------------------ views
class TerminalView:
    """Text board redrawn in place (ANSI clear + home) when stdout is a terminal; frames one after another
    without pauses otherwise (e.g. piped to a file)."""

    def __init__(self, player: Player, fps: float, out=None):
        self.player, self.out = player, out or sys.stdout
        self.live = hasattr(self.out, "isatty") and self.out.isatty()
        self.delay = 1.0 / fps if fps > 0 else 0.0
        self.finished: list[str] = []  # episode lines, kept on screen under every redraw

    def episode_done(self, ep: int, result: "EpisodeResult"):
        line = episode_line(ep, result)
        self.finished.append(line)
        print(line, file=self.out, flush=True)

    def __call__(self, frame: Frame):
        lines = []
        if self.live:
            lines.append("\x1b[H\x1b[2J")
            lines.extend(self.finished)
        lines.append(f"episode {frame.episode}  step {frame.step}  return {frame.total_reward:+.3f}")
        lines.append(self.player.text(frame))
        if frame.action is not None:
            lines.append(f"action: {frame.action}   reward {frame.reward:+.3f}")
            terms = {k: v for k, v in frame.reward_terms.items() if v != 0.0}
            if terms:
                lines.append("  " + "  ".join(f"{k} {v:+.3f}" for k, v in terms.items()))
        if self.player.is_hackmatrix and self.player.raw_stepping:
            s = frame.env_state
            lines.append(f"HP {int(s.hp)}  credits {int(s.credits)}  energy {int(s.energy)}  stage {int(s.stage)}")
        if frame.done:
            lines.append(f"-> {frame.done}")
        print("\n".join(lines), file=self.out, flush=True)
        if self.live and self.delay:
            time.sleep(self.delay)


def has_display() -> bool:
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


class WindowView:
    """A matplotlib window showing the RGB frames; closing it stops the replay."""

    def __init__(self, player: Player, fps: float):
        if not has_display():
            raise WatchError("--window needs a display (none found: DISPLAY is not set); use the terminal view "
                             "or --save out.gif")
        import matplotlib

        backend = matplotlib.get_backend().lower()
        if backend in ("agg", "pdf", "svg", "ps", "cairo", "template") or "inline" in backend:
            raise WatchError(f"--window: matplotlib has no interactive backend (it uses {backend!r}); "
                             "install tkinter or PyQt, or use --save out.gif")
        import matplotlib.pyplot as plt

        self.plt, self.player = plt, player
        self.delay = 1.0 / fps if fps > 0 else 0.001
        self.fig, self.ax = plt.subplots()
        self.ax.set_axis_off()
        self.im = None

    def __call__(self, frame: Frame):
        img = self.player.rgb(frame)
        if self.im is None or self.im.get_array().shape != img.shape:
            self.ax.clear()
            self.ax.set_axis_off()
            self.im = self.ax.imshow(img)
        else:
            self.im.set_data(img)
        self.ax.set_title(caption_for(frame).lower(), fontsize=10)
        self.plt.pause(self.delay)
        return not self.plt.fignum_exists(self.fig.number)  # window closed -> stop

    def close(self):
        self.plt.close(self.fig)


def check_save_path(path: str) -> str:
    """Everything about `--save PATH` that can be checked before the (slow) compile and play: the extension, the
    encoder for .mp4, the folder, that PATH is not a folder, and that a file can be created there. Returns the
    extension."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".gif", ".mp4"):
        raise WatchError(f"--save {path}: use a .gif or .mp4 file name")
    if ext == ".mp4":
        try:
            import imageio_ffmpeg  # noqa: F401
        except ImportError:
            raise WatchError("--save .mp4 needs imageio-ffmpeg (pip install imageio-ffmpeg); "
                             "or save a .gif instead") from None
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise WatchError(f"--save {path}: is a directory; give a file name such as {os.path.join(path, 'agent' + ext)}")
    if not os.path.isdir(directory):
        raise WatchError(f"--save {path}: directory {directory} does not exist")
    existed = os.path.exists(path)
    try:
        with open(path, "ab"):
            pass
    except OSError as err:
        raise WatchError(f"--save {path}: cannot write there ({err.strerror or err})") from None
    if not existed:
        os.remove(path)
    return ext


class FileView:
    """Collects captioned RGB frames and writes a GIF (pillow) or an MP4 (imageio-ffmpeg)."""

    def __init__(self, player: Player, path: str, fps: float):
        ext = check_save_path(path)
        self.player, self.path, self.ext = player, path, ext
        self.fps = fps if fps > 0 else 5.0
        self.frames: list[np.ndarray] = []

    def __call__(self, frame: Frame):
        self.frames.append(captioned(self.player.rgb(frame), caption_for(frame)))

    def write(self) -> int:
        if not self.frames:
            raise WatchError("nothing to save: no frames were played")
        h = max(f.shape[0] for f in self.frames)
        w = max(f.shape[1] for f in self.frames)
        frames = [np.pad(f, ((0, h - f.shape[0]), (0, w - f.shape[1]), (0, 0))) for f in self.frames]
        if self.ext == ".gif":
            write_gif(self.path, frames, self.fps)
        else:
            write_mp4(self.path, frames, self.fps)
        return len(frames)


def write_gif(path: str, frames: list[np.ndarray], fps: float) -> None:
    from PIL import Image

    images = [Image.fromarray(f) for f in frames]
    duration = max(int(round(1000.0 / fps)), 20)
    # Every frame carries its own caption (step counter), so pillow never merges two frames into one.
    images[0].save(path, save_all=True, append_images=images[1:], duration=duration, loop=0, optimize=False)


def write_mp4(path: str, frames: list[np.ndarray], fps: float) -> None:
    import imageio_ffmpeg

    h, w = frames[0].shape[:2]
    ph, pw = -h % 16, -w % 16  # the H.264 encoder wants sizes divisible by 16: pad instead of rescaling
    writer = imageio_ffmpeg.write_frames(path, (w + pw, h + ph), fps=fps, macro_block_size=1, quality=7)
    with warnings.catch_warnings():  # starting ffmpeg after jax is loaded warns about os.fork(); it only execs
        warnings.filterwarnings("ignore", message=".*os.fork", category=RuntimeWarning)
        writer.send(None)
    try:
        for f in frames:
            writer.send(np.ascontiguousarray(np.pad(f, ((0, ph), (0, pw), (0, 0)))))
    finally:
        writer.close()


# ------------------------------------------------------------------------------------------------ summary
def episode_line(ep: int, r: EpisodeResult) -> str:
    line = f"episode {ep}: {r.steps} steps, return {r.total_reward:+.3f}, {r.outcome}"
    if r.highest_stage is not None:
        line += f", highest stage {r.highest_stage}"
    if r.programs:
        line += ", programs used: " + ", ".join(f"{k} x{v}" for k, v in sorted(r.programs.items()))
    elif r.highest_stage is not None:
        line += ", programs used: none"
    return line


def summary_lines(results: list[EpisodeResult], stats=()) -> list[str]:
    """The replay's summary, then the same statistics evaluate.py and training's eval/ report (`stats`: the env's
    declared episode statistics)."""
    if not results:
        return ["no episodes played"]
    returns = np.array([r.total_reward for r in results])
    steps = np.array([r.steps for r in results])
    outcomes: dict[str, int] = {}
    for r in results:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    lines = [f"summary over {len(results)} episode(s): return mean {returns.mean():+.3f} "
             f"(min {returns.min():+.3f}, max {returns.max():+.3f}), steps mean {steps.mean():.1f}",
             "outcomes: " + ", ".join(f"{k} {v}" for k, v in outcomes.items())]
    stages = [r.highest_stage for r in results if r.highest_stage is not None]
    if stages:
        lines.append(f"highest stage reached: {max(stages)}")
    programs: dict[str, int] = {}
    for r in results:
        for k, v in r.programs.items():
            programs[k] = programs.get(k, 0) + v
    if programs:
        lines.append("programs used: " + ", ".join(f"{k} x{v}" for k, v in sorted(programs.items())))
    from hephaestus import evaluation

    out = {"return": returns, "length": steps, "finished": np.array([r.finished for r in results]),
           "stats": {s.name: np.array([r.stats.get(s.name, 0.0) for r in results]) for s in stats}}
    lines += evaluation.summary_lines(evaluation.summarise(out, stats, "eval/"), "eval/")
    return lines


# ------------------------------------------------------------------------------------------------ main
def build_parser():
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message):  # one line, no usage block
            self.exit(2, f"error: {message} (see --help)\n")

    p = Parser(
        prog="watch_agent.py",
        description="Watch a trained agent play in the environment it was trained on (CPU is enough).")
    p.add_argument("path", nargs="?", help="final_params.npz, params_<n>.npz, a checkpoint step directory "
                   "(uses the params_<n>.npz beside it) or a run directory (final_params.npz, else the newest "
                   "params_<n>.npz)")
    p.add_argument("--latest", action="store_true", help="the newest run under --checkpoints-dir")
    p.add_argument("--checkpoints-dir", default="checkpoints", help="where --latest looks (default: checkpoints)")
    p.add_argument("--env", help="environment, used only when the file does not name one")
    p.add_argument("--episodes", type=int, default=3, help="episodes to play (default 3)")
    p.add_argument("--max-steps", type=int, default=500, help="steps per episode at most (default 500)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seed-index", type=int, default=None, metavar="I",
                   help="which agent of a --num-seeds run to watch: row I of its parameter file (default 0)")
    p.add_argument("--sample", action="store_true", help="sample actions instead of the greedy argmax")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--window", action="store_true", help="show the frames in a window (needs a display)")
    view.add_argument("--save", metavar="FILE", help="write the frames to FILE.gif or FILE.mp4 (headless)")
    p.add_argument("--fps", type=float, default=5.0, help="frames per second (default 5)")
    return p


def main(argv=None, compile_cache: bool = True) -> int:
    """The script; `compile_cache` turns on the persistent compilation cache (`loop.enable_compilation_cache`)."""
    args = build_parser().parse_args(argv)
    try:
        if args.episodes < 1 or args.max_steps < 1:
            raise WatchError("--episodes and --max-steps must be at least 1")
        if args.path and args.latest:
            raise WatchError("give either a path or --latest, not both")
        path = resolve_params_path(args.path, args.latest, args.checkpoints_dir)
        if args.save:  # check the output before the (slow) compile
            check_save_path(args.save)
        if args.window and not has_display():
            raise WatchError("--window needs a display (none found: DISPLAY is not set); use the terminal view "
                             "or --save out.gif")
        player = Player(path, env_override=args.env, greedy=not args.sample, seed_index=args.seed_index)
        if compile_cache:  # jit is lazy: nothing has been compiled yet
            from hephaestus.loop import enable_compilation_cache

            enable_compilation_cache()
        which = f" (seed index {player.seed_index} of {player.num_seeds})" if player.num_seeds > 1 else ""
        print(f"watching {path}{which}: env {player.env_name}, update {player.meta.get('update', '?')}, "
              f"{player.meta.get('env_steps', '?')} env steps, {'sampled' if args.sample else 'greedy'} actions",
              flush=True)
        if args.save:
            view = FileView(player, args.save, args.fps)
        elif args.window:
            view = WindowView(player, args.fps)
        else:
            view = TerminalView(player, args.fps)
        on_end = view.episode_done if isinstance(view, TerminalView) else \
            (lambda ep, r: print(episode_line(ep, r), flush=True))
        try:
            results = player.episodes(args.episodes, args.max_steps, args.seed, view, on_end=on_end)
        except KeyboardInterrupt:
            if args.save and view.frames:  # Ctrl-C: keep what was played
                n = view.write()
                print(f"stopped: saved the {n} frames played so far to {args.save}", file=sys.stderr)
                return 130
            raise
        if args.save:
            n = view.write()
            print(f"saved {n} frames to {args.save}")
        elif args.window:
            view.close()
        print("\n".join(summary_lines(results, player.spec.episode_stats)))
        return 0
    except WatchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return 130
