"""The one adapter boundary: every environment family becomes the same pure, single-env interface.

    reset(key)                          -> (env_state, EnvStep)
    step(key, env_state, act)           -> (env_state, EnvStep)     auto-resets a finished episode
    step_no_reset(key, env_state, act)  -> (env_state, EnvStep)     stops on the state the episode ended in

`EnvStep.obs` is the flat float observation the *next* action is chosen from (already auto-reset when an
episode ended), `final_obs` is the observation the episode ended on (equal to `obs` otherwise), so GAE can
bootstrap from it on truncation. `terminated` and `truncated` are exclusive: a step that both reaches a
terminal state and the time limit is a termination (no bootstrap). Pytree/dict observations are flattened
here; a leaf named `action_mask` is taken out and becomes `EnvStep.action_mask`.

gymnax 1.x (`step_env` + `is_truncated` + `reset_env`), jumanji (`TimeStep`) and craftax (gymnax-style with a
five-tuple `step`) all pass through here and nowhere else. The pipeline vmaps these functions over envs.
A gymnax-style env may offer `step_and_reset(key, state, action, params)`, with the contract and outputs of
gymnax's `Environment.step` (auto-reset included, `info["final_observation"]`) but cheaper under vmap than a
reset for every lane plus a select; the adapter then uses it (HackMatrix's generates levels only for the lanes
that need one). Everywhere else `step` is `step_no_reset` followed by a reset where the episode ended
(`_with_auto_reset`), so the two steps are one step. `AdaptedEnv.presentation` is how tools show the env
(envs/presentation.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import struct

from hephaestus.envs import spaces
from hephaestus.envs.presentation import gymnax_frames, presentation_of

MASK_KEY = "action_mask"


@struct.dataclass
class EnvStep:
    obs: jax.Array  # float32[obs_dim], after auto-reset
    action_mask: jax.Array  # bool[num_actions] for `obs` (all True for unmasked or continuous envs)
    reward: jax.Array  # float32[]
    terminated: jax.Array  # bool[]
    truncated: jax.Array  # bool[]
    final_obs: jax.Array  # float32[obs_dim], the observation the step landed on, before any reset
    info: dict  # env-specific extras: `reward_terms` (dict of float32[]), `stage`, `episode_stats` (dict of float32[]),
    # `curriculum_start` (bool[]: the ending episode began as a training curriculum's late start)


@dataclass(frozen=True)
class EnvSpec:
    """Static facts about an adapted environment (not a pytree: it shapes the compiled program)."""

    name: str
    obs_dim: int
    discrete: bool
    action_dim: int  # number of actions (discrete) or action vector length (continuous)
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    has_action_mask: bool = False
    obs_dtype: Any = jnp.float32
    # Optional named action ranges (name, first, end) for discrete envs; the rollout logs the fraction of
    # actions in each as `actions/<name>_frac`. Taken from the env's `action_groups` attribute when it has one.
    action_groups: tuple[tuple[str, int, int], ...] = ()
    # Optional observation structure (flat, cells, channels): obs[:flat] are plain features, the rest is
    # `cells` groups of `channels` values, row-major. Taken from the env's `obs_cells` attribute when it has
    # one; the `cells` encoder (networks.py) embeds each cell with shared weights.
    obs_cells: tuple[int, int, int] | None = None
    # Optional board layout of those cells (rows, cols, row_feature, col_feature): the cells are a rows x cols
    # board, row-major, and obs[row_feature] * (rows - 1), obs[col_feature] * (cols - 1) are the player's row
    # and column. Taken from the env's `obs_board` attribute; the `ego` encoder centres the board on the player.
    obs_board: tuple[int, int, int, int] | None = None
    # Optional quantisation of the observation: obs[i] * obs_quanta[i] is an integer in 0..255 for every
    # observation the env produces, so the rollout can store it exactly in uint8 (obs_storage.py). Taken from
    # the env's `obs_quanta` attribute when it has one.
    obs_quanta: tuple[float, ...] | None = None
    # Optional per-episode statistics (episode_stats.EpisodeStat), from the env's `episode_stats` attribute; every
    # step then reports one float32 value for each in `info["episode_stats"]`, and the pipeline sums or maxes them
    # over episodes and reports them under episode/ (training) and eval/ (evaluation).
    episode_stats: tuple = ()
    # Optional scores over those statistics' rates (episode_stats.EpisodeScore, from `episode_scores`; craftax:
    # Crafter's score), computed on the host beside the rates they read.
    episode_scores: tuple = ()
    # What an observation whose action mask allows no action means. False (the default, jumanji's convention):
    # every action is then allowed (networks.effective_mask) and the env ends the episode; the loop counts such
    # rows in `fully_masked_rows` and warns once. True: the env guarantees a valid action, so such a row is a
    # bug and the loop stops with an error. Taken from the env's `fully_masked_is_bug` attribute when it has one.
    fully_masked_is_bug: bool = False
    # Whether a step can report a truncation (a time limit). False where the env never does (a craftax env
    # without `is_truncated`: its episodes only terminate): the rollout then computes no truncation bootstrap,
    # which under vmapped seeds (where a branch runs both sides) would be a critic pass, and for a recurrent
    # policy a cell step, on every step. Taken from the env's `may_truncate` attribute when it has one.
    may_truncate: bool = True


@dataclass(frozen=True)
class AdaptedEnv:
    spec: EnvSpec
    reset: Callable[[jax.Array], tuple[Any, EnvStep]]
    step: Callable[[jax.Array, Any, jax.Array], tuple[Any, EnvStep]]
    # The same step without the auto-reset, for tools that show episodes (watch.py): the state and `obs` are those
    # the step landed on, the episode's end included (`obs == final_obs`); after an end, call `reset` yourself.
    step_no_reset: Callable[[jax.Array, Any, jax.Array], tuple[Any, EnvStep]] | None = None
    raw_env: Any = None  # the underlying environment, for renderers and tools
    raw_params: Any = None
    # How tools show the env to a person (envs/presentation.py): the env's own declaration, else a generic one.
    presentation: Any = None
    # Optional: called once per run on the freshly reset, batched env states with a key drawn from the run's
    # key; sets what every env of one run shares and keeps (DeepSea: the action map). None: nothing shared.
    init_instance: Callable[[jax.Array, Any], Any] | None = None
    # With init_instance: what one run's batched env states share (`instance_of(states)`, DeepSea: its map [N, N]),
    # and those states with a given instance set (`set_instance(states, instance)`), so that an evaluation plays the
    # run's instance, not a fresh one (evaluation.make_evaluator's `instance`; exports store it).
    instance_of: Callable[[Any], Any] | None = None
    set_instance: Callable[[Any, Any], Any] | None = None
    # Optional scripted baselines by name, `(state, action_mask, key) -> action` on one env's state (this adapter's
    # state): from the env's `scripted_policies` attribute (HackMatrix: envs/hackmatrix/scripted.py). The
    # evaluation program plays them with `evaluate.py --scripted NAME`.
    scripted_policies: dict = dataclasses.field(default_factory=dict)

    def scripted_policy(self, name: str) -> Callable:
        """The scripted policy `name`; ValueError (one line naming the ones there are) where the env has none such.
        The one lookup of `evaluate.py --scripted` and `--teacher`."""
        if name not in self.scripted_policies:
            raise ValueError(f"{self.spec.name} has no such scripted policy; it has "
                             f"{', '.join(sorted(self.scripted_policies)) or 'none'}")
        return self.scripted_policies[name]


def split_observation(obs: Any) -> tuple[jax.Array, jax.Array | None]:
    """Flatten an observation pytree to float32[obs_dim]; pull out its action mask if it has one."""
    mask = None
    if isinstance(obs, dict) and MASK_KEY in obs:
        mask = obs[MASK_KEY]
        obs = {k: v for k, v in obs.items() if k != MASK_KEY}
    elif hasattr(obs, MASK_KEY) and hasattr(obs, "_replace"):  # jumanji NamedTuple observations
        mask = getattr(obs, MASK_KEY)
        obs = {k: v for k, v in obs._asdict().items() if k != MASK_KEY}
    leaves = jax.tree_util.tree_leaves(obs)
    flat = jnp.concatenate([jnp.ravel(leaf).astype(jnp.float32) for leaf in leaves])
    if mask is not None:
        mask = jnp.ravel(mask).astype(bool)
    return flat, mask


def _finish(spec: EnvSpec, obs_tree, reward, terminated, truncated, final_tree, info) -> EnvStep:
    obs, mask = split_observation(obs_tree)
    final_obs, _ = split_observation(final_tree)
    if mask is None:
        mask = jnp.ones((spec.action_dim if spec.discrete else 1,), bool)
    terminated = jnp.asarray(terminated, bool)
    truncated = jnp.logical_and(jnp.asarray(truncated, bool), ~terminated)
    return EnvStep(obs=obs, action_mask=mask, reward=jnp.asarray(reward, jnp.float32), terminated=terminated,
                   truncated=truncated, final_obs=final_obs, info=info)


def _select(done, if_done, if_not):
    return jax.tree.map(lambda a, b: jax.lax.select(done, a, b), if_done, if_not)


def _reset_from(spec: EnvSpec, raw_reset):
    """The adapted reset of `raw_reset(key) -> (state, observation pytree)`."""

    def reset(key):
        state, obs_tree = raw_reset(key)
        zero = jnp.zeros((), bool)
        return state, _finish(spec, obs_tree, 0.0, zero, zero, obs_tree, {})

    return reset


def split_step_key(key):
    """(transition key, reset key) of an auto-resetting `step(key)`: the step without reset runs on the first,
    a reset where the episode ended on the second. `_with_auto_reset` and HackMatrix's `step_and_reset` split so,
    and a tool that replays an auto-resetting run one `step_no_reset` at a time (evaluation.GameKeys) finds the
    transition's key here; steps that take no key (jumanji's) ignore it."""
    return jax.random.split(key)


def _with_auto_reset(reset, step_no_reset, split_key: bool = True):
    """The auto-resetting step made of `step_no_reset` and `reset`: where an episode ended, the state and `obs`
    (and its mask) are a fresh reset's, drawn with the second half of the split key; `final_obs` keeps the
    observation the episode ended on."""

    def step(key, state, action):
        key_step, key_reset = split_step_key(key) if split_key else (key, key)
        next_state, out = step_no_reset(key_step, state, action)
        reset_state, first = reset(key_reset)
        done = jnp.logical_or(out.terminated, out.truncated)
        return _select(done, reset_state, next_state), out.replace(
            obs=jax.lax.select(done, first.obs, out.obs), action_mask=jax.lax.select(done, first.action_mask,
                                                                                   out.action_mask))

    return step


def _probe_spec(name, reset_fn, discrete, action_dim, low=(), high=(), env=None) -> EnvSpec:
    """The spec's observation width and action mask: as `env` declares them (`obs_dim` and `has_action_mask`, as
    HackMatrix does), else read from the shapes of a traced reset (~0.4 s for HackMatrix)."""
    if getattr(env, "obs_dim", None) is not None and getattr(env, "has_action_mask", None) is not None:
        obs_dim, has_mask = int(env.obs_dim), bool(env.has_action_mask)
    else:
        obs_tree = jax.eval_shape(reset_fn, jax.random.key(0))[1]
        flat, mask = jax.eval_shape(split_observation, obs_tree)
        obs_dim, has_mask = int(flat.shape[0]), mask is not None
    return EnvSpec(name=name, obs_dim=obs_dim, discrete=discrete, action_dim=action_dim,
                   action_low=tuple(low), action_high=tuple(high), has_action_mask=has_mask)


def with_obs_structure(spec: EnvSpec, env) -> EnvSpec:
    """`spec` with the env's declared `obs_cells` (flat, cells, channels), `obs_board` and `obs_quanta`, checked
    against obs_dim, its `fully_masked_is_bug` and `may_truncate`."""
    if getattr(env, "fully_masked_is_bug", False):
        spec = dataclasses.replace(spec, fully_masked_is_bug=True)
    if getattr(env, "may_truncate", True) is False:
        spec = dataclasses.replace(spec, may_truncate=False)
    quanta = getattr(env, "obs_quanta", None)
    if quanta is not None:
        quanta = tuple(float(q) for q in quanta)
        if len(quanta) != spec.obs_dim or min(quanta) <= 0:
            raise ValueError(f"{spec.name}: obs_quanta must hold {spec.obs_dim} positive numbers, one per "
                             f"observation entry (got {len(quanta)})")
        spec = dataclasses.replace(spec, obs_quanta=quanta)
    cells = getattr(env, "obs_cells", None)
    if not cells:
        return spec
    flat, num_cells, channels = (int(n) for n in cells)
    if min(flat, num_cells, channels) < 0 or flat + num_cells * channels != spec.obs_dim or not num_cells * channels:
        raise ValueError(f"{spec.name}: obs_cells {tuple(cells)} does not describe its {spec.obs_dim}-wide "
                         f"observation (flat + cells x channels must equal it)")
    spec = dataclasses.replace(spec, obs_cells=(flat, num_cells, channels))
    board = getattr(env, "obs_board", None)
    if not board:
        return spec
    rows, cols, row_feature, col_feature = (int(n) for n in board)
    if rows < 1 or cols < 1 or rows * cols != num_cells or not (0 <= row_feature < flat and 0 <= col_feature < flat):
        raise ValueError(f"{spec.name}: obs_board {tuple(board)} must be (rows, cols, row_feature, col_feature) with "
                         f"rows x cols = its {num_cells} cells and both features among its {flat} flat ones")
    return dataclasses.replace(spec, obs_board=(rows, cols, row_feature, col_feature))


def with_episode_stats(spec: EnvSpec, env) -> EnvSpec:
    """`spec` with the env's declared per-episode statistics (episode_stats.py)."""
    from hephaestus.envs.episode_stats import as_scores, as_stats

    stats = as_stats(getattr(env, "episode_stats", ()))
    return dataclasses.replace(spec, episode_stats=stats,
                               episode_scores=as_scores(getattr(env, "episode_scores", ()), stats))


def _info_extras(info: dict, spec: EnvSpec | None = None) -> dict:
    """Keep only the info entries the pipeline knows how to aggregate (fixed, small, scalar-valued): reward
    terms, the stage, and the declared episode statistics (each must be reported on every step)."""
    keep = {}
    if spec is not None and spec.episode_stats:
        reported = info.get("episode_stats", {})
        missing = [s.name for s in spec.episode_stats if s.name not in reported]
        if missing:
            raise ValueError(f"{spec.name}: its step reports no value for the declared episode stats {missing}")
        keep["episode_stats"] = {s.name: jnp.asarray(reported[s.name], jnp.float32) for s in spec.episode_stats}
    if "reward_terms" in info:
        keep["reward_terms"] = {k: jnp.asarray(v, jnp.float32) for k, v in info["reward_terms"].items()}
    if "stage" in info:
        keep["stage"] = jnp.asarray(info["stage"], jnp.int32)
    if "curriculum_start" in info:  # the episode began as a curriculum's late start (rollout_metrics.py)
        keep["curriculum_start"] = jnp.asarray(info["curriculum_start"], jnp.bool_)
    return keep


def adapt_gymnax(env, params, name: str, five_tuple: bool = False) -> AdaptedEnv:
    """gymnax-style envs (gymnax 1.x, HackMatrix, craftax). Uses `step_env`/`reset_env` and does the
    auto-reset here, so truncation and the final observation are handled the same for all of them."""
    space = env.action_space(params)
    if spaces.is_discrete(space):
        discrete, action_dim, low, high = True, int(space.n), (), ()
    elif spaces.is_box(space):
        discrete = False
        action_dim = int(jnp.prod(jnp.array(space.shape))) if space.shape else 1
        low = tuple(float(x) for x in jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), (action_dim,)))
        high = tuple(float(x) for x in jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), (action_dim,)))
    else:
        raise ValueError(f"{name}: unsupported action space {type(space).__name__}")

    def raw_reset(key):
        obs, state = env.reset_env(key, params)
        return state, obs

    spec = _probe_spec(name, raw_reset, discrete, action_dim, low, high, env=env)
    if discrete and getattr(env, "action_groups", None):
        spec = dataclasses.replace(spec, action_groups=tuple((str(n), int(a), int(b)) for n, a, b in env.action_groups))
    spec = with_episode_stats(with_obs_structure(spec, env), env)

    reset = _reset_from(spec, raw_reset)

    scalar_action = not discrete and not getattr(space, "shape", ())  # a Box of shape (): the env wants a scalar

    def step_no_reset(key, state, action):
        action = action.reshape(()) if scalar_action else action
        obs_tree, next_state, reward, done, info = env.step_env(key, state, action, params)
        if five_tuple:  # craftax: `done` already merges termination and the time limit
            truncated = env.is_truncated(next_state, params) if hasattr(env, "is_truncated") else False
            terminated = jnp.logical_and(done, ~jnp.asarray(truncated, bool))
        else:
            terminated = done
            truncated = env.is_truncated(next_state, params)
        return next_state, _finish(spec, obs_tree, reward, terminated, truncated, obs_tree, _info_extras(info, spec))

    if getattr(env, "step_and_reset", None):
        def step(key, state, action):
            action = action.reshape(()) if scalar_action else action
            new_obs, new_state, reward, terminated, truncated, info = env.step_and_reset(key, state, action, params)
            return new_state, _finish(spec, new_obs, reward, terminated, truncated, info["final_observation"],
                                      _info_extras(info, spec))
    else:
        step = _with_auto_reset(reset, step_no_reset)

    return AdaptedEnv(spec=spec, reset=reset, step=step, step_no_reset=step_no_reset, raw_env=env, raw_params=params,
                      presentation=presentation_of(env, spec, gymnax_frames(env, params)),
                      scripted_policies=dict(getattr(env, "scripted_policies", None) or {}))  # state: the env's own


def adapt_jumanji(env, name: str) -> AdaptedEnv:
    """jumanji envs: `TimeStep` with `discount == 0` on termination, `> 0` on truncation."""
    import numpy as np

    action_spec = env.action_spec
    if not hasattr(action_spec, "num_values"):
        raise ValueError(f"{name}: only discrete jumanji action specs are supported")
    num_values = np.asarray(action_spec.num_values)
    if num_values.ndim != 0:
        raise ValueError(f"{name}: multi-discrete jumanji action specs are not supported yet")
    action_dim = int(num_values)

    # Many jumanji observations carry the raw `step_count` (Snake: 0..4000). Fed as is, one input thousands of
    # times larger than the rest saturates the first layer; jumanji's own networks divide it by the env's
    # `time_limit`, and so does the adapter.
    time_limit = getattr(env, "time_limit", None)

    def observation(timestep):
        obs = timestep.observation
        if time_limit and hasattr(obs, "step_count") and hasattr(obs, "_replace"):
            obs = obs._replace(step_count=jnp.asarray(obs.step_count, jnp.float32) / float(time_limit))
        return obs

    def raw_reset(key):
        state, timestep = env.reset(key)
        return state, observation(timestep)

    spec = with_episode_stats(with_obs_structure(_probe_spec(name, raw_reset, True, action_dim), env), env)

    reset = _reset_from(spec, raw_reset)

    def step_no_reset(key, state, action):
        next_state, timestep = env.step(state, action.astype(jnp.int32))
        last = timestep.last()
        terminated = jnp.logical_and(last, timestep.discount == 0)
        truncated = jnp.logical_and(last, timestep.discount != 0)
        obs = observation(timestep)
        return next_state, _finish(spec, obs, timestep.reward, terminated, truncated, obs,
                                   _info_extras(timestep.extras or {}, spec))

    # jumanji's step takes no key: the reset after an episode gets the step's key itself
    return AdaptedEnv(spec=spec, reset=reset, step=_with_auto_reset(reset, step_no_reset, split_key=False),
                      step_no_reset=step_no_reset, raw_env=env, presentation=presentation_of(env, spec))


def with_fixed_instance(env: AdaptedEnv, instance) -> AdaptedEnv:
    """`env` whose every reset plays `instance` (what `env.instance_of` read from a trained run, e.g. DeepSea's
    action map) instead of the env's default: how evaluate.py and watch_agent.py replay a stored agent's instance.
    Each step keeps the state's instance across its auto-reset already."""
    if env.set_instance is None:
        return env
    instance = jnp.asarray(instance)
    raw_reset = env.reset

    def reset(key):
        state, first = raw_reset(key)
        return env.set_instance(state, instance), first

    return dataclasses.replace(env, reset=reset)


def adapt_deepsea(size: int, stochastic: bool = False, name: str | None = None) -> AdaptedEnv:
    """bsuite's DeepSea (gymnax 1.x) with one random action map per run, as bsuite's `mapping_seed` gives each
    environment instance its own. gymnax draws its map once from a fixed key (so `randomize_actions=True` alone
    gives every seed the same map); here `init_instance` draws the map from the run's key, every env of the run
    gets that same map (the observation does not say which map applies, so envs of one run must share it),
    and the step keeps it across auto-resets. `stochastic`: bsuite's noisy variant (random transitions and
    N(0, 1) reward noise)."""
    from hephaestus.envs.gymnax_import import import_gymnax

    import_gymnax()
    from gymnax.environments.bsuite.deep_sea import DeepSea

    from hephaestus.envs.episode_stats import EpisodeStat

    env = DeepSea(size=size)
    params = env.default_params.replace(randomize_actions=True, sample_action_map=False,
                                        deterministic=not stochastic)
    base = adapt_gymnax(env, params, name or f"deepsea:{size}")
    # bsuite's two per-episode outcomes, from the state before each step (the auto-reset clears gymnax's own
    # flags): `bad_episode`, a move left while on the diagonal (the treasure path; bsuite's "bad episode", the
    # quantity its analysis scores), and `treasure`, the treasure's denoised reward (the stochastic variant's
    # noise does not hide it).
    stats = (EpisodeStat("bad_episode", aggregate="max", rate=True, doc="moved left on the treasure path"),
             EpisodeStat("treasure", aggregate="max", rate=True, doc="reached the treasure"))
    spec = dataclasses.replace(base.spec, episode_stats=stats)

    def with_stats(out, state, action):
        right = action == state.action_mapping[state.row, state.column]
        bad = ~right & (state.row == state.column)
        treasure = right & (state.column == size - 1)
        return out.replace(info={**out.info, "episode_stats": {"bad_episode": bad.astype(jnp.float32),
                                                               "treasure": treasure.astype(jnp.float32)}})

    def step(key, state, action):
        new_state, out = base.step(key, state, action)
        return new_state.replace(action_mapping=state.action_mapping), with_stats(out, state, action)

    def step_no_reset(key, state, action):
        new_state, out = base.step_no_reset(key, state, action)
        return new_state, with_stats(out, state, action)

    def set_instance(states, mapping):
        return states.replace(action_mapping=jnp.broadcast_to(jnp.asarray(mapping, jnp.int32),
                                                              states.action_mapping.shape))

    def init_instance(key, states):
        return set_instance(states, jax.random.bernoulli(key, 0.5, (size, size)).astype(jnp.int32))

    def instance_of(states):  # every env of a run holds the same map: the first env's
        return states.action_mapping.reshape((-1, size, size))[0]

    return dataclasses.replace(base, spec=spec, step=step, step_no_reset=step_no_reset, init_instance=init_instance,
                               instance_of=instance_of, set_instance=set_instance)
