"""Agent families, one folder each: its stages, its options, its env-dependent defaults and its registration (its
package's __init__.py: the options it declares, `--agent` names with their stage lists, and the stages it loads
when a run builds them). Importing a family registers it; adding an agent is one folder and one line here.
`--agent ppo` is the core pipeline alone (no extra stage)."""

from hephaestus.agents import normalization  # noqa: F401  reward_scale, obs_norm (--scale-rewards, --normalize-obs)
from hephaestus.agents import reward_bonus  # noqa: F401  the template stage (--extra-stages reward_bonus)
from hephaestus.agents import dtc  # noqa: F401  --agent dtc, disagreement
from hephaestus.agents import bonus  # noqa: F401  --agent rnd, count, episodic; the intrinsic critic
from hephaestus.agents import dreamer  # noqa: F401  --agent dreamer, dreamer-dtc
