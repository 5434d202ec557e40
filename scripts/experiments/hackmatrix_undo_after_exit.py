#!/usr/bin/env python3
"""Does a HackMatrix agent replay exits with R94's UNDO quirk? Its choice on the first step of a stage.

R94 (faithful to the Swift game) keeps the UNDO history across a stage change: an UNDO on the first step of a new
stage restores the previous stage's board while the stage number stays, so walking onto the same exit again clears
another stage. HackMatrix's default training turns the quirk off (`undo_across_stages=0`: the history is cleared when
a stage starts), so in training UNDO is never playable on a stage's first step: the action mask forbids it (an empty
history) and the policy is never trained on that choice. Evaluations play the rules' game, quirk on.

This plays `--games` greedy games of the agent (auto-reset, `--steps` steps each, the rules' env or the one
`--env-params` gives) and, on every first step of a stage reached through an exit (not a victory, not a reset),
counts: was UNDO playable there, did the greedy policy play it, and the policy's probability of UNDO there.

    python scripts/experiments/hackmatrix_undo_after_exit.py RUN [RUN ...]
    python scripts/experiments/hackmatrix_undo_after_exit.py RUN --env-params undo_across_stages=0
    python scripts/experiments/hackmatrix_undo_after_exit.py RUN --quick      # a smoke run (the test suite's)

Prints a markdown table, one row per agent, and with `--json OUT` writes it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from hephaestus.tools.entry_points import require_this_checkout
from hephaestus.tools.experiment import add_out, check_out


def first_steps_after_exits(stage_before, stage_after, done):
    """bool [steps, games]: step t+1 is the first step of a stage its game reached by an exit at step t, i.e. the
    stage rose at step t and the game went on (a victory or a death ends the game; the next step is a reset's).
    Arrays [steps, games]: the stage before and after each step, and whether the step ended the game."""
    import numpy as np

    exited = (np.asarray(stage_after) > np.asarray(stage_before)) & ~np.asarray(done, bool)
    out = np.zeros_like(exited)
    out[1:] = exited[:-1]
    return out


def summarise(first, undo_playable, chose_undo, undo_prob) -> dict:
    """Counts over the steps `first` marks (arrays [steps, games])."""
    import numpy as np

    first = np.asarray(first, bool)
    playable = first & np.asarray(undo_playable, bool)
    chose = playable & np.asarray(chose_undo, bool)
    return {"stage_starts_after_exits": int(first.sum()), "undo_playable": int(playable.sum()),
            "greedy_plays_undo": int(chose.sum()),
            "share_played": float(chose.sum() / playable.sum()) if playable.any() else float("nan"),
            "mean_undo_prob": float(np.asarray(undo_prob)[playable].mean()) if playable.any() else float("nan")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("agents", nargs="+", help="HackMatrix run directories or parameter files")
    p.add_argument("--env-params", default="", metavar="NAME=VALUE,...",
                   help="the env the games play (default: the rules' game, R94's quirk on)")
    p.add_argument("--games", type=int, default=1000, help="games played at once")
    p.add_argument("--steps", type=int, default=1000, help="steps per game lane (games auto-reset)")
    p.add_argument("--seed", type=int, default=0)
    add_out(p, "hackmatrix_undo_after_exit", "writes the table to OUT.json")
    p.add_argument("--json", default="", metavar="FILE", help="write the table to FILE instead")
    p.add_argument("--quick", action="store_true", help="16 games x 40 steps (a smoke run)")
    args = p.parse_args(argv)
    if args.quick:
        args.games, args.steps = 16, 40
    if args.games < 1 or args.steps < 2:
        p.error("--games at least 1 and --steps at least 2")
    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        p.error(f"--json {args.json}: directory does not exist")
    args.json = args.json or check_out(p, args.out, "hackmatrix_undo_after_exit") + ".json"

    import jax
    import jax.numpy as jnp

    from hephaestus.envs.hackmatrix.constants import A_UNDO
    from hephaestus.envs.registry import EnvParamError, parse_env_params
    from hephaestus.core.networks import masked_logits
    from hephaestus.api import LoadError, load_agent

    items = [item for item in args.env_params.split(",") if item.strip()]

    def player(network, env):
        """The jitted greedy games `params -> per-step arrays [steps, games]` of one network and env (its adapted
        reset and auto-resetting step, as evaluations and the rollout play them)."""
        def play(params, key):
            key, reset_key = jax.random.split(key)
            state, first = jax.vmap(env.reset)(jax.random.split(reset_key, args.games))

            def step(carry, key):
                state, obs, mask = carry
                logits = masked_logits(network.apply(params, obs)[0], mask)
                action = jnp.argmax(logits, axis=-1).astype(jnp.int32)
                undo_prob = jax.nn.softmax(logits, axis=-1)[:, A_UNDO]
                next_state, out = jax.vmap(env.step)(jax.random.split(key, args.games), state, action)
                done = out.terminated | out.truncated  # a finished game's next state is a reset's: not an exit
                return (next_state, out.obs, out.action_mask), (
                    state.stage, jnp.where(done, state.stage, next_state.stage), done, mask[:, A_UNDO],
                    action == A_UNDO, undo_prob)

            return jax.lax.scan(step, (state, first.obs, first.action_mask), jax.random.split(key, args.steps))[1]

        return jax.jit(play)

    rows, players = {}, {}  # players: one compiled program per network shape (agents of one config share it)
    for agent in args.agents:
        try:
            loaded = load_agent(agent, env_params=parse_env_params(items))
        except (LoadError, EnvParamError) as err:
            p.error(str(err))
        params, meta, env, network = loaded.params, loaded.meta, loaded.env, loaded.network
        if env.spec.name != "hackmatrix":
            p.error(f"{agent} is a {env.spec.name} agent; this experiment plays HackMatrix")
        shape = json.dumps(meta.get("network") or {}, sort_keys=True)
        if shape not in players:
            players[shape] = player(network, env)
        before, after, done, playable, chose, prob = players[shape](params, jax.random.PRNGKey(args.seed))
        rows[agent] = summarise(first_steps_after_exits(before, after, done), playable, chose, prob)

    print(f"{args.games} greedy games x {args.steps} steps (auto-reset), seed {args.seed}, env params "
          f"{','.join(items) or '(the rules: R94 quirk on)'}")
    print("| agent | first steps after an exit | UNDO playable there | greedy plays UNDO | share | mean P(UNDO) |")
    print("|---|---|---|---|---|---|")
    for agent, r in rows.items():
        print(f"| {agent} | {r['stage_starts_after_exits']} | {r['undo_playable']} | {r['greedy_plays_undo']} | "
              f"{r['share_played']:.1%} | {r['mean_undo_prob']:.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env_params": items, "games": args.games, "steps": args.steps, "seed": args.seed,
                       "agents": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    require_this_checkout(__file__)
    sys.exit(main())
