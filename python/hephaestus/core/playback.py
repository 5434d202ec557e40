"""Playing an agent's episodes one step at a time and rendering them: the frames `watch_agent.py` shows and the
evaluation videos a training run logs (`episode_video`).

* `Player` plays with the agent's one policy (`Agent.act`, i.e. `networks.act`: greedy = argmax over the valid
  actions, or sampled) and jits the adapter's step without auto-reset (`AdaptedEnv.step_no_reset`) *once*, so the
  last frame of an episode is the state it ended in.
* What is shown of an env (action names, how an episode ended, a status line, a note per episode, the text
  picture, the RGB frame) is the env's `Presentation` (envs/presentation.py); this module knows no env by name.
* Frames: an episode of `n` steps gives `n + 1` frames (the reset state, then the state after each step), each
  with a caption line (episode, step, action, reward) in a saved GIF/MP4.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from hephaestus.core.agent import Agent
from hephaestus.envs import episode_stats

CAPTION_H = 18

# ------------------------------------------------------------------------------------------------ actions
def describe_action(names, action) -> str:
    a = np.asarray(action)
    if names is not None and a.ndim == 0:
        i = int(a)
        return names[i] if 0 <= i < len(names) else str(i)
    return np.array2string(a, precision=2, separator=",")


# ------------------------------------------------------------------------------------------------ env
_COMPILED_ENVS: dict = {}


def _compiled_env(env):
    """(reset, step_no_reset) of the adapted env, jitted once per env name and process (a name means one env),
    so several replays in one process (or a greedy and a sampled one) share one compiled env step."""
    import jax

    if env.spec.name not in _COMPILED_ENVS:
        _COMPILED_ENVS[env.spec.name] = (jax.jit(env.reset), jax.jit(env.step_no_reset))
    return _COMPILED_ENVS[env.spec.name]


# ------------------------------------------------------------------------------------------------ keys
class WatchKeys:
    """watch_agent.py's own keys: one stream from `--seed`, episode after episode. (`--eval-game` uses
    `evaluation.GameKeys` instead, the same interface.)"""

    def __init__(self, seed: int):
        import jax

        self.key = jax.random.PRNGKey(seed)

    def reset(self):
        """The key of the next episode's reset."""
        import jax

        self.key, k_reset = jax.random.split(self.key)
        return k_reset

    def step(self):
        """(policy key, key of `step_no_reset`) for the next step."""
        import jax

        self.key, k_act, k_env = jax.random.split(self.key, 3)
        return k_act, k_env


# ------------------------------------------------------------------------------------------------ player
@dataclass
class Frame:
    """What one view shows: the state (and its observation) after `step` steps of episode `episode`."""

    episode: int
    step: int
    env_state: Any
    obs: np.ndarray
    action: str | None = None
    reward: float = 0.0
    total_reward: float = 0.0
    reward_terms: dict = field(default_factory=dict)
    done: str | None = None  # outcome on the last frame of an episode


@dataclass
class EpisodeResult:
    steps: int
    total_reward: float
    outcome: str  # the env's word for a termination (won, died, terminated ...) | time limit | out of steps | stopped
    stats: dict = field(default_factory=dict)  # declared episode statistics (episode_stats.py) of this episode
    finished: bool = True  # ended by the env (not by --max-steps or a stop)
    note: str = ""  # the env's few words on the episode (Presentation.episode_note)


class Player:
    """Plays an agent's episodes with its one policy (Agent.act, i.e. networks.act) and the adapter's step without
    auto-reset, both jitted once; renders them through the env's Presentation (envs/presentation.py)."""

    def __init__(self, agent, greedy: bool = True):
        self.agent = agent
        self.params, self.meta, self.env, self.network = agent.params, agent.meta, agent.env, agent.network
        self.seed_index = agent.seed_index
        self.num_seeds = agent.num_seeds
        self.spec = self.env.spec
        self.env_name = self.spec.name
        self.present = self.env.presentation
        self.greedy = greedy
        self._build()

    @classmethod
    def from_parts(cls, params, env, network, meta=None, greedy: bool = True) -> "Player":
        """A player of parameters in memory (a training run's evaluation video), not of a file."""
        player = cls.__new__(cls)
        Player.__init__(player, Agent(params=params, network=network, env=env, meta=meta or {}), greedy)
        return player

    # -- the compiled functions (jit once; every step reuses them) --------------------------------------
    def _build(self):
        self._reset, self._step = _compiled_env(self.env)

    def _policy(self, key, out):
        """The env action of the agent's one policy (Agent.act) for the step `out`: greedy, or sampled with `key`
        (drawn either way, so a greedy and a sampled replay walk the same key stream). A recurrent agent's state
        goes on from step to step (`self._state`, None at each episode's reset)."""
        if self.agent.recurrent:
            action, self._state = self.agent.act(out, None if self.greedy else key, state=self._state)
            return action
        return self.agent.act(out, None if self.greedy else key)

    # -- playing ----------------------------------------------------------------------------------------
    def episodes(self, num_episodes: int, max_steps: int, seed: int, on_frame: Callable[[Frame], bool | None],
                 on_end: Callable[[int, EpisodeResult], None] | None = None,
                 keys=None) -> list[EpisodeResult]:
        """Play; call `on_frame` for each frame (returning True stops early) and `on_end` after each episode.
        `keys`: where the episodes' keys come from: `WatchKeys(seed)` (the default), or
        `evaluation.GameKeys` to replay one game of an evaluation."""
        import jax

        declared = self.spec.episode_stats
        keys = keys or WatchKeys(seed)
        results = []
        for ep in range(num_episodes):
            state, out = self._reset(keys.reset())
            self._state = None  # a recurrent agent starts each episode with a fresh state
            total, stats = 0.0, episode_stats.zeros(declared, (), np)
            if on_frame(Frame(ep + 1, 0, state, np.asarray(out.obs))):
                break
            outcome, steps, stop = "out of steps", 0, False
            for t in range(max_steps):
                k_act, k_env = keys.step()
                action = self._policy(k_act, out)
                state, out = self._step(k_env, state, action)
                info = jax.device_get(out.info)
                steps, reward = t + 1, float(out.reward)
                total += reward
                if declared:
                    stats = episode_stats.accumulate(declared, stats, info["episode_stats"], np)
                done = None
                if bool(out.terminated):
                    done = self.present.outcome(info)
                elif bool(out.truncated):
                    done = "time limit"
                elif steps == max_steps:
                    done = "out of steps"
                terms = {k: float(v) for k, v in (info.get("reward_terms") or {}).items()}
                name = describe_action(self.present.action_names, action)
                frame = Frame(ep + 1, steps, state, np.asarray(out.obs), name, reward, total, terms, done)
                if on_frame(frame):
                    stop = True
                    outcome = "stopped"
                    break
                if done:
                    outcome = done
                    break
            stats = {k: float(v) for k, v in stats.items()}
            result = EpisodeResult(steps, total, outcome, stats, outcome not in ("out of steps", "stopped"),
                                   self.present.episode_note(stats))
            results.append(result)
            if on_end:
                on_end(ep + 1, result)
            if stop:
                break
        return results

    # -- pictures and text ------------------------------------------------------------------------------
    def text(self, frame: Frame) -> str:
        return self.present.text(frame.env_state, frame.obs)

    def status(self, frame: Frame) -> str:
        return self.present.status(frame.env_state)

    def rgb(self, frame: Frame) -> np.ndarray:
        return np.asarray(self.present.rgb(frame.env_state, frame.obs), np.uint8)


# ------------------------------------------------------------------------------------------------ captions
def captioned(img: np.ndarray, caption: str) -> np.ndarray:
    """The frame with a caption bar on top (drawn with the built-in bitmap font)."""
    from hephaestus.envs.bitmap_font import draw_text_np

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


def episode_video(params, env, network, path: str, seed: int = 0, max_steps: int = 1000, fps: float = 5.0,
                  instance=None) -> tuple[str, int, float]:
    """One greedy episode of `params` written to `path` (.mp4 where imageio-ffmpeg is installed, else .gif): the
    captioned RGB frames watch_agent.py --save writes. Returns (path written, frames, episode return). `instance`:
    the training run's env instance (DeepSea's map), played instead of the env's default one."""
    if instance is not None and env.set_instance is not None:
        from hephaestus.envs.adapters import with_fixed_instance

        env = with_fixed_instance(env, instance)
    player = Player.from_parts(params, env, network)
    frames: list[np.ndarray] = []
    results = player.episodes(1, max_steps, seed, lambda f: frames.append(captioned(player.rgb(f), caption_for(f))))
    h, w = max(f.shape[0] for f in frames), max(f.shape[1] for f in frames)
    frames = [np.pad(f, ((0, h - f.shape[0]), (0, w - f.shape[1]), (0, 0))) for f in frames]
    try:
        path = os.path.splitext(path)[0] + ".mp4"
        write_mp4(path, frames, fps)
    except (ImportError, RuntimeError, OSError):  # no imageio-ffmpeg or no ffmpeg binary: a GIF (pillow)
        path = os.path.splitext(path)[0] + ".gif"
        write_gif(path, frames, fps)
    return path, len(frames), results[0].total_reward if results else 0.0


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
