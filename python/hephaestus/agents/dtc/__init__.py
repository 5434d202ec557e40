"""DTC (Dual-Timescale Competence), part 1: RSSM world-model ensemble (rssm.py), on-device replay (replay.py) and the
dual-timescale intrinsic reward (intrinsic.py), as pipeline stages (`world_model`, `intrinsic_reward`: agent.py).
See specs/dtc.md. This file is the family's registration: its options, agents and stages (no jax imported here)."""

from hephaestus.agents.dtc.options import DTC_AUTO_FALLBACKS, DTC_FALLBACK_DEFAULTS, DTC_STAGES
from hephaestus.config.registry import (ConfigError, declare_stage, declare_stored_defaults, register_agent,
                                       register_auto)
from hephaestus.core.stages import stage_loader


def _disagreement_check(config) -> None:
    if config.stages.dtc.competence_coef not in (None, 0.0):
        raise ConfigError(f"--agent disagreement is dtc with competence off; --dtc-competence-coef "
                          f"{config.stages.dtc.competence_coef:g} needs --agent dtc")


# dtc: world-model ensemble + dual-timescale intrinsic reward; disagreement: the same with competence off (plain
# ensemble disagreement).
register_agent("dtc", DTC_STAGES)
register_agent("disagreement", DTC_STAGES, {"dtc_competence_coef": 0.0}, check=_disagreement_check)
for _name in DTC_STAGES:
    declare_stage(_name, reads_obs=True, families=("dtc",))
register_auto(tuple(DTC_AUTO_FALLBACKS), lambda config: DTC_AUTO_FALLBACKS, fallback=True)
register_auto(tuple(DTC_FALLBACK_DEFAULTS), lambda config: DTC_FALLBACK_DEFAULTS, fallback=True,
              texts={name: f"auto: {value}" for name, value in DTC_FALLBACK_DEFAULTS.items()})
# World models before --dtc-encoder read the flat observation (and fitted the decoder by its NLL).
declare_stored_defaults(**DTC_FALLBACK_DEFAULTS)


@stage_loader(*DTC_STAGES)
def _load_stages():
    from hephaestus.agents.dtc import agent  # noqa: F401  registers world_model, intrinsic_reward
