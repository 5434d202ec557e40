"""On-device replay: a fixed-capacity ring buffer of length-L sequences, kept in the stage state.

Every rollout [T, N] is cut into (T / L) * N sequences (env n, steps [jL, (j+1)L)) and written at the write
pointer, wrapping around. Sampling is O(1) per draw and stratified:

* frontier: `round(frontier_fraction * B)` draws uniform over the `min(window, count)` most recently
  written slots, i.e. slots (ptr - 1 - u) mod capacity, u ~ U[0, min(window, count));
* episodic: the rest, uniform over every stored slot, U[0, count) (while filling, slots 0..count-1 are the
  stored ones; once full, every slot is).

Both are correct while the buffer fills and after the pointer wraps; no sums, trees or priorities.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
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


def sample_indices(key, replay: Replay, batch: int, frontier_fraction: float, window: int):
    """Slot indices: the first `round(frontier_fraction * batch)` from the frontier, the rest episodic.
    Returns (indices int32[batch], is_frontier bool[batch])."""
    cap = capacity_of(replay)
    n_front = int(round(frontier_fraction * batch))
    key_f, key_e = jax.random.split(key)
    count = jnp.maximum(replay.count, 1)
    w = jnp.minimum(jnp.int32(window), count)
    back = jax.random.randint(key_f, (n_front,), 0, w)  # u in [0, w)
    front = (replay.ptr - 1 - back) % cap
    episodic = jax.random.randint(key_e, (batch - n_front,), 0, count)
    idx = jnp.concatenate([front, episodic]).astype(jnp.int32)
    is_front = jnp.arange(batch) < n_front
    return idx, is_front


def replay_sample(key, replay: Replay, batch: int, frontier_fraction: float, window: int) -> dict:
    """`batch` sequences, time-major: name -> [L, batch, ...]."""
    idx, _ = sample_indices(key, replay, batch, frontier_fraction, window)
    return {k: jnp.swapaxes(jnp.take(v, idx, axis=0), 0, 1) for k, v in replay.data.items()}
