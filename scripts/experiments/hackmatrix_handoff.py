#!/usr/bin/env python3
"""What would a HackMatrix agent win if a scripted player took over its later stages? (the goal of a victory in 1000 games)

The agent plays its greedy game of the rules until the stage given by `--from-stages`; from that stage on the scripted
policy (`--teacher`, default exit-rush-collector, the agent's own teacher) plays. `--from-stages 9` never hands over:
it is the agent's own greedy evaluation, game for game (the same evaluation program and keys as `evaluate.py`), which
checks the handover's plumbing. Each row is `--episodes` games on each evaluation seed.

    python scripts/experiments/hackmatrix_handoff.py RUN --from-stages 9,8,7,6,5 --episodes 1000 --seeds 0,1,2 --out handoff
    python scripts/experiments/hackmatrix_handoff.py RUN --quick       # a smoke run (the test suite's)

Prints a markdown table (victories, stage 4 and stage 8 reached, per row) and writes OUT.json. An upper bound of
sorts for a lever that keeps the teacher on the late stages: the teacher itself plays them here, not a student.
"""

from __future__ import annotations

import argparse
import sys

from hephaestus.tools.entry_points import require_this_checkout
from hephaestus.tools.experiment import add_out, check_out, write_json

NEVER = 9  # a stage the game never reaches: the agent plays every stage


def handoff_policy(network, params, teacher, from_stage: int):
    """`(state, mask, key) -> action` on one game: the agent's greedy action on the observation of `state` (the one
    the evaluation feeds it) below stage `from_stage`, the `teacher`'s from it on."""
    import jax.numpy as jnp

    from hephaestus.core import networks as nets
    from hephaestus.envs.adapters import split_observation
    from hephaestus.envs.hackmatrix.env import get_obs

    def policy(state, mask, key):
        obs, _ = split_observation(get_obs(state))
        agent = nets.act(network, params, obs[None], mask[None], key, greedy=True)[0][0]
        return jnp.where(state.stage >= from_stage, teacher(state, mask, key), agent).astype(agent.dtype)

    return policy


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("agent", help="a HackMatrix run directory or parameter file")
    p.add_argument("--teacher", default="exit-rush-collector", help="the scripted policy that takes over")
    p.add_argument("--from-stages", default="9,8,7,6", help="comma-separated stages at which it takes over (9: never)")
    p.add_argument("--episodes", type=int, default=1000, help="games per evaluation seed")
    p.add_argument("--seeds", default="0,1,2", help="evaluation seeds")
    p.add_argument("--max-steps", type=int, default=1000)
    add_out(p, "hackmatrix_handoff", "writes OUT.json")
    p.add_argument("--quick", action="store_true", help="16 games of at most 40 steps, stages 9 and 2 (a smoke run)")
    args = p.parse_args(argv)
    try:
        stages = [int(s) for s in args.from_stages.split(",")]
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        p.error("--from-stages and --seeds take comma-separated integers")
    if args.quick:
        args.episodes, args.max_steps, stages, seeds = 16, 40, [NEVER, 2], seeds[:1]
    if not all(2 <= s <= NEVER for s in stages) or args.episodes < 1 or args.max_steps < 1:
        p.error("--from-stages in 2..9, --episodes and --max-steps at least 1")
    args.out = check_out(p, args.out, "hackmatrix_handoff")

    import jax
    import numpy as np

    from hephaestus.core.evaluation import Evaluator
    from hephaestus.api import LoadError, load_agent

    try:
        agent = load_agent(args.agent)
    except LoadError as err:
        p.error(str(err))
    params, env, network = agent.params, agent.env, agent.network
    if env.spec.name != "hackmatrix":
        p.error(f"{args.agent} is a {env.spec.name} agent; this experiment plays HackMatrix")
    try:
        teacher = env.scripted_policy(args.teacher)
    except ValueError as err:
        p.error(f"--teacher {args.teacher}: {err}")

    rows = []
    for stage in stages:
        # Registered as one of this process's env's scripted policies, so that the Evaluator plays it exactly as
        # evaluate.py --scripted plays a baseline (the same program and keys: "never" is evaluate.py's games).
        name = f"handoff-{stage}"
        env.scripted_policies[name] = handoff_policy(network, params, teacher, stage)
        evaluator = Evaluator(env, None, args.episodes, args.max_steps, scripted=name)
        per_seed = []
        for seed in seeds:
            _, raw = evaluator(None, jax.random.PRNGKey(seed))
            stats = jax.tree.map(np.asarray, raw["eval/"]["stats"])
            per_seed.append({"victories": int(stats["victory"].sum()),
                             "stage_1_cleared": float(np.mean(stats["stage_reached"] >= 2)),
                             "stage_4_reached": float(np.mean(stats["stage_reached"] >= 4)),
                             "stage_8_reached": float(np.mean(stats["stage_reached"] >= 8)),
                             "victories_without_undo": int(np.sum((stats["victory"] > 0) & (stats["program_UNDO"] == 0)))})
        rows.append({"from_stage": stage, "per_seed": per_seed})
        print(f"from stage {stage}: victories per {args.episodes} games {[r['victories'] for r in per_seed]}",
              flush=True)
    write_json(args.out, {"agent": args.agent, "teacher": args.teacher, "episodes": args.episodes, "seeds": seeds,
                          "max_steps": args.max_steps, "rows": rows})
    print(f"| {args.teacher} plays from stage | victories per {args.episodes} (seeds {','.join(map(str, seeds))}) | "
          "without UNDO | stage 1 cleared | stage 4 reached | stage 8 reached |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        r = row["per_seed"]
        mean = lambda k: np.mean([x[k] for x in r])  # noqa: E731
        label = "never (the agent alone)" if row["from_stage"] == NEVER else str(row["from_stage"])
        print(f"| {label} | {', '.join(str(x['victories']) for x in r)} | "
              f"{', '.join(str(x['victories_without_undo']) for x in r)} | {mean('stage_1_cleared'):.1%} | "
              f"{mean('stage_4_reached'):.1%} | {mean('stage_8_reached'):.2%} |")
    print(f"written {args.out}.json")
    return 0


if __name__ == "__main__":
    require_this_checkout(__file__)
    sys.exit(main())
