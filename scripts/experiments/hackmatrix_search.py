"""How well does search over the true HackMatrix dynamics play, led by a trained agent? The teacher a search lever
would distil.

The env is a pure JAX function, so it is its own model: at every move of a game, Gumbel MuZero's search (DeepMind's
`mctx`, `gumbel_muzero_policy`) expands the agent's masked policy as its prior and the agent's critic as its leaf
value, and steps the real env's `step_env` from each node's state (one sampled future per node: spawns and other
chance events are drawn once where a node is expanded). The move played is the search's choice, without Gumbel noise
(`gumbel_scale` 0: the action of the highest completed value among those the search considered). The agent's own
greedy play of the same games (same env keys) is the baseline; `--simulations 0` plays it alone.

The games are the rules' games from stage 1 with R94's UNDO quirk off (`undo_across_stages=0`); the search's
rewards are the agent's training reward (the file's `env_params`, without its late-start curriculum), the reward
its critic predicts. Every table row: share of games that cleared stage 1 / reached stage 4 / played a program /
used a siphon, victories, deaths, mean stage reached, and the wall seconds of the row.

    python scripts/experiments/hackmatrix_search.py --agent checkpoints/pretrained/hackmatrix --games 200 \
        --simulations 0 8 32
    python scripts/experiments/hackmatrix_search.py --games 2 --simulations 2 --max-steps 20   # the plumbing, tiny

Cost: a move costs `simulations` env steps and network calls more than greedy play (one batched call per
simulation; the games run side by side).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

SHIPPED_AGENT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                             "checkpoints", "pretrained", "hackmatrix")
GAME_PARAMS = {"undo_across_stages": 0, "curriculum_share": 0.0}  # the rules' games, quirk off, from stage 1


def parse(argv=None):
    from hephaestus.tools.experiment import check_out, parser

    p = parser("hackmatrix_search", __doc__.split("\n\n")[0], out_help="writes OUT.json and OUT.md",
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agent", default=SHIPPED_AGENT,
                   help="a HackMatrix agent: parameter file or run folder (default: this checkout's shipped agent, "
                        "checkpoints/pretrained/hackmatrix)")
    p.add_argument("--games", type=int, default=200, help="games per row, played side by side (default 200)")
    p.add_argument("--simulations", type=int, nargs="+", default=[0, 8, 32],
                   help="search simulations per move, one row each; 0 = the agent's greedy play (default 0 8 32)")
    p.add_argument("--considered", type=int, default=8,
                   help="actions the root's sequential halving considers (max_num_considered_actions, default 8)")
    p.add_argument("--value-scale", type=float, default=0.1,
                   help="weight of the search's values against the prior's logits (mctx's value_scale, default 0.1)")
    p.add_argument("--raw-values", action="store_true",
                   help="use the values as they are, not rescaled to [0, 1] by the tree's min and max (mctx's "
                        "rescale_values=False): a small difference of value then moves the choice little")
    p.add_argument("--rollout-depths", type=int, nargs="*", default=[],
                   help="one row each, instead of the tree search: each of the --considered most likely valid actions "
                        "is tried and followed by this many moves of the agent's greedy play (the same sampled future "
                        "for each), and the best discounted return plus the critic's value at the end is played (one "
                        "step of policy improvement by rollouts; default: no such row)")
    p.add_argument("--max-steps", type=int, default=1000, help="moves per game at most (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="the games' key: every row plays the same games")
    args = p.parse_args(argv)
    args.out = check_out(p, args.out, "hackmatrix_search")
    if (args.games < 1 or args.max_steps < 1 or min(args.simulations) < 0 or args.considered < 2
            or min(args.rollout_depths, default=1) < 1):
        p.error("--games, --max-steps and --rollout-depths must be at least 1, --simulations at least 0, "
                "--considered at least 2")
    return args


def load(agent_path: str):
    """(network, params, gamma, the search env's params, the game's params, env) of a HackMatrix agent file."""
    from hephaestus.envs.hackmatrix import HackMatrix
    from hephaestus.envs.registry import parse_env_params, with_params
    from hephaestus.tools.saved_agent import LoadError, read_agent, resolve_params_path

    try:
        params, meta, _, network = read_agent(resolve_params_path(agent_path))
    except LoadError as err:
        raise SystemExit(f"error: {err}") from None
    if meta.get("env") != "hackmatrix":
        raise SystemExit(f"error: {agent_path} plays {meta.get('env')!r}, not hackmatrix")
    if network.recurrent != "none":
        raise SystemExit(f"error: {agent_path} is a recurrent agent; this search reads feed-forward ones")
    env = HackMatrix()
    config = meta.get("config") or {}
    training = parse_env_params(config.get("env_params") or ())
    search_params = with_params("hackmatrix", env.default_params, {**training, **GAME_PARAMS})
    game_params = with_params("hackmatrix", env.default_params, GAME_PARAMS)
    return network, params, float(config.get("gamma", 0.99)), search_params, game_params, env


def make_player(network, params, gamma, search_params, game_params, env, simulations, considered, max_steps,
                value_scale=0.1, raw_values=False, rollout_depth=0):
    """A jitted (key, games) -> per-game statistics: every game played to its end (or `max_steps`) by greedy play
    (`simulations` 0) or by Gumbel MuZero's search over `env.step_env`."""
    from functools import partial

    import jax
    import jax.numpy as jnp
    import mctx

    from hephaestus.core.networks import masked_logits

    def policy(obs):
        logits, value = network.apply(params, obs["obs"])
        return masked_logits(logits, obs["action_mask"]), value

    def recurrent_fn(_, key, action, state):
        keys = jax.random.split(key, action.shape[0])
        obs, state, reward, terminated, _ = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))(
            keys, state, action, search_params)
        logits, value = policy(obs)
        discount = jnp.where(terminated, 0.0, gamma).astype(jnp.float32)
        return mctx.RecurrentFnOutput(reward=reward.astype(jnp.float32), discount=discount, prior_logits=logits,
                                      value=jnp.where(terminated, 0.0, value)), state

    def step_all(key, state, action):
        return jax.vmap(env.step_env, in_axes=(0, 0, 0, None))(jax.random.split(key, action.shape[0]), state,
                                                                action, search_params)

    def rollout_return(key, obs, state, first_action):
        """Discounted training return of `first_action` then `rollout_depth` greedy moves, plus the critic's
        value where the game is still on: [games]. One scan of depth + 1 moves, the first one `first_action`."""

        def move(carry, t_key):
            obs, state, ret, disc, alive = carry
            t, k = t_key
            action = jnp.where(t == 0, first_action, jnp.argmax(policy(obs)[0], axis=-1))
            obs, state, reward, terminated, _ = step_all(k, state, action)
            return (obs, state, ret + jnp.where(alive, disc * reward, 0.0), disc * gamma,
                    alive & ~terminated), None

        zeros = jnp.zeros(first_action.shape, jnp.float32)
        init = (obs, state, zeros, jnp.float32(1.0), jnp.ones(first_action.shape, bool))
        key_first, key_rest = jax.random.split(key)
        keys = jnp.concatenate([key_first[None], jax.random.split(key_rest, rollout_depth)])
        steps = (jnp.arange(rollout_depth + 1), keys)
        (obs, _, ret, disc, alive), _ = jax.lax.scan(move, init, steps)
        return ret + jnp.where(alive, disc * policy(obs)[1], 0.0)

    def choose(key, obs, state):
        logits, value = policy(obs)
        if simulations == 0:
            return jnp.argmax(logits, axis=-1).astype(jnp.int32)
        if rollout_depth > 0:  # every candidate sees the same sampled future (one key): their returns compare
            valid_logits, candidates = jax.lax.top_k(logits, considered)  # [games, considered]
            returns = jax.vmap(lambda a: rollout_return(key, obs, state, a), in_axes=1, out_axes=1)(candidates)
            returns = jnp.where(jnp.take_along_axis(obs["action_mask"], candidates, axis=1), returns, -jnp.inf)
            return jnp.take_along_axis(candidates, jnp.argmax(returns, axis=1)[:, None], axis=1)[:, 0]
        root = mctx.RootFnOutput(prior_logits=logits, value=value, embedding=state)
        out = mctx.gumbel_muzero_policy(None, key, root, recurrent_fn, num_simulations=simulations,
                                        invalid_actions=~obs["action_mask"], max_num_considered_actions=considered,
                                        gumbel_scale=0.0, qtransform=partial(
                                            mctx.qtransform_completed_by_mix_value, value_scale=value_scale,
                                            rescale_values=not raw_values))
        return out.action.astype(jnp.int32)

    stat_names = ("stage_reached", "victory", "death", "programs_played", "siphons_used")

    @partial(jax.jit, static_argnums=1)
    def play(key, num_games):
        key_reset, key_play = jax.random.split(key)
        obs, state = jax.vmap(env.reset_env, in_axes=(0, None))(jax.random.split(key_reset, num_games), game_params)
        zeros = jnp.zeros((num_games,), jnp.float32)
        stats = {"stage_reached": state.stage.astype(jnp.float32), "victory": zeros, "death": zeros,
                 "programs_played": zeros, "siphons_used": zeros, "moves": zeros}

        def move(carry, t):
            obs, state, done, stats = carry
            key_choose, key_step = jax.random.split(jax.random.fold_in(key_play, t))
            action = choose(key_choose, obs, state)
            keys = jax.random.split(key_step, num_games)
            # The real move: the game's own params (its rewards do not matter here, its dynamics equal the search's).
            obs2, state2, _, terminated, info = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))(
                keys, state, action, game_params)
            live = ~done
            ep = info["episode_stats"]
            stats = {"stage_reached": jnp.where(live, jnp.maximum(stats["stage_reached"], ep["stage_reached"]),
                                                stats["stage_reached"]),
                     **{k: stats[k] + jnp.where(live, ep[k], 0.0) for k in stat_names[1:]},
                     "moves": stats["moves"] + live}
            keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(  # noqa: E731
                done.reshape(done.shape + (1,) * (a.ndim - 1)), b, a), new, old)
            return (keep(obs2, obs), keep(state2, state), done | terminated, stats), None

        init = (obs, state, jnp.zeros((num_games,), bool), stats)
        (_, _, _, stats), _ = jax.lax.scan(move, init, jnp.arange(max_steps))
        return stats

    return play


def summarise(stats, seconds):
    import numpy as np

    s = {k: np.asarray(v) for k, v in stats.items()}
    return {"games": int(len(s["moves"])), "stage1_cleared": float((s["stage_reached"] >= 2).mean()),
            "stage4_reached": float((s["stage_reached"] >= 4).mean()),
            "program_played": float((s["programs_played"] >= 1).mean()),
            "siphon_used": float((s["siphons_used"] >= 1).mean()), "victories": int((s["victory"] > 0).sum()),
            "deaths": int((s["death"] > 0).sum()), "stage_mean": float(s["stage_reached"].mean()),
            "moves_mean": float(s["moves"].mean()), "seconds": round(seconds, 1)}


def main(argv=None) -> int:
    args = parse(argv)
    import jax

    network, params, gamma, search_params, game_params, env = load(args.agent)
    rows = []
    header = ("| policy | stage 1 cleared | stage 4 reached | program played | siphon used | victories | "
              "deaths | mean stage | mean moves | seconds |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = [f"{args.games} games (seed {args.seed}), quirk off, at most {args.max_steps} moves; agent {args.agent}; "
             f"{args.considered} actions considered; tree: value scale {args.value_scale}, "
             f"{'raw' if args.raw_values else 'rescaled'} values", "", header]
    print("\n".join(lines))
    methods = [(f"search, {n} simulations" if n else "greedy (the agent)", n, 0) for n in args.simulations]
    methods += [(f"rollouts of {d} greedy moves", 1, d) for d in args.rollout_depths]
    for name, simulations, depth in methods:
        play = make_player(network, params, gamma, search_params, game_params, env, simulations, args.considered,
                           args.max_steps, args.value_scale, args.raw_values, depth)
        t0 = time.perf_counter()
        stats = jax.device_get(play(jax.random.PRNGKey(args.seed), args.games))
        row = {"policy": name, "simulations": simulations, "rollout_depth": depth,
               **summarise(stats, time.perf_counter() - t0)}
        rows.append(row)
        lines.append(f"| {name} | {row['stage1_cleared']:.1%} | {row['stage4_reached']:.1%} | "
                     f"{row['program_played']:.1%} | {row['siphon_used']:.1%} | {row['victories']} | {row['deaths']} | "
                     f"{row['stage_mean']:.2f} | {row['moves_mean']:.0f} | {row['seconds']} |")
        print(lines[-1], flush=True)
    from hephaestus.tools.experiment import write_json, write_md

    paths = [write_json(args.out, {"args": vars(args), "rows": rows}), write_md(args.out, "\n".join(lines))]
    print(f"results: {', '.join(paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
