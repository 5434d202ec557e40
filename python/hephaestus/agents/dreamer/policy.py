"""The dreamer's actor-critic on the world model's state (--dreamer-actor-input state; specs/dreamer.md).

DreamerV3's actor and critic read the model state (h, z), not an observation. In imagination the dream supplies
(h, z); in the real env the policy must filter its observations into (h, z) itself, with the world model's
posterior, as the rollout's world model does. `LatentActorCritic` is that policy as one pipeline network: it holds
a copy of the world model's member 0 (the submodule `world_model`, which the dreamer stage overwrites with the
trained member after every update: `with_world_model`) beside the actor and critic MLPs, and acts as a recurrent
network whose carry is the filter's state, so the rollout, evaluation, `Agent.act` and checkpoints carry it as they
carry a --recurrent policy's:

    carry = [h_{t-1}, z_{t-1}, a_{t-1}]                (zeros at the start)
    h_t   = GRU(h_{t-1}, [z_{t-1}, a_{t-1}]),  0 where o_t starts an episode   (rssm.observe's reset)
    z_t   = the posterior's mode given (h_t, o_t)      (deterministic: acting needs no key)
    (policy, value) = heads([h_t, z_t]);  the carry becomes [h_t, z_t, a_t] once the action is chosen
                                          (networks.act_carried calls `with_action`)

The dreams start from sampled posterior states and roll sampled priors: the actor sees one-hot latents either way.
No gradient of the actor-critic loss reaches the copy (the loss reads only the MLPs on given states).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from hephaestus.agents.dtc import rssm
from hephaestus.core.networks import MLP, actor_critic_outputs, critic_value

WORLD_MODEL = "world_model"  # the copy's name in the network's parameters


class LatentActorCritic(nn.Module):
    sizes: rssm.RSSMSizes
    action_dim: int
    discrete: bool
    hidden_dim: int = 256
    num_layers: int = 2
    activation: str = "tanh"
    dtype: jnp.dtype = jnp.float32
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    unimix: float = 0.0
    value_bins: int = 0
    recurrent: str = "latent"  # networks.is_recurrent: the rollout carries its filter state
    carries_action: bool = True  # networks.act_carried writes the chosen action into the carry

    @property
    def carry_width(self) -> int:
        return self.sizes.deter + self.sizes.stoch + self.action_width

    @property
    def action_width(self) -> int:
        return self.sizes.action_dim

    def setup(self):
        dims = (self.hidden_dim,) * self.num_layers
        self.world_model = rssm.RSSM(self.sizes)
        self.actor = MLP(dims, self.action_dim, 0.01, self.activation, self.dtype)
        self.critic = MLP(dims, self.value_bins or 1, 0.0 if self.value_bins else 1.0, self.activation, self.dtype)
        if not self.discrete:
            self.log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,), jnp.float32)

    # -- on a model state [..., deter + stoch] (the dreams) ---------------------------------------------------------
    def raw_heads(self, feat):
        return actor_critic_outputs(self, feat)

    def heads(self, feat):
        out, raw = self.raw_heads(feat)
        return out, critic_value(raw, self.value_bins)

    def outputs(self, feat):
        """(policy_params, the critic's raw output) of model states: what the dreamer's loss reads."""
        return self.raw_heads(feat)

    def value(self, feat):
        return critic_value(self.critic(feat), self.value_bins)

    # -- in the real env: filter observations into the state ------------------------------------------------------
    def filter(self, carry, obs, first):
        """The model state [..., deter + stoch] of `obs` after `carry` (reset where `first`)."""
        s = self.sizes
        h, z, a = jnp.split(carry, [s.deter, s.deter + s.stoch], axis=-1)
        if self.is_initializing():  # every parameter of the world model, so the dreamer can copy a member in
            self.world_model(obs, a, jax.random.PRNGKey(0))
        h = self.world_model.gru_step(h, z, a)
        h = jnp.where(first[..., None], 0.0, h)
        z = rssm.latent_mode(self.world_model.post_logits(h, self.world_model.encode(obs)))
        return jnp.concatenate([h, z], -1)

    def step(self, carry, obs, first):
        feat = self.filter(carry, obs, first)
        next_carry = jnp.concatenate([feat, jnp.zeros(feat.shape[:-1] + (self.action_width,), jnp.float32)], -1)
        return next_carry, self.heads(feat)

    def value_step(self, carry, obs):
        return self.value(self.filter(carry, obs, jnp.zeros(obs.shape[:-1], bool)))

    def policy_log_std(self):
        return self.log_std

    @nn.nowrap
    def with_action(self, carry, action):
        """The carry with the chosen action (one-hot, or the raw vector) in its last `action_width` entries."""
        a_vec = rssm.action_vector(action, self.sizes)
        return jnp.concatenate([carry[..., :-self.action_width], a_vec], -1)


def with_world_model(params, member_params):
    """The network's variables with the world model's copy replaced by `member_params` (one member's variables)."""
    inner = dict(params["params"])
    inner[WORLD_MODEL] = member_params["params"]
    return {**params, "params": inner}
