"""Environments: one adapter boundary (adapters.py), a name registry (registry.py), and the env families' training
defaults, declared on import without jax (hackmatrix/training.py; gymnax classic control's in registry.py)."""

from hephaestus.envs import hackmatrix  # noqa: F401  HackMatrix's training defaults (its env loads on first use)
from hephaestus.envs import registry  # noqa: F401  envs by name; gymnax classic control's training defaults
