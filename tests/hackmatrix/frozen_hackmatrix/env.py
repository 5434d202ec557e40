"""HackMatrix as a gymnax-style environment (envs/spaces.py: the gymnax interface without importing gymnax)."""
from functools import partial

import jax
import jax.numpy as jnp
from hephaestus.envs import spaces
from hephaestus.envs.episode_stats import EpisodeStat

from .constants import ENEMY_NAMES, NUM_ACTIONS, OBS_SIZE, PROGRAM_NAMES
from . import rng
from .compact import compacted_pair
from .generate import curriculum_start, initialize_stage_seeded, new_game, new_game_stage_seed, new_game_start
from .observe import OBS_QUANTA, action_mask, observation
from .state import EnvParams, EnvState, select
from .step import play
from .step import step as _step


def get_obs(state: EnvState):
    return {"obs": observation(state), "action_mask": action_mask(state)}


def _curriculum(params: EnvParams):
    """(share, max stage, program probability) of the training curriculum as arrays (generate.curriculum_start)."""
    return (jnp.asarray(params.curriculum_share, jnp.float32), jnp.asarray(params.curriculum_max_stage, jnp.int32),
            jnp.asarray(params.curriculum_program_prob, jnp.float32))


def _level(need, is_new_game, obs_state, sd_stage, sd_reset, share, max_stage, program_prob):
    """(obs, state) of the level a lane needs: a new game (``reset_env``'s, for seed ``sd_reset``, with the
    curriculum's ``share``, ``max_stage`` and ``program_prob``) where ``is_new_game``, else the next stage of the
    lane's state (step.play). One function for both, so level generation is compiled once per step, not once for
    the stage advance and once for the auto-reset."""
    new_start = curriculum_start(new_game_start(sd_reset), sd_reset, share, max_stage, program_prob)
    start = select(is_new_game, new_start, obs_state[1])
    seed = jnp.where(is_new_game, new_game_stage_seed(sd_reset), sd_stage)
    out = initialize_stage_seeded(start, seed, need)
    return get_obs(out), out


def _landed_info(info, obs, state, truncated):
    """The step's info with the mask and stage of the state the action landed on (before any auto-reset), and
    the episode statistics completed with ``step_limit`` (whether the step ended the episode by truncation)."""
    stats = {**info["episode_stats"], "step_limit": truncated.astype(jnp.float32)}
    # curriculum_start: the game began on a later stage (a training curriculum's late start, not a game by the
    # rules): the pipeline reports its episode statistics apart (curriculum/), not with the fresh games' (episode/).
    return {**info, "action_mask": obs["action_mask"], "stage": state.stage, "episode_stats": stats,
            "curriculum_start": state.start_stage > 1}


# What one episode did (episode_stats.py): summed or maxed over its steps by the pipeline, reported as means,
# rates and thresholds under episode/ (training) and eval/ (evaluation). The values come from step.episode_stats.
# victory, death, step_limit and invalid_action are exclusive: exactly one is 1 in every finished episode (the
# cause of its end).
EPISODE_STATS = (
    EpisodeStat("stage_reached", "max", thresholds=tuple(range(2, 9)),
                doc="highest stage the episode was on (1..8)", headline=True),
    EpisodeStat("stages_cleared", "sum", doc="exits taken, victory included (R94's UNDO can re-take one)"),
    EpisodeStat("victory", "max", rate=True, doc="stage 8 completed (R109)", headline=True),
    EpisodeStat("death", "max", rate=True, doc="HP reached 0"),
    EpisodeStat("step_limit", "max", rate=True, doc="truncated at max_steps_in_episode (D6)"),
    EpisodeStat("invalid_action", "max", rate=True, doc="ended by a masked action (R121, D5)"),
    EpisodeStat("siphons_used", "sum", thresholds=(1,), doc="valid SIPHON actions", headline=True),
    EpisodeStat("siphons_collected", "sum", doc="data siphons picked up (R44)"),
    EpisodeStat("programs_played", "sum", thresholds=(1,), doc="valid program actions, all 23"),
    # Owning comes before playing: a program is acquired by siphoning its block (R49) and kept after a play (R51),
    # so programs_owned>=1 against programs_played>=1 says whether an agent fails to get programs or to use them.
    EpisodeStat("programs_owned", "max", thresholds=(1,), doc="most programs owned at once (R49; a play keeps one)"),
    EpisodeStat("credits_gathered", "sum", doc="credits taken by siphoning"),
    EpisodeStat("energy_gathered", "sum", doc="energy taken by siphoning"),
    EpisodeStat("score_gained", "sum", doc="data points gained (R105)"),
    EpisodeStat("kills", "sum", doc="kills as counted for the reward (R106)"),
    EpisodeStat("damage_taken", "sum", doc="HP lost to enemy attacks (R16)"),
    # The failure modes of a death: which enemies stood beside the player when HP reached 0 (the killer is one
    # of them; several can be), how many, and what the player died holding unused.
    *(EpisodeStat(f"death_beside_{name}", "max", rate=True, doc=f"died with a {name} adjacent")
      for name in ENEMY_NAMES),
    EpisodeStat("death_enemies_beside", "sum", doc="enemies adjacent at death (0 where the episode did not die)"),
    EpisodeStat("death_beside_siphon_spawn", "max", rate=True,
                doc="died with an enemy spawned by a siphon adjacent (R116's siphon-death penalty)"),
    EpisodeStat("death_holding_siphons", "max", rate=True, doc="died with a data siphon unused"),
    EpisodeStat("death_holding_programs", "max", rate=True, doc="died owning a program"),
) + tuple(EpisodeStat(f"program_{name}", "sum", doc=f"{name} played") for name in PROGRAM_NAMES)


# (new stage where next_stage, new game where done) -> (next obs and state, the obs the step landed on)
_levels_compact = compacted_pair(_level, keep=lambda obs_state: obs_state[0])


class HackMatrix(spaces.Environment):
    """HackMatrix 6x6 roguelike (rules: specs/hackmatrix-rules.md, design: specs/hackmatrix.md)."""

    # Named action ranges (R36): the pipeline logs the fraction of each as actions/<name>_frac.
    action_groups = (("move", 0, 4), ("siphon", 4, 5), ("program", 5, 28))
    # Observation structure (R95): obs[:33] are player features and owned-program flags, obs[33:] are
    # 36 cells x 42 channels, row-major. A network may encode the cells with shared weights.
    obs_cells = (33, 36, 42)
    # The cells are the 6 x 6 board, row-major; obs[0] = row / 5 and obs[1] = col / 5 place the player (R96), so
    # the ego encoder can centre the board on the player.
    obs_board = (6, 6, 0, 1)
    # The flat observation's width and that every observation carries an action mask, declared so that adapting the
    # env traces no reset to learn them (envs/adapters.py; a test checks them against that trace).
    obs_dim = OBS_SIZE
    has_action_mask = True
    # A HackMatrix state should always offer a valid action (R121 makes an invalid one a failed step): an
    # observation with no valid action means the port is wrong, so the loop stops the run on one.
    fully_masked_is_bug = True
    # obs * obs_quanta is an integer in 0..255 (observe.py): the rollout stores observations exactly in uint8.
    obs_quanta = OBS_QUANTA
    # Per-episode statistics (episode_stats.py); each step reports its values in info["episode_stats"].
    episode_stats = EPISODE_STATS

    @property
    def scripted_policies(self):
        """Scripted baselines by name, ``(state, mask, key) -> action`` (scripted.py; evaluate.py --scripted)."""
        from .scripted import POLICIES

        return POLICIES

    @property
    def presentation(self):
        """How tools show HackMatrix (envs/presentation.py): names, outcome, status line, text board, frames."""
        from .presentation import PRESENTATION

        return PRESENTATION

    @property
    def default_params(self) -> EnvParams:
        return EnvParams()

    def reset_env(self, key, params: EnvParams):
        state = new_game(key, curriculum=_curriculum(params))
        return get_obs(state), state

    @partial(jax.jit, static_argnames=("self",))
    def step(self, key, state, action, params=None):
        """Same contract and outputs as gymnax ``Environment.step`` (auto-reset on terminated | truncated, info
        gets terminated/truncated/final_observation, the key split into step and reset keys as gymnax does).
        What differs is the cost under vmap: levels are generated only for the lanes that need one, a stage's
        or a new game's, by one compacted call (compact.py), instead of a fresh game for every lane on every
        step."""
        return self.step_and_reset(key, state, action, self.default_params if params is None else params)

    def step_and_reset(self, key, state, action, params):
        """``step``'s work: ``step_env`` then the auto-reset, with the stage advance's level generation and
        the new games' in one compacted call. The training pipeline's adapter calls this."""
        key_step, key_reset = jax.random.split(key)
        st, next_stage, sd_stage, reward, terminated, info = play(state, action, key_step, params)
        truncated = self.is_truncated(st, params)
        done = jnp.logical_or(terminated, truncated)
        # get_obs(st) is the observation of every lane that generates nothing; the others get theirs with
        # their level.
        (obs, state), final_obs = _levels_compact(next_stage, done, (get_obs(st), st), sd_stage,
                                                  rng.seed(key_reset), *_curriculum(params))
        info = {**_landed_info(info, final_obs, st, truncated & ~terminated), "terminated": terminated,
                "truncated": truncated,
                "final_observation": final_obs}
        return obs, state, reward, terminated, truncated, info

    def step_env(self, key, state: EnvState, action, params: EnvParams):
        state, reward, terminated, info = _step(state, action, key, params)
        obs = get_obs(state)
        truncated = self.is_truncated(state, params) & ~terminated
        return obs, state, reward, terminated, _landed_info(info, obs, state, truncated)

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
