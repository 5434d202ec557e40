"""Reward scaling (--scale-rewards) and observation normalisation (--normalize-obs) as two pipeline stages
(stages.py; core/stages.py's option_stages switches them on). This file is their registration (no jax here)."""

from hephaestus.core.stages import stage_loader


@stage_loader("reward_scale", "obs_norm")
def _load_stages():
    from hephaestus.agents.normalization import stages  # noqa: F401  registers reward_scale, obs_norm
