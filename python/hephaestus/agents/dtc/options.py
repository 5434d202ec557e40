"""DTC's options (specs/dtc.md): world-model ensemble, replay and the dual-timescale intrinsic reward, read by the
`world_model` and `intrinsic_reward` stages (--agent dtc). `TrainConfig.stages.dtc`; flags `--dtc-<field>`.

Defaults are CPU-sized; TPU-sized settings (specs/dtc.md): deter 512, stoch 32x32, hidden 512, replay 65536
sequences, wm batch 64. No jax here: the command line loads this module (hephaestus/agents/dtc/__init__.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from hephaestus.config.registry import ConfigError, auto_text, register_options, require_positive, stages_reading

# The stages `--agent dtc` inserts after the rollout, in this order (python/hephaestus/agents/dtc/agent.py).
DTC_STAGES = ("world_model", "intrinsic_reward")
# What the world model reads and how its decoder is fitted, where nothing else settles them (the dreamers settle
# them by env family, agents/dreamer/options.py): the flat observation with the NLL fit dtc was measured with.
DTC_FALLBACK_DEFAULTS = {"dtc_encoder": "flat", "dtc_recon_loss": "nll"}
# Options left auto that no agent sets: a 5-member ensemble, competence on (--agent disagreement: off).
DTC_AUTO_FALLBACKS = {"dtc_ensemble_size": 5, "dtc_competence_coef": 1.0}
@register_options("dtc")
@dataclass(frozen=True)
class DTCOptions:
    """DTC world model and intrinsic reward (specs/dtc.md)"""

    ensemble_size: int | None = field(default=None, metadata={"default_text": "auto: 1 for --agent dreamer, else 5"})
    """world-model ensemble members K (parameters stacked on a leading axis and vmapped)"""
    deter_dim: int = 64
    """RSSM deterministic (GRU) state size"""
    stoch_groups: int = 8
    """RSSM categorical latents"""
    stoch_classes: int = 8
    """classes per categorical latent"""
    hidden_dim: int = 64
    """RSSM MLP width"""
    unimix: float = 0.01
    """uniform mixture in every latent categorical"""
    free_bits: float = 1.0
    """nats; KL terms below this give no gradient"""
    kl_dyn: float = 0.5
    """KL balancing: weight pulling the prior to the posterior"""
    kl_rep: float = 0.1
    """KL balancing: weight pulling the posterior to the prior"""
    wm_lr: float = 1e-3
    """world-model learning rate"""
    head_loss_scale: float = 1.0
    """weight of the reward and continuation heads' losses in the world-model loss, whose reconstruction terms
    sum over every observation dimension"""
    logvar_init: float = -8.0
    """the decoder's initial log-variance per observation dimension (learned from there). Low, so an untrained
    ensemble's disagreement is not hidden under a large aleatoric term; it also weighs the reconstruction's
    gradient by exp(-logvar) (about 3,000 at -8) against the reward and continuation heads'"""
    recon_loss: Literal["nll", "mse"] | None = field(default=None, metadata={"default_text": auto_text("dtc_recon_loss")})
    """how the decoder's mean is fitted. nll: the Gaussian NLL with the learned variance, so each observation
    dimension's error is weighed by exp(-logvar), thousands for dimensions the model already fits well; mse:
    DreamerV3's unit-variance squared error for the mean, and the variance fitted by the NLL to the stopped mean's
    residuals (novelty still reads it), so the reconstruction no longer drowns the reward and continuation heads"""
    encoder: Literal["flat", "ego"] | None = field(default=None, metadata={"default_text": auto_text("dtc_encoder")})
    """what the world model's encoder reads. flat: the observation vector as it is; ego: on envs whose cells form a
    board around a player (HackMatrix), the cells laid out on a window centred on the player, as PPO's --encoder
    ego does; the decoder still reconstructs the flat observation"""
    reward_bins: int = 0
    """0: the reward head regresses symlog(reward) by squared error; n >= 2: it predicts logits over n bins evenly
    spaced in symlog space on [-20, 20], trained by two-hot cross-entropy (DreamerV3: 255)"""
    wm_grad_clip: float = 100.0
    """per-member global-norm gradient clip"""
    replay_ratio: float = 1.0
    """replayed transitions per env step (sets the world-model gradient steps per update); 0: a frozen model.
    A fixed 1 step per update, a ratio of 0.25 on DeepSea, left the ensemble barely learning"""
    bootstrap: bool = field(default=True, metadata={"values": "01"})
    """1: each member trains on its own replay draws (bootstrap); 0: all on one shared batch"""
    wm_batch: int = 16
    """replayed sequences per world-model gradient step"""
    seq_len: int = 16
    """replay sequence length; must divide --num-steps"""
    replay_capacity: int = 2048
    """replay ring buffer size, in sequences"""
    frontier_fraction: float = 0.5
    """share of replay draws from the most recent window"""
    frontier_window: int = 512
    """sequences in the recent window"""
    reward_fraction: float = 0.0
    """share of replay draws (world model and dream starts) in proportion to each stored sequence's largest
    |reward|, so that a rare large reward is replayed until the reward head has learned it; 0: off"""
    reward_power: float = 2.0
    """the reward-rich draws' weight of a sequence is its largest |reward| to this power. 1 (proportional) lets
    many small rewards outweigh one large one: in a DeepSea-10 run's 12,544 stored sequences, most holding a move
    cost of 0.001, the one treasure sequence (1.0) got 7.4% of the draws at 1 and 98.8% at 2"""
    novelty_signal: Literal["disagreement", "surprise"] = "surprise"
    """disagreement: variance of the members' predicted next observations (no outcome needed, the design's);
    surprise: the members' mean squared error against the observed next observation (score before learning)"""
    prior_scale: float = 0.0
    """randomized prior functions (Osband et al. 2018): each member's next-observation prediction adds a trained
    correction and prior-scale x its own fixed random function of (o_t, a_t), so members err and disagree on
    transitions they have not yet fitted; novelty of real transitions only (imagined states have no o_t); 0: off"""
    aleatoric_weight: float = 1.0
    """weight of the members' own predicted variance subtracted from the novelty signal: 1 = "clean" novelty (the
    design's); 0 = the plain signal (for disagreement: Plan2Explore's)"""
    intrinsic_coef: float = field(default=0.05, metadata={"flag": "--intrinsic-coef"})
    """intrinsic reward weight: reward += coef x (novelty + competence term)"""
    competence_coef: float | None = field(default=None, metadata={
        "default_text": "auto: 0 for --agent disagreement, else 1"})
    """gain of competence on novelty (0 = disagreement alone)"""
    competence: Literal["global", "progress"] = "global"
    """global: one competence per update, the relative gap of two EMAs of the batch's mean novelty (a gain on every
    transition's bonus alike); progress: per transition, the share of its novelty that this update's world-model
    steps removed (the rollout scored again after them), so novelty the ensemble is learning now pays more and
    novelty it cannot learn (fitted, or noise) pays plain; boredom then reads the batch's share. Costs one more
    scoring pass of the rollout per update; needs --dtc-replay-ratio > 0"""
    norm_rate: float = 0.0
    """novelty normaliser: 0 divides by the root of the mean novelty^2 over every transition seen (the divisor
    keeps the early, high novelty and the bonus shrinks as the model learns); > 0 an EMA of it at this rate per
    update (at least; the count-weighted step while larger), so the bonus keeps its scale over the run"""
    fast_rate: float = 0.1
    """C_fast = EMA(novelty, fast rate)"""
    slow_rate: float = 0.005
    """C_slow = EMA(novelty, slow rate)"""
    boredom_threshold: float = 0.01
    """competence below this counts as "not learning\""""
    boredom_rise: float = 0.01
    """boredom rise per update while not learning"""
    boredom_decay: float = 0.05
    """boredom decay per update while learning"""
    min_horizon: int = 8
    """shortest dream horizon (part 2, set by boredom)"""
    max_horizon: int = 64
    """longest dream horizon"""

    def wm_steps(self, batch_size: int) -> int:
        """World-model gradient steps per PPO update: replay_ratio x env steps / replayed steps per gradient step,
        rounded, at least 1 while the ratio is positive."""
        if self.replay_ratio <= 0:
            return 0
        return max(1, round(self.replay_ratio * batch_size / (self.wm_batch * self.seq_len)))

    def validate(self, config) -> None:
        if not any(name in stages_reading("dtc") for name in config.extra_stages):  # dtc's stages, the dreamer
            return
        require_positive(self, "dtc", "ensemble_size", "deter_dim", "stoch_groups", "stoch_classes", "hidden_dim",
                         "wm_batch", "seq_len", "replay_capacity", "frontier_window")
        if self.replay_ratio < 0:
            raise ConfigError(f"--dtc-replay-ratio must be >= 0, got {self.replay_ratio}")
        if self.competence == "progress" and self.replay_ratio == 0:
            raise ConfigError("--dtc-competence progress measures what the world model's steps learned: it needs "
                              "--dtc-replay-ratio > 0")
        if self.competence == "progress" and "world_model" not in config.extra_stages:
            raise ConfigError("--dtc-competence progress scores real transitions twice in the world_model stage "
                              "(--agent dtc or disagreement); the dreamer's imagined novelty is scored once")
        if not 0.0 <= self.norm_rate <= 1.0:
            raise ConfigError(f"--dtc-norm-rate must be in [0, 1], got {self.norm_rate}")
        if self.prior_scale < 0:
            raise ConfigError(f"--dtc-prior-scale must be >= 0, got {self.prior_scale}")
        if self.reward_bins == 1 or self.reward_bins < 0:
            raise ConfigError(f"--dtc-reward-bins must be 0 (scalar) or >= 2, got {self.reward_bins}")
        if self.head_loss_scale < 0:
            raise ConfigError(f"--dtc-head-loss-scale must be >= 0, got {self.head_loss_scale}")
        from hephaestus.agents.dtc.rssm import LOGVAR_MAX, LOGVAR_MIN  # the decoder's clip: a start outside it is clipped

        if not LOGVAR_MIN <= self.logvar_init <= LOGVAR_MAX:
            raise ConfigError(f"--dtc-logvar-init must be in [{LOGVAR_MIN:g}, {LOGVAR_MAX:g}], got {self.logvar_init}")
        num_steps, num_envs = config.env.num_steps, config.env.num_envs
        if num_steps % self.seq_len:
            raise ConfigError(f"--dtc-seq-len {self.seq_len} must divide --num-steps {num_steps}")
        per_rollout = num_steps // self.seq_len * num_envs
        if self.replay_capacity < per_rollout:
            raise ConfigError(f"--dtc-replay-capacity {self.replay_capacity} holds less than one rollout "
                              f"({per_rollout} sequences of {self.seq_len} steps)")
        if not 0.0 <= self.frontier_fraction <= 1.0:
            raise ConfigError(f"--dtc-frontier-fraction must be in [0, 1], got {self.frontier_fraction}")
        if not 0.0 <= self.reward_fraction <= 1.0 - self.frontier_fraction:
            raise ConfigError(f"--dtc-reward-fraction must be in [0, 1 - --dtc-frontier-fraction] = "
                              f"[0, {1.0 - self.frontier_fraction:g}], got {self.reward_fraction}")
        if not self.reward_power > 0.0:
            raise ConfigError(f"--dtc-reward-power must be > 0, got {self.reward_power}")
