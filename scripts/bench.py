#!/usr/bin/env python3
"""Speed benchmarks. Prints one line per case: compile seconds, env steps per second (median of 3 timed chunks
after compile) and peak memory. Each case runs in its own process so its peak memory is its own.

    python scripts/bench.py                      # every case
    python scripts/bench.py --cases cartpole-4x128,cartpole-4x128-reference
    python scripts/bench.py --devices 1,2,4,8     # one data-parallel workload over 1, 2, 4, 8 devices

Peak memory is the process's peak resident set on the CPU (which includes compilation), or the device's peak
bytes in use where the backend reports it (GPU/TPU). PPO cases also print the compiled program's own buffers
(XLA's memory analysis: arguments, outputs and temporaries), which is what the program needs on a device, and
the setup seconds before the compile (building the env and the initial state, which compiles the reset).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from hephaestus.entry_points import require_this_checkout

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMED_RUNS = 3


def peak_memory_mib() -> float:
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    if "peak_bytes_in_use" in stats:
        return stats["peak_bytes_in_use"] / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def time_chunks(run_chunk, state, steps_per_chunk):
    import jax

    rates = []
    for _ in range(TIMED_RUNS):
        t0 = time.perf_counter()
        state, out = run_chunk(state)
        jax.block_until_ready(out)
        rates.append(steps_per_chunk / (time.perf_counter() - t0))
    return statistics.median(rates)


def bench_hephaestus(env_name, num_envs, num_steps, updates_per_chunk, **overrides):
    import numpy as np

    from hephaestus.config import TrainConfig, resolve
    from hephaestus.loop import release_freed_memory
    from hephaestus.ppo import make_train

    config, _ = resolve(TrainConfig.from_flat(env=env_name, num_envs=num_envs, num_steps=num_steps,
                                    log_interval=updates_per_chunk, total_timesteps=10**9, **overrides))
    t0 = time.perf_counter()
    trainer = make_train(config)  # builds the env and the initial state (compiles the reset)
    setup_s = time.perf_counter() - t0
    config = trainer.config  # resolved for the env: encoder and observation storage settled
    n = np.int32(updates_per_chunk)
    t0 = time.perf_counter()
    compiled = trainer.compiled_chunk.lower(trainer.runner_state, n).compile()
    compile_s = time.perf_counter() - t0
    release_freed_memory()  # as the training loop does
    state, _ = compiled(trainer.runner_state, n)  # warm-up run
    # With --num-seeds S the chunk trains S agents: its throughput counts all of their env steps.
    sps = time_chunks(lambda s: compiled(s, n), state, updates_per_chunk * config.batch_size * config.run.num_seeds)
    # The program's own buffers as XLA planned them (arguments + outputs + temporaries, aliased donations
    # counted once): what a GPU/TPU needs, without the compiler's and Python's share of the process peak.
    mem = compiled.memory_analysis()
    program_mib = (mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
                   - mem.alias_size_in_bytes) / 2**20 if mem is not None else float("nan")
    return {"compile_s": compile_s, "steps_per_s": sps,
            "detail": f"setup {setup_s:.1f}s, " + (f"{config.run.num_seeds} seeds, " if config.run.num_seeds > 1 else "") +
                      f"{config.ppo.num_minibatches} mb x {config.ppo.update_epochs} ep, hidden {config.network.hidden_dim}, "
                      f"{config.network.encoder} encoder, obs {config.network.obs_dtype}, "
                      f"XLA buffers {program_mib:,.0f} MiB"}


def bench_reference(env_id, num_envs, num_steps, updates_per_chunk, hidden_dim, num_layers):
    import importlib.util

    import gymnax
    import jax

    from hephaestus.config import auto_scale_for_batch_size

    # benchmarks/ is not an installed package: load the reference implementation from its file
    spec = importlib.util.spec_from_file_location("purejaxrl_reference",
                                                  os.path.join(ROOT, "benchmarks", "purejaxrl_reference.py"))
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    make_reference_train = reference.make_reference_train
    env, params = gymnax.make(env_id)
    minibatches, epochs = auto_scale_for_batch_size(num_envs, num_steps)
    init, chunk = make_reference_train(env, params, num_envs, num_steps, minibatches, epochs, hidden_dim, num_layers)
    state = init(jax.random.PRNGKey(0))
    t0 = time.perf_counter()
    compiled = jax.jit(lambda s: chunk(s, updates_per_chunk)).lower(state).compile()
    compile_s = time.perf_counter() - t0
    state, _ = compiled(state)
    sps = time_chunks(compiled, state, updates_per_chunk * num_envs * num_steps)
    return {"compile_s": compile_s, "steps_per_s": sps, "detail": f"{minibatches} mb x {epochs} ep, hidden {hidden_dim}"}


def bench_random_policy(env_name, num_envs, steps_per_chunk):
    """Env alone: masked-uniform random actions, `steps_per_chunk` vectorised steps in one scan."""
    import jax
    import jax.numpy as jnp

    from hephaestus.envs.registry import make_env

    env = make_env(env_name)
    v_reset, v_step = jax.vmap(env.reset), jax.vmap(env.step)

    def chunk(carry):
        def one(carry, key):
            state, mask = carry
            k_act, k_env = jax.random.split(key)
            action = jax.random.categorical(k_act, jnp.where(mask, 0.0, -1e9))
            state, step = v_step(jax.random.split(k_env, num_envs), state, action)
            return (state, step.action_mask), step.reward.sum()

        (state, mask), key = carry
        key, sub = jax.random.split(key)
        (state, mask), rewards = jax.lax.scan(one, (state, mask), jax.random.split(sub, steps_per_chunk))
        return ((state, mask), key), rewards

    state, first = v_reset(jax.random.split(jax.random.PRNGKey(0), num_envs))
    carry = ((state, first.action_mask), jax.random.PRNGKey(1))
    t0 = time.perf_counter()
    compiled = jax.jit(chunk, donate_argnums=0).lower(carry).compile()
    compile_s = time.perf_counter() - t0
    carry, _ = compiled(carry)
    sps = time_chunks(compiled, carry, steps_per_chunk * num_envs)
    return {"compile_s": compile_s, "steps_per_s": sps, "detail": "random policy, env only"}


# name -> (function, kwargs). Sizes keep the whole default run under ~5 minutes on 2 CPU cores.
CASES = {
    "cartpole-4x128": (bench_hephaestus, dict(env_name="gymnax:CartPole-v1", num_envs=4, num_steps=128,
                                              updates_per_chunk=100, hidden_dim=64, num_layers=2)),
    "cartpole-4x128-reference": (bench_reference, dict(env_id="CartPole-v1", num_envs=4, num_steps=128,
                                                       updates_per_chunk=100, hidden_dim=64, num_layers=2)),
    # --num-seeds 4 in one program: its aggregate env steps/s against one seed's (4 separate runs one after
    # another have the single run's rate). specs/pipeline.md, "Many seeds", has the measured ratios.
    "cartpole-4x128-seeds4": (bench_hephaestus, dict(env_name="gymnax:CartPole-v1", num_envs=4, num_steps=128,
                                                     updates_per_chunk=100, hidden_dim=64, num_layers=2, num_seeds=4)),
    "cartpole-2048x128": (bench_hephaestus, dict(env_name="gymnax:CartPole-v1", num_envs=2048, num_steps=128,
                                                 updates_per_chunk=1, hidden_dim=64, num_layers=2)),
    "cartpole-2048x128-reference": (bench_reference, dict(env_id="CartPole-v1", num_envs=2048, num_steps=128,
                                                          updates_per_chunk=1, hidden_dim=64, num_layers=2)),
    # PPO vs PPO + DTC (world_model + intrinsic_reward stages, default DTC sizes), same PPO config; goal <= 2x cost.
    "cartpole-64x128": (bench_hephaestus, dict(env_name="gymnax:CartPole-v1", num_envs=64, num_steps=128,
                                               updates_per_chunk=4)),
    "cartpole-64x128-dtc": (bench_hephaestus, dict(env_name="gymnax:CartPole-v1", num_envs=64, num_steps=128,
                                                   updates_per_chunk=4,
                                                   extra_stages=("world_model", "intrinsic_reward"))),
    "cartpole-64x128-rnd": (bench_hephaestus, dict(env_name="gymnax:CartPole-v1", num_envs=64, num_steps=128,
                                                   updates_per_chunk=4, extra_stages=("rnd",))),
    "hackmatrix-random-2048": (bench_random_policy, dict(env_name="hackmatrix", num_envs=2048, steps_per_chunk=64)),
    # Defaults (auto: MLP, exact uint8 observation storage), the cells encoder on the same storage, and the MLP on
    # float32 storage (the default before uint8); issue 3's targets at 2048 x 128: >= 18,000 env steps/s, peak
    # < 2 GiB, compile < 15 s.
    "hackmatrix-ppo-2048x128": (bench_hephaestus, dict(env_name="hackmatrix", num_envs=2048, num_steps=128,
                                                       updates_per_chunk=1)),
    # The same comparison on HackMatrix at a small size (CPU-sized): 64 envs x 32 steps, 1 seed vs 4 seeds.
    "hackmatrix-ppo-64x32": (bench_hephaestus, dict(env_name="hackmatrix", num_envs=64, num_steps=32,
                                                    updates_per_chunk=4)),
    "hackmatrix-ppo-64x32-seeds4": (bench_hephaestus, dict(env_name="hackmatrix", num_envs=64, num_steps=32,
                                                           updates_per_chunk=4, num_seeds=4)),
    "hackmatrix-ppo-2048x128-cells": (bench_hephaestus, dict(env_name="hackmatrix", num_envs=2048, num_steps=128,
                                                             updates_per_chunk=1, encoder="cells")),
    "hackmatrix-ppo-2048x128-f32": (bench_hephaestus, dict(env_name="hackmatrix", num_envs=2048, num_steps=128,
                                                           updates_per_chunk=1, obs_dtype="float32")),
    # Half-width MLP (128): 1.65x the default's speed. Not the default: in 2e6-step runs at HackMatrix's entropy
    # bonus it cleared stages on 4 of 5 seeds against 5 of 5 for width 256, and less of them (specs/hackmatrix.md).
    "hackmatrix-ppo-2048x128-h128": (bench_hephaestus, dict(env_name="hackmatrix", num_envs=2048, num_steps=128,
                                                            updates_per_chunk=1, hidden_dim=128)),
}


# --devices: one global workload (envs split over the `data` mesh axis) per device count. On a CPU the devices
# are simulated (XLA_FLAGS=--xla_force_host_platform_device_count) and share the same cores, so the figures
# measure the overhead of sharding, not a speed-up.
DEVICES_CASE = dict(env_name="gymnax:CartPole-v1", num_envs=64, num_steps=64, updates_per_chunk=4, hidden_dim=64,
                    num_layers=2)
CPU_DEVICE_FLAGS = "--xla_force_host_platform_device_count={n}"  # added to the user's XLA_FLAGS


def run_devices_worker(n: int) -> None:
    import jax

    result = bench_hephaestus(**DEVICES_CASE, num_devices=n)
    result["peak_mib"] = peak_memory_mib()
    result["devices"] = jax.device_count()
    print("RESULT " + json.dumps(result), flush=True)


def run_devices(counts: list[int]) -> int:
    import jax

    platform, available = jax.devices()[0].platform, jax.device_count()
    simulated = platform == "cpu"
    c = DEVICES_CASE
    print(f"jax {jax.__version__} on {platform}; {c['env_name']}, {c['num_envs']} envs x {c['num_steps']} steps "
          f"(global), hidden {c['hidden_dim']}; median of {TIMED_RUNS} timed chunks of {c['updates_per_chunk']} updates")
    if simulated:
        print(f"note: {platform} devices are simulated and share the same {os.cpu_count()} cores: this measures "
              "sharding overhead, not speed-up")
    print(f"{'devices':>7} {'compile s':>9} {'env steps/s':>12} {'vs 1 device':>11} {'peak MiB':>9}")
    base = None
    for n in counts:
        if c["num_envs"] % n:
            print(f"{n:>7} skipped: {c['num_envs']} envs do not divide by {n}")
            continue
        env = dict(os.environ)
        if simulated:
            env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + CPU_DEVICE_FLAGS.format(n=n)).strip()
        elif n > available:
            print(f"{n:>7} skipped: only {available} {platform} devices")
            continue
        out = subprocess.run([sys.executable, __file__, "--devices-worker", str(n)], capture_output=True, text=True,
                             env=env)
        line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
        if out.returncode or line is None:
            last = (out.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"{n:>7} failed: {last[:120]}")
            continue
        r = json.loads(line[len("RESULT "):])
        base = base or (r["steps_per_s"] if n == 1 else None)
        ratio = f"{r['steps_per_s'] / base:.2f}x" if base else "-"
        print(f"{n:>7} {r['compile_s']:>9.1f} {r['steps_per_s']:>12,.0f} {ratio:>11} {r['peak_mib']:>9,.0f}", flush=True)
    return 0


def run_worker(name: str) -> None:
    fn, kwargs = CASES[name]
    result = fn(**kwargs)
    result["peak_mib"] = peak_memory_mib()
    print("RESULT " + json.dumps(result), flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated case names (default: all)")
    p.add_argument("--devices", help="comma-separated device counts, e.g. 1,2,4,8: run one data-parallel "
                   "workload on each instead of the cases (simulated devices on a CPU)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--devices-worker", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        run_worker(args.worker)
        return 0
    if args.devices_worker:
        run_devices_worker(args.devices_worker)
        return 0
    if args.devices:
        try:
            counts = [int(n) for n in args.devices.split(",") if n.strip()]
        except ValueError:
            counts = []
        if not counts or min(counts) < 1:
            print(f"error: --devices takes positive counts like 1,2,4,8, got {args.devices!r}", file=sys.stderr)
            return 2
        return run_devices(counts)
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"error: unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}", file=sys.stderr)
        return 2
    import jax

    print(f"jax {jax.__version__} on {jax.devices()[0].platform} ({os.cpu_count()} cores); "
          f"median of {TIMED_RUNS} timed chunks after compile")
    print(f"{'case':<30} {'compile s':>9} {'env steps/s':>12} {'peak MiB':>9}  detail")
    results = {}
    for name in names:
        out = subprocess.run([sys.executable, __file__, "--worker", name], capture_output=True, text=True)
        line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
        if out.returncode or line is None:
            last = (out.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"{name:<30} failed: {last[:120]}")
            continue
        r = results[name] = json.loads(line[len("RESULT "):])
        print(f"{name:<30} {r['compile_s']:>9.1f} {r['steps_per_s']:>12,.0f} {r['peak_mib']:>9,.0f}  {r['detail']}",
              flush=True)
    for name in names:
        ref = results.get(f"{name}-reference")
        if name in results and ref:
            print(f"{name}: hephaestus / plain PureJaxRL = {results[name]['steps_per_s'] / ref['steps_per_s']:.2f}x")
        dtc = results.get(f"{name}-dtc")
        if name in results and dtc:
            print(f"{name}: PPO+DTC costs {results[name]['steps_per_s'] / dtc['steps_per_s']:.2f}x PPO per env step")
    return 0


if __name__ == "__main__":
    require_this_checkout(__file__)
    sys.exit(main())
