"""A trained agent in memory: its parameters, its network, the env it plays, and its one policy (`Agent.act`).

`tools/saved_agent.py` loads one from a file (`hephaestus.load_agent`); a training run's evaluation video builds
one from the parameters in hand (core/playback.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Agent:
    """A trained agent: its parameters, its network, the env it plays and the metadata of its file."""

    params: Any
    network: Any  # networks.ActorCritic
    env: Any  # envs.adapters.AdaptedEnv
    meta: dict
    path: str = ""
    seed_index: int = 0  # which agent of a --num-seeds file
    _compiled: dict = field(default_factory=dict, repr=False)

    @property
    def spec(self):
        """The env's static facts (envs.adapters.EnvSpec): obs_dim, action_dim, discrete, has_action_mask."""
        return self.env.spec

    @property
    def num_seeds(self) -> int:
        """How many agents the file holds (a --num-seeds run's); this one is row `seed_index`."""
        from hephaestus.core.export import num_seeds_of

        return num_seeds_of(self.meta)

    @property
    def recurrent(self) -> bool:
        """Whether the policy remembers (a --recurrent gru | lstm run's): its `act` takes and returns a state."""
        from hephaestus.core.networks import is_recurrent

        return is_recurrent(self.network)

    def act(self, obs, key=None, mask=None, state=None):
        """The action(s) for `obs`: greedy (the argmax over the valid actions) without `key`, sampled with one.

        `obs`: one observation [obs_dim], a batch [..., obs_dim], or an env step (anything with `.obs` and
        `.action_mask`, as `env.reset` and `env.step` return), whose mask is used unless `mask` is given.
        `mask`: bool [..., action_dim], the valid actions; required where the env has action masks and `obs` is a
        bare array. Returns int32 [...] (discrete) or float32 [..., action_dim] within the action bounds.

        A recurrent agent (`recurrent`) returns `(action, state)`: pass that state back with the next observation of
        the same game(s); `state=None` starts a game (the state of a fresh episode, one per observation of the
        batch). The caller holds one state per game, so any number of games can be played at once. A feed-forward
        agent returns the action alone and takes no state."""
        import jax.numpy as jnp

        if hasattr(obs, "obs") and hasattr(obs, "action_mask"):
            obs, mask = obs.obs, obs.action_mask if mask is None else mask
        obs = jnp.asarray(obs)
        spec = self.spec
        if obs.ndim == 0 or obs.shape[-1] != spec.obs_dim:
            raise ValueError(f"{spec.name} observations have {spec.obs_dim} values; got shape {tuple(obs.shape)}")
        width = spec.action_dim if spec.discrete else 1
        if mask is None:
            if spec.has_action_mask:
                raise ValueError(f"{spec.name} has action masks: pass the env step (agent.act(step)) or "
                                 "mask=step.action_mask, so that no invalid action is chosen")
            mask = jnp.ones(obs.shape[:-1] + (width,), bool)
        mask = jnp.broadcast_to(jnp.asarray(mask, bool), obs.shape[:-1] + (jnp.shape(mask)[-1],))
        if not self.recurrent:
            if state is not None:
                raise ValueError("a feed-forward agent keeps no state: call act without state")
            if key is None:
                return self._policy(True)(self.params, obs, mask, None)
            return self._policy(False)(self.params, obs, mask, key)
        from hephaestus.core.networks import initial_carry

        if state is None:
            state = initial_carry(self.network, obs.shape[:-1])
        elif jnp.shape(state) != obs.shape[:-1] + initial_carry(self.network).shape:
            raise ValueError(f"state shaped {tuple(jnp.shape(state))} does not belong to observations shaped "
                             f"{tuple(obs.shape)}: pass the state act returned for these games (None to start)")
        return self._policy(key is None)(self.params, obs, mask, key, state)

    def _policy(self, greedy: bool):
        """networks.act (a recurrent network's act_carried), jitted once per agent and mode (greedy is a Python
        bool: it selects the program)."""
        if greedy not in self._compiled:
            import jax

            from hephaestus.core import networks

            network = self.network

            if self.recurrent:
                def policy(params, obs, mask, key, state):
                    # A fresh state (zeros) is already the state of an episode's start: no reset flag needed.
                    first = jax.numpy.zeros(obs.shape[:-1], bool)
                    state, acted = networks.act_carried(network, params, state, obs, first, mask, key, greedy)
                    return acted[0], state
            else:
                def policy(params, obs, mask, key):
                    return networks.act(network, params, obs, mask, key, greedy)[0]

            self._compiled[greedy] = jax.jit(policy)
        return self._compiled[greedy]
