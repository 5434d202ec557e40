import functools

import jax
import jax.numpy as jnp
import numpy as np

from hephaestus.envs.hackmatrix import HackMatrix
from hephaestus.envs.hackmatrix.state import REWARD_TERMS

ENV = HackMatrix()
PARAMS = ENV.default_params


@functools.lru_cache(maxsize=None)
def _jstep():
    return jax.jit(lambda k, s, a: ENV.step_env(k, s, a, PARAMS))


def step(state, action, seed=0):
    """One step_env with the shared jitted function. Returns (obs, state, reward, term, info)."""
    return step_with_key(jax.random.key(seed), state, action)


def step_with_key(key, state, action):
    """`step` with a given key (a raw uint32 key is wrapped: the same bits, so the same step)."""
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(key)
    return _jstep()(key, state, jnp.int32(action))


def cell(r, c):
    return r * 6 + c


def enemies(state):
    """List of (type, (r, c), hp, disabled, stunned, sched, siphon) in list order."""
    s = jax.device_get(state)
    out = []
    for j in np.argsort(s.ent_order):
        if s.ent_active[j] and s.ent_enemy[j]:
            out.append((int(s.ent_type[j]), divmod(int(s.ent_pos[j]), 6), int(s.ent_hp[j]),
                        int(s.ent_disabled[j]), bool(s.ent_stunned[j]), bool(s.ent_sched[j]),
                        bool(s.ent_siphon[j])))
    return out


def transmissions(state):
    """List of ((r, c), turns, type, sched, siphon) in list order."""
    s = jax.device_get(state)
    out = []
    for j in np.argsort(s.ent_order):
        if s.ent_active[j] and not s.ent_enemy[j]:
            out.append((divmod(int(s.ent_pos[j]), 6), int(s.ent_turns[j]), int(s.ent_type[j]),
                        bool(s.ent_sched[j]), bool(s.ent_siphon[j])))
    return out


def terms(info):
    return {k: float(v) for k, v in info["reward_terms"].items()}


def nonzero_terms(info):
    return {k: round(v, 6) for k, v in terms(info).items() if abs(v) > 1e-9}


def check_sum(reward, info):
    t = info["reward_terms"]
    assert set(t) == set(REWARD_TERMS)
    total = sum(float(t[k]) for k in REWARD_TERMS)
    assert abs(float(reward) - total) <= 1e-6 * max(1.0, abs(total)), (float(reward), total)


def py_bfs_connected(blocks, exit_cell):
    """Reference R32(a) BFS in plain Python (blocks: set of cells)."""
    walk = {c for c in range(36) if c not in blocks}
    start = min(walk)
    seen = {start}
    queue = [start]
    while queue:
        c = queue.pop(0)
        if c == exit_cell and c != start:
            continue
        r, k = divmod(c, 6)
        for dr, dc in ((1, 0), (-1, 0), (0, -1), (0, 1)):
            rr, cc = r + dr, k + dc
            n = rr * 6 + cc
            if 0 <= rr < 6 and 0 <= cc < 6 and n in walk and n not in seen:
                seen.add(n)
                queue.append(n)
    return seen == walk
