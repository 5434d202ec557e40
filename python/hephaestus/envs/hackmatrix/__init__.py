"""HackMatrix: JAX-native gymnax environment. See specs/hackmatrix.md.

Its training defaults (training.py) are declared on import, without jax; the environment's own modules load on
first use of one of the names below (`from hephaestus.envs.hackmatrix import HackMatrix`)."""

from hephaestus.envs.hackmatrix import training  # noqa: F401  declares HackMatrix's training defaults

__all__ = ["HackMatrix", "EnvParams", "EnvState", "make_state", "render_text", "get_obs", "REWARD_TERMS"]


def __getattr__(name):
    if name in ("HackMatrix", "get_obs"):
        from hephaestus.envs.hackmatrix import env as home
    elif name == "render_text":
        from hephaestus.envs.hackmatrix import render as home
    elif name == "make_state":
        from hephaestus.envs.hackmatrix import scenario as home
    elif name in ("REWARD_TERMS", "EnvParams", "EnvState"):
        from hephaestus.envs.hackmatrix import state as home
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(home, name)
