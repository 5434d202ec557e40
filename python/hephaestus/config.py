"""The one place for configuration: every hyperparameter, its default, and the checks on it.

`TrainConfig` is frozen so a config can key a compile cache and be stored in a checkpoint as-is.
`resolve(config)` applies `auto_scale_for_batch_size` and validates; everything downstream takes a
resolved config and never mutates it.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field

# PureJaxRL/CleanRL reference batch: 256 envs x 128 steps split into 4 minibatches for 4 epochs.
# Users found that growing the batch without rebalancing these hurts (bigger, less noisy minibatches
# and many more gradient steps per update), so larger batches are rescaled to keep ~8k minibatches.
REFERENCE_BATCH = 32_768
REFERENCE_MINIBATCHES = 4
REFERENCE_EPOCHS = 4
MAX_MINIBATCHES = 64
MIN_EPOCHS = 2
ENCODERS = ("auto", "mlp", "cells")
OBS_DTYPES = ("auto", "float32", "bfloat16", "uint8")
# Hyperparameters whose default depends on the environment family (the part of --env before ":"): a TrainConfig
# field left at None takes its family's value, else FALLBACK_DEFAULTS'. HackMatrix: with an entropy bonus of
# 0.01, about half the seeds settle within 2e6 steps into surviving without clearing stages (the seeds' "entropy
# collapse"); with 0.03 every seed tried kept clearing stages (specs/hackmatrix.md, "Learning").
FALLBACK_DEFAULTS = {"ent_coef": 0.01, "hidden_dim": 256}
ENV_DEFAULTS = {"hackmatrix": {"ent_coef": 0.03}}


def env_defaults(env: str) -> dict:
    """The defaults of the fields in FALLBACK_DEFAULTS for env name `env`."""
    return {**FALLBACK_DEFAULTS, **ENV_DEFAULTS.get(env.partition(":")[0], {})}


# PPO hyperparameters that are data, not compile-time constants: they live in `RunnerState.hyper` (float32, per
# agent with --num-seeds), so runs and sweep points that differ only in them share one compiled program.
DATA_HYPERPARAMETERS = ("lr", "gamma", "gae_lambda", "clip_eps", "vf_coef", "ent_coef", "max_grad_norm")


class ConfigError(ValueError):
    """A configuration a run cannot start with; the message is one line, fit for the console."""


@dataclass(frozen=True)
class TrainConfig:
    # environment
    env: str = "hackmatrix"
    num_envs: int = 64
    num_steps: int = 128
    total_timesteps: int = 1_000_000
    # PPO
    lr: float = 2.5e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = REFERENCE_MINIBATCHES
    update_epochs: int = REFERENCE_EPOCHS
    clip_eps: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float | None = None  # None: the env's default (env_defaults: 0.03 for hackmatrix, else 0.01)
    max_grad_norm: float = 0.5
    normalize_advantages: bool = True
    clip_value_loss: bool = True
    # network
    hidden_dim: int | None = None  # None: the env's default (env_defaults)
    num_layers: int = 2
    activation: str = "tanh"
    dtype: str = "float32"  # matmul dtype; parameters and reductions stay float32
    # Observation encoder. "cells": for envs declaring `obs_cells = (flat, cells, channels)` (HackMatrix:
    # 33 + 36 x 42), embed each cell's channels with one Dense shared by all cells (and by actor and critic),
    # then the MLPs: half the multiply-adds of a network whose first layer reads all 1545 inputs, and a
    # translation-invariant prior on cells. "mlp": the flat observation straight into the MLPs. "auto": mlp
    # for now; cells did not yet learn as well on HackMatrix (resolve_encoder, specs/pipeline.md).
    encoder: str = "auto"
    cell_dim: int = 16  # per-cell embedding width of the cells encoder (42 one-hot-ish channels -> 16)
    # Rollout-buffer dtype of observations (obs_storage.py), the largest array of a rollout (2048 x 128 x 1545
    # floats = 1.6 GB in float32). "uint8": exact, for envs declaring obs_quanta (HackMatrix): a quarter of the
    # memory, bit-identical observations. "bfloat16": half, lossy; the policy acts on the rounded values.
    # "auto": uint8 where the env declares obs_quanta and no extra stage reads observations (DTC), else float32.
    obs_dtype: str = "auto"
    # pipeline: extra stages (registered in stages.py) inserted after the core stage they name
    extra_stages: tuple[str, ...] = ()
    # DTC (specs/dtc.md): world-model ensemble + replay + dual-timescale intrinsic reward, used by the
    # `world_model` and `intrinsic_reward` stages (--agent dtc). Defaults are CPU-sized; TPU-sized settings
    # (specs/dtc.md): deter 512, stoch 32x32, hidden 512, replay 65536 sequences, wm batch 64.
    dtc_ensemble_size: int = 5  # K members, parameters stacked on a leading axis and vmapped
    dtc_deter_dim: int = 64  # GRU state h
    dtc_stoch_groups: int = 8  # categorical latents z: groups x classes
    dtc_stoch_classes: int = 8
    dtc_hidden_dim: int = 64  # MLP width inside the RSSM
    dtc_unimix: float = 0.01  # uniform mixture in every latent categorical
    dtc_free_bits: float = 1.0  # nats; KL terms below this give no gradient
    dtc_kl_dyn: float = 0.5  # KL balancing: weight pulling the prior to the posterior
    dtc_kl_rep: float = 0.1  # ... and the posterior to the prior
    dtc_wm_lr: float = 1e-3
    dtc_wm_grad_clip: float = 100.0  # per-member global-norm clip
    # Replay ratio: replayed transitions (wm_batch x seq_len per gradient step) per env step; the gradient steps per
    # PPO update follow from it (TrainConfig.dtc_wm_steps). 0: a frozen model (novelty only, for measuring). The
    # old fixed 1 step per update was a ratio of 0.25 on DeepSea and the ensemble barely learned (issue 20).
    dtc_replay_ratio: float = 1.0
    dtc_bootstrap: bool = True  # each member trains on its own replay draws (bootstrap), not one shared batch
    dtc_wm_batch: int = 16  # replayed sequences per gradient step
    dtc_seq_len: int = 16  # replay sequence length; must divide num_steps
    dtc_replay_capacity: int = 2048  # sequences in the on-device ring buffer
    dtc_frontier_fraction: float = 0.5  # share of each replay batch drawn from the most recent window
    dtc_frontier_window: int = 512  # sequences in that window
    dtc_intrinsic_coef: float = 0.05  # reward += coef * (novelty + competence term)
    dtc_competence_coef: float = 1.0  # gain of competence on per-transition novelty (0: disagreement alone)
    dtc_fast_rate: float = 0.1  # C_fast = EMA(novelty, 0.1)
    dtc_slow_rate: float = 0.005  # C_slow = EMA(novelty, 0.005)
    dtc_boredom_threshold: float = 0.01  # competence below this counts as "not learning"
    dtc_boredom_rise: float = 0.01  # per update while not learning
    dtc_boredom_decay: float = 0.05  # per update while learning
    dtc_min_horizon: int = 8  # dream horizon range for part 2 (set by boredom)
    dtc_max_horizon: int = 64
    # RND (bonus.py, --agent rnd): a predictor learns a fixed random network's embedding of the next observation;
    # the bonus is its squared error before it trains on the batch, divided by a running RMS.
    rnd_coef: float = 0.5  # reward += coef * normalised prediction error
    rnd_hidden_dim: int = 64
    rnd_embed_dim: int = 32
    rnd_lr: float = 1e-3
    rnd_steps: int = 4  # predictor gradient steps (full batch) per PPO update
    # Tabular count bonus (bonus.py, --agent count): reward += coef / sqrt(n(next_obs)), n counted per hashed
    # observation; the oracle for small discrete envs (DeepSea), useless on continuous ones.
    count_coef: float = 0.5
    count_table_size: int = 1 << 20  # hash buckets (int32 each); keep >> distinct observations
    # bookkeeping
    seed: int = 0
    # Independent agents trained by one vmapped program (specs/pipeline.md, "Many seeds"): agent i is seeded
    # with seed + i and is exactly the single-seed run of that seed. 1: the single-agent program, no seed axis.
    num_seeds: int = 1
    log_interval: int = 10  # PPO updates per compiled chunk, i.e. per console line
    # evaluation episodes (evaluation.py): their own compiled program, run between chunks, never in their timing
    eval_every: int = 0  # evaluate after the chunk in which the update count crosses a multiple of this; 0 = off
    eval_episodes: int = 32  # K episodes per evaluation, all in parallel, greedy (argmax over valid actions)
    eval_max_steps: int = 1000  # an episode not ended by then is cut (eval/capped_rate)
    eval_sampled: bool = False  # also evaluate the sampled policy (eval_sampled/ keys)
    final_eval_episodes: int = 100  # episodes of the evaluation at the end of every run -> eval.json; 0 = off
    run_name: str = ""
    checkpoint_dir: str = "checkpoints"
    # checkpoints, resume and logging (specs/checkpoints.md)
    keep_checkpoints: int = 3  # newest checkpoints kept under checkpoint_dir/run_name/
    save_interval_minutes: float = 10.0  # wall-clock interval between checkpoints...
    save_interval: int = 0  # ...or every this many PPO updates when > 0
    resume: str = ""  # run directory or step directory to continue from
    keep_optimizer: bool = False  # on a resume that re-creates env states, keep the optimizer state anyway
    wandb: bool | None = None  # None: on when an API key is configured; True: on (offline without a key)
    wandb_project: str = "hephaestus"
    wandb_entity: str = ""
    wandb_artifacts: bool = True  # upload each checkpoint as a wandb artifact
    tensorboard_dir: str = ""  # write TensorBoard event files here when set
    # devices (specs/distributed.md): num_envs is global and splits over the `data` mesh axis
    num_devices: int = 0  # 0 = every device of every host
    distributed: bool = False  # call jax.distributed.initialize() first (multi-host; auto on TPU pod slices)
    # seconds a start-up phase (setup, first compile, first chunk) may go without CPU progress before the run
    # stops with one line saying where it is stuck (watchdog.py); 0 = off
    startup_timeout: float = 300.0
    # auto-scale bookkeeping: which of the two knobs the user set explicitly
    user_set_minibatches: bool = False
    user_set_epochs: bool = False
    # options of extra stages, as (name, value) pairs so the config stays hashable
    stage_options: tuple[tuple[str, float], ...] = field(default_factory=tuple)

    def __post_init__(self):
        # Env-dependent defaults are filled at construction, so no None reaches the code that trains. (A later
        # replace(env=...) keeps them: set them again if the family changes.)
        for name, value in env_defaults(self.env).items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def dtc_wm_steps(self) -> int:
        """World-model gradient steps per PPO update: dtc_replay_ratio x env steps / replayed steps per gradient
        step, rounded, at least 1 while the ratio is positive."""
        if self.dtc_replay_ratio <= 0:
            return 0
        per_step = self.dtc_wm_batch * self.dtc_seq_len
        return max(1, round(self.dtc_replay_ratio * self.batch_size / per_step))

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    @property
    def num_updates(self) -> int:
        # Round up: a user asking for 1e6 steps gets at least 1e6.
        return max(1, -(-self.total_timesteps // self.batch_size))

    def stage_option(self, name: str, default: float) -> float:
        return dict(self.stage_options).get(name, default)

    def replace(self, **changes) -> "TrainConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def auto_scale_for_batch_size(num_envs: int, num_steps: int) -> tuple[int, int]:
    """(num_minibatches, update_epochs) for a batch, keeping minibatches near the reference size.

    Up to the reference batch nothing changes. Above it, minibatches grow with the batch (capped at 64)
    and epochs shrink (floored at 2, so rare strategic events still get two passes).
    """
    batch = num_envs * num_steps
    if batch <= REFERENCE_BATCH:
        return REFERENCE_MINIBATCHES, REFERENCE_EPOCHS
    scale = batch // REFERENCE_BATCH
    return min(REFERENCE_MINIBATCHES * scale, MAX_MINIBATCHES), max(MIN_EPOCHS, REFERENCE_EPOCHS // scale)


def resolve(config: TrainConfig) -> tuple[TrainConfig, str]:
    """Apply auto-scaling and validate. Returns the resolved config and a one-line note for the console."""
    note = ""
    if config.user_set_minibatches or config.user_set_epochs:
        if config.batch_size > REFERENCE_BATCH:
            which = " and ".join(
                n for n, s in (("--num-minibatches", config.user_set_minibatches),
                               ("--update-epochs", config.user_set_epochs)) if s)
            note = f"auto-scale: off ({which} set explicitly)"
    elif config.batch_size > REFERENCE_BATCH:
        minibatches, epochs = auto_scale_for_batch_size(config.num_envs, config.num_steps)
        config = config.replace(num_minibatches=minibatches, update_epochs=epochs)
        note = (f"auto-scale: batch {config.batch_size:,} -> {minibatches} minibatches of "
                f"{config.batch_size // minibatches:,} x {epochs} epochs = {minibatches * epochs} gradient steps")
    try:
        validate(config)
    except ConfigError as err:
        if note.startswith("auto-scale: batch") and "minibatches" in str(err):
            raise ConfigError(f"{err} ({note}; set --num-minibatches to choose)") from None
        raise
    if not config.run_name:
        env_tag = config.env.replace(":", "-").replace("/", "-")
        seeds = f"{config.seed}" if config.num_seeds == 1 else f"{config.seed}-{config.seed + config.num_seeds - 1}"
        config = config.replace(run_name=f"{env_tag}_s{seeds}")
    return config, note


def validate(config: TrainConfig) -> None:
    check_run_name(config.run_name)
    for name in ("lr", "ent_coef", "clip_eps", "vf_coef", "max_grad_norm", "gamma", "gae_lambda"):
        if not math.isfinite(getattr(config, name)):
            raise ConfigError(f"--{name.replace('_', '-')} must be a finite number, got {getattr(config, name)}")
    if not -2**63 <= config.seed < 2**63:
        raise ConfigError(f"--seed must fit in 64 bits (-2^63 to 2^63-1), got {config.seed}")
    positive = ("num_envs", "num_steps", "total_timesteps", "num_minibatches", "update_epochs",
                "hidden_dim", "log_interval", "num_seeds")
    for name in positive:
        if getattr(config, name) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(config, name)}")
    for name in ("eval_every", "final_eval_episodes"):
        if getattr(config, name) < 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 0 (0 = off), got {getattr(config, name)}")
    if config.eval_every and config.num_seeds > 1:
        raise ConfigError("--eval-every does not support --num-seeds > 1 yet (evaluate a seed's parameters with "
                          "scripts/evaluate.py --seed-index)")
    for name in ("eval_episodes", "eval_max_steps"):
        if getattr(config, name) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(config, name)}")
    if config.num_devices < 0:
        raise ConfigError(f"--num-devices must be >= 0 (0 = all), got {config.num_devices}")
    if config.num_layers < 0:
        raise ConfigError(f"--num-layers must be >= 0, got {config.num_layers}")
    if config.keep_checkpoints <= 0:
        raise ConfigError(f"--keep-checkpoints must be positive, got {config.keep_checkpoints}")
    if config.save_interval < 0:
        raise ConfigError(f"--save-interval must be >= 0 (0 = use --save-interval-minutes), got {config.save_interval}")
    if not config.startup_timeout >= 0:
        raise ConfigError(f"--startup-timeout must be 0 (off) or a number of seconds, got {config.startup_timeout}")
    if not config.save_interval_minutes > 0:
        raise ConfigError(f"--save-interval-minutes must be positive, got {config.save_interval_minutes}")
    if config.batch_size % config.num_minibatches:
        raise ConfigError(
            f"batch {config.num_envs} envs x {config.num_steps} steps = {config.batch_size:,} does not divide "
            f"into {config.num_minibatches} minibatches")
    if config.num_steps < 2:
        raise ConfigError(f"--num-steps must be at least 2, got {config.num_steps} (a one-step rollout learns "
                          "from one sample per env per update)")
    if config.minibatch_size < 2:
        raise ConfigError(f"minibatches of {config.minibatch_size} sample ({config.batch_size:,} / "
                          f"{config.num_minibatches}): advantage normalisation sets every advantage to 0 and nothing "
                          "is learned; lower --num-minibatches or raise --num-envs")
    if config.max_grad_norm <= 0:
        raise ConfigError(f"--max-grad-norm must be positive, got {config.max_grad_norm}")
    if config.vf_coef < 0:
        raise ConfigError(f"--vf-coef must be >= 0, got {config.vf_coef}")
    if not 0.0 <= config.gamma <= 1.0:
        raise ConfigError(f"--gamma must be in [0, 1], got {config.gamma}")
    if not 0.0 <= config.gae_lambda <= 1.0:
        raise ConfigError(f"--gae-lambda must be in [0, 1], got {config.gae_lambda}")
    if config.lr <= 0:
        raise ConfigError(f"--lr must be positive, got {config.lr}")
    if config.clip_eps <= 0:
        raise ConfigError(f"--clip-eps must be positive, got {config.clip_eps}")
    if config.dtype not in ("float32", "bfloat16"):
        raise ConfigError(f"--dtype must be float32 or bfloat16, got {config.dtype!r}")
    if config.activation not in ("tanh", "relu"):
        raise ConfigError(f"--activation must be tanh or relu, got {config.activation!r}")
    if config.encoder not in ENCODERS:
        raise ConfigError(f"--encoder must be one of {', '.join(ENCODERS)}, got {config.encoder!r}")
    if config.obs_dtype not in OBS_DTYPES:
        raise ConfigError(f"--obs-dtype must be one of {', '.join(OBS_DTYPES)}, got {config.obs_dtype!r}")
    if config.cell_dim <= 0:
        raise ConfigError(f"--cell-dim must be positive, got {config.cell_dim}")
    if any(name in DTC_STAGES for name in config.extra_stages):
        validate_dtc(config)
    for name in ("rnd_hidden_dim", "rnd_embed_dim", "rnd_steps", "count_table_size"):
        if getattr(config, name) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(config, name)}")
    if config.rnd_lr <= 0:
        raise ConfigError(f"--rnd-lr must be positive, got {config.rnd_lr}")


def check_run_name(name: str) -> None:
    """A run name is one folder inside --checkpoint-dir: `.`, `..`, separators or an absolute path would put the
    run's checkpoints in (or beside) the checkpoint directory itself, where orbax's pruning of old steps deletes
    every sibling run whose folder name is a number."""
    if not name:
        return
    bad = (name in (".", "..") or "/" in name or (os.sep != "/" and os.sep in name) or "\0" in name
           or os.path.isabs(name) or name != name.strip())
    if bad:
        raise ConfigError(f"--run-name {name!r} must be one folder name (no '/', '.', '..' or surrounding spaces)")


def resolve_encoder(config: TrainConfig, spec) -> str:
    """"mlp" or "cells" for this env (`spec`: envs.adapters.EnvSpec). Raises ConfigError for cells on an env
    that does not declare its cell structure."""
    cells = getattr(spec, "obs_cells", None)
    if config.encoder == "cells" and not cells:
        raise ConfigError(f"--encoder cells needs an env that declares obs_cells (flat, cells, channels); "
                          f"{config.env} does not (use --encoder mlp)")
    if config.encoder == "auto":
        # mlp even where cells are declared: on HackMatrix (2e6 steps, 64 envs, exact uint8 storage) cells made
        # stage progress on one seed of two (reward/stage 0.005 -> 0.019 on seed 1, flat at 0.004 on seed 0)
        # while the MLP did on both (0.0052 -> 0.0150 and 0.0055 -> 0.0142). Not "at least as well" yet.
        return "mlp"
    return config.encoder


def resolve_obs_dtype(config: TrainConfig, spec) -> str:
    """"float32", "bfloat16" or "uint8": how the rollout stores observations (obs_storage.py)."""
    quantised = getattr(spec, "obs_quanta", None) is not None
    # DTC's world model and replay, RND and the count bonus read the batch's observations as floats.
    reads_obs = any(name in OBS_READING_STAGES for name in config.extra_stages)
    if config.obs_dtype == "uint8":
        if not quantised:
            raise ConfigError(f"--obs-dtype uint8 needs an env that declares obs_quanta; {config.env} does not "
                              "(use float32 or bfloat16)")
        if reads_obs:
            raise ConfigError("--obs-dtype uint8 cannot be used with --agent dtc, disagreement, rnd or count (they "
                              "read float observations); use float32 or bfloat16")
    if config.obs_dtype != "auto":
        return config.obs_dtype
    return "uint8" if quantised and not reads_obs else "float32"


# The stages `--agent dtc` inserts after the rollout, in this order (python/hephaestus/dtc/agent.py).
DTC_STAGES = ("world_model", "intrinsic_reward")
# --agent NAME -> (extra stages, config changes). ppo: none. dtc: world-model ensemble + dual-timescale intrinsic
# reward. disagreement: the same with competence off (plain ensemble disagreement). rnd: Random Network
# Distillation. count: tabular count bonus (the oracle on small discrete envs).
AGENTS = {"ppo": ((), {}), "dtc": (DTC_STAGES, {}), "disagreement": (DTC_STAGES, {"dtc_competence_coef": 0.0}),
          "rnd": (("rnd",), {}), "count": (("count_bonus",), {})}
OBS_READING_STAGES = DTC_STAGES + ("rnd", "count_bonus")


def agent_config(config: TrainConfig, agent: str) -> TrainConfig:
    """`config` with the agent's extra stages first (then any others already set) and its config changes."""
    if agent not in AGENTS:
        raise ConfigError(f"unknown agent {agent!r}; choose from {', '.join(AGENTS)}")
    stages, changes = AGENTS[agent]
    extra = tuple(stages) + tuple(s for s in config.extra_stages if s not in stages)
    return config.replace(extra_stages=extra, **changes)


def validate_dtc(config: TrainConfig) -> None:
    for name in ("dtc_ensemble_size", "dtc_deter_dim", "dtc_stoch_groups", "dtc_stoch_classes", "dtc_hidden_dim",
                 "dtc_wm_batch", "dtc_seq_len", "dtc_replay_capacity", "dtc_frontier_window"):
        if getattr(config, name) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(config, name)}")
    if config.dtc_replay_ratio < 0:
        raise ConfigError(f"--dtc-replay-ratio must be >= 0, got {config.dtc_replay_ratio}")
    if config.num_steps % config.dtc_seq_len:
        raise ConfigError(f"--dtc-seq-len {config.dtc_seq_len} must divide --num-steps {config.num_steps}")
    per_rollout = config.num_steps // config.dtc_seq_len * config.num_envs
    if config.dtc_replay_capacity < per_rollout:
        raise ConfigError(f"--dtc-replay-capacity {config.dtc_replay_capacity} holds less than one rollout "
                          f"({per_rollout} sequences of {config.dtc_seq_len} steps)")
    if not 0.0 <= config.dtc_frontier_fraction <= 1.0:
        raise ConfigError(f"--dtc-frontier-fraction must be in [0, 1], got {config.dtc_frontier_fraction}")
