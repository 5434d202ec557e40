#!/usr/bin/env python3
"""Stress benchmark (not a test): N cold starts in a row, each with an empty compilation cache, counting hangs.

    python benchmarks/cold_starts.py --starts 20                      # both configurations, as the entry points run
    python benchmarks/cold_starts.py --starts 5 --xla-flags "--xla_cpu_enable_concurrency_optimized_scheduler=false"

Configurations:
  dtc    scripts/train_purejaxrl.py --env hackmatrix --agent dtc --num-envs 16 --num-steps 32, one update (a run
         that deadlocked at its start, cut to its first update: the deadlock it met is in the fresh runner state's program);
         --dtc-env picks another env.
  seeds  the fresh runner state's program (network, optimizer, env reset) vmapped over 8 seeds, CartPole at the
         default width: what a many-seeds run compiles and runs first.

A start counts as a hang when its process's CPU time grows by less than --min-cpu seconds over --stall-seconds
(a deadlocked thread pool sits at ~0% CPU; a slow compile on a loaded machine still burns CPU); it is then killed.
A start that neither finishes nor stalls within --timeout counts as "slow". The children get this process's
XLA_FLAGS plus `--xla-flags` (the entry points add none): with the initialisers mapped one agent and one ensemble
member at a time (runner_state.fresh_agents, rssm.init_ensemble) no program has a batched LAPACK call left, which
was what deadlocked (specs/pipeline.md, "Start-up").
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "scripts", "train_purejaxrl.py")
SEEDS = 8


def dtc_command(tmp: str, env: str) -> list[str]:
    return [sys.executable, TRAIN, "--env", env, "--agent", "dtc", "--num-envs", "16", "--num-steps", "32",
            "--total-timesteps", "512", "--log-interval", "1", "--no-wandb", "--checkpoint-dir", tmp]


def seeds_child() -> int:
    """The `seeds` configuration, run in a child process: set up as an entry point does, then run the fresh runner
    state's program vmapped over SEEDS seeds."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import jax

    from hephaestus.config.train_config import TrainConfig, resolve
    from hephaestus.core.compilation_cache import enable_compilation_cache
    from hephaestus.core.ppo import make_train

    enable_compilation_cache()
    config, _ = resolve(TrainConfig.from_flat(env="gymnax:CartPole-v1", num_envs=4, num_steps=16, total_timesteps=64 * 4,
                                    num_seeds=SEEDS))
    trainer = make_train(config)  # builds and runs the fresh runner state's program, vmapped over the seeds
    jax.block_until_ready(trainer.runner_state)
    print(f"ok: {SEEDS} fresh runner states", flush=True)
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_start(config: str, env: dict, args) -> tuple[str, float]:
    tmp = tempfile.mkdtemp(prefix="cold_start_")
    env = {**env, "JAX_COMPILATION_CACHE_DIR": os.path.join(tmp, "jax_cache")}
    command = dtc_command(tmp, args.dtc_env) if config == "dtc" else [sys.executable, os.path.abspath(__file__), "--child", "seeds"]
    t0 = time.monotonic()
    log = open(os.path.join(tmp, "log"), "w")
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    window = [(t0, 0.0)]  # (time, cpu seconds) samples
    outcome = None
    while outcome is None:
        try:
            rc = proc.wait(timeout=2.0)
            outcome = "ok" if rc == 0 else f"error {rc}"
            break
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        try:
            window.append((now, cpu_seconds(proc.pid)))
        except (OSError, IndexError, ValueError):
            continue
        while window and now - window[0][0] > args.stall_seconds:
            old = window.pop(0)
            if window[-1][1] - old[1] < args.min_cpu:
                outcome = "hang"
        if outcome is None and now - t0 > args.timeout:
            outcome = "slow"
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    log.close()
    if outcome.startswith("error"):
        print(open(os.path.join(tmp, "log")).read()[-2000:], file=sys.stderr)
    shutil.rmtree(tmp, ignore_errors=True)
    return outcome, time.monotonic() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--configs", default="dtc,seeds", help="comma-separated: dtc, seeds (default: %(default)s)")
    p.add_argument("--dtc-env", default="hackmatrix",
                   help="--env of the dtc configuration; gymnax:CartPole-v1 starts ~5x faster, with the same "
                        "vmapped ensemble initialisation (default: %(default)s)")
    p.add_argument("--starts", type=int, default=20, help="cold starts per configuration (default: %(default)s)")
    p.add_argument("--xla-flags", default="", help="added to the children's XLA_FLAGS (default: none)")
    p.add_argument("--stall-seconds", type=float, default=60.0,
                   help="window over which a start must burn --min-cpu seconds of CPU (default: %(default)s)")
    p.add_argument("--min-cpu", type=float, default=1.0, help="(default: %(default)s)")
    p.add_argument("--timeout", type=float, default=900.0,
                   help="seconds before a start counts as slow (default: %(default)s)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child == "seeds":
        return seeds_child()

    env = dict(os.environ)
    if args.xla_flags:
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {args.xla_flags}".strip()
    label = f"XLA_FLAGS={env.get('XLA_FLAGS', '')!r}; dtc on {args.dtc_env}"
    for config in args.configs.split(","):
        counts: dict[str, int] = {}
        for i in range(1, args.starts + 1):
            outcome, seconds = one_start(config, env, args)
            counts[outcome] = counts.get(outcome, 0) + 1
            print(f"{config} start {i}/{args.starts}: {outcome} in {seconds:.0f}s", flush=True)
        summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        print(f"{config} ({label}): hangs: {counts.get('hang', 0)} of {args.starts} ({summary})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
