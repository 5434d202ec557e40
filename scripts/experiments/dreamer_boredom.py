#!/usr/bin/env python3
"""Does boredom change what the dreamer-dtc agent does? Its one channel: the dream length (issues 20 and 21).

With `--dreamer-horizons 8,16,32,64` the dreamer-dtc agent picks, per actor-critic step, the longest compiled
dream length not above `--dtc-max-horizon - boredom x (max - min)`; boredom rises while the imagined novelty stops
falling (competence under its threshold) and falls while it falls. The ablation is the same agent with boredom's
channel cut: every dream `--dreamer-horizon 64` long, the length of an agent that is never bored.

Each variant trains once per seed, each in its own process, alternating (a vmapped --num-seeds program would run
every length's branch: specs/dreamer.md), on CartPole-v1 at the dreamer's CartPole settings
(scripts/experiments/dreamer_cartpole.py). Reported per variant and seed: the dream length over the run, the
boredom and competence it followed, the imagined steps dreamt, the seconds of the training chunks (side by side on
one machine: compare as a ratio), env steps to a training return of 475, and the greedy evaluation at the end.

    python scripts/experiments/dreamer_boredom.py --out checkpoints/boredom --seeds 3
    python scripts/experiments/dreamer_boredom.py --out checkpoints/boredom --seeds 3 --reuse   # read runs only

Writes OUT.json, OUT.md and OUT.png.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from hephaestus.tools.entry_points import load_script, require_this_checkout
from hephaestus.tools.experiment import add_out, check_out, write_results


# scripts/experiments/dreamer_cartpole.py: its dreamer settings and output writer are this one's.
CARTPOLE = load_script(os.path.join(os.path.dirname(os.path.abspath(__file__)), "dreamer_cartpole.py"),
                       "dreamer_cartpole_experiment")
TRAIN = CARTPOLE.TRAIN
# The dreamer's CartPole settings (dreamer_cartpole.py), with the ensemble's imagined novelty (dreamer-dtc).
COMMON = list(CARTPOLE.AGENTS["dreamer"])
COMMON[COMMON.index("--agent") + 1] = "dreamer-dtc"
VARIANTS = {"boredom picks the length": ["--dreamer-horizons", "8,16,32,64"],
            "never bored (64 steps)": ["--dreamer-horizon", "64"]}
FOLDER = {"boredom picks the length": "adaptive", "never bored (64 steps)": "fixed64"}


def run_name(variant: str, seed: int) -> str:
    return f"{FOLDER[variant]}_s{seed}"


def train(variant: str, seed: int, out_dir: str, timesteps: int, eval_episodes: int) -> None:
    cmd = [sys.executable, TRAIN, *COMMON, *VARIANTS[variant], "--seed", str(seed), "--total-timesteps",
           str(timesteps), "--run-name", run_name(variant, seed), "--checkpoint-dir", out_dir, "--no-wandb",
           "--final-eval-episodes", str(eval_episodes)]
    print("+", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True)


def read_run(run_dir: str, threshold: float) -> dict:
    """One run's curves from its metrics.jsonl: per chunk the env steps, the training return, the mean dream length,
    boredom, competence and the chunk's seconds; and the final greedy evaluation where the run wrote one."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    train_rows = [r for r in rows if "dreamer/horizon" in r]
    curve = {"steps": [r["env_steps"] for r in train_rows],
             "return": [r.get("mean_episode_return") for r in train_rows],
             "horizon": [r["dreamer/horizon"] for r in train_rows],
             "boredom": [r["dtc/boredom"] for r in train_rows],
             "competence": [r["dtc/competence"] for r in train_rows],
             "ac_steps": [r["dreamer/ac_steps"] for r in train_rows]}
    # wall_seconds is the run's clock at the chunk's end; the first chunk's includes the compile, so the chunks'
    # time is counted from the first chunk's end on (the same chunks for every run)
    clock = [r["wall_seconds"] for r in train_rows]
    updates = [r["update"] for r in train_rows]
    per_chunk = [updates[0]] + [b - a for a, b in zip(updates, updates[1:])]
    dreamt = sum(h * a * n for h, a, n in zip(curve["horizon"], curve["ac_steps"], per_chunk))
    hit = next((s for s, ret in zip(curve["steps"], curve["return"]) if ret is not None and ret >= threshold), None)
    eval_path = os.path.join(run_dir, "eval.json")  # the run's final greedy evaluation (--final-eval-episodes)
    evaluation = {}
    if os.path.exists(eval_path):
        with open(eval_path) as f:
            evaluation = json.load(f)["metrics"]
    return {**curve, "seconds_after_first_chunk": clock[-1] - clock[0], "imagined_steps": dreamt,
            "mean_horizon": sum(h * n for h, n in zip(curve["horizon"], per_chunk)) / sum(per_chunk),
            "steps_to_threshold": hit, "eval_return": evaluation.get("eval/return_mean")}


def summarise(results: dict) -> list[str]:
    import numpy as np

    lines = ["| variant | seeds | mean dream length (per seed) | scan steps dreamt, per start state (per seed) | "
             f"chunk seconds after the first (per seed) | env steps to {results['threshold']:g} | "
             "final training return | greedy eval |",
             "|---|---|---|---|---|---|---|---|"]
    for variant, runs in results["variants"].items():
        seeds = sorted(runs, key=int)
        col = lambda key, fmt: ", ".join(fmt(runs[s][key]) for s in seeds)
        final = [float(np.mean([v for v in runs[s]["return"][-3:] if v is not None])) for s in seeds]
        lines.append(
            f"| {variant} | {', '.join(seeds)} | {col('mean_horizon', lambda v: f'{v:.1f}')} | "
            f"{col('imagined_steps', lambda v: f'{v / 1e3:,.0f}k')} | "
            f"{col('seconds_after_first_chunk', lambda v: f'{v:.0f}')} | "
            f"{col('steps_to_threshold', lambda v: '-' if v is None else f'{v:,}')} | "
            f"{', '.join(f'{v:.0f}' for v in final)} | "
            f"{col('eval_return', lambda v: '-' if v is None else f'{v:.0f}')} |")
    return lines


def plot(results: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2), dpi=100)
    for colour, (variant, runs) in zip(("C0", "C1"), results["variants"].items()):
        for i, (_seed, r) in enumerate(sorted(runs.items(), key=lambda kv: int(kv[0]))):
            label = variant if i == 0 else None
            axes[0].plot(r["steps"], r["return"], color=colour, alpha=0.8, label=label)
            axes[1].plot(r["steps"], r["horizon"], color=colour, alpha=0.8, label=label)
            if variant == "boredom picks the length":
                axes[2].plot(r["steps"], r["boredom"], color="C2", alpha=0.8, label="boredom" if i == 0 else None)
                axes[2].plot(r["steps"], r["competence"], color="C3", alpha=0.8,
                             label="competence" if i == 0 else None)
    axes[0].axhline(results["threshold"], color="k", ls=":", lw=1)
    axes[0].set_title("CartPole-v1, training return (one line per seed)", fontsize=9)
    axes[1].set_title("dream length (mean per chunk)", fontsize=9)
    axes[2].set_title("boredom and competence (boredom's agent)", fontsize=9)
    for ax in axes:
        ax.set_xlabel("env steps")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_out(p, "dreamer_boredom", "writes OUT.json, OUT.md, OUT.png; runs under OUT_runs/")
    p.add_argument("--num-seeds", "--seeds", dest="seeds", type=int, default=3,
                   help="seeds (the training command's --num-seeds; --seeds says the same)")
    p.add_argument("--timesteps", type=int, default=61440)
    p.add_argument("--threshold", type=float, default=475.0)
    p.add_argument("--final-eval-episodes", type=int, default=100)
    p.add_argument("--runs-dir", default=None, help="where the runs are (default OUT_runs)")
    p.add_argument("--reuse", action="store_true", help="train nothing: read the runs already in the runs folder")
    args = p.parse_args(argv)
    args.out = check_out(p, args.out, "dreamer_boredom")
    out_dir = args.runs_dir or args.out + "_runs"
    os.makedirs(out_dir, exist_ok=True)
    if not args.reuse:
        for seed in range(args.seeds):  # alternating, so that load on the machine falls on both variants alike
            for variant in VARIANTS:
                train(variant, seed, out_dir, args.timesteps, args.final_eval_episodes)
    results = {"threshold": args.threshold, "timesteps": args.timesteps, "command_flags": COMMON,
               "variant_flags": VARIANTS, "variants": {}}
    for variant in VARIANTS:
        results["variants"][variant] = {
            str(seed): read_run(os.path.join(out_dir, run_name(variant, seed)), args.threshold)
            for seed in range(args.seeds)}
    write_results(args.out, results, summarise(results), plot)
    return 0


if __name__ == "__main__":
    require_this_checkout(__file__)
    sys.exit(main())
