#!/usr/bin/env python3
"""Whose advantages fill a HackMatrix PPO batch? The share of each start stage in one batch's advantages.

PPO normalises a minibatch's advantages together (mean 0, std 1), so games whose advantages are large set the scale
for all. With the stage curriculum (`curriculum_share`), a game that starts on stage 7 or 8 plays for stage rewards
of 32 to 64; this measures what that does to a batch. The agent's sampled policy plays `--envs` games of its own
training env (the run's stored `--env-params` list, with this command's `--env-params` laid over it by name), for
`--warmup` steps and then `--steps` more, which are the batch; the agent's critic gives the values and the batch's
advantages are the pipeline's GAE (`ppo.gae`, the run's gamma and lambda). Each step is counted by the stage its game
began on (`EnvState.start_stage`: 1 for the rules' game).

    python scripts/experiments/hackmatrix_advantage_shares.py RUN --env-params curriculum_share=0.25,curriculum_max_stage=8
    python scripts/experiments/hackmatrix_advantage_shares.py RUN --quick     # a smoke run (the test suite's)

Prints a markdown table (share of the steps, advantage std, share of the sum of squares, and the std over the
batch's) and, with `--json OUT`, writes it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from hephaestus.tools.entry_points import require_this_checkout
from hephaestus.tools.experiment import add_out, check_out


def training_env_params(meta: dict, extra: list[str]) -> list[str]:
    """The run's training `--env-params` (its stored list, else HackMatrix's default list) with `extra` laid over
    it by name: a name in `extra` replaces the stored item, a new one is added."""
    from hephaestus.config.train_config import ENV_DEFAULTS, overlay_env_params

    stored = (meta.get("config") or {}).get("env_params")
    return list(overlay_env_params(ENV_DEFAULTS["hackmatrix"]["env_params"] if stored is None else stored, extra))


def shares_by_start_stage(advantage, start_stage) -> dict[int, dict]:
    """{start stage: its share of the steps, its advantages' std, its share of the batch's sum of squared deviations
    from the batch mean, and its std over the batch's} for the flat arrays `advantage` and `start_stage`."""
    import numpy as np

    advantage, start_stage = np.asarray(advantage, np.float64).ravel(), np.asarray(start_stage).ravel()
    batch_std = advantage.std()
    squares = (advantage - advantage.mean()) ** 2
    rows = {}
    for stage in sorted(set(start_stage.tolist())):
        mine = start_stage == stage
        rows[int(stage)] = {"steps": float(mine.mean()), "std": float(advantage[mine].std()),
                            "square_share": float(squares[mine].sum() / squares.sum()),
                            "std_over_batch": float(advantage[mine].std() / batch_std)}
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("agent", help="a HackMatrix run directory or parameter file")
    p.add_argument("--env-params", default="", metavar="NAME=VALUE,...",
                   help="laid over the run's own training list by name (e.g. curriculum_share=0.25)")
    p.add_argument("--envs", type=int, default=2048, help="games played at once (the batch's width)")
    p.add_argument("--steps", type=int, default=128, help="steps per game in the batch")
    p.add_argument("--warmup", type=int, default=384, help="steps played first, so the games are at all ages")
    p.add_argument("--seed", type=int, default=0)
    add_out(p, "hackmatrix_advantage_shares", "writes the table to OUT.json")
    p.add_argument("--json", default="", metavar="FILE", help="write the table to FILE instead")
    p.add_argument("--quick", action="store_true", help="32 games, 8 + 16 steps (a smoke run)")
    args = p.parse_args(argv)
    if args.quick:
        args.envs, args.steps, args.warmup = 32, 16, 8
    if args.envs < 1 or args.steps < 1 or args.warmup < 0:
        p.error("--envs and --steps at least 1, --warmup at least 0")
    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        p.error(f"--json {args.json}: directory does not exist")
    args.json = args.json or check_out(p, args.out, "hackmatrix_advantage_shares") + ".json"

    import jax
    import numpy as np

    from hephaestus.core import networks as nets
    from hephaestus.envs.registry import EnvParamError, parse_env_params
    from hephaestus.core.ppo import gae
    from hephaestus.api import LoadError, load_agent, make_env

    try:
        agent = load_agent(args.agent)
        params, meta, env, network = agent.params, agent.meta, agent.env, agent.network
        if env.spec.name != "hackmatrix":
            p.error(f"{args.agent} is a {env.spec.name} agent; this experiment plays HackMatrix")
        items = training_env_params(meta, [item for item in args.env_params.split(",") if item.strip()])
        env = make_env(env.spec.name, **parse_env_params(items))  # its training env, as load_agent builds one
    except (LoadError, EnvParamError) as err:
        p.error(str(err))
    config = meta.get("config") or {}
    gamma, gae_lambda = float(config.get("gamma", 0.99)), float(config.get("gae_lambda", 0.95))

    def play(key):  # the training env's own adapted reset and auto-resetting step, as the rollout plays them
        key, reset_key = jax.random.split(key)
        state, first = jax.vmap(env.reset)(jax.random.split(reset_key, args.envs))

        def step(carry, key):
            state, obs, mask = carry
            act_key, step_key = jax.random.split(key)
            action, _, _, value = nets.act(network, params, obs, mask, act_key)
            next_state, out = jax.vmap(env.step)(jax.random.split(step_key, args.envs), state, action)
            _, next_value = network.apply(params, out.final_obs)
            return (next_state, out.obs, out.action_mask), (out.reward, value, next_value, out.terminated,
                                                            out.terminated | out.truncated, state.start_stage)

        _, out = jax.lax.scan(step, (state, first.obs, first.action_mask),
                              jax.random.split(key, args.warmup + args.steps))
        return jax.tree.map(lambda x: x[args.warmup:], out)

    reward, value, next_value, terminated, done, start_stage = jax.jit(play)(jax.random.PRNGKey(args.seed))
    advantage = gae(reward, value, next_value, terminated, done, gamma, gae_lambda)
    rows = shares_by_start_stage(np.asarray(advantage), np.asarray(start_stage))
    batch_std = float(np.asarray(advantage).std())
    print(f"{args.agent}: {args.envs} games x {args.steps} steps after {args.warmup}, env params "
          f"{','.join(items) or '(the rules)'}; advantage std over the batch {batch_std:.3f}, reward std "
          f"{float(np.asarray(reward).std()):.3f}")
    print("| start stage | share of steps | advantage std | share of the sum of squares | std / batch std |")
    print("|---|---|---|---|---|")
    for stage, row in rows.items():
        print(f"| {stage} | {row['steps']:.1%} | {row['std']:.2f} | {row['square_share']:.1%} | "
              f"{row['std_over_batch']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"agent": args.agent, "env_params": items, "envs": args.envs, "steps": args.steps,
                       "warmup": args.warmup, "seed": args.seed, "batch_std": batch_std,
                       "by_start_stage": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    require_this_checkout(__file__)
    sys.exit(main())
