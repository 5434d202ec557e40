"""Environments by name: `gymnax:<id>`, `jumanji:<id>`, `craftax:<id>`, `hackmatrix`, `deepsea:<size>` (bsuite's
DeepSea, one random action map per run) and `deepsea-stochastic:<size>` (its noisy variant).

Adding an environment family means adding one branch here and, if its API differs, one adapter. An env family's
training defaults (the values of options left auto) are declared by the family: HackMatrix's in
hackmatrix/training.py, gymnax classic control's below.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import TYPE_CHECKING

from hephaestus.config.registry import declare_env_defaults, env_params_of
from hephaestus.config.values import number_text, parse_untyped
from hephaestus.envs.gymnax_import import import_gymnax

if TYPE_CHECKING:
    from hephaestus.envs.adapters import AdaptedEnv

# Discrete classic control: PureJaxRL's ppo.py network (2 x 64 tanh, separate actor and critic), so a user who
# compares the two on CartPole compares the same arithmetic; at 256 a CartPole chunk runs 5x slower (specs/speed.md).
for _name in ("CartPole-v1", "Acrobot-v1", "MountainCar-v0"):
    declare_env_defaults(f"gymnax:{_name}", hidden_dim=64)
# bsuite's MemoryChain (gymnax; --env-params memory_length=N): the cue shown at the start decides the reward of the
# last of N + 1 steps, so only a policy with memory (--recurrent gru | lstm) beats chance from N = 2 on (gymnax
# returns each step's observation of the state *before* it, so at N = 1 the cue is still in view). Its inputs are 3
# numbers: PureJaxRL's ppo_rnn width suffices (scripts/experiments/memory_chain.py).
declare_env_defaults("gymnax:MemoryChain-bsuite", hidden_dim=64)


# craftax's envs (make_craftax_env_from_name); Classic-Symbolic is the one the Craftax baselines compare on.
CRAFTAX_IDS = ("Craftax-Classic-Symbolic-v1", "Craftax-Classic-Pixels-v1", "Craftax-Symbolic-v1", "Craftax-Pixels-v1")


class UnknownEnvError(ValueError):
    """An environment name that does not resolve; the message is one line and suggests close names."""


class EnvParamError(UnknownEnvError):
    """An env parameter (``--env-params``) the env does not have, or a value that does not fit it; one line. A
    kind of UnknownEnvError, so every caller that reports a bad env reports this too."""


def _suggest(name: str, known) -> str:
    close = difflib.get_close_matches(name, list(known), n=3)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def parse_env_params(items) -> dict:
    """("distance_coef=0", "curriculum_share=0.5") -> {"distance_coef": "0", ...}: the values stay text until
    ``make_env`` reads them as the types of the env's own parameters."""
    params = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise EnvParamError(f"--env-params {item!r}: expected NAME=VALUE")
        params[name.strip()] = value.strip()
    return params


def _read_value(env: str, name: str, text, default):
    """``text`` as the type of ``default`` (bool, int or float); values that are already not text pass through."""
    if not isinstance(text, str):
        return text
    if isinstance(default, bool):
        value = {"1": True, "true": True, "0": False, "false": False}.get(text.lower())
        kind = "a bool (0/1/true/false)"
    else:  # read as the config's own int and float options are (config/values.py's number_text)
        value = number_text(text, whole=isinstance(default, int))
        kind = "an int" if isinstance(default, int) else "a number"
    if value is None or isinstance(value, str):
        raise EnvParamError(f"{env} parameter {name} is {text!r}, expected {kind}")
    return value


def with_params(env: str, params, overrides: dict):
    """``params`` (a dataclass of the env's parameters) with ``overrides`` read as its fields' types; an unknown
    name is a one-line error listing the known ones."""
    if not overrides:
        return params
    fields = {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}
    for name in overrides:
        if name not in fields:
            raise EnvParamError(f"{env} has no parameter {name!r}{_suggest(name, fields)}; its parameters: "
                                f"{', '.join(fields)}")
    return params.replace(**{n: _read_value(env, n, v, fields[n]) for n, v in overrides.items()})


def make_training_env(env_config) -> AdaptedEnv:
    """The env a run trains on: ``--env`` with ``--env-params`` (config.EnvConfig; auto: the env family's)."""
    return make_env(env_config.name, **parse_env_params(env_params_of(env_config)))


def make_env(name: str, **param_overrides) -> AdaptedEnv:
    """The env called ``name``, with its parameters changed by ``param_overrides`` (text or values; for gymnax,
    craftax and HackMatrix the fields of its ``EnvParams``, for jumanji the keyword arguments of
    ``jumanji.make``)."""
    from hephaestus.envs.adapters import adapt_deepsea, adapt_gymnax, adapt_jumanji  # jax: loaded with the first env

    family, _, env_id = name.partition(":")
    if family == "hackmatrix" and not env_id:
        try:
            from hephaestus.envs.hackmatrix import HackMatrix
            from hephaestus.envs.hackmatrix.state import check_params
        except ImportError as err:  # pragma: no cover - the package ships it
            raise UnknownEnvError(f"hackmatrix environment unavailable: {err}") from err
        env = HackMatrix()
        params = with_params(name, env.default_params, param_overrides)
        try:
            check_params(params)
        except ValueError as err:
            raise EnvParamError(f"{name}: {err}") from None
        return adapt_gymnax(env, params, "hackmatrix")
    if family in ("deepsea", "deepsea-stochastic"):
        if not env_id.isdigit() or int(env_id) < 2:
            raise UnknownEnvError(f"{family} needs a size >= 2, e.g. {family}:10 (got {name!r})")
        if param_overrides:
            raise EnvParamError(f"{name} has no parameters to set (got {', '.join(param_overrides)})")
        return adapt_deepsea(int(env_id), stochastic=family == "deepsea-stochastic", name=name)
    if family == "gymnax":
        gymnax = import_gymnax()

        if env_id not in gymnax.registered_envs:
            raise UnknownEnvError(f"unknown gymnax env {env_id!r}{_suggest(env_id, gymnax.registered_envs)}")
        env, params = gymnax.make(env_id)
        return adapt_gymnax(env, with_params(name, params, param_overrides), name)
    if family == "jumanji":
        import jumanji

        known = jumanji.registered_environments()
        if env_id not in known:
            raise UnknownEnvError(f"unknown jumanji env {env_id!r}{_suggest(env_id, known)}")
        # jumanji's keyword arguments declare no types
        kwargs = {k: parse_untyped(v) if isinstance(v, str) else v for k, v in param_overrides.items()}
        try:
            return adapt_jumanji(jumanji.make(env_id, **kwargs), name)
        except TypeError as err:
            raise EnvParamError(f"{name}: {err}") from None
    if family == "craftax":
        try:
            from craftax.craftax_env import make_craftax_env_from_name
        except ImportError as err:
            raise UnknownEnvError("craftax is not installed (pip install craftax, or .[craftax])") from err
        from hephaestus.envs.craftax_env import CraftaxWithStats

        try:
            raw = make_craftax_env_from_name(env_id, auto_reset=False)
        except ValueError as err:  # "Unknown craftax environment"
            raise UnknownEnvError(f"unknown craftax env {env_id!r}{_suggest(env_id, CRAFTAX_IDS)}") from err
        env = CraftaxWithStats(raw, env_id)
        return adapt_gymnax(env, with_params(name, raw.default_params, param_overrides), name, five_tuple=True)
    raise UnknownEnvError(
        f"unknown env {name!r}: use hackmatrix, gymnax:<id> (e.g. gymnax:CartPole-v1), "
        f"jumanji:<id> (e.g. jumanji:Snake-v1), craftax:<id> or deepsea:<size>")
