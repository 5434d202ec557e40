"""Where HackMatrix's step goes, by rule area: StableHLO operations of each area's function, lowered alone and
vmapped over the games as the step runs it, and its time on this machine (jit of the vmapped function on a
batch of mid-game states, median of a few calls).

    python benchmarks/hackmatrix_step_profile.py --num-envs 2048 --calls 5

The areas overlap nothing but are not all of the step (the reward terms, episode statistics and the selects
that merge branches are the rest), so the whole step's line is its own measurement, not a sum.
"""
import argparse
import collections
import statistics
import time

import jax
import jax.numpy as jnp

from hephaestus.envs.hackmatrix import enemies as en, env as hm_env, rng, step as hm_step
from hephaestus.envs.hackmatrix.constants import MAX_ENTITIES
from hephaestus.envs.hackmatrix.generate import place_transmissions
from hephaestus.envs.hackmatrix.history import push_pop
from hephaestus.envs.hackmatrix.observe import action_mask, observation
from hephaestus.envs.hackmatrix.programs import run_program_where


def count_ops(lowered):
    """Operations of the lowered module by dialect prefix (stablehlo ops, func.call/func.func separately)."""
    cnt = collections.Counter()

    def walk(op):
        for region in op.regions:
            for block in region.blocks:
                for o in block.operations:
                    cnt[o.operation.name] += 1
                    walk(o.operation)

    walk(lowered.compiler_ir("stablehlo").operation)
    return sum(v for k, v in cnt.items() if k.startswith("stablehlo."))


def enemy_moves(st, sd):
    """E1-E3 of the enemy phase: the turn, hatching, the two sub-steps' moves and attacks with their shortest
    paths."""
    k0, k1 = (rng.hash32(sd ^ rng.U(c)) for c in (0x1111, 0x2222))
    return en.move_enemies(en.hatch(st.replace(turn=st.turn + 1)), k0, k1)


def spawns(st, sd):
    """E4-E5: the scheduled transmission and the siphon spawns (one placement loop)."""
    fire = ((~st.sched_disabled) & (st.turn >= st.next_sched_turn)).astype(jnp.int32)
    nth = jnp.arange(MAX_ENTITIES, dtype=jnp.int32)
    return place_transmissions(st, sd, fire + st.pending_siphon, nth < fire, nth >= fire)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-envs", type=int, default=2048)
    ap.add_argument("--warm-steps", type=int, default=40, help="random steps before the timed batch")
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--areas", default="", help="comma-separated subset of the areas (default: all)")
    args = ap.parse_args()
    env = hm_env.HackMatrix()
    params = env.default_params
    n = args.num_envs
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    _, st = jax.jit(jax.vmap(env.reset_env, (0, None)))(keys, params)
    v_step = jax.jit(jax.vmap(lambda k, s, a: env.step_and_reset(k, s, a, params)))
    key = jax.random.PRNGKey(1)
    mask = jax.vmap(action_mask)(st)
    for _ in range(args.warm_steps):
        key, ka, ks = jax.random.split(key, 3)
        act = jax.random.categorical(ka, jnp.where(mask, 0.0, -1e9))
        _, st, _, _, _, info = v_step(jax.random.split(ks, n), st, act)
        mask = info["action_mask"] if False else jax.vmap(action_mask)(st)
    key, ka, ks = jax.random.split(key, 3)
    act = jax.random.categorical(ka, jnp.where(mask, 0.0, -1e9)).astype(jnp.int32)
    step_keys = jax.random.split(ks, n)
    seeds = jax.vmap(rng.seed)(step_keys)
    played = jax.jit(jax.vmap(lambda s, a, k: hm_step.play(s, a, k, params)))(st, act, step_keys)
    next_stage, done = played[1], played[4] | (played[0].time >= params.max_steps_in_episode)
    print(f"batch: {n} games after {args.warm_steps} random steps; this step: {int(next_stage.sum())} stage "
          f"advances, {int(done.sum())} episodes done, {int((act > 4).sum())} programs, "
          f"{int((act == 4).sum())} siphons")

    areas = {
        "whole step (step_and_reset)": (lambda s, a, k: env.step_and_reset(k, s, a, params), (st, act, step_keys)),
        "play (the step less level generation)": (lambda s, a, k: hm_step.play(s, a, k, params),
                                                 (st, act, step_keys)),
        "enemy phase (E0-E6)": (lambda s, d: en.enemy_phase(s, d), (st, seeds)),
        "  enemy moves and attacks (E1-E3, shortest paths)": (enemy_moves, (st, seeds)),
        "  spawns and transmissions (E4-E5)": (spawns, (st, seeds)),
        "level generation (stage advance + auto-reset, compacted)": (
            lambda ns, d, s, sd, sr: hm_env._levels_compact(ns, d, (hm_env.get_obs(s), s), sd, sr,
                                                           *hm_env._curriculum(params)),
            (next_stage, done, played[0], played[2], seeds)),
        "programs (compacted)": (lambda s, a, sd: run_program_where(a > 4, s, a - 5, sd), (st, act, seeds)),
        "move / attack": (lambda s, a: hm_step.move_or_attack(s, jnp.clip(a, 0, 3)), (st, act)),
        "siphon + siphon quality": (lambda s: (hm_step._siphon(s), hm_step.siphon_quality_missed(s)), (st,)),
        "UNDO snapshot push/pop": (lambda s, a: push_pop(s, a < 4, a == 14), (st, act)),
        "observation": (observation, (st,)),
        "action mask": (action_mask, (st,)),
        "exit distances (reward, before and after)": (lambda s: hm_step.exit_dists(s, s), (st,)),
        "step seeds (threefry)": (lambda k: rng.seeds(k, 3), (step_keys,)),
    }
    wanted = [a for a in args.areas.split(",") if a]
    print(f"| area | StableHLO ops | compile s | ms per call ({n} games) |")
    print("|---|---|---|---|")
    for name, (fn, fargs) in areas.items():
        if wanted and not any(w in name for w in wanted):
            continue
        f = jax.jit(jax.vmap(fn))
        lowered = f.lower(*fargs)
        ops = count_ops(lowered)
        t0 = time.perf_counter()
        compiled = lowered.compile()
        comp = time.perf_counter() - t0
        jax.block_until_ready(compiled(*fargs))
        ts = []
        for _ in range(args.calls):
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(*fargs))
            ts.append(time.perf_counter() - t0)
        print(f"| {name} | {ops:,} | {comp:.1f} | {1e3 * statistics.median(ts):.1f} |", flush=True)


if __name__ == "__main__":
    main()
