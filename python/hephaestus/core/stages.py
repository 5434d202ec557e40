"""The stage interface: one PPO update is a short, named sequence of stages over one batch.

    rollout -> [extra stages after "rollout"] -> advantage -> [extra stages after "advantage"] -> ppo_update
            -> [extra stages after "ppo_update"]

An extra stage may take the place of core stages (`Stage.replaces`): the dreamer (agents/dreamer/) replaces
`advantage` and `ppo_update`, so `--agent dreamer` is rollout -> dreamer.

Every stage has the same shape:

    Stage.init(key)                                  -> stage_state   (any pytree, may be None)
    Stage.apply(key, train_state, batch, stage_state) -> (train_state, batch, stage_state, metrics)

* `batch` is a dict of arrays with a leading [num_steps, num_envs] axis (plus `last_value`, [num_envs]);
  the keys the core stages produce and read are listed in `BATCH_KEYS`. A stage may add keys or rewrite
  values (e.g. add an intrinsic reward to `reward`) but never changes shapes of existing keys.
* `stage_state` is the stage's own persistent state (env states, replay buffer, EMA statistics, ...). It
  lives in `RunnerState.stages[name]`, so checkpoints and resume treat it like everything else.
  `Stage.partition` says how it is laid out over devices (distributed.py): a pytree prefix of the state whose
  leaves are `ENVS` (the leaf's leading axis is the env axis: split over devices with the envs) or `REPLICATED`
  (every device holds all of it). The default, `REPLICATED`, is always correct; `ENVS` keeps per-env state on
  the device that steps those envs. A shape never decides: a replay buffer whose capacity equals num_envs
  stays whole.
* `train_state` is the flax `TrainState` of the actor-critic; only stages that train the policy touch it.
* `metrics` is a flat dict of float32 scalars, returned from the compiled chunk under the stage's keys.

A stage never reads another stage's `stage_state`; it communicates only through the batch. Extra stages are
registered by name with `register_stage` and selected by `TrainConfig.extra_stages`, so adding one edits
neither the PPO code nor the loop. The agent families (hephaestus/agents/) register theirs; a family's stages
import jax, so its package declares them with `stage_loader` (the module that registers them, imported when a run
first builds one of them) and the command line starts without jax.

No jax is imported here at module level: the agent families import this module when the command line starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import jax

# Keys of the batch as the core stages write them. Shapes: [T, N] unless noted.
BATCH_KEYS = {
    "obs": "float32[T, N, obs_dim] observation the action was chosen from",
    "action_mask": "bool[T, N, A] mask that applied to `obs`",
    "action": "int32[T, N] or float32[T, N, A] the action taken (unclipped for Gaussian policies)",
    "log_prob": "float32 log-probability of `action` under the behaviour policy",
    "value": "float32 critic value of `obs`",
    "reward": "float32 reward of the transition (extra stages may add to it)",
    "terminated": "bool episode ended in a terminal state: no bootstrap",
    "truncated": "bool episode hit its time limit: bootstrap from `bootstrap_value`",
    "bootstrap_value": "float32 critic value of the final observation where truncated, else 0",
    "next_obs": "float32[T, N, obs_dim] the observation the action led to: the pre-reset final observation where "
                "the episode ended, else the next step's `obs` (stored only when an extra stage lists it in "
                "Stage.reads: it doubles the batch's observation memory)",
    "last_value": "float32[N] critic value of the observation after the last step",
    "advantage": "float32 GAE advantage (written by the advantage stage)",
    "target": "float32 value target = advantage + value (written by the advantage stage)",
}

CORE_STAGES = ("rollout", "advantage", "ppo_update")

# Leaves of a `Stage.partition`.
ENVS = "envs"  # leading axis is the env axis [num_envs, ...]: split over devices like the envs
REPLICATED = "replicated"  # whole on every device


@dataclass(frozen=True)
class Stage:
    name: str
    apply: Callable[..., tuple[Any, dict, Any, dict]]
    init: Callable[[jax.Array], Any] = lambda key: None
    after: str = "rollout"  # which core stage this one follows (for extra stages)
    reads: tuple[str, ...] = ()  # optional batch keys this stage needs the rollout to store (e.g. "next_obs")
    partition: Any = REPLICATED  # pytree prefix of the stage state: ENVS or REPLICATED per leaf (see above)
    # Core stages this one takes the place of (an agent that learns differently, e.g. the dreamer replaces
    # "advantage" and "ppo_update"); it then runs where the first of them would have.
    replaces: tuple[str, ...] = ()
    takes_hyper: bool = False  # apply(..., hyper=) gets the agent's data hyperparameters (RunnerState.hyper)


@dataclass(frozen=True)
class StageContext:
    """What a stage factory may use to build itself: the resolved config, env spec and network."""

    config: Any
    env_spec: Any
    network: Any


_REGISTRY: dict[str, Callable[[StageContext], Stage]] = {}
_LOADERS: dict[str, Callable[[], None]] = {}


def register_stage(name: str):
    """Decorator: register `factory(ctx) -> Stage` under `name` for `TrainConfig.extra_stages`."""

    def wrap(factory):
        _REGISTRY[name] = factory
        return factory

    return wrap


def stage_loader(*names: str):
    """Decorator: `load()` imports the module whose `register_stage` registers the stages `names` (an agent family's
    package declares its stages so, without importing jax until a run builds one)."""

    def wrap(load):
        for name in names:
            _LOADERS[name] = load
        return load

    return wrap


def registered_stages() -> tuple[str, ...]:
    return tuple(sorted(set(_REGISTRY) | set(_LOADERS)))


def stage_factory(name: str) -> Callable[[StageContext], Stage]:
    """The registered factory of stage `name` (its module loaded first, where a family declared a loader)."""
    if name not in _REGISTRY and name in _LOADERS:
        _LOADERS[name]()
    if name not in _REGISTRY:
        raise ValueError(f"unknown stage {name!r}; registered: {', '.join(registered_stages()) or 'none'}")
    return _REGISTRY[name]


def option_stages(config) -> tuple[str, ...]:
    """The stages that options switch on (agents/normalization/): --scale-rewards adds `reward_scale` and
    --normalize-obs adds `obs_norm`. Reward scaling comes before any other stage after the rollout, so intrinsic
    rewards are added to the scaled extrinsic reward."""
    return (("reward_scale",) if config.ppo.scale_rewards else ()) + (("obs_norm",) if config.network.normalize_obs
                                                                     else ())


def extra_stages(ctx: StageContext) -> list[Stage]:
    """The extra stages: those options switch on (`option_stages`), then the configured ones
    (`TrainConfig.extra_stages`), built by their registered factories."""
    extras = []
    for name in option_stages(ctx.config) + tuple(ctx.config.extra_stages):
        stage = stage_factory(name)(ctx)
        if stage.after not in CORE_STAGES:
            raise ValueError(f"stage {name!r} must follow one of {', '.join(CORE_STAGES)}, not {stage.after!r}")
        extras.append(stage)
    return extras


def build_pipeline(core: dict[str, Stage], extras: list[Stage]) -> list[Stage]:
    """Order the core stages and the extra stages into one list, leaving out the core stages an extra stage
    replaces. The rollout cannot be replaced, and no stage may follow a replaced one."""
    replaced = {name: s.name for s in extras for name in s.replaces}
    for name, by in replaced.items():
        if name not in CORE_STAGES or name == "rollout":
            raise ValueError(f"stage {by!r} cannot replace {name!r}; it may replace "
                             f"{', '.join(n for n in CORE_STAGES if n != 'rollout')}")
    for s in extras:
        if s.after in replaced:
            raise ValueError(f"stage {s.name!r} follows {s.after!r}, which stage {replaced[s.after]!r} replaces")
    pipeline = []
    for core_name in CORE_STAGES:
        if core_name not in replaced:
            pipeline.append(core[core_name])
        pipeline.extend(s for s in extras if s.after == core_name)
    return pipeline


def add_intrinsic(batch, bonus):
    """The batch's `intrinsic_reward` with `bonus` added: the sum of the bonuses of every exploration stage so far,
    each of which also adds its bonus to `reward` (what the intrinsic_critic stage takes back out)."""
    return batch["intrinsic_reward"] + bonus if "intrinsic_reward" in batch else bonus
