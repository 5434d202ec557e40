"""Baseline exploration bonuses (stages.py): Random Network Distillation, the count bonus, Never Give Up's episodic
novelty, and the intrinsic critic that gives any bonus its own value head. Options: options.py. This file is the
family's registration: its options, agents and stages (no jax imported here)."""

from hephaestus.agents.bonus import options  # noqa: F401  registers rnd, count, episodic, intrinsic_critic options
from hephaestus.config.registry import declare_stage, register_agent
from hephaestus.core.stages import stage_loader

BONUS_STAGE_NAMES = ("rnd", "count_bonus", "episodic_novelty", "intrinsic_critic")

# rnd: Random Network Distillation; count: tabular count bonus (the oracle on small discrete envs); episodic: Never
# Give Up's episodic k-nearest-neighbour bonus.
register_agent("rnd", ("rnd",))
register_agent("count", ("count_bonus",))
register_agent("episodic", ("episodic_novelty",))
for _name in BONUS_STAGE_NAMES:
    declare_stage(_name, reads_obs=True)


@stage_loader(*BONUS_STAGE_NAMES)
def _load_stages():
    from hephaestus.agents.bonus import stages  # noqa: F401  registers rnd, count_bonus, episodic_novelty, ...
