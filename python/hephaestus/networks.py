"""Actor-critic networks and the two policy distributions (masked categorical, Gaussian).

Separate actor and critic MLPs (as PureJaxRL and CleanRL do): a shared torso lets the value loss pull the
policy features around. Orthogonal init with gain sqrt(2) in the torso, 0.01 on the policy head (near-uniform
initial policy) and 1.0 on the value head. Matmuls run in `dtype` (bfloat16 on TPU if asked); parameters and
every output are float32.
"""

from __future__ import annotations

import math
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

# Finite, so masked entries give exp() == 0 exactly and 0 * logit stays 0 (−inf would make NaNs).
MASKED_LOGIT = -1e9


class MLP(nn.Module):
    hidden_dims: Sequence[int]
    out_dim: int
    out_gain: float
    activation: str = "tanh"
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x):
        act = nn.tanh if self.activation == "tanh" else nn.relu
        x = x.astype(self.dtype)
        for width in self.hidden_dims:
            x = nn.Dense(width, kernel_init=nn.initializers.orthogonal(math.sqrt(2)),
                         bias_init=nn.initializers.zeros, dtype=self.dtype, param_dtype=jnp.float32)(x)
            x = act(x)
        x = nn.Dense(self.out_dim, kernel_init=nn.initializers.orthogonal(self.out_gain),
                     bias_init=nn.initializers.zeros, dtype=self.dtype, param_dtype=jnp.float32)(x)
        return x.astype(jnp.float32)


class ActorCritic(nn.Module):
    """`__call__(obs) -> (policy_params, value)`; `policy_params` are logits (discrete) or means (continuous)."""

    action_dim: int
    discrete: bool
    hidden_dim: int = 256
    num_layers: int = 2
    activation: str = "tanh"
    dtype: jnp.dtype = jnp.float32

    def setup(self):
        dims = (self.hidden_dim,) * self.num_layers
        self.actor = MLP(dims, self.action_dim, 0.01, self.activation, self.dtype)
        self.critic = MLP(dims, 1, 1.0, self.activation, self.dtype)
        if not self.discrete:
            # State-independent log std, as in PPO's continuous-control setup.
            self.log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,), jnp.float32)

    def __call__(self, obs):
        return self.actor(obs), self.value(obs)

    def value(self, obs):
        return self.critic(obs)[..., 0]

    def policy_log_std(self):
        return self.log_std


def make_network(spec, config) -> ActorCritic:
    return ActorCritic(action_dim=spec.action_dim, discrete=spec.discrete, hidden_dim=config.hidden_dim,
                       num_layers=config.num_layers, activation=config.activation,
                       dtype=jnp.bfloat16 if config.dtype == "bfloat16" else jnp.float32)


# ---------------------------------------------------------------------------------------------------
# Masked categorical. The same masked logits feed sampling, log-probabilities and entropy, so an invalid
# action has probability exactly 0 everywhere. A row with no valid action cannot be sampled from; callers
# count such rows (`fully_masked_rows`) and the training loop stops with an error when any appear.


def masked_logits(logits, mask):
    return jnp.where(mask, logits, MASKED_LOGIT)


def fully_masked_rows(mask):
    return jnp.sum(~jnp.any(mask, axis=-1))


def categorical_sample(key, logits, mask):
    return jax.random.categorical(key, masked_logits(logits, mask), axis=-1)


def categorical_log_prob(logits, mask, action):
    log_p = jax.nn.log_softmax(masked_logits(logits, mask), axis=-1)
    return jnp.take_along_axis(log_p, action[..., None].astype(jnp.int32), axis=-1)[..., 0]


def categorical_entropy(logits, mask):
    log_p = jax.nn.log_softmax(masked_logits(logits, mask), axis=-1)
    return -jnp.sum(jnp.where(mask, jnp.exp(log_p) * log_p, 0.0), axis=-1)


# ---------------------------------------------------------------------------------------------------
# Diagonal Gaussian. The raw sample is what is stored and scored; the env receives it clipped to the
# action bounds (clipping, not tanh-squashing, keeps log-probabilities exact and is what PPO uses).


def gaussian_sample(key, mean, log_std):
    return mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)


def gaussian_log_prob(mean, log_std, action):
    z = (action - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * z**2 - log_std - 0.5 * jnp.log(2 * jnp.pi), axis=-1)


def gaussian_entropy(mean, log_std):
    return jnp.broadcast_to(jnp.sum(log_std + 0.5 * (1.0 + jnp.log(2 * jnp.pi))), mean.shape[:-1])
