"""HackMatrix: JAX-native gymnax environment (issue 3). See specs/hackmatrix.md."""
from .env import HackMatrix, get_obs
from .render import render_text
from .scenario import make_state
from .state import REWARD_TERMS, EnvParams, EnvState

__all__ = ["HackMatrix", "EnvParams", "EnvState", "make_state", "render_text", "get_obs", "REWARD_TERMS"]
