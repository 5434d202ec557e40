"""HackMatrix as the watch tool shows it (the `Presentation` interface of envs/presentation.py): action names
(R36: four moves, siphon, the 23 programs), how an episode ended (from the step's episode statistics), the
status line, the note on an episode (highest stage, programs played), the text board (render.py) and the RGB
frame (render_rgb.py)."""

from __future__ import annotations

import jax
import numpy as np

from hephaestus.envs.presentation import Presentation

from .constants import NUM_ACTIONS, PROGRAM_NAMES
from .render import render_text
from .render_rgb import render_rgb

ACTION_NAMES = ("up", "down", "left", "right", "siphon") + tuple(PROGRAM_NAMES)
assert len(ACTION_NAMES) == NUM_ACTIONS


def outcome(info: dict) -> str:
    """How a terminated episode ended: its last step's episode statistics name exactly one cause (env.py)."""
    stats = info.get("episode_stats", {})
    if float(stats.get("victory", 0.0)) > 0:
        return "won"
    if float(stats.get("invalid_action", 0.0)) > 0:
        return "invalid action"
    return "died"


def status(state) -> str:
    return f"HP {int(state.hp)}  credits {int(state.credits)}  energy {int(state.energy)}  stage {int(state.stage)}"


def episode_note(stats: dict) -> str:
    """The highest stage and the programs played (their declared per-episode counts, env.py)."""
    played = {name: int(stats.get(f"program_{name}", 0)) for name in PROGRAM_NAMES}
    used = ", ".join(f"{name} x{n}" for name, n in sorted(played.items()) if n) or "none"
    return f"highest stage {int(stats.get('stage_reached', 0))}, programs used: {used}"


_render_rgb = jax.jit(render_rgb)  # compiled on first use, once per process


def rgb(state, obs) -> np.ndarray:
    return np.asarray(_render_rgb(state))


# The key to render_text's cell codes, two lines under the board.
LEGEND = ("legend: @ you | V2 D3 G1 C2 virus/daemon/glitch/cryptog + HP (! stunned, ~ disabled) | t3 transmission, "
          "3 turns to spawn\n"
          "        D4 data block (4 points) | P18 program block (program 18) | ?? unknown block | * siphoned | "
          "EX exit | $S data siphon pick-up | c2 e1 credits/energy | + siphon centre")

PRESENTATION = Presentation(action_names=ACTION_NAMES, outcome=outcome, status=status,
                            text=lambda state, obs: render_text(state), rgb=rgb, episode_note=episode_note,
                            legend=LEGEND)
