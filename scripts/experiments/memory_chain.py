#!/usr/bin/env python3
"""bsuite's MemoryChain (gymnax:MemoryChain-bsuite): how long a cue the recurrent policy (--recurrent gru) remembers,
against the feed-forward one (--recurrent none) and the random policy.

An episode of MemoryChain at memory length N is N + 1 steps; a one-bit cue is in view at the start and the last
step's action is rewarded +1 if it names the cue, else -1 (gymnax shows each step the observation of the state
before it, so the cue is in view for the first two steps and a policy must hold it for N - 1 steps). The cue is
random, so any memoryless policy (the MLP, the random policy) scores 0 in expectation; a policy that remembers
scores 1.

Per memory length and agent: `--num-seeds` seeds trained together (the training command's --num-seeds, one compiled
program per agent and length), each scored by `--episodes` greedy games on the training env (random: the random
policy's games). A seed *solves* a length when its greedy mean return is above 0.9.

    python scripts/experiments/memory_chain.py                       # lengths 2 4 8 16, 5 seeds
    python scripts/experiments/memory_chain.py --lengths 2 4 --num-seeds 2 --updates 60   # quick
"""

from __future__ import annotations

import time

from hephaestus.tools.entry_points import require_this_checkout
from hephaestus.tools.experiment import add_seeds, check_out, parser, save_figure, write_json, write_md

AGENTS = ("random", "mlp", "gru")
SOLVED = 0.9  # a greedy mean return above this: the cue is named in at least 95% of the games


def build_parser():
    p = parser("memory_chain", __doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[2, 4, 8, 16], help="memory lengths (default 2 4 8 16)")
    p.add_argument("--agents", nargs="+", default=list(AGENTS), choices=AGENTS, help="default: all")
    p.add_argument("--updates", type=int, default=150, help="PPO updates per run (default 150)")
    p.add_argument("--num-envs", type=int, default=32, help="default 32")
    p.add_argument("--num-steps", type=int, default=32, help="default 32 (an update: num-envs x num-steps steps)")
    p.add_argument("--episodes", type=int, default=256, help="greedy games per seed (default 256)")
    add_seeds(p, num_seeds=5)
    return p


def config_for(agent: str, length: int, args):
    """The run's config: PureJaxRL ppo_rnn-like settings for a tiny observation (3 numbers)."""
    from hephaestus.config.train_config import TrainConfig, resolve

    config = TrainConfig.from_flat(
        env="gymnax:MemoryChain-bsuite", env_params=(f"memory_length={length}",), recurrent="gru" if agent == "gru"
        else "none", num_envs=args.num_envs, num_steps=args.num_steps, total_timesteps=args.updates * args.num_envs
        * args.num_steps, log_interval=args.updates, num_minibatches=4, update_epochs=4, lr=3e-3, ent_coef=0.01,
        seed=args.seed, num_seeds=args.num_seeds, wandb=False)
    return resolve(config)[0]


def run_one(agent: str, length: int, args) -> dict:
    """Train (unless random) and score: per-seed greedy mean returns, the training's last mean episode returns."""
    import jax
    import numpy as np

    from hephaestus.core.evaluation import make_evaluator, policy_index
    from hephaestus.core.ppo import make_train
    from hephaestus.envs.registry import make_env

    start = time.time()
    keys = jax.random.split(jax.random.PRNGKey(args.seed + 1000), args.num_seeds)
    if agent == "random":
        env = make_env("gymnax:MemoryChain-bsuite", memory_length=length)
        evaluate = make_evaluator(env, None, args.episodes, length + 2)
        out = jax.vmap(lambda k: evaluate(None, k, policy_index("random")))(keys)
        train_return = [float("nan")] * args.num_seeds
    else:
        trainer = make_train(config_for(agent, length, args))
        runner, chunk = trainer
        runner, metrics = chunk(runner)
        evaluate = make_evaluator(trainer.env, trainer.network, args.episodes, length + 2)
        params = runner.train_state.params
        if args.num_seeds == 1:
            out = jax.tree.map(lambda x: x[None], evaluate(params, keys[0], policy_index("greedy")))
        else:
            out = jax.vmap(lambda p, k: evaluate(p, k, policy_index("greedy")))(params, keys)
        last = np.asarray(metrics["mean_episode_return"])[-1]
        train_return = np.atleast_1d(last).astype(float).tolist()
    returns = np.asarray(out["return"]).mean(axis=-1).astype(float).tolist()
    return {"agent": agent, "length": length, "greedy_return": returns, "train_return": train_return,
            "solved": sum(r > SOLVED for r in returns), "seconds": time.time() - start}


def table(results: list[dict], args) -> list[str]:
    import numpy as np

    lines = [f"MemoryChain-bsuite: greedy mean return per seed ({args.num_seeds} seeds, {args.episodes} games each; "
             f"{args.updates} updates of {args.num_envs} x {args.num_steps} steps; random: the random policy)", "",
             "| memory length | agent | mean return (seeds' mean ± std) | seeds solved (> 0.9) | run time |",
             "|---|---|---|---|---|"]
    for r in results:
        g = np.asarray(r["greedy_return"])
        lines.append(f"| {r['length']} | {r['agent']} | {g.mean():+.2f} ± {g.std():.2f} | {r['solved']}/{len(g)} | "
                     f"{r['seconds']:.0f} s |")
    return lines


def plot(results: list[dict], args, out: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6, 4))
    for agent in args.agents:
        rows = [r for r in results if r["agent"] == agent]
        lengths = [r["length"] for r in rows]
        means = [np.mean(r["greedy_return"]) for r in rows]
        stds = [np.std(r["greedy_return"]) for r in rows]
        ax.errorbar(lengths, means, yerr=stds, marker="o", capsize=3, label=agent)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("memory length")
    ax.set_ylabel("greedy mean return (seeds' mean ± std)")
    ax.set_ylim(-1.05, 1.05)
    ax.axhline(0.0, color="grey", lw=0.5)
    ax.legend()
    ax.set_title("MemoryChain-bsuite")
    fig.tight_layout()
    return save_figure(fig, out, dpi=110)


def main(argv=None) -> int:
    require_this_checkout(__file__)
    p = build_parser()
    args = p.parse_args(argv)
    if min(args.lengths) < 1 or args.updates < 1 or args.num_seeds < 1 or args.episodes < 1:
        p.error("--lengths, --updates, --num-seeds and --episodes must be positive")
    out = check_out(p, args.out, "memory_chain")
    results = []
    for length in args.lengths:
        for agent in args.agents:
            results.append(run_one(agent, length, args))
            print(table(results, args)[-1], flush=True)
    lines = table(results, args)
    paths = [write_json(out, {"args": vars(args), "results": results}), write_md(out, "\n".join(lines)),
             plot(results, args, out)]
    print("\n".join(lines))
    print(f"results: {', '.join(paths)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
