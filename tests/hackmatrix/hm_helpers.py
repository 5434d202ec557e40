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
    # The parameters a rule test varies, the training shaping terms (0 or off in the rules' game), are inputs of the
    # program rather than baked in, so their tests share this compiled step.
    def step_env(k, s, a, acquired, played, at_clear, acquired_at_clear, reward_scale, programs_unscaled,
                 undo_across):
        return ENV.step_env(k, s, a, PARAMS.replace(
            program_acquired_coef=acquired, program_played_coef=played, program_played_at_clear=at_clear,
            program_acquired_at_clear=acquired_at_clear, curriculum_reward_scale=reward_scale,
            curriculum_programs_unscaled=programs_unscaled, undo_across_stages=undo_across))

    return jax.jit(step_env)


# The random rollout test_env and test_programs check their invariants on: ROLL_B lanes, ROLL_T steps of a
# masked-uniform policy through the batched gymnax step (auto-reset included). One compiled program for both
# modules (they run on one xdist worker, group "hackmatrix"): a batched HackMatrix rollout compiles for ~20 s of
# CPU on a 2-core machine, and each used to build its own.
ROLL_B, ROLL_T = 24, 96


@functools.lru_cache(maxsize=None)
def _rollout_program():
    vstep = jax.vmap(ENV.step, in_axes=(0, 0, 0, None))

    def policy(key, mask):
        return jax.random.categorical(key, jnp.where(mask, 0.0, -1e9)).astype(jnp.int32)

    @jax.jit
    def run(key, start):
        obs = jax.vmap(ENV.get_obs)(start)

        def body(carry, k):
            obs, st = carry
            k_act, k_step = jax.random.split(k)
            action = jax.vmap(policy)(jax.random.split(k_act, ROLL_B), obs["action_mask"])
            obs2, st2, r, te, tr, info = vstep(jax.random.split(k_step, ROLL_B), st, action, PARAMS)
            out = dict(action=action, mask=obs["action_mask"], obs=obs2, r=r, te=te, tr=tr,
                       terms=info["reward_terms"], stage=info["stage"], invalid=info["invalid_action"],
                       mask_in_info=info["action_mask"], st=st2, final_obs=info["final_observation"])
            return (obs2, st2), out

        _, outs = jax.lax.scan(body, (obs, start), jax.random.split(key, ROLL_T))
        return outs

    return run


def random_rollout(key, start):
    """ROLL_T steps of ROLL_B games from the batched state `start` under a masked-uniform policy, on the host:
    per step [ROLL_T, ROLL_B, ...] the action and the mask it was drawn from, then the step's obs, reward,
    terminated, truncated, reward terms, stage, invalid flag, info's mask, state and final observation."""
    return jax.device_get(_rollout_program()(key, start))


@functools.lru_cache(maxsize=None)
def resets(n=96, seed=0):
    """`n` new games (obs, state) on the host, from one jitted batched reset."""
    keys = jax.random.split(jax.random.key(seed), n)
    obs, st = jax.jit(jax.vmap(ENV.reset, in_axes=(0, None)))(keys, PARAMS)
    return jax.device_get(obs), jax.device_get(st)


def step(state, action, seed=0, program_acquired_coef=0.0, program_played_coef=0.0, program_played_at_clear=False,
         program_acquired_at_clear=False, curriculum_reward_scale=False, curriculum_programs_unscaled=False,
         undo_across_stages=True):
    """One step_env with the shared jitted function. Returns (obs, state, reward, term, info)."""
    return step_with_key(jax.random.key(seed), state, action, program_acquired_coef, program_played_coef,
                         program_played_at_clear, program_acquired_at_clear, curriculum_reward_scale,
                         curriculum_programs_unscaled, undo_across_stages)


def step_with_key(key, state, action, program_acquired_coef=0.0, program_played_coef=0.0,
                  program_played_at_clear=False, program_acquired_at_clear=False, curriculum_reward_scale=False,
                  curriculum_programs_unscaled=False, undo_across_stages=True):
    """`step` with a given key (a raw uint32 key is wrapped: the same bits, so the same step)."""
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(key)
    return _jstep()(key, state, jnp.int32(action), jnp.float32(program_acquired_coef),
                    jnp.float32(program_played_coef), jnp.bool_(program_played_at_clear),
                    jnp.bool_(program_acquired_at_clear), jnp.bool_(curriculum_reward_scale),
                    jnp.bool_(curriculum_programs_unscaled), jnp.bool_(undo_across_stages))


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
