"""Options of the exploration bonuses in bonus.py (`--agent rnd`, `--agent count`, `--agent episodic`):
`TrainConfig.stages.rnd`, `.count` and `.episodic`, flags `--rnd-<field>`, `--count-<field>` and `--episodic-<field>`.
No jax here (hephaestus.config.registry)."""

from __future__ import annotations

from dataclasses import dataclass

from hephaestus.config.registry import ConfigError, register_options, require_positive


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


@register_options("episodic")
@dataclass(frozen=True)
class EpisodicOptions:
    """Episodic novelty (Never Give Up's episodic bonus, Badia et al. 2020): each env keeps this episode's
    embeddings of the observations it reached; the bonus of the next observation is 1 / (sqrt(sum of a kernel over
    its k nearest neighbours in that memory) + c), found by an exact top-k on device, normalised by a running RMS.
    The embedding is a fixed random projection of symlog(obs) (NGU learns one by inverse dynamics: not here)."""

    coef: float = 0.05
    """episodic bonus weight: reward += coef x normalised episodic novelty. RND's 0.5 drowned HackMatrix's reward
    (3 seeds at 1e6 steps: stage 2 in 6.2% of greedy games against PPO's 26.7%; 0.05: 28.0%, specs/dtc.md)"""
    capacity: int = 128
    """embeddings each env's memory holds (its episode's latest, a ring); memory is num_envs x capacity x embed_dim"""
    k: int = 10
    """nearest neighbours the bonus reads (NGU: 10)"""
    embed_dim: int = 32
    """size of the fixed random projection of symlog(obs) that the memory holds"""
    cluster_distance: float = 0.008
    """normalised squared distances below this count as the same state (NGU's xi: 0.008)"""
    kernel_epsilon: float = 1e-3
    """inverse kernel K = eps / (d^2 / mean d^2 + eps) (NGU: 1e-3)"""
    pseudo_count: float = 1e-3
    """c in 1 / (sqrt(sum K) + c) (NGU: 1e-3)"""
    max_similarity: float = 8.0
    """sqrt(sum K) + c above this pays no bonus: the state is well known this episode (NGU: 8)"""

    def validate(self, config) -> None:
        if "episodic_novelty" not in config.extra_stages:
            return
        require_positive(self, "episodic", "capacity", "k", "embed_dim")
        if self.k > self.capacity:
            raise ConfigError(f"--episodic-k {self.k} must be <= --episodic-capacity {self.capacity}")
        for name in ("kernel_epsilon", "pseudo_count", "max_similarity"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"--episodic-{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.cluster_distance < 0:
            raise ConfigError(f"--episodic-cluster-distance must be >= 0, got {self.cluster_distance}")


# Stages that add an exploration bonus to `reward` and write it (summed, when several do) as `intrinsic_reward`.
BONUS_STAGES = ("rnd", "count_bonus", "episodic_novelty", "intrinsic_reward")


@register_options("intrinsic_critic")
@dataclass(frozen=True)
class IntrinsicCriticOptions:
    """--extra-stages intrinsic_critic: the bonus gets its own critic and non-episodic returns (RND's two value
    heads, Burda et al. 2018): the stage takes `intrinsic_reward` back out of `reward`, fits its own value network
    to the intrinsic stream as one never-ending episode, and adds coef x its GAE advantage to PPO's advantage."""

    gamma: float = 0.99
    """intrinsic critic discount (episode ends do not cut the intrinsic return)"""
    hidden_dim: int = 64
    """intrinsic critic width (2 ReLU layers)"""
    lr: float = 1e-3
    """intrinsic critic learning rate"""
    steps: int = 4
    """intrinsic critic gradient steps (full batch) per PPO update"""
    coef: float = 1.0
    """weight of the intrinsic advantage added to PPO's (extrinsic) advantage"""

    def validate(self, config) -> None:
        if "intrinsic_critic" not in config.extra_stages:
            return
        require_positive(self, "intrinsic_critic", "hidden_dim", "steps", "lr")
        if not 0 <= self.gamma < 1:
            raise ConfigError(f"--intrinsic-critic-gamma must be in [0, 1), got {self.gamma}")
        stages = list(config.extra_stages)
        bonus = [s for s in stages[:stages.index("intrinsic_critic")] if s in BONUS_STAGES]
        if not bonus:
            raise ConfigError("--extra-stages intrinsic_critic needs an exploration bonus before it (--agent rnd, "
                              "count, dtc or disagreement)")
