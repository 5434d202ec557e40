"""The gymnax environment interface for our own envs, without importing gymnax: its package import loads every
gymnax env and its plotting stack (seaborn, matplotlib), about 1.5 s of every HackMatrix start on a 2-core CPU
(specs/results/speed.md, "HackMatrix start-up"). The spaces and the base class mirror gymnax 1.x's (same names, fields and `reset` contract), so
gymnax-style code reads our envs unchanged; the adapter (adapters.adapt_gymnax) tells the spaces apart by their
fields, so it accepts gymnax's own as well."""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp


class Discrete:
    """Actions 0..n-1 (gymnax.environments.spaces.Discrete)."""

    def __init__(self, num_categories: int):
        self.n = int(num_categories)
        self.shape = ()
        self.dtype = jnp.int32

    def sample(self, key):
        return jax.random.randint(key, self.shape, 0, self.n).astype(self.dtype)

    def contains(self, x) -> jax.Array:
        return jnp.logical_and(x >= 0, x < self.n)


class Box:
    """Arrays of `shape` within [low, high] (gymnax.environments.spaces.Box)."""

    def __init__(self, low, high, shape: tuple[int, ...], dtype=jnp.float32):
        self.low, self.high, self.shape, self.dtype = low, high, tuple(shape), dtype

    def sample(self, key):
        return jax.random.uniform(key, self.shape, minval=self.low, maxval=self.high).astype(self.dtype)

    def contains(self, x) -> jax.Array:
        return jnp.logical_and(jnp.all(x >= self.low), jnp.all(x <= self.high))


class Dict:
    """A dict of spaces (gymnax.environments.spaces.Dict)."""

    def __init__(self, spaces: dict):
        self.spaces = dict(spaces)

    def sample(self, key):
        keys = jax.random.split(key, len(self.spaces))
        return {name: space.sample(k) for (name, space), k in zip(self.spaces.items(), keys)}


def is_discrete(space) -> bool:
    """A Discrete space, ours or gymnax's (it has `n`)."""
    return hasattr(space, "n")


def is_box(space) -> bool:
    """A Box space, ours or gymnax's (it has `low`, `high` and `shape`)."""
    return all(hasattr(space, name) for name in ("low", "high", "shape"))


class Environment:
    """gymnax's `Environment` contract for envs written here: pure `reset_env(key, params) -> (obs, state)` and
    `step_env(key, state, action, params) -> (obs, state, reward, done, info)`, `default_params`, and the jitted
    `reset(key, params=None)`. `step` (with its auto-reset) is each env's own: HackMatrix generates levels only for
    the lanes that need one, which the generic select-both-branches auto-reset cannot."""

    @property
    def default_params(self) -> Any:
        raise NotImplementedError

    @partial(jax.jit, static_argnames=("self",))
    def reset(self, key, params=None):
        return self.reset_env(key, self.default_params if params is None else params)

    def reset_env(self, key, params):
        raise NotImplementedError

    def step_env(self, key, state, action, params):
        raise NotImplementedError
