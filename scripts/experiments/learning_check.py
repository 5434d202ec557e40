#!/usr/bin/env python3
"""Learning check: training runs' return curves against a uniformly random (masked-uniform) policy.

Reads `metrics.jsonl` of each run directory (one run per seed), measures the random policy's mean episode
return in the same environment over many episodes (the evaluation program's masked-uniform policy, so a fully
masked row picks any action), prints a table and saves a PNG: mean and min-max band over the runs,
and the random policy's line.

    python scripts/experiments/learning_check.py --env jumanji:Snake-v1 RUN_DIR [RUN_DIR ...] --plot out.png
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from hephaestus.tools.entry_points import require_this_checkout
import numpy as np

from hephaestus.core.evaluation import random_policy_returns
from hephaestus.tools.experiment import add_out, check_out


def read_curves(run_dir: str):
    """(label, steps, returns) per agent of a run: one for a single-seed run, one per seed of a --num-seeds run."""
    steps, returns = [], []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            seeds = rec.get("per_seed", {}).get("mean_episode_return")
            values = seeds if seeds is not None else [rec.get("mean_episode_return", np.nan)]
            if np.all(np.isfinite(values)):
                steps.append(rec["env_steps"])
                returns.append(values)
    name = os.path.basename(os.path.normpath(run_dir))
    returns = np.array(returns).reshape(len(steps), -1)
    labels = [name] if returns.shape[1] == 1 else [f"{name}[seed {i}]" for i in range(returns.shape[1])]
    return [(label, np.array(steps), returns[:, i]) for i, label in enumerate(labels)]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", help="run directories (each with metrics.jsonl): one per seed, or --num-seeds "
                                           "runs (each seed a curve)")
    p.add_argument("--env", required=True)
    p.add_argument("--random-envs", type=int, default=200)
    p.add_argument("--random-steps", type=int, default=4001, help="more than the time limit (Snake: 4000)")
    p.add_argument("--last", type=int, default=3, help="final return = mean of the last this many records")
    add_out(p, "learning_check", "writes OUT.png")
    p.add_argument("--plot", default=None, metavar="FILE", help="write the plot to FILE instead of OUT.png")
    args = p.parse_args(argv)
    args.plot = args.plot or check_out(p, args.out, "learning_check") + ".png"

    random_returns = random_policy_returns(args.env, args.random_envs, args.random_steps)
    rand_mean = float(random_returns.mean())
    rand_sem = float(random_returns.std(ddof=1) / np.sqrt(len(random_returns)))
    print(f"random policy: {rand_mean:.3f} +- {rand_sem:.3f} (sem) over {len(random_returns)} episodes "
          f"(std {random_returns.std():.3f})")

    curves = [curve for r in args.runs for curve in read_curves(r)]
    common = min(len(s) for _, s, _ in curves)
    print(f"{'run':<40} {'env steps':>10} {'final return':>12}")
    finals = []
    for label, steps, rets in curves:
        finals.append(float(rets[common - args.last:common].mean()))
        print(f"{label:<40} {steps[common - 1]:>10,} {finals[-1]:>12.2f}")
    print(f"final return over runs: {np.mean(finals):.2f} +- {np.std(finals, ddof=1) if len(finals) > 1 else 0:.2f} "
          f"(std), min {min(finals):.2f}, max {max(finals):.2f}; random {rand_mean:.2f}")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = curves[0][1][:common]
    stack = np.stack([r[:common] for _, _, r in curves])
    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=100)
    ax.plot(steps, stack.mean(0), label=f"PPO, mean of {len(curves)} seeds")
    ax.fill_between(steps, stack.min(0), stack.max(0), alpha=0.25, label="min-max over seeds")
    ax.axhline(rand_mean, color="k", ls="--", lw=1, label="random (masked-uniform)")
    ax.set_xlabel("env steps")
    ax.set_ylabel("mean episode return")
    ax.set_title(args.env, fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.plot)
    print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    require_this_checkout(__file__)
    sys.exit(main())
