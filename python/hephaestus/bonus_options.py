"""Options of the exploration bonuses in bonus.py (`--agent rnd`, `--agent count`): `TrainConfig.stages.rnd` and
`TrainConfig.stages.count`, flags `--rnd-<field>` and `--count-<field>`. No jax here (hephaestus.stage_options)."""

from __future__ import annotations

from dataclasses import dataclass

from hephaestus.stage_options import ConfigError, register_options, require_positive


@register_options("rnd")
@dataclass(frozen=True)
class RNDOptions:
    """Random Network Distillation: a predictor learns a fixed random network's embedding of the next observation;
    the bonus is its squared error before it trains on the batch, divided by a running RMS."""

    coef: float = 0.5
    """RND bonus weight: reward += coef x normalised prediction error"""
    hidden_dim: int = 64
    """RND network width"""
    embed_dim: int = 32
    """RND embedding size"""
    lr: float = 1e-3
    """RND predictor learning rate"""
    steps: int = 4
    """RND predictor gradient steps (full batch) per PPO update"""

    def validate(self, config) -> None:
        require_positive(self, "rnd", "hidden_dim", "embed_dim", "steps")
        if self.lr <= 0:
            raise ConfigError(f"--rnd-lr must be positive, got {self.lr}")


@register_options("count")
@dataclass(frozen=True)
class CountOptions:
    """Tabular count bonus: reward += coef / sqrt(n(next_obs)), n counted per hashed observation; the oracle for
    small discrete envs (DeepSea), useless on continuous ones."""

    coef: float = 0.5
    """count bonus weight: reward += coef / sqrt(visits of the next observation)"""
    table_size: int = 1 << 20
    """count bonus hash buckets (int32 each); keep >> distinct observations"""

    def validate(self, config) -> None:
        require_positive(self, "count", "table_size")
