#!/usr/bin/env python3
"""How well do HackMatrix agents play the later stages? Every game starts on a stage uniform in 2..8 (the training
curriculum's late start, `generate.curriculum_start`: HP 3, the credits, energy, siphon and programs a player who
cleared the skipped stages might hold), and each policy's games are counted by the stage they began on.

In the rules' game stage 8 is reached in about 1 game of 200, so a victory rate says little about how the agent
plays stages 5-8; here each start stage gets a seventh of the games. Every policy plays the same games (the same
evaluation seed gives the same starts and the same stages), so the rows compare policies game for game.

    python scripts/experiments/hackmatrix_late_starts.py checkpoints/RUN_A "agent B=checkpoints/RUN_B" --random --scripted exit-rush-collector --episodes 2000 --out late_starts
    python scripts/experiments/hackmatrix_late_starts.py --random --quick      # a smoke run (the test suite's)

For each policy and start stage: games, the share that clear the stage they began on, the share that win (clear
stage 8), the share that win without playing UNDO (R94's quirk replays an exit), and the mean stages cleared. Each
policy is played by `scripts/evaluate.py` (greedy for agents) with `--env-params curriculum_share=1,...`. Writes
OUT.json and OUT.png, prints a markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile

import numpy as np

from hephaestus.tools.entry_points import require_this_checkout
from hephaestus.tools.experiment import add_out, check_out, write_json

FIRST_LATE_STAGE = 2  # the curriculum's starts are uniform in 2..max (EnvParams.curriculum_max_stage)
LAST_STAGE = 8


def start_stages(stats: dict) -> np.ndarray:
    """The stage each game began on, from its eval statistics: the stage it reached less the stages it cleared,
    plus one for a victory (a victory clears stage 8 and reaches no stage after it)."""
    reached = np.asarray(stats["stage_reached"], np.int64)
    cleared = np.asarray(stats["stages_cleared"], np.int64)
    return reached - cleared + np.asarray(stats["victory"], bool)


def by_start_stage(stats: dict) -> dict[int, dict]:
    """{start stage: {games, clear_own (share that clear the stage they began on), victory, victory_without_undo,
    stages_cleared (mean)}} over the games of one policy."""
    start = start_stages(stats)
    cleared = np.asarray(stats["stages_cleared"], np.float64)
    victory = np.asarray(stats["victory"], bool)
    undo = np.asarray(stats["program_UNDO"], np.float64)
    rows = {}
    for stage in sorted(set(start.tolist())):
        m = start == stage
        rows[int(stage)] = {"games": int(m.sum()), "clear_own": float(np.mean(cleared[m] >= 1)),
                            "victory": float(np.mean(victory[m])),
                            "victory_without_undo": float(np.mean(victory[m] & (undo[m] == 0))),
                            "stages_cleared": float(np.mean(cleared[m]))}
    return rows


def agent_label(arg: str) -> tuple[str, str]:
    """(label, path) of an agent argument: LABEL=PATH, or a PATH labelled by its last component."""
    label, sep, path = arg.partition("=")
    if sep and label and not os.path.exists(arg):
        return label, path
    return os.path.basename(os.path.normpath(arg)), arg


def play(policy: list[str], label: str, args, workdir: str) -> dict:
    """One policy's games (evaluate.py's argv for it in `policy`): its per-episode statistics."""
    out = os.path.join(workdir, f"{len(os.listdir(workdir))}.json")
    curriculum = (f"curriculum_share=1,curriculum_max_stage={args.max_stage},"
                  f"curriculum_program_prob={args.program_prob}")
    argv = [*policy, "--episodes", str(args.episodes), "--max-steps", str(args.max_steps), "--seed", str(args.seed),
            "--env-params", curriculum, "--json", out]
    from hephaestus.tools import evaluate_agent

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = evaluate_agent.main(argv)
    if code != 0:
        raise SystemExit(code)  # evaluate.py said why, in one line on stderr
    summary = next((line.strip() for line in printed.getvalue().splitlines() if line.startswith("eval:")), "")
    print(f"{label}: {summary}", flush=True)
    stats = json.load(open(out))["per_episode"]["eval/"]["stats"]
    return stats[0] if isinstance(stats, list) else stats


def table(results: dict[str, dict[int, dict]]) -> str:
    lines = ["| policy | start stage | games | clears its stage | victory | victory without UNDO | stages cleared |",
             "|---|---|---|---|---|---|---|"]
    for label, rows in results.items():
        for stage, r in rows.items():
            lines.append(f"| {label} | {stage} | {r['games']} | {r['clear_own']:.1%} | {r['victory']:.1%} | "
                         f"{r['victory_without_undo']:.1%} | {r['stages_cleared']:.2f} |")
    return "\n".join(lines)


def plot(results: dict[str, dict[int, dict]], out: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for label, rows in results.items():
        stages = sorted(rows)
        for ax, key in zip(axes, ("clear_own", "victory")):
            ax.plot(stages, [rows[s][key] for s in stages], marker="o", label=label)
    for ax, name in zip(axes, ("clears the stage it began on", "wins (clears stage 8)")):
        ax.set_xlabel("start stage")
        ax.set_ylabel("share of games")
        ax.set_title(name, fontsize=10)
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("agents", nargs="*", metavar="[LABEL=]PATH",
                   help="run directories or parameter files of HackMatrix agents (greedy), each optionally labelled")
    p.add_argument("--random", action="store_true", help="also the masked-uniform random policy")
    p.add_argument("--scripted", action="append", default=[], metavar="NAME",
                   help="also this scripted policy (repeatable): exit-rush, exit-rush-safe, exit-rush-collector, ...")
    p.add_argument("--episodes", type=int, default=2000, help="games per policy, all in parallel")
    p.add_argument("--max-steps", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0, help="evaluation seed: the same games for every policy")
    p.add_argument("--max-stage", type=int, default=LAST_STAGE, help="starts are uniform in 2..this (2-8)")
    p.add_argument("--program-prob", type=float, default=0.02,
                   help="each program owned with this probability per skipped stage (EnvParams.curriculum_program_prob;"
                        " 0.02 hands a stage-8 start about 2.8 of the 23)")
    add_out(p, "hackmatrix_late_starts", "writes OUT.json and OUT.png")
    p.add_argument("--quick", action="store_true", help="28 games of at most 30 steps (a smoke run)")
    args = p.parse_args(argv)
    if args.quick:
        args.episodes, args.max_steps = 28, 30
    if not (args.agents or args.random or args.scripted):
        p.error("give agents, --random or --scripted NAME")
    if args.episodes < 1 or args.max_steps < 1 or not FIRST_LATE_STAGE <= args.max_stage <= LAST_STAGE:
        p.error("--episodes and --max-steps at least 1, --max-stage in 2..8")
    args.out = check_out(p, args.out, "hackmatrix_late_starts")

    policies = [([path], label) for label, path in map(agent_label, args.agents)]
    policies += [(["--random", "--env", "hackmatrix"], "random policy")] if args.random else []
    policies += [(["--scripted", name, "--env", "hackmatrix"], f"scripted {name}") for name in args.scripted]
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        for policy, label in policies:
            results[label] = by_start_stage(play(policy, label, args, workdir))
    write_json(args.out, {"episodes": args.episodes, "seed": args.seed, "max_stage": args.max_stage,
                          "program_prob": args.program_prob, "max_steps": args.max_steps, "by_start_stage": results})
    plot(results, args.out + ".png", f"HackMatrix, games started on a stage uniform in 2..{args.max_stage} "
         f"({args.episodes} per policy, eval seed {args.seed})")
    print(table(results))
    print(f"written {args.out}.json, {args.out}.png")
    return 0


if __name__ == "__main__":
    require_this_checkout(__file__)
    sys.exit(main())
