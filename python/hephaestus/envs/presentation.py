"""How tools show an environment to a person: the optional `Presentation` an env declares.

watch_agent.py (watch.py) replays episodes of any env through this interface and knows no env by name. An env
declares its own presentation with a `presentation` attribute (HackMatrix: `envs/hackmatrix/presentation.py`,
built from its render modules); every other env gets a generic one from `presentation_of`:

* action names: gymnax's CartPole says left/right, every other discrete env the action indices;
* outcome of a terminated episode: "terminated" (a truncated one is "time limit" for every env);
* status line and episode note: none;
* text: the first observation values;
* RGB frame: CartPole drawn with pillow, other gymnax envs through gymnax's own Visualizer where it has one,
  else (jumanji, craftax, DeepSea ...) a bar plot of the observation.

Every function runs on the host, on one unbatched env state (the state a step landed on, before any reset) and
its flat observation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass(frozen=True)
class Presentation:
    # Discrete envs: one name per action. None: actions are shown as numbers (continuous envs).
    action_names: tuple[str, ...] | None
    # (info of the step that terminated the episode, as numpy: `episode_stats`, `reward_terms`, `stage`) -> a word
    # for how it ended ("won", "died", ...). Truncation is "time limit" for every env and never asked.
    outcome: Callable[[dict], str]
    # (state) -> one status line under the picture ("" for none).
    status: Callable[[Any], str]
    # (state, obs) -> a text picture for the terminal (one or more lines).
    text: Callable[[Any, np.ndarray], str]
    # (state, obs) -> uint8[H, W, 3], the frame a window or a saved GIF/MP4 shows.
    rgb: Callable[[Any, np.ndarray], np.ndarray]
    # (the episode's declared statistics, episode_stats.py, summed or maxed over its steps) -> a few words for
    # its summary line ("" for none). Given the statistics of several episodes combined the same way, it
    # describes them together.
    episode_note: Callable[[dict], str] = lambda stats: ""
    # A key to the text picture's codes, shown under the board in the terminal (watch_agent.py --legend); "" none.
    legend: str = ""


def presentation_of(env, spec, rgb: Callable[[Any, np.ndarray], np.ndarray] | None = None) -> Presentation:
    """The raw env's declared `presentation`, else the generic one (module docstring), with frames from
    `rgb(state, obs)` where the adapter has a renderer for the env's family (else the observation's bar plot)."""
    declared = getattr(env, "presentation", None)
    if declared is not None:
        return declared
    names = None
    if spec.discrete:
        names = ACTION_NAMES.get(spec.name) or tuple(str(i) for i in range(spec.action_dim))
    return Presentation(action_names=names, outcome=lambda info: "terminated", status=lambda state: "",
                        text=lambda state, obs: observation_text(obs),
                        rgb=rgb or (lambda state, obs: obs_bar_image(obs)))


def gymnax_frames(env, params) -> Callable[[Any, np.ndarray], np.ndarray]:
    """Frames of a gymnax env: its own picture where it has one (gymnax_rgb), else the observation's bars."""

    def rgb(state, obs):
        img = gymnax_rgb(env, params, state)
        return obs_bar_image(obs) if img is None else img

    return rgb


# Envs without a declared presentation whose actions have names (the others are shown by index).
ACTION_NAMES = {"gymnax:CartPole-v1": ("left", "right")}


def observation_text(obs) -> str:
    obs = np.asarray(obs).ravel()
    shown = np.array2string(obs[:16], precision=3, suppress_small=True, max_line_width=100)
    return f"observation ({obs.size} values): {shown}{' ...' if obs.size > 16 else ''}"


# ------------------------------------------------------------------------------------------------ frames
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
