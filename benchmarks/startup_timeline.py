#!/usr/bin/env python3
"""Benchmark (not a test): when a training run's start-up lines appear, for one or more checkouts, alternating.

    python benchmarks/startup_timeline.py --rounds 4 /tmp/before /work/main      # two checkouts, A B A B ...
    python benchmarks/startup_timeline.py --rounds 2 . -- --env gymnax:CartPole-v1

Starts `scripts/train_purejaxrl.py` of each checkout (its own `python/` first on PYTHONPATH, its own compilation
cache), by default HackMatrix at 2048 x 128 (the start-up goal's size, specs/results/speed.md), records the seconds since the process started at
which the `run`, `setup:` and `compile:` lines appear, and stops the run at `compile:`. Each checkout's first round
is cold only if its cache is empty (delete `CHECKOUT/.jax_cache` first); later rounds are warm. Flags after `--`
replace the run's own (the default: --num-envs 2048 --num-steps 128).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

MARKS = ("run ", "setup:", "compile:")


def timeline(checkout: str, run_name: str, flags: list[str], checkpoint_dir: str | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.join(checkout, "python"))
    cmd = [sys.executable, os.path.join(checkout, "scripts", "train_purejaxrl.py"), *flags, "--total-timesteps", "1e9",
           "--no-wandb", "--checkpoint-dir", checkpoint_dir or os.path.join(checkout, "checkpoints", "startup_timeline"),
           "--run-name", run_name, "--final-eval-episodes", "0"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=checkout)
    marks, tail = {}, []
    for line in proc.stdout:
        seconds = time.perf_counter() - t0
        tail = (tail + [line.rstrip()])[-5:]
        for mark in MARKS:
            if line.startswith(mark):
                marks[mark.strip(": ")] = (seconds, line.strip())
        if line.startswith("compile:"):
            proc.kill()
            break
    proc.wait()
    if "compile" not in marks:
        raise SystemExit(f"{checkout}: the run ended before compiling:\n" + "\n".join(tail))
    return marks


def main() -> int:
    argv = sys.argv[1:]
    run_flags = ["--num-envs", "2048", "--num-steps", "128"]
    if "--" in argv:
        cut = argv.index("--")
        argv, run_flags = argv[:cut], argv[cut + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checkouts", nargs="+", help="repository roots (each with scripts/ and python/)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--checkpoint-dir", help="where the runs write (default: CHECKOUT/checkpoints/startup_timeline)")
    args = p.parse_args(argv)
    for checkout in args.checkouts:
        if not os.path.isfile(os.path.join(checkout, "scripts", "train_purejaxrl.py")):
            p.error(f"{checkout} has no scripts/train_purejaxrl.py")
    print("round  checkout                          run line   setup done  compile done  (seconds since start)")
    for r in range(args.rounds):
        for i, checkout in enumerate(args.checkouts):
            marks = timeline(os.path.abspath(checkout), f"startup_{i}_{r}", run_flags, args.checkpoint_dir)
            when = lambda name: f"{marks[name][0]:9.2f}" if name in marks else "        -"
            print(f"{r:5d}  {checkout[-32:]:32s}  {when('run')}  {when('setup')}  {when('compile')}   "
                  f"{marks['compile'][1]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
