"""The dreamer's options (specs/dreamer.md): actor-critic learning in a world model's imagination, in place of GAE
and the PPO update (--agent dreamer, dreamer-dtc). `TrainConfig.stages.dreamer`; flags `--dreamer-<field>`. The
world model is DTC's (agents/dtc/options.py: --dtc-*). No jax here: the command line loads this module."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from hephaestus.agents.dtc.options import DTC_FALLBACK_DEFAULTS
from hephaestus.config.registry import ConfigError, auto_text, env_defaults_text, register_options, require_positive

# The stage `--agent dreamer` and `--agent dreamer-dtc` put after the rollout, in place of `advantage` and
# `ppo_update` (python/hephaestus/agents/dreamer/dreamer.py). It trains a world model of DTCOptions (stages.dtc) itself.
DREAMER_STAGES = ("dreamer",)

# The dreamers' learning settings that depend on the env, by env family (the part of the name before ":"), and
# the values of every other env and of the agents that do not dream (dtc's world model reads the flat observation
# with the NLL fit it was measured with). An option left auto takes these (config.resolve); a flag wins. HackMatrix:
# the world model reads the board around the player and fits the decoder's mean by squared error, range-scaled
# advantages, entropy 0.1: at 1e6 env steps 38.8% +- 3.6 of greedy games reach stage 2 with them against 5.6% +- 2.2
# with the others (3 seeds each; specs/dreamer.md, "What the world model reads").
DREAMER_FALLBACK_DEFAULTS = {**DTC_FALLBACK_DEFAULTS, "dreamer_entropy": 3e-4, "dreamer_advantage_norm": "batch"}
DREAMER_ENV_DEFAULTS = {"hackmatrix": {"dtc_encoder": "ego", "dtc_recon_loss": "mse", "dreamer_entropy": 0.1,
                                       "dreamer_advantage_norm": "range"}}


def dreamer_defaults(env_name: str, dreams: bool) -> dict:
    """The values of DREAMER_FALLBACK_DEFAULTS' options for a run on `env_name`; `dreams`: the agent is a dreamer."""
    family = DREAMER_ENV_DEFAULTS.get(env_name.partition(":")[0], {}) if dreams else {}
    return {**DREAMER_FALLBACK_DEFAULTS, **family}


def auto_texts() -> dict[str, str]:
    """--help's defaults of DREAMER_FALLBACK_DEFAULTS' options."""
    return {name: "auto: " + env_defaults_text(name, DREAMER_ENV_DEFAULTS, DREAMER_FALLBACK_DEFAULTS,
                                               who="the dreamers on ") for name in DREAMER_FALLBACK_DEFAULTS}



@register_options("dreamer")
@dataclass(frozen=True)
class DreamerOptions:
    """The dreamer: actor-critic learning on the world model's imagined trajectories (specs/dtc.md, part 2). The
    world model's own options are the DTC ones (--dtc-deter-dim, --dtc-replay-ratio, ...)."""

    horizon: int = 15
    """imagined steps per start state (DreamerV3: 15)"""
    horizons: tuple[int, ...] = field(default=(), metadata={"parse": "csv", "metavar": "H,H,...",
                                                              "default_text": "none: every dream is --dreamer-horizon"})
    """dream lengths compiled side by side (e.g. 8,16,32,64), chosen per actor-critic step by boredom (lax.switch):
    the longest not above the boredom-driven horizon --dtc-max-horizon - boredom x (max - min), so a bored
    agent (novelty no longer falling) dreams short and cheap; needs --agent dreamer-dtc (boredom comes from the
    imagined novelty)"""
    starts: int = 16
    """replayed sequences per actor-critic step; every posterior state of them starts a dream (starts x seq-len)"""
    burn_in: int = 0
    """replayed steps that only build the filter state: dreams start from the posterior states after them (a
    replayed sequence starts from a zero state); must be < --dtc-seq-len"""
    ac_ratio: float = 1.0
    """actor-critic gradient steps per world-model gradient step"""
    entropy: float | None = field(default=None, metadata={"default_text": auto_text("dreamer_entropy")})
    """entropy regulariser on returns normalised to about [0, 1] (DreamerV3: 3e-4)"""
    advantage_norm: Literal["batch", "range"] | None = field(default=None, metadata={
        "default_text": auto_text("dreamer_advantage_norm")})
    """batch: mean 0 and std 1 over each batch of dreams (PPO's); range: divided by max(1, the lambda-returns'
    5th-95th percentile range), an EMA (DreamerV3's). On CartPole range learns slower and falls back: a critic that
    lags its rising returns biases every advantage alike, which only centring removes (specs/dreamer.md)"""
    return_decay: float = 0.99
    """EMA decay of the return scale (the 5th-95th percentile range of the lambda-returns)"""
    slow_critic_decay: float = 0.98
    """EMA decay of the slow critic (regularises the critic; bootstraps the lambda-returns with --dreamer-bootstrap
    slow)"""
    bootstrap: Literal["critic", "slow"] = "critic"
    """the values the lambda-returns bootstrap from: critic (the critic itself, as data: DreamerV3) or slow (its
    EMA copy: steadier targets, but values then climb towards long returns far more slowly)"""
    slow_critic_reg: float = 0.0
    """weight of the critic's regression towards the slow critic's values (DreamerV3: 1; on CartPole it keeps the
    critic lagging and learning falls back, specs/dreamer.md)"""
    actor_input: Literal["obs", "state"] = "obs"
    """what the actor and critic read: obs, the observation (member 0's decoded observation in a dream, the real one
    in the env; the pipeline's own network); state, the world model's state (h, z) (DreamerV3's): the dream's, and in
    the env the posterior of the observations filtered by a copy of member 0 carried as a recurrent policy's state
    (agents/dreamer/policy.py)"""
    critic_bins: int = 0
    """0: the critic regresses its value (or symlog value, --dreamer-symlog-critic) by squared error; n >= 2: it
    predicts logits over n bins evenly spaced in symlog space on [-20, 20], trained by two-hot cross-entropy on the
    lambda-returns and the slow critic's values (DreamerV3: 255; its output layer starts at zero)"""
    symlog_critic: bool = field(default=False, metadata={"values": "01"})
    """1: the value head predicts symlog(value) and regresses on symlog(lambda-return) (DreamerV3's critic
    works in symlog space), so its targets stay O(1) as returns grow; 0: it predicts the value itself"""
    replay_value: float = 0.0
    """weight of the critic's regression on replayed real sequences (DreamerV3's replay value loss, weight 0.3):
    lambda-returns along each replayed sequence from its real rewards and terminations, bootstrapped from the
    dreams' returns at its states, so the critic also learns where real episodes ended, which dreams from a soft
    continuation head underrate; the critic reads the real observation there (the state, with --dreamer-actor-input
    state). 0 = off (the critic learns from dreams alone)"""
    survival_penalty: float = 0.0
    """a survival penalty from the continuation head: each imagined step's reward loses this times the predicted
    chance that the episode ends there (1 - continuation probability). It charges every end alike, a win as well as
    a death (on HackMatrix the 8th stage's victory); 0 = off"""
    novelty_coef: float | None = field(default=None, metadata={
        "default_text": "auto: 1 for --agent dreamer-dtc, else 0"})
    """weight of the ensemble's disagreement on imagined states (Plan2Explore), normalised, in the imagined reward
    (with a competence gain as in part 1); needs --dtc-ensemble-size >= 2"""

    @property
    def reads_slow_critic(self) -> bool:
        """Whether anything reads the slow critic: its regulariser or the returns' bootstrap. Where nothing does, it
        is neither evaluated in the loss nor updated."""
        return self.slow_critic_reg > 0 or self.bootstrap == "slow"

    def ac_steps(self, wm_steps: int) -> int:
        """Actor-critic gradient steps per update: ac_ratio x world-model steps, rounded, at least 1."""
        return max(1, round(self.ac_ratio * max(wm_steps, 1)))

    def validate(self, config) -> None:
        if not any(name in DREAMER_STAGES for name in config.extra_stages):
            return
        require_positive(self, "dreamer", "horizon", "starts", "ac_ratio")
        if any(h <= 0 for h in self.horizons):
            raise ConfigError(f"--dreamer-horizons must be positive lengths, got {','.join(map(str, self.horizons))}")
        if self.horizons and not (self.novelty_coef or 0) > 0:
            raise ConfigError("--dreamer-horizons are chosen by boredom, which the imagined novelty drives: use "
                              "--agent dreamer-dtc (or --dreamer-novelty-coef > 0)")
        if not 0 <= self.burn_in < config.stages.dtc.seq_len:
            raise ConfigError(f"--dreamer-burn-in must be in [0, --dtc-seq-len {config.stages.dtc.seq_len}), "
                              f"got {self.burn_in}")
        if self.critic_bins == 1 or self.critic_bins < 0:
            raise ConfigError(f"--dreamer-critic-bins must be 0 (scalar) or >= 2, got {self.critic_bins}")
        if self.critic_bins and self.symlog_critic:
            raise ConfigError("--dreamer-critic-bins already regresses in symlog space: drop --dreamer-symlog-critic")
        for name in ("return_decay", "slow_critic_decay"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"--dreamer-{name.replace('_', '-')} must be in [0, 1), got {getattr(self, name)}")
        for name in ("novelty_coef", "entropy", "slow_critic_reg", "survival_penalty", "replay_value"):
            if getattr(self, name) < 0:
                raise ConfigError(f"--dreamer-{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}")
        if self.novelty_coef > 0 and config.stages.dtc.ensemble_size < 2:
            raise ConfigError(f"--dreamer-novelty-coef {self.novelty_coef} needs an ensemble to disagree: "
                              f"--dtc-ensemble-size >= 2, got {config.stages.dtc.ensemble_size}")
