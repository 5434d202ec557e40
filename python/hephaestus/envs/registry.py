"""Environments by name: `gymnax:<id>`, `jumanji:<id>`, `craftax:<id>`, `hackmatrix`, `deepsea:<size>` (bsuite's
DeepSea, one random action map per run) and `deepsea-stochastic:<size>` (its noisy variant).

Adding an environment family means adding one branch here and, if its API differs, one adapter.
"""

from __future__ import annotations

import difflib

from hephaestus.envs.adapters import AdaptedEnv, adapt_deepsea, adapt_gymnax, adapt_jumanji


class UnknownEnvError(ValueError):
    """An environment name that does not resolve; the message is one line and suggests close names."""


def _suggest(name: str, known) -> str:
    close = difflib.get_close_matches(name, list(known), n=3)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def make_env(name: str, **param_overrides) -> AdaptedEnv:
    family, _, env_id = name.partition(":")
    if family == "hackmatrix" and not env_id:
        try:
            from hephaestus.envs.hackmatrix import HackMatrix
        except ImportError as err:  # pragma: no cover - the package ships it
            raise UnknownEnvError(f"hackmatrix environment unavailable: {err}") from err
        env = HackMatrix()
        params = env.default_params.replace(**param_overrides) if param_overrides else env.default_params
        return adapt_gymnax(env, params, "hackmatrix")
    if family in ("deepsea", "deepsea-stochastic"):
        if not env_id.isdigit() or int(env_id) < 2:
            raise UnknownEnvError(f"{family} needs a size >= 2, e.g. {family}:10 (got {name!r})")
        return adapt_deepsea(int(env_id), stochastic=family == "deepsea-stochastic", name=name)
    if family == "gymnax":
        import gymnax

        if env_id not in gymnax.registered_envs:
            raise UnknownEnvError(f"unknown gymnax env {env_id!r}{_suggest(env_id, gymnax.registered_envs)}")
        env, params = gymnax.make(env_id)
        if param_overrides:
            params = params.replace(**param_overrides)
        return adapt_gymnax(env, params, name)
    if family == "jumanji":
        import jumanji

        known = jumanji.registered_environments()
        if env_id not in known:
            raise UnknownEnvError(f"unknown jumanji env {env_id!r}{_suggest(env_id, known)}")
        return adapt_jumanji(jumanji.make(env_id, **param_overrides), name)
    if family == "craftax":
        try:
            from craftax.craftax_env import make_craftax_env_from_name
        except ImportError as err:
            raise UnknownEnvError("craftax is not installed (pip install craftax)") from err
        env = make_craftax_env_from_name(env_id, auto_reset=False)
        return adapt_gymnax(env, env.default_params, name, five_tuple=True)
    raise UnknownEnvError(
        f"unknown env {name!r}: use hackmatrix, gymnax:<id> (e.g. gymnax:CartPole-v1), "
        f"jumanji:<id> (e.g. jumanji:Snake-v1), craftax:<id> or deepsea:<size>")
