"""HackMatrix's env alone, this checkout's step against another git revision's (`--reference REV`, exported as
hackmatrix_step_differential.py does), in one process: both random-policy chunks (masked-uniform actions, auto-reset, the bench's hackmatrix-random case) are
compiled, then timed in alternation, so a load that drifts over minutes hits both alike. Prints each one's lower +
compile seconds and, per round, wall and process CPU seconds per chunk; CPU seconds are the steadier figure on a
shared machine.

    python benchmarks/hackmatrix_step_ab.py --reference ce78ab6 --num-envs 2048 --rounds 5
"""
import argparse
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp

from hephaestus.tools.entry_points import load_script

reference_env = load_script(os.path.join(os.path.dirname(os.path.abspath(__file__)), "hackmatrix_step_differential.py"),
                            "hackmatrix_step_differential").reference_env


def chunk_program(env, num_envs, steps):
    params = env.default_params

    def chunk(carry):
        def one(carry, key):
            state, mask = carry
            k_act, k_env = jax.random.split(key)
            action = jax.random.categorical(k_act, jnp.where(mask, 0.0, -1e9)).astype(jnp.int32)
            obs, state, reward, _, _, _ = jax.vmap(lambda k, s, a: env.step_and_reset(k, s, a, params))(
                jax.random.split(k_env, num_envs), state, action)
            return (state, obs["action_mask"]), reward.sum()

        (state, mask), key = carry
        key, sub = jax.random.split(key)
        (state, mask), rewards = jax.lax.scan(one, (state, mask), jax.random.split(sub, steps))
        return ((state, mask), key), rewards

    obs, state = jax.jit(jax.vmap(lambda k: env.reset_env(k, params)))(
        jax.random.split(jax.random.PRNGKey(0), num_envs))
    carry = ((state, obs["action_mask"]), jax.random.PRNGKey(1))
    t0 = time.perf_counter()
    compiled = jax.jit(chunk).lower(carry).compile()
    return compiled, carry, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", required=True, metavar="REV", help="the git revision whose step is compared")
    ap.add_argument("--num-envs", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=32, help="steps per timed chunk")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from hephaestus.envs.hackmatrix import HackMatrix

    reference = reference_env(args.reference)
    if reference is None:
        print(f"error: --reference {args.reference}: not a git revision with HackMatrix's env", file=sys.stderr)
        return 2
    progs = {}
    for name, env in (("today", HackMatrix()), ("reference", reference)):
        compiled, carry, secs = chunk_program(env, args.num_envs, args.steps)
        carry, _ = jax.block_until_ready(compiled(carry))
        progs[name] = [compiled, carry]
        print(f"{name}: lower + compile {secs:.1f} s", flush=True)
    times = {name: ([], []) for name in progs}
    for r in range(args.rounds):
        for name, prog in progs.items():
            w, c = time.perf_counter(), time.process_time()
            prog[1], _ = jax.block_until_ready(prog[0](prog[1]))
            times[name][0].append(time.perf_counter() - w)
            times[name][1].append(time.process_time() - c)
        print(f"round {r}: " + ", ".join(f"{n} wall {t[0][-1]:.2f} s cpu {t[1][-1]:.2f} s" for n, t in times.items()),
              flush=True)
    steps = args.num_envs * args.steps
    med = {n: (statistics.median(t[0]), statistics.median(t[1])) for n, t in times.items()}
    for n, (w, c) in med.items():
        print(f"{n}: {steps / w:,.0f} env steps/s wall, {steps / c:,.0f} per CPU second (medians)")
    print(f"today / reference: {med['reference'][0] / med['today'][0]:.2f}x wall, "
          f"{med['reference'][1] / med['today'][1]:.2f}x CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
