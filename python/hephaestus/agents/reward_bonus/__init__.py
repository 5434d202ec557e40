"""The template of an extra stage with its own option: `reward_bonus` adds a constant to every reward
(--extra-stages reward_bonus --reward-bonus-scale X). Useful as a check that stages compose, and as the shape of
a new family: its options (a frozen dataclass, registered), its stage (stage.py, loaded when a run builds it), and
one import line in hephaestus/agents/__init__.py."""

from dataclasses import dataclass

from hephaestus.config.registry import register_options
from hephaestus.core.stages import stage_loader


@register_options("reward_bonus")
@dataclass(frozen=True)
class RewardBonusOptions:
    """The reward_bonus stage (agents/reward_bonus/): the template of an extra stage with its own option."""

    scale: float = 1.0
    """constant the reward_bonus stage adds to every reward"""


@stage_loader("reward_bonus")
def _load_stages():
    from hephaestus.agents.reward_bonus import stage  # noqa: F401  registers reward_bonus
