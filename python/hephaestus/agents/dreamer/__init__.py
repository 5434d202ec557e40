"""The dreamer: actor-critic learned in the imagination of DTC's world model, in place of GAE and the PPO update
(dreamer.py; specs/dreamer.md). This file is the family's registration: its options, agents and stage (no jax
imported here)."""

from hephaestus.agents.dreamer.options import (DREAMER_ENV_DEFAULTS, DREAMER_FALLBACK_DEFAULTS, DREAMER_STAGES,
                                               auto_texts)
from hephaestus.config.registry import (UpdateRule, declare_stage, declare_stored_defaults, learns_by_dreaming,
                                       register_agent, register_auto, register_note)
from hephaestus.core.stages import stage_loader

# The dreamer's actor and critic share one optimizer, and at PPO's clip of 0.5 the critic's large regression
# gradients set the clip and shrink the actor's step with them (CartPole: slower and less stable learning,
# specs/dreamer.md), so the dreamers clip at DreamerV3's 100.
DREAMER_GRAD_CLIP = 100.0


def update_summary(config) -> str:
    wm_steps = config.stages.dtc.wm_steps(config.batch_size)
    return f"dreamer: {wm_steps} world-model + {config.stages.dreamer.ac_steps(wm_steps)} imagination steps per update"


def horizons_note(config) -> str:
    """lax.switch under vmap with a per-seed index becomes a select over every branch's result."""
    if config.run.num_seeds > 1 and len(set(config.stages.dreamer.horizons)) > 1 and learns_by_dreaming(config):
        lengths = sorted(set(config.stages.dreamer.horizons))
        return (f"--dreamer-horizons with --num-seeds {config.run.num_seeds}: the vmapped seeds each choose a length, "
                f"so every dream runs all {len(lengths)} lengths ({'+'.join(map(str, lengths))} = {sum(lengths)} "
                "steps) and keeps its own; results are each seed's, the saving is lost: run one seed per process to "
                "save compute")
    return ""


def env_values(config) -> dict:
    """The dreamers' env-dependent settings (DREAMER_ENV_DEFAULTS), for a run that dreams."""
    return DREAMER_ENV_DEFAULTS.get(config.env.name.partition(":")[0], {}) if learns_by_dreaming(config) else {}


# dreamer: actor-critic in the imagination of a one-member world model; dreamer-dtc: the same with a 5-member
# ensemble whose disagreement on imagined states, gained by competence, joins the imagined reward.
register_agent("dreamer", DREAMER_STAGES, {"dtc_ensemble_size": 1, "dreamer_novelty_coef": 0.0})
register_agent("dreamer-dtc", DREAMER_STAGES, {"dreamer_novelty_coef": 1.0})
for _name in DREAMER_STAGES:
    declare_stage(_name, reads_obs=True, families=("dtc", "dreamer"),
                  update=UpdateRule(max_grad_norm=DREAMER_GRAD_CLIP, summary=update_summary))
register_auto(tuple(DREAMER_ENV_DEFAULTS.get("hackmatrix", {})), env_values, texts=auto_texts())
register_auto(("dreamer_novelty_coef", *DREAMER_FALLBACK_DEFAULTS),
              lambda config: {"dreamer_novelty_coef": 0.0, **DREAMER_FALLBACK_DEFAULTS}, fallback=True)
register_note(horizons_note)
# The dreamer options' values before they had env defaults (stored configs since then hold them anyway).
declare_stored_defaults(**DREAMER_FALLBACK_DEFAULTS)


@stage_loader(*DREAMER_STAGES)
def _load_stages():
    from hephaestus.agents.dreamer import dreamer  # noqa: F401  registers the dreamer stage
