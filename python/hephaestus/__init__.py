"""Hephaestus: a PureJaxRL-style training pipeline compiled into one XLA program.

Importing the package declares every env family's training defaults (envs/) and every agent family (agents/)
into config/registry.py, without jax: the options tree is built from what they declared."""

__version__ = "0.1.0"

from hephaestus import envs  # noqa: E402,F401  env families' training defaults
from hephaestus import agents  # noqa: E402,F401  agent families: options, --agent names, stages
