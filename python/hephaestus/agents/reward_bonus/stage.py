"""The reward_bonus stage: a constant added to every reward (registered in agents/reward_bonus/__init__.py)."""

from __future__ import annotations

import jax.numpy as jnp

from hephaestus.core.stages import Stage, StageContext, register_stage


@register_stage("reward_bonus")
def reward_bonus_stage(ctx: StageContext) -> Stage:
    """Adds a constant to every reward. Useful as a template and as a check that stages compose."""
    bonus = float(ctx.config.stages.reward_bonus.scale)

    def apply(key, train_state, batch, state):
        batch = {**batch, "reward": batch["reward"] + jnp.float32(bonus)}
        return train_state, batch, state, {"reward_bonus/bonus": jnp.float32(bonus)}

    return Stage(name="reward_bonus", apply=apply)
