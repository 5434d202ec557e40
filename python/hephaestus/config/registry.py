"""Options of pipeline stage families, registered by the stage family itself.

A stage family (DTC, RND, the count bonus, ...) declares its options as one frozen dataclass and registers it
here under a short family name; `TrainConfig.stages.<family>` then holds it, the command line gets one flag per
field (`--<family>-<field>`, help from the field's docstring), config files set it under `stages: {<family>: ...}`
and checkpoints store it as `<family>_<field>`. Adding an option is one field in the family's own options module:
neither config.py nor the PPO code changes. Adding a family is one options module listed in OPTION_MODULES.

Options modules import no jax (the command line and `--help` load them before anything heavy):

    @register_options("reward_bonus")
    @dataclass(frozen=True)
    class RewardBonusOptions:
        scale: float = 1.0
        \"\"\"constant added to every reward by the reward_bonus stage\"\"\"

        def validate(self, config) -> None:   # optional: checks against the whole config, raise ConfigError
            ...
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

# Modules that register option families (imported once, on first use of the registry).
OPTION_MODULES = ("hephaestus.config.registry", "hephaestus.agents.dtc.options", "hephaestus.agents.bonus.options")

_FAMILIES: dict[str, type] = {}


class ConfigError(ValueError):
    """A configuration a run cannot start with; the message is one line, fit for the console."""


def register_options(family: str):
    """Class decorator: `cls` (a frozen dataclass with defaults for every field) holds family `family`'s options."""

    def wrap(cls):
        if not family.isidentifier():
            raise ValueError(f"option family {family!r} must be an identifier")
        _FAMILIES[family] = cls
        return cls

    return wrap


def families() -> dict[str, type]:
    """{family: options class}, every options module loaded."""
    for module in OPTION_MODULES:
        importlib.import_module(module)
    return dict(_FAMILIES)


def env_defaults_text(name: str, by_family: dict, fallback: dict, who: str = "") -> str:
    """--help's default of an option that depends on the env family: "0.1 for hackmatrix, else 0.01" (`by_family`:
    {family: {name: value}}, `fallback`: {name: value}; `who` qualifies the family: "the dreamers on ")."""
    text = lambda value: (",".join(value) or "none") if isinstance(value, tuple) else str(value)
    special = [f"{text(values[name])} for {who}{family}" for family, values in by_family.items() if name in values]
    return ", ".join(special + [f"else {text(fallback[name])}"]) if special else text(fallback[name])


def require_positive(options, family: str, *names: str) -> None:
    """ConfigError naming the flag when one of `names` is not > 0."""
    for name in names:
        value = getattr(options, name)
        if not value > 0:
            raise ConfigError(f"--{family}-{name.replace('_', '-')} must be positive, got {value}")


@register_options("reward_bonus")
@dataclass(frozen=True)
class RewardBonusOptions:
    """The reward_bonus stage (stages.py): the template of an extra stage with its own option."""

    scale: float = 1.0
    """constant the reward_bonus stage adds to every reward"""
