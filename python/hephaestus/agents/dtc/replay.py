"""On-device replay: a fixed-capacity ring buffer of length-L sequences, kept in the stage state.

Every rollout [T, N] is cut into (T / L) * N sequences (env n, steps [jL, (j+1)L)) and written at the write
pointer, wrapping around. Sampling is O(1) per draw and stratified:

* frontier: `round(frontier_fraction * B)` draws uniform over the `min(window, count)` most recently
  written slots, i.e. slots (ptr - 1 - u) mod capacity, u ~ U[0, min(window, count));
* reward-rich (off unless `reward_fraction` > 0): `round(reward_fraction * B)` draws over the stored slots in
  proportion to each sequence's largest |reward| to the power `reward_power` (2 by default: proportional
  weights let thousands of small move costs outweigh one large reward), so that a rare large reward (DeepSea's treasure, found once
  in hundreds of episodes) is replayed until the reward head has learned it instead of about once; where every
  sequence's largest |reward| is the same (CartPole's 1 per step) these draws are uniform like the episodic ones;
* episodic: the rest, uniform over every stored slot, U[0, count) (while filling, slots 0..count-1 are the
  stored ones; once full, every slot is).

All are correct while the buffer fills and after the pointer wraps. The reward-rich draws read the stored
rewards (capacity x L) at every draw, O(capacity), with no sum tree: the buffers here hold thousands of
sequences, not millions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct


@struct.dataclass
class Replay:
    data: dict  # name -> [capacity, L, ...]
    ptr: jax.Array  # int32[], next slot to write
    count: jax.Array  # int32[], slots holding data (<= capacity)


def replay_init(capacity: int, example: dict) -> Replay:
    """`example`: name -> ShapeDtypeStruct/array of ONE sequence [L, ...]."""
    data = {k: jnp.zeros((capacity,) + tuple(v.shape), v.dtype) for k, v in example.items()}
    return Replay(data=data, ptr=jnp.int32(0), count=jnp.int32(0))


def capacity_of(replay: Replay) -> int:
    return next(iter(replay.data.values())).shape[0]


def to_sequences(batch_tn: dict, seq_len: int) -> dict:
    """[T, N, ...] -> [(T / L) * N, L, ...], sequence index = chunk * N + env."""

    def cut(x):
        t, n = x.shape[:2]
        x = x.reshape((t // seq_len, seq_len, n) + x.shape[2:])
        x = jnp.swapaxes(x, 1, 2)
        return x.reshape((t // seq_len * n, seq_len) + x.shape[3:])

    return {k: cut(v) for k, v in batch_tn.items()}


def replay_add(replay: Replay, seqs: dict) -> Replay:
    """Write S sequences (S <= capacity) at the pointer, wrapping."""
    cap = capacity_of(replay)
    s = next(iter(seqs.values())).shape[0]
    if s > cap:
        raise ValueError(f"replay capacity {cap} is smaller than one rollout's {s} sequences")
    idx = (replay.ptr + jnp.arange(s, dtype=jnp.int32)) % cap
    data = {k: replay.data[k].at[idx].set(seqs[k].astype(replay.data[k].dtype)) for k in replay.data}
    return Replay(data=data, ptr=(replay.ptr + s) % cap, count=jnp.minimum(replay.count + s, cap))


def reward_priority(replay: Replay, power: float) -> jax.Array:
    """Each slot's largest |reward| over its sequence to `power`, float32[capacity] (0 for slots not yet written)."""
    return jnp.max(jnp.abs(replay.data["reward"].astype(jnp.float32)), axis=1) ** power


def sample_indices(key, replay: Replay, batch: int, frontier_fraction: float, window: int,
                   reward_fraction: float = 0.0, reward_power: float = 2.0):
    """Slot indices: the first `round(frontier_fraction * batch)` from the frontier, then
    `round(reward_fraction * batch)` reward-rich ones (at most what the frontier leaves), the rest episodic.
    Returns (indices int32[batch], is_frontier bool[batch])."""
    cap = capacity_of(replay)
    n_front = int(round(frontier_fraction * batch))
    n_reward = min(int(round(reward_fraction * batch)), batch - n_front)
    if n_reward:
        key_f, key_e, key_r = jax.random.split(key, 3)
    else:  # the two-way split of the sampler without reward-rich draws, so its draws stay as they were
        key_f, key_e = jax.random.split(key)
    count = jnp.maximum(replay.count, 1)
    w = jnp.minimum(jnp.int32(window), count)
    back = jax.random.randint(key_f, (n_front,), 0, w)  # u in [0, w)
    front = (replay.ptr - 1 - back) % cap
    parts = [front]
    if n_reward:
        # log-weights of the stored slots; the floor keeps a buffer of zero rewards uniform and every slot
        # possible, and slots not yet written (index >= count while filling) impossible
        logits = jnp.log(reward_priority(replay, reward_power) + 1e-12)
        logits = jnp.where(jnp.arange(cap) < count, logits, -jnp.inf)
        parts.append(jax.random.categorical(key_r, logits, shape=(n_reward,)))
    parts.append(jax.random.randint(key_e, (batch - n_front - n_reward,), 0, count))
    idx = jnp.concatenate(parts).astype(jnp.int32)
    is_front = jnp.arange(batch) < n_front
    return idx, is_front


def replay_sample(key, replay: Replay, batch: int, frontier_fraction: float, window: int,
                  reward_fraction: float = 0.0, reward_power: float = 2.0) -> dict:
    """`batch` sequences, time-major: name -> [L, batch, ...]."""
    idx, _ = sample_indices(key, replay, batch, frontier_fraction, window, reward_fraction, reward_power)
    return {k: jnp.swapaxes(jnp.take(v, idx, axis=0), 0, 1) for k, v in replay.data.items()}


def with_first_flags(seq: dict) -> dict:
    """Time-major sequences [L, B, ...] plus `first` [L, B]: a replayed sequence starts from a zero state (its step
    0 counts as a start) and a step after an episode end starts the next episode."""
    return {**seq, "first": jnp.concatenate([jnp.ones_like(seq["done"][:1]), seq["done"][:-1]], 0)}


def stored_sequences(replay: Replay, limit: int | None = None) -> tuple[dict, dict]:
    """The first `limit` (default: all) written slots, for reading a trained model outside the chunk (the
    experiments' probes): (name -> numpy [B, L, ...], the same time-major as jnp [L, B, ...] with `first`)."""
    count = int(replay.count) if limit is None else min(int(replay.count), limit)
    data = {k: np.asarray(v)[:count] for k, v in jax.device_get(replay.data).items()}
    return data, with_first_flags({k: jnp.swapaxes(jnp.asarray(v), 0, 1) for k, v in data.items()})
