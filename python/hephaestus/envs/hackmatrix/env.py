"""gymnax Environment wrapper for HackMatrix."""
from functools import partial

import jax
import jax.numpy as jnp
from gymnax.environments import environment, spaces

from .constants import NUM_ACTIONS, OBS_SIZE
from . import rng
from .compact import compacted
from .generate import new_game, new_game_seeded
from .observe import OBS_QUANTA, action_mask, observation
from .state import EnvParams, EnvState
from .step import step as _step


def get_obs(state: EnvState):
    return {"obs": observation(state), "action_mask": action_mask(state)}


def _fresh(need, sd):
    state = new_game_seeded(sd, need)
    return get_obs(state), state


_fresh_compact = compacted(_fresh)


class HackMatrix(environment.Environment):
    """HackMatrix 6x6 roguelike (rules: /work/shared/hackmatrix-rules.md, design: specs/hackmatrix.md)."""

    # Named action ranges (R36): the pipeline logs the fraction of each as actions/<name>_frac.
    action_groups = (("move", 0, 4), ("siphon", 4, 5), ("program", 5, 28))
    # Observation structure (R95): obs[:33] are player features and owned-program flags, obs[33:] are
    # 36 cells x 42 channels, row-major. A network may encode the cells with shared weights.
    obs_cells = (33, 36, 42)
    # obs * obs_quanta is an integer in 0..255 (observe.py): the rollout stores observations exactly in uint8.
    obs_quanta = OBS_QUANTA

    @property
    def default_params(self) -> EnvParams:
        return EnvParams()

    def reset_env(self, key, params: EnvParams):
        state = new_game(key)
        return get_obs(state), state

    @partial(jax.jit, static_argnames=("self",))
    def step(self, key, state, action, params=None):
        """Same contract and outputs as gymnax ``Environment.step`` (auto-reset on
        terminated | truncated, info gets terminated/truncated/final_observation); the only
        difference is that the fresh game and its observation are built only for the lanes that
        are done (compact.py), instead of for every lane on every step."""
        if params is None:
            params = self.default_params
        key_step, key_reset = jax.random.split(key)
        obs_st, state_st, reward, terminated, info = self.step_env(key_step, state, action, params)
        truncated = self.is_truncated(state_st, params)
        done = jnp.logical_or(terminated, truncated)
        state, obs = self.auto_reset(key_reset, done, state_st, obs_st, params)
        info = {**info, "terminated": terminated, "truncated": truncated, "final_observation": obs_st}
        return obs, state, reward, terminated, truncated, info

    def auto_reset(self, key, done, state, obs, params=None):
        """(state, obs), with a fresh game (what `reset_env(key)` gives) where `done`. The training pipeline's
        adapter calls this instead of resetting every lane and selecting: under vmap only the lanes that are
        done generate a level (compact.py), about 1% of them per step."""
        obs, state = _fresh_compact(done, (obs, state), rng.seed(key))
        return state, obs

    def step_env(self, key, state: EnvState, action, params: EnvParams):
        state, reward, terminated, info = _step(state, action, key, params)
        obs = get_obs(state)
        info = dict(info)
        info["action_mask"] = obs["action_mask"]
        info["stage"] = state.stage
        return obs, state, reward, terminated, info

    def is_terminated(self, state, params):
        return state.hp == 0

    def is_truncated(self, state: EnvState, params: EnvParams):
        return state.time >= params.max_steps_in_episode

    def get_obs(self, state, params=None, key=None):
        return get_obs(state)

    @property
    def name(self) -> str:
        return "HackMatrix"

    @property
    def num_actions(self) -> int:
        return NUM_ACTIONS

    def action_space(self, params=None):
        return spaces.Discrete(NUM_ACTIONS)

    def observation_space(self, params=None):
        return spaces.Dict({
            "obs": spaces.Box(0.0, jnp.inf, (OBS_SIZE,), jnp.float32),
            "action_mask": spaces.Box(0, 1, (NUM_ACTIONS,), jnp.bool_),
        })
