"""The one place for configuration: every hyperparameter, its default, and the checks on it.

`TrainConfig` is frozen so a config can key a compile cache and be stored in a checkpoint as-is.
`resolve(config)` applies `auto_scale_for_batch_size` and validates; everything downstream takes a
resolved config and never mutates it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

# PureJaxRL/CleanRL reference batch: 256 envs x 128 steps split into 4 minibatches for 4 epochs.
# Users found that growing the batch without rebalancing these hurts (bigger, less noisy minibatches
# and many more gradient steps per update), so larger batches are rescaled to keep ~8k minibatches.
REFERENCE_BATCH = 32_768
REFERENCE_MINIBATCHES = 4
REFERENCE_EPOCHS = 4
MAX_MINIBATCHES = 64
MIN_EPOCHS = 2


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
    ent_coef: float = 0.01
    max_grad_norm: float = 0.5
    normalize_advantages: bool = True
    clip_value_loss: bool = True
    # network
    hidden_dim: int = 256
    num_layers: int = 2
    activation: str = "tanh"
    dtype: str = "float32"  # matmul dtype; parameters and reductions stay float32
    # pipeline: extra stages (registered in stages.py) inserted after the core stage they name
    extra_stages: tuple[str, ...] = ()
    # bookkeeping
    seed: int = 0
    log_interval: int = 10  # PPO updates per compiled chunk, i.e. per console line
    run_name: str = ""
    checkpoint_dir: str = "checkpoints"
    # auto-scale bookkeeping: which of the two knobs the user set explicitly
    user_set_minibatches: bool = False
    user_set_epochs: bool = False
    # options of extra stages, as (name, value) pairs so the config stays hashable
    stage_options: tuple[tuple[str, float], ...] = field(default_factory=tuple)

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

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
    validate(config)
    if not config.run_name:
        env_tag = config.env.replace(":", "-").replace("/", "-")
        config = config.replace(run_name=f"{env_tag}_s{config.seed}")
    return config, note


def validate(config: TrainConfig) -> None:
    positive = ("num_envs", "num_steps", "total_timesteps", "num_minibatches", "update_epochs",
                "hidden_dim", "log_interval")
    for name in positive:
        if getattr(config, name) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(config, name)}")
    if config.num_layers < 0:
        raise ConfigError(f"--num-layers must be >= 0, got {config.num_layers}")
    if config.batch_size % config.num_minibatches:
        raise ConfigError(
            f"batch {config.num_envs} envs x {config.num_steps} steps = {config.batch_size:,} does not divide "
            f"into {config.num_minibatches} minibatches")
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
