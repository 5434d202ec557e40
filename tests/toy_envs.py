"""Tiny gymnax-style environments with known dynamics, for exact checks of the pipeline."""

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces


@struct.dataclass
class WalkState:
    pos: jax.Array
    start: jax.Array
    time: jax.Array


@struct.dataclass
class WalkParams:
    max_steps_in_episode: int = 6
    bound: int = 3


class RandomWalk(environment.Environment):
    """Walk left/right on a line. obs = [pos, time, start]; reward = pos after the move.
    |pos| reaching `bound` terminates; `max_steps_in_episode` truncates. The start position is random,
    so two envs given different reset keys start in different places."""

    @property
    def default_params(self):
        return WalkParams()

    def reset_env(self, key, params):
        start = jax.random.randint(key, (), -2, 3).astype(jnp.int32)
        state = WalkState(pos=start, start=start, time=jnp.int32(0))
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        pos = state.pos + 2 * action.astype(jnp.int32) - 1
        state = WalkState(pos=pos, start=state.start, time=state.time + 1)
        terminated = jnp.abs(pos) >= params.bound
        return self.get_obs(state), state, pos.astype(jnp.float32), terminated, {}

    def get_obs(self, state, params=None, key=None):
        return jnp.stack([state.pos, state.time, state.start]).astype(jnp.float32)

    @property
    def num_actions(self):
        return 2

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(-10, 10, (3,), jnp.float32)


@struct.dataclass
class MaskedState:
    time: jax.Array


class MaskedBandit(environment.Environment):
    """Five actions, of which only `valid` are allowed; reward 1 for a valid action. With `valid=()` every
    observation is fully masked."""

    def __init__(self, valid=(1, 3)):
        super().__init__()
        self.valid = tuple(valid)

    @property
    def default_params(self):
        return WalkParams(max_steps_in_episode=4)

    def _obs(self):
        mask = jnp.zeros((5,), bool).at[jnp.array(self.valid, jnp.int32)].set(True) if self.valid else jnp.zeros((5,), bool)
        return {"obs": jnp.ones((2,), jnp.float32), "action_mask": mask}

    def reset_env(self, key, params):
        return self._obs(), MaskedState(time=jnp.int32(0))

    def step_env(self, key, state, action, params):
        ok = jnp.isin(action, jnp.array(self.valid or (-1,), jnp.int32))
        return self._obs(), MaskedState(time=state.time + 1), ok.astype(jnp.float32), jnp.bool_(False), {}

    @property
    def num_actions(self):
        return 5

    def action_space(self, params=None):
        return spaces.Discrete(5)


class StatWalk(RandomWalk):
    """RandomWalk declaring per-episode statistics (episode_stats.py): moves to the right (a sum), the largest
    |pos| (a level, thresholds 2 and 3) and whether the walk hit the bound (a flag)."""

    from hephaestus.envs.episode_stats import EpisodeStat

    episode_stats = (EpisodeStat("right_moves", "sum"), EpisodeStat("reach", "max", thresholds=(2, 3)),
                     EpisodeStat("hit_bound", "max", rate=True))
    del EpisodeStat

    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, info = super().step_env(key, state, action, params)
        info = {"episode_stats": {"right_moves": (action == 1).astype(jnp.float32),
                                  "reach": jnp.abs(state.pos).astype(jnp.float32),
                                  "hit_bound": terminated.astype(jnp.float32)}}
        return obs, state, reward, terminated, info


class MaskBugBandit(MaskedBandit):
    """A MaskedBandit that declares a fully masked observation a bug (as HackMatrix does)."""

    fully_masked_is_bug = True
