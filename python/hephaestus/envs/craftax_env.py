"""Craftax (`craftax:<id>`, e.g. `craftax:Craftax-Classic-Symbolic-v1`): the optional `craftax` package's envs with
their achievements declared as episode statistics, Crafter's score, and a presentation for watch_agent.py.

* Episode statistics (episode_stats.py): one flag per achievement (`<achievement>_rate`: the share of episodes that
  unlocked it; Craftax-Classic has Crafter's 22, full Craftax its 67), read on every step from the state's own
  `achievements` array (cumulative within an episode), so the pipeline's max over the episode is 1 exactly when the
  episode unlocked it.
* Score (episode_stats.EpisodeScore): Crafter's score over those success rates s_i (in percent),
  exp(mean(ln(1 + s_i))) - 1, reported as `episode/score` (training) and `eval/score` (evaluation).
* Auto-reset (`step_and_reset`, which the adapter calls instead of its own select-based reset): craftax's reset
  generates a whole world, which costs far more than a step; gymnax-style auto-reset computes it for every env on
  every step (under vmap a `cond` is a select). Here only the envs whose episode ended get one
  (hackmatrix/compact.py's `compacted`: the ending lanes, packed into groups of RESET_GROUP, none when no episode
  ended), with the same keys as the adapter's auto-reset. A group computes RESET_GROUP worlds however few of its
  lanes need one, so the group is small: with 32, a 3-seed run of 64 envs generated about 8 times the worlds their
  optimistic reset does and ran at under half its speed. Craftax_Baselines' answer to the same cost is that
  "optimistic" reset: one world per 16 envs, shared where more end at once.
* Presentation: action names from craftax's `Action` enum, craftax's own pixel renderer
  (`make_craftax_pixel_renderer`, compiled once per process) for frames, a status line of the player's vitals,
  "died" for a terminated episode and the achievements unlocked as the episode's note.

The wrapper changes nothing else: every other attribute is the craftax env's own (`step_env`, `reset_env`, spaces).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from hephaestus.envs.episode_stats import EpisodeScore, EpisodeStat


# Worlds generated together where episodes ended (module docstring): a world per 16 of 64 envs, as their reset draws.
RESET_GROUP = 4


def _constants(env_id: str):
    if "Classic" in env_id:
        from craftax.craftax_classic import constants
    else:
        from craftax.craftax import constants
    return constants


def achievement_names(env_id: str) -> tuple[str, ...]:
    """The env's achievements, lower case, in the order of the state's `achievements` array."""
    achievements = _constants(env_id).Achievement
    return tuple(a.name.lower() for a in sorted(achievements, key=lambda a: a.value))


class CraftaxWithStats:
    """A craftax env whose `step_env` also reports `info["episode_stats"]` (one 0/1 value per achievement), with
    the declarations the pipeline reads (`episode_stats`, `episode_scores`, `presentation`)."""

    def __init__(self, env, env_id: str):
        self._env = env
        self.env_id = env_id
        self.achievements = achievement_names(env_id)
        self.episode_stats = tuple(EpisodeStat(name, "max", rate=True, doc=f"unlocked {name.replace('_', ' ')}")
                                   for name in self.achievements)
        self.episode_scores = (EpisodeScore("score", self.achievements,
                                            doc="Crafter's score: exp(mean(ln(1 + success %))) - 1"),)
        self._presentation = None
        self.may_truncate = hasattr(env, "is_truncated")  # else every end is a termination (step_and_reset)
        from hephaestus.envs.hackmatrix.compact import compacted

        # (need, base, key, params) -> a reset's (obs, state) where `need`, else `base`; under vmap only those lanes
        self._reset_where = compacted(lambda need, key, params: env.reset_env(key, params), cap=RESET_GROUP)

    def __getattr__(self, name):  # everything else: the craftax env's own
        return getattr(self._env, name)

    def step_env(self, key, state, action, params):
        obs, next_state, reward, done, info = self._env.step_env(key, state, action, params)
        unlocked = next_state.achievements.astype(jnp.float32)
        info = {**info, "episode_stats": {name: unlocked[i] for i, name in enumerate(self.achievements)}}
        return obs, next_state, reward, done, info

    def step_and_reset(self, key, state, action, params):
        """`step_env`, then a fresh game only where the episode ended (module docstring): gymnax's `step`
        contract plus the split of `done` into terminated and truncated and `final_observation`, the observation
        the episode ended on."""
        key_step, key_reset = jax.random.split(key)  # as adapters.split_step_key
        obs, next_state, reward, done, info = self.step_env(key_step, state, action, params)
        truncated = jnp.asarray(self._env.is_truncated(next_state, params), bool) \
            if hasattr(self._env, "is_truncated") else jnp.zeros_like(done, bool)
        new_obs, new_state = self._reset_where(done, (obs, next_state), key_reset, params)
        info = {**info, "final_observation": obs}
        return new_obs, new_state, reward, jnp.logical_and(done, ~truncated), truncated, info

    @property
    def presentation(self):
        if self._presentation is None:
            self._presentation = make_presentation(self.env_id, self.achievements)
        return self._presentation


def make_presentation(env_id: str, achievements: tuple[str, ...]):
    """watch_agent.py's view of a craftax env (module docstring)."""
    from hephaestus.envs.presentation import Presentation, observation_text

    constants = _constants(env_id)
    action_names = tuple(a.name.lower() for a in sorted(constants.Action, key=lambda a: a.value))
    render = _pixel_renderer(env_id)

    def status(state: Any) -> str:
        vitals = ("health", "food", "drink", "energy")
        parts = [f"{v} {int(np.asarray(getattr(state, f'player_{v}')))}" for v in vitals]
        got = int(np.asarray(state.achievements).sum())
        return "  ".join(parts) + f"  achievements {got}/{len(achievements)}"

    def episode_note(stats: dict) -> str:
        got = [name for name in achievements if float(np.max(np.asarray(stats.get(name, 0.0)))) > 0]
        return f"{len(got)} achievements" + (f": {', '.join(got)}" if got else "")

    return Presentation(action_names=action_names, outcome=lambda info: "died", status=status,
                        text=lambda state, obs: observation_text(obs), rgb=render, episode_note=episode_note)


def _pixel_renderer(env_id: str, block_pixel_size: int | None = None):
    """(state, obs) -> uint8[H, W, 3] from craftax's own renderer (its textures load on the first frame)."""
    holder = {}

    def rgb(state, obs):
        if "fn" not in holder:
            import jax

            constants = _constants(env_id)
            size = block_pixel_size or constants.BLOCK_PIXEL_SIZE_IMG
            if "Classic" in env_id:
                from craftax.craftax_classic.renderer import make_craftax_pixel_renderer
            else:
                from craftax.craftax.renderer import make_craftax_pixel_renderer
            holder["fn"] = jax.jit(make_craftax_pixel_renderer(size))
        frame = np.asarray(holder["fn"](state))
        return np.clip(frame, 0, 255).astype(np.uint8)

    return rgb
