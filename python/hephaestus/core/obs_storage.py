"""How the rollout buffer stores observations (`--obs-dtype`), and how a minibatch gets them back.

Observations are the largest array of a rollout (HackMatrix at 2048 x 128: 262k x 1545 floats = 1.6 GB in
float32), so they are stored compactly and turned back into float32 only a minibatch at a time.

- float32: as the env gives them.
- uint8: exact. An env that declares `obs_quanta` (EnvSpec) promises that `obs[i] * obs_quanta[i]` is an
  integer in 0..255 for every observation it can produce (HackMatrix: one-hot flags, hp / 3, points / 9, ...).
  The buffer keeps those integers and turns them back with the same float32 division the env did, so the
  restored observation is bit-identical to the env's: a quarter of the memory and nothing for the agent to notice.
- bfloat16: lossy (8 bits of mantissa), for wide observations that are not quantised; the policy acts on the
  rounded values, so what is stored is exactly what it acted on.

`to_storage` is what the rollout stores, `from_storage` what the network reads (the words `encode`/`decode`
belong to the networks' feature encoders, networks.py and dtc/rssm.py). `to_gather`/`from_gather` wrap the
minibatch gather: XLA's CPU backend gathers bfloat16 in float32 and, since the batch is loop-invariant in the
minibatch scan, hoists that conversion out of it, a float32 copy of every stored observation (measured: the
update's temporaries 98 -> 484 MiB at 512 x 128 x 1545); gathering the uint16 bit patterns avoids it.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

@dataclass(frozen=True)
class ObsStorage:
    dtype: str  # "float32", "bfloat16" or "uint8", as networks.resolve_obs_dtype resolved --obs-dtype
    quanta: tuple[float, ...] | None = None  # uint8 only: obs * quanta is an integer in 0..255

    def __post_init__(self):
        if self.dtype == "uint8" and self.quanta is None:
            raise ValueError("uint8 observation storage needs the env's obs_quanta")

    def to_storage(self, obs):
        """float32 observations -> the stored array."""
        if self.dtype == "uint8":
            # Saturate rather than wrap should an env break its promise (e.g. HackMatrix's uncapped siphon
            # count past 2550 / 10, which no game reaches).
            return jnp.clip(jnp.round(obs * self._quanta()), 0, 255).astype(jnp.uint8)
        return obs.astype(self.dtype)

    def from_storage(self, stored):
        """The stored array -> float32 observations, as the network reads them."""
        if self.dtype == "uint8":
            return stored.astype(jnp.float32) / self._quanta()
        return stored.astype(jnp.float32)

    def to_gather(self, stored):
        return jax.lax.bitcast_convert_type(stored, jnp.uint16) if stored.dtype == jnp.bfloat16 else stored

    def from_gather(self, gathered):
        if self.dtype == "bfloat16":
            gathered = jax.lax.bitcast_convert_type(gathered, jnp.bfloat16)
        return self.from_storage(gathered)

    def _quanta(self):
        return jnp.asarray(np.asarray(self.quanta, np.float32))


def storage_for(dtype: str, spec) -> ObsStorage:
    """The storage of resolved dtype `dtype` for an env (`spec`: envs.adapters.EnvSpec)."""
    return ObsStorage(dtype, spec.obs_quanta if dtype == "uint8" else None)
