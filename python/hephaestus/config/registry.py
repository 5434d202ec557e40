"""What the families of the package declare, and the options tree reads: the bottom of the package.

Nothing here knows an agent or an env; the families declare themselves into it, on import (hephaestus/agents/
and hephaestus/envs/ import every family):

* option families (`register_options`): a stage family (DTC, RND, the count bonus, ...) declares its options as
  one frozen dataclass under a short family name; `TrainConfig.stages.<family>` then holds it, the command line
  gets one flag per field (`--<family>-<field>`, help from the field's docstring), config files set it under
  `stages: {<family>: ...}` and checkpoints store it as `<family>_<field>`. Adding an option is one field in the
  family's own options module: neither the options tree nor the PPO code changes;
* agents (`register_agent`): `--agent NAME` -> its extra stages and its values of options left auto;
* stage traits (`declare_stage`): what the options tree must know of a stage by name (it reads float
  observations, it reads an option family, it takes the place of the PPO update);
* auto values (`register_auto`): options a family settles itself when left auto, from the rest of the config;
* env families' training defaults (`declare_env_defaults`), by env family or full env name;
* stored defaults (`declare_stored_defaults`): what an option means in a checkpoint that predates it.

Declarations import no jax (the command line and `--help` load them before anything heavy):

    @register_options("reward_bonus")
    @dataclass(frozen=True)
    class RewardBonusOptions:
        scale: float = 1.0
        \"\"\"constant added to every reward by the reward_bonus stage\"\"\"

        def validate(self, config) -> None:   # optional: checks against the whole config, raise ConfigError
            ...

Option families are read once, when the options tree is built (config/train_config.py): a family declared after
that is an error naming it, not a section that silently does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

_FAMILIES: dict[str, type] = {}
_FAMILIES_READ = False


class ConfigError(ValueError):
    """A configuration a run cannot start with; the message is one line, fit for the console."""


def register_options(family: str):
    """Class decorator: `cls` (a frozen dataclass with defaults for every field) holds family `family`'s options."""

    def wrap(cls):
        if not family.isidentifier():
            raise ValueError(f"option family {family!r} must be an identifier")
        if _FAMILIES_READ and family not in _FAMILIES:
            raise RuntimeError(f"option family {family!r} declared after the options tree was built: import its "
                               "package from hephaestus/agents/__init__.py")
        _FAMILIES[family] = cls
        return cls

    return wrap


def families() -> dict[str, type]:
    """{family: options class} of every family declared; the options tree is built from it once."""
    global _FAMILIES_READ
    _FAMILIES_READ = True
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


# ----------------------------------------------------------------------------------------------------------
# Agents: --agent NAME -> (extra stages, values of auto options). Each agent family registers its own
# (hephaestus/agents/<family>/__init__.py). An agent's values fill only options left auto (None): a flag the user
# gives wins (--agent dreamer --dtc-ensemble-size 3 trains 3 members).

AGENTS: dict[str, tuple[tuple[str, ...], dict]] = {"ppo": ((), {})}  # ppo: no extra stage
AGENT_CHECKS: dict[str, Callable[[Any], None]] = {}


def register_agent(name: str, stages: tuple[str, ...], auto: dict | None = None,
                   check: Callable[[Any], None] | None = None) -> None:
    """`--agent name` puts `stages` first in --extra-stages and fills the options `auto` names where left auto;
    `check(config)` (optional) raises ConfigError for a config the agent refuses, before its values fill."""
    AGENTS[name] = (tuple(stages), dict(auto or {}))
    if check is not None:
        AGENT_CHECKS[name] = check


# ----------------------------------------------------------------------------------------------------------
# Stage traits: what the options tree knows of a stage, by name.


@dataclass(frozen=True)
class UpdateRule:
    """A stage that takes the place of the PPO update (the dreamer): its gradient clip (--max-grad-norm auto) and a
    line saying what learns in one update (the run's header)."""

    max_grad_norm: float
    summary: Callable[[Any], str]


@dataclass(frozen=True)
class StageTraits:
    reads_obs: bool = False  # reads the batch's float observations: no uint8 observation storage
    families: tuple[str, ...] = ()  # option families it reads: their checks run when the stage does
    update: UpdateRule | None = None  # takes the place of the PPO update: no teacher, the MLP encoder, its clip


STAGE_TRAITS: dict[str, StageTraits] = {}


def declare_stage(name: str, *, reads_obs: bool = False, families: tuple[str, ...] = (),
                  update: UpdateRule | None = None) -> None:
    STAGE_TRAITS[name] = StageTraits(reads_obs=reads_obs, families=tuple(families), update=update)


def stages_reading(family: str) -> tuple[str, ...]:
    """The stages that read option family `family` (their options are checked only when one of them runs)."""
    return tuple(name for name, traits in STAGE_TRAITS.items() if family in traits.families)


def obs_reading_stages() -> tuple[str, ...]:
    return tuple(name for name, traits in STAGE_TRAITS.items() if traits.reads_obs)


def update_rule(config) -> UpdateRule | None:
    """The rule of the stage that takes the place of the PPO update in `config`, or None (PPO learns)."""
    for name in config.extra_stages:
        traits = STAGE_TRAITS.get(name)
        if traits is not None and traits.update is not None:
            return traits.update
    return None


def learns_by_dreaming(config) -> bool:
    """Whether a stage takes the place of the PPO update (--agent dreamer, dreamer-dtc)."""
    return update_rule(config) is not None


def agents_replacing_update() -> tuple[str, ...]:
    return tuple(name for name, (stages, _) in AGENTS.items()
                 if any(STAGE_TRAITS.get(s, StageTraits()).update is not None for s in stages))


# ----------------------------------------------------------------------------------------------------------
# Auto values a family settles itself: `values(config)` -> {flat name: value}, filled where still auto.

AUTO_VALUES: list[tuple[tuple[str, ...], Callable[[Any], dict], bool]] = []
AUTO_TEXTS: dict[str, str] = {}


def register_auto(names: tuple[str, ...], values: Callable[[Any], dict], fallback: bool = False,
                  texts: dict[str, str] | None = None) -> None:
    """Options `names` left auto take `values(config)` (the agent's own values, set by --agent, come first; then
    these, the `fallback` ones last, so a family may refine another's fallbacks). `texts`: --help's default of each
    (an option's `default_text` is `auto_text(name)`)."""
    AUTO_VALUES.append((tuple(names), values, fallback))
    AUTO_VALUES.sort(key=lambda entry: entry[2])  # stable: registration order within each kind
    AUTO_TEXTS.update(texts or {})


def auto_text(name: str) -> Callable[[], str]:
    """--help's default of option `name`, as declared by the family that settles it (read when --help is built)."""
    return lambda: AUTO_TEXTS.get(name, "auto")


def auto_names() -> tuple[str, ...]:
    return tuple(dict.fromkeys(name for names, _, _ in AUTO_VALUES for name in names))


# Lines a family adds to resolve's console note: `note(config)` -> "" or one sentence.
RESOLVE_NOTES: list[Callable[[Any], str]] = []


def register_note(note: Callable[[Any], str]) -> None:
    RESOLVE_NOTES.append(note)


# What settles the options that need the env (`settle(config, env_spec)` -> config): the encoder and the observation
# storage dtype, declared by core/networks.py, which owns the encoders (resolve_for_env runs them).
ENV_SETTLERS: list[Callable[[Any, Any], Any]] = []


def register_env_settler(settle: Callable[[Any, Any], Any]) -> None:
    if settle not in ENV_SETTLERS:
        ENV_SETTLERS.append(settle)


# ----------------------------------------------------------------------------------------------------------
# Env families' training defaults. A field left at None (auto) takes its env family's value (the part of --env
# before ":"), or its full name's, else FALLBACK_DEFAULTS'. Each env family declares its own
# (hephaestus/envs/hackmatrix/training.py, the gymnax families in hephaestus/envs/registry.py).

NO_TEACHER = "none"  # --teacher none: no teacher (has_teacher)
FALLBACK_DEFAULTS = {"ent_coef": 0.01, "hidden_dim": 256, "teacher": NO_TEACHER, "encoder": "mlp",
                     "teacher_fraction": 1.0, "cell_dim": 16, "env_params": ()}
ENV_DEFAULTS: dict[str, dict] = {}


def declare_env_defaults(env: str, **values) -> dict:
    """Training defaults of env family (or full env name) `env`; names from FALLBACK_DEFAULTS. Returns them."""
    unknown = set(values) - set(FALLBACK_DEFAULTS)
    if unknown:
        raise ValueError(f"{env}: no env-dependent option named {', '.join(sorted(unknown))}")
    ENV_DEFAULTS[env] = dict(values)
    return ENV_DEFAULTS[env]


def env_defaults(env: str) -> dict:
    """The defaults of the fields in FALLBACK_DEFAULTS for env name `env` (a full name's win over its family's)."""
    return {**FALLBACK_DEFAULTS, **ENV_DEFAULTS.get(env.partition(":")[0], {}), **ENV_DEFAULTS.get(env, {})}


def env_params_of(env) -> tuple[str, ...]:
    """The training env's --env-params (`env`: config.EnvConfig): the given list (which replaces the env family's),
    else the family's default (ENV_DEFAULTS "env_params"; none for most envs). `resolve` settles it; this also
    serves the unresolved configs that build an env before resolving (a sweep's base)."""
    return env_defaults(env.name)["env_params"] if env.env_params is None else env.env_params


# ----------------------------------------------------------------------------------------------------------
# What an option means when a checkpoint predates it (run/checkpoint.py lays these under a stored config).

STORED_DEFAULTS: dict[str, Any] = {}


def declare_stored_defaults(**values) -> None:
    STORED_DEFAULTS.update(values)
