"""Watch a trained agent play, on a laptop (CPU jax is enough): `scripts/watch_agent.py`.

The parameters come from a laptop export (`export.py`: `final_params.npz` or `params_<update>.npz`), which names
the environment and the network shape, so the agent replays in the very environment it was trained on.

* The path becomes one `.npz` file and an agent as `hephaestus.load_agent` finds and loads them
  (saved_agent.py: a file, a run directory, a checkpoint step directory or `--latest`).
* Playing and rendering are core/playback.py's (`Player`, the frames and their captions, the GIF/MP4 writers,
  shared with the evaluation videos a training run logs); `Player` here is that player of a saved agent.
* What is shown of an env (action names, how an episode ended, a status line, a note per episode, the text
  picture, the RGB frame) is the env's `Presentation` (envs/presentation.py); this module knows no env by name.
* A saved GIF/MP4 holds the frames of all episodes one after the other, each with a caption line (episode,
  step, action, reward), so `sum(steps_i + 1)` frames in all.
* Views: terminal (text board redrawn in place), window (matplotlib), file (`.gif` with pillow, `.mp4` with
  imageio-ffmpeg).

Errors a user can cause (bad path, not a parameter file, unknown env, no display, ...) raise `WatchError`
with a one-line message; the script prints it and exits 2.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from hephaestus.envs import episode_stats
from hephaestus.core import playback
from hephaestus.core.playback import (CAPTION_H, EpisodeResult, Frame, WatchKeys, caption_for, captioned,  # noqa: F401
                                      describe_action, episode_video, write_gif, write_mp4)
from hephaestus.tools.outputs import output_file_problem
from hephaestus.tools.saved_agent import LoadError, load_agent, resolve_params_path


# The viewer's one-line errors are the loader's: a bad path or file and a bad --save are reported alike.
WatchError = LoadError


class Player(playback.Player):
    """core/playback.py's player of the agent saved at a path (what watch_agent.py takes)."""

    def __init__(self, params_path: str, env_override: str | None = None, greedy: bool = True,
                 seed_index: int | None = None):
        super().__init__(load_agent(params_path, seed_index=seed_index, env=env_override), greedy)

# ------------------------------------------------------------------------------------------------ views
class TerminalView:
    """Text board redrawn in place (ANSI clear + home) when stdout is a terminal; frames one after another
    without pauses otherwise (e.g. piped to a file)."""

    def __init__(self, player: Player, fps: float, out=None, legend: bool = True):
        self.player, self.out = player, out or sys.stdout
        self.legend = legend  # the env's key to its text board (Presentation.legend) under every board
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
        status = self.player.status(frame)
        if status:
            lines.append(status)
        if self.legend and self.player.present.legend:
            lines.append(self.player.present.legend)
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
    problem = output_file_problem("--save", path, "agent" + ext)
    if problem:
        raise WatchError(problem)
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


# ------------------------------------------------------------------------------------------------ summary
def episode_line(ep: int, r: EpisodeResult) -> str:
    line = f"episode {ep}: {r.steps} steps, return {r.total_reward:+.3f}, {r.outcome}"
    return f"{line}, {r.note}" if r.note else line


def summary_lines(results: list[EpisodeResult], stats=(), episode_note=None, scores=()) -> list[str]:
    """The replay's summary; the env's note on all episodes together (`episode_note` of the episode statistics
    summed or maxed over the episodes, as over the steps of one); then the same statistics evaluate.py and
    training's eval/ report (`stats`: the env's declared episode statistics)."""
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
    if episode_note is not None and stats:
        together = episode_stats.zeros(stats, (), np)
        for r in results:
            together = episode_stats.accumulate(stats, together, r.stats, np)
        note = episode_note({k: float(v) for k, v in together.items()})
        if note:
            lines.append(f"all episodes: {note}")
    from hephaestus.core import evaluation

    out = {"return": returns, "length": steps, "finished": np.array([r.finished for r in results]),
           "stats": {s.name: np.array([r.stats.get(s.name, 0.0) for r in results]) for s in stats}}
    lines += evaluation.summary_lines(evaluation.summarise(out, stats, "eval/", scores), "eval/")
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
                   "(uses the params_<n>.npz beside it), a run directory (final_params.npz, else the newest "
                   "params_<n>.npz), a shipped agent (checkpoints/pretrained/NAME), or a wandb run's final "
                   "parameters: wandb:ENTITY/PROJECT/RUN_ID (or an artifact, wandb:ENTITY/PROJECT/NAME:ALIAS), "
                   "downloaded to ~/.cache/hephaestus/wandb")
    p.add_argument("--latest", action="store_true", help="the newest run under --checkpoints-dir")
    p.add_argument("--checkpoints-dir", default="checkpoints", help="where --latest looks (default: checkpoints)")
    p.add_argument("--env", help="environment, used only when the file does not name one")
    p.add_argument("--episodes", type=int, default=3, help="episodes to play (default 3)")
    p.add_argument("--max-steps", type=int, default=None,
                   help="steps per episode at most (default 500; 1000 with --eval-game)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seed-index", type=int, default=None, metavar="I",
                   help="which agent of a --num-seeds run to watch: row I of its parameter file (default 0)")
    p.add_argument("--sample", action="store_true", help="sample actions instead of the greedy argmax")
    p.add_argument("--eval-game", type=int, default=None, metavar="G",
                   help="replay game G (0-based, as its --json lists them) of `evaluate.py --seed SEED` (greedy), "
                        "step for step, e.g. the one victory in 1000; --max-steps then defaults to evaluate's 1000")
    p.add_argument("--eval-batch", type=int, default=1000, metavar="N",
                   help="with --eval-game: the games that evaluation played at once (its --batch-size, else its "
                        "--episodes; default 1000)")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--window", action="store_true", help="show the frames in a window (needs a display)")
    view.add_argument("--save", metavar="FILE", help="write the frames to FILE.gif or FILE.mp4 (headless)")
    p.add_argument("--fps", type=float, default=5.0, help="frames per second (default 5)")
    p.add_argument("--legend", action=argparse.BooleanOptionalAction, default=True,
                   help="the key to the terminal board's cell codes under it, for envs that have one (default on; "
                        "--no-legend: off)")
    return p


def main(argv=None, compile_cache: bool = True) -> int:
    """The script; `compile_cache` turns on the persistent compilation cache (`compilation_cache.enable_compilation_cache`)."""
    args = build_parser().parse_args(argv)
    try:
        replay = args.eval_game is not None
        if args.max_steps is None:
            args.max_steps = 1000 if replay else 500
        if args.episodes < 1 or args.max_steps < 1:
            raise WatchError("--episodes and --max-steps must be at least 1")
        if replay and (args.eval_game < 0 or args.eval_batch < 1):
            raise WatchError("--eval-game must be at least 0 and --eval-batch at least 1")
        if replay and args.sample:
            raise WatchError("--eval-game replays evaluate.py's greedy games; it cannot be given with --sample")
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
            from hephaestus.core.compilation_cache import enable_compilation_cache

            enable_compilation_cache()
        from hephaestus.core.export import agent_label

        label = agent_label(player.meta, player.seed_index)  # a sweep agent: its point and seed
        which = (f" (seed index {player.seed_index} of {player.num_seeds}{': ' + label if label else ''})"
                 if player.num_seeds > 1 else "")
        print(f"watching {path}{which}: env {player.env_name}, update {player.meta.get('update', '?')}, "
              f"{player.meta.get('env_steps', '?')} env steps, {'sampled' if args.sample else 'greedy'} actions",
              flush=True)
        if args.save:
            view = FileView(player, args.save, args.fps)
        elif args.window:
            view = WindowView(player, args.fps)
        else:
            view = TerminalView(player, args.fps, legend=args.legend)
        on_end = view.episode_done if isinstance(view, TerminalView) else \
            (lambda ep, r: print(episode_line(ep, r), flush=True))
        try:
            from hephaestus.core.evaluation import GameKeys

            keys = GameKeys(args.seed, args.eval_game, args.eval_batch) if replay else None
            results = player.episodes(1 if replay else args.episodes, args.max_steps, args.seed, view,
                                      on_end=on_end, keys=keys)
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
        print("\n".join(summary_lines(results, player.spec.episode_stats, player.present.episode_note,
                                      player.spec.episode_scores)))
        return 0
    except WatchError as err:  # bad input (a path, a file, a flag, no display): exit 2, as every script
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # writing --save after playing: a full disk
        print(f"error: writing {err.filename or args.save} failed: {err.strerror or err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return 130
