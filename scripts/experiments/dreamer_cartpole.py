#!/usr/bin/env python3
"""The dreamer against PPO on CartPole-v1: env steps to a return of 475, over seeds, and the world
model's open-loop prediction error.

Trains each agent once with --num-seeds S (all seeds in one vmapped program, seeds 0..S-1), reads every seed's
training curve (mean return of the episodes that ended in each chunk) from metrics.jsonl, and reports the first
env step at which each seed's curve reaches --threshold (475: CartPole-v1 counts as solved there). Then, from the
dreamer's final checkpoint, the open-loop check: real episodes of the trained policy are held out; the world
model filters the first --context steps of each and then imagines --horizon steps with the actions that were
really taken, with no observations; the error of every imagined observation against the real one is reported per
step k, next to the error of the naive forecast "the last observation repeats".

    python scripts/experiments/dreamer_cartpole.py --out checkpoints/dreamer_cartpole --seeds 5
    python scripts/experiments/dreamer_cartpole.py --quick --out /tmp/dc      # a smoke run (about a minute)

Writes OUT.json, OUT.md and OUT.png (curves, mean and min-max band per agent; open-loop error by k).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from hephaestus.tools.entry_points import require_this_checkout
from hephaestus.tools.experiment import add_out, check_out, write_results

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "scripts", "train_purejaxrl.py")

# PPO: PureJaxRL's CartPole settings (configs/cartpole.yaml). The dreamer: 16 envs x 16 steps per update, a replay
# ratio of 8 (8 world-model and 8 actor-critic gradient steps per update of 256 env steps), lr 3e-4 and a replay of
# 16,384 sequences (262k steps: no transition of a 1.5e5-step run is forgotten); its own defaults otherwise. Both
# report every 4,096 env steps, so "steps to 475" is read at the same granularity.
AGENTS = {
    "ppo": ["--config", os.path.join(ROOT, "configs", "cartpole.yaml"), "--log-interval", "8"],
    "dreamer": ["--env", "gymnax:CartPole-v1", "--agent", "dreamer", "--num-envs", "16", "--num-steps", "16",
                "--dtc-replay-ratio", "8", "--lr", "3e-4", "--dtc-replay-capacity",
                "16384", "--log-interval", "16"],
}


def train(agent: str, extra: list[str], out_dir: str, seeds: int, timesteps: float, eval_episodes: int) -> str:
    run_dir = os.path.join(out_dir, agent)
    cmd = [sys.executable, TRAIN, *AGENTS[agent], *extra, "--num-seeds", str(seeds), "--seed", "0",
           "--total-timesteps", str(int(timesteps)), "--run-name", agent, "--checkpoint-dir", out_dir,
           "--no-wandb", "--final-eval-episodes", str(eval_episodes)]
    print("+", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True)
    return run_dir


def seed_curves(run_dir: str):
    """(env steps [C], returns [C, S]) of a --num-seeds run (chunks where some seed had no finished episode
    keep that seed's previous value, as the training loop reports it)."""
    import numpy as np

    steps, returns = [], []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            values = rec.get("per_seed", {}).get("mean_episode_return")
            if values is None and "mean_episode_return" in rec:
                values = [rec["mean_episode_return"]]
            if values is not None and "env_steps" in rec:
                steps.append(rec["env_steps"])
                returns.append(values)
    return np.asarray(steps), np.asarray(returns, dtype=float)


def steps_to(steps, returns, threshold: float):
    """Per seed: the first env step whose curve value is >= threshold (None if never)."""
    import numpy as np

    out = []
    for s in range(returns.shape[1]):
        hit = np.nonzero(returns[:, s] >= threshold)[0]
        out.append(int(steps[hit[0]]) if len(hit) else None)
    return out


def open_loop(run_dir: str, episodes: int, context: int, horizon: int, seed: int = 123):
    """Mean absolute error per imagined step k = 1..horizon (per observation dimension, averaged), of the world
    model of the dreamer's final checkpoint (seed 0's agent), against held-out real steps of its own policy; and
    the same error for the forecast "the last real observation repeats"."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from hephaestus.run import checkpoint as ck
    from hephaestus.core import networks as nets
    from hephaestus.core.compilation_cache import enable_compilation_cache
    from hephaestus.config.train_config import resolve
    from hephaestus.agents.dtc import rssm
    from hephaestus.agents.dtc.agent import sizes_from
    from hephaestus.agents.dreamer.dreamer import member
    from hephaestus.core.ppo import make_train

    found = ck.locate(run_dir)
    config, _ = resolve(ck.config_of(found))
    # The training run stored its fresh-agent program beside the compilation cache (stored_programs.py): read it
    # back for the checkpoint's structure instead of tracing and compiling the agents' initialisation again.
    trainer = make_train(config, store_programs_in=enable_compilation_cache())
    runner = ck.restore(found, trainer).runner_state
    world, ac_params = runner.stages["dreamer"].world.params, runner.train_state.params
    if config.run.num_seeds > 1:  # seed 0's agent
        world, ac_params = member(world, 0), member(ac_params, 0)
    model = rssm.RSSM(sizes_from(trainer.config, trainer.env.spec))
    lead = member(world, 0)  # the ensemble's first member, as the dreams use it
    env, length = trainer.env, context + horizon

    def episode(key):  # one real episode's first `length` steps under the trained (sampled) policy
        key_reset, key_run = jax.random.split(key)
        state, first_step = env.reset(key_reset)

        def step(carry, k):  # a policy on the model state (--dreamer-actor-input state) carries its filter state
            state, obs, mask, alive, policy_carry, first = carry
            k_act, k_env = jax.random.split(k)
            policy_carry, (env_action, action, _, _) = nets.act_carried(trainer.network, ac_params, policy_carry,
                                                                        obs[None], first[None], mask[None], k_act)
            state, out = env.step(k_env, state, env_action[0])
            done = jnp.logical_or(out.terminated, out.truncated)
            return (state, out.obs, out.action_mask, alive & ~done, policy_carry, jnp.bool_(False)), (obs, action[0],
                                                                                                      alive)

        start = (state, first_step.obs, first_step.action_mask, jnp.bool_(True),
                 nets.initial_carry(trainer.network, (1,)), jnp.bool_(True))
        _, (obs, action, alive) = jax.lax.scan(step, start, jax.random.split(key_run, length))
        return obs, action, alive

    obs, action, alive = jax.jit(jax.vmap(episode))(jax.random.split(jax.random.PRNGKey(seed), episodes))
    obs, action, alive = (jnp.swapaxes(x, 0, 1) for x in (obs, action, alive))  # [L, B, ...]
    first_flags = jnp.zeros(alive.shape, bool).at[0].set(True)
    h0 = jnp.zeros((episodes, model.sizes.deter), jnp.float32)
    out, _ = rssm.observe(model, lead, obs[:context], action[:context], first_flags[:context], h0,
                          jax.random.PRNGKey(seed + 1), sample=False)
    # The state after the last context action is the prior at step `context`: imagine from the context's last
    # posterior with its action, then with the real actions after it.
    imagined = rssm.imagine(model, lead, out["h"][-1], out["z"][-1], action[context - 1:context + horizon - 1],
                            jax.random.PRNGKey(seed + 2))
    predicted = rssm.symexp(imagined["obs_mean"])  # [horizon, B, D]: steps context .. context + horizon - 1
    real = obs[context:context + horizon]
    valid = np.asarray(alive[context:context + horizon])  # the episode had not ended before this step
    err = np.abs(np.asarray(predicted) - np.asarray(real)).mean(-1)
    naive = np.abs(np.asarray(real) - np.asarray(obs[context - 1])[None]).mean(-1)
    scale = np.asarray(real).std(axis=(0, 1)).mean()
    rows = []
    for k in range(horizon):
        m = valid[k]
        rows.append({"k": k + 1, "episodes": int(m.sum()), "model_mae": float(err[k][m].mean()),
                     "repeat_last_mae": float(naive[k][m].mean())})
    return {"rows": rows, "obs_std": float(scale), "context": context}


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), dpi=100)
    for agent, r in results["agents"].items():
        steps, returns = np.asarray(r["steps"]), np.asarray(r["returns"])
        axes[0].plot(steps, returns.mean(1), label=f"{agent} (mean of {returns.shape[1]} seeds)")
        axes[0].fill_between(steps, returns.min(1), returns.max(1), alpha=0.2)
    axes[0].axhline(results["threshold"], color="k", ls=":", lw=1, label=f"{results['threshold']:g}")
    axes[0].axhline(results["random_return"], color="k", ls="--", lw=1, label="random policy")
    axes[0].set_xlabel("env steps"); axes[0].set_ylabel("training episode return"); axes[0].legend(fontsize=7)
    axes[0].set_title("CartPole-v1", fontsize=10)
    if results.get("open_loop"):
        rows = results["open_loop"]["rows"]
        k = [r["k"] for r in rows]
        axes[1].plot(k, [r["model_mae"] for r in rows], marker="o", label="world model, open loop")
        axes[1].plot(k, [r["repeat_last_mae"] for r in rows], marker="x", label="last observation repeats")
        axes[1].set_xlabel("imagined step k"); axes[1].set_ylabel("mean abs error per dim"); axes[1].legend(fontsize=7)
        axes[1].set_title("open-loop prediction on held-out episodes", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_out(p, "dreamer_cartpole", "writes OUT.json, OUT.md, OUT.png; runs under OUT_runs/")
    p.add_argument("--num-seeds", "--seeds", dest="seeds", type=int, default=5,
                   help="seeds (the training command's --num-seeds; --seeds says the same)")
    p.add_argument("--agents", nargs="+", default=list(AGENTS), choices=list(AGENTS))
    p.add_argument("--ppo-timesteps", type=float, default=5e5)
    p.add_argument("--dreamer-timesteps", type=float, default=1.5e5)
    p.add_argument("--threshold", type=float, default=475.0)
    p.add_argument("--open-loop-episodes", type=int, default=64)
    p.add_argument("--context", type=int, default=10)
    p.add_argument("--horizon", type=int, default=15)
    p.add_argument("--quick", action="store_true", help="a smoke run: the dreamer alone (PPO's run is the same code "
                   "with other flags; --agents ppo dreamer adds it), 2 seeds, tiny budgets, 8 evaluation and 8 open-loop "
                   "episodes")
    p.add_argument("--dreamer-args", default="", help="extra flags for the dreamer run, e.g. '--dtc-replay-ratio 4'")
    p.add_argument("--final-eval-episodes", type=int, default=100, help="greedy episodes each run ends with")
    args = p.parse_args(argv)
    args.out = check_out(p, args.out, "dreamer_cartpole")
    random_envs = 200  # random-policy episodes for the plot's baseline line
    if args.quick:
        args.seeds, args.ppo_timesteps, args.dreamer_timesteps, args.open_loop_episodes = 2, 4096, 1024, 8
        args.final_eval_episodes, random_envs = 8, 16
        if "--agents" not in (sys.argv[1:] if argv is None else argv):
            args.agents = ["dreamer"]
    import numpy as np

    out_dir = args.out + "_runs"
    os.makedirs(out_dir, exist_ok=True)
    from hephaestus.core.evaluation import random_policy_returns

    random_return = float(random_policy_returns("gymnax:CartPole-v1", random_envs, 501).mean())
    results = {"threshold": args.threshold, "seeds": list(range(args.seeds)), "agents": {},
               "random_return": random_return}
    for agent in args.agents:
        budget = args.ppo_timesteps if agent == "ppo" else args.dreamer_timesteps
        extra = args.dreamer_args.split() if agent == "dreamer" else []
        run_dir = train(agent, extra, out_dir, args.seeds, budget, args.final_eval_episodes)
        steps, returns = seed_curves(run_dir)
        hits = steps_to(steps, returns, args.threshold)
        results["agents"][agent] = {"budget": budget, "steps": steps.tolist(), "returns": returns.tolist(),
                                    "steps_to_threshold": hits, "final_return": returns[-3:].mean(0).tolist(),
                                    "command_flags": AGENTS[agent] + extra}
        if agent == "dreamer":
            results["open_loop"] = open_loop(run_dir, args.open_loop_episodes, args.context, args.horizon)
    lines = [f"| agent | budget | seeds reaching {args.threshold:g} | env steps to {args.threshold:g} (per seed) | "
             "final training return (mean ± std) |", "|---|---|---|---|---|"]
    for agent, r in results["agents"].items():
        hits = r["steps_to_threshold"]
        final = np.asarray(r["final_return"])
        lines.append(f"| {agent} | {r['budget']:,.0f} | {sum(h is not None for h in hits)}/{len(hits)} | "
                     f"{', '.join('-' if h is None else f'{h:,}' for h in hits)} | "
                     f"{final.mean():.1f} ± {final.std(ddof=1) if len(final) > 1 else 0:.1f} |")
    if results.get("open_loop"):
        ol = results["open_loop"]
        lines += ["", f"Open loop (context {ol['context']} real steps, then imagined with the real actions; "
                      f"observation std {ol['obs_std']:.3f}):", "", "| k | episodes | world model MAE | "
                      "last-observation MAE |", "|---|---|---|---|"]
        lines += [f"| {r['k']} | {r['episodes']} | {r['model_mae']:.4f} | {r['repeat_last_mae']:.4f} |"
                  for r in ol["rows"]]
    write_results(args.out, results, lines, plot)
    return 0


if __name__ == "__main__":
    require_this_checkout(__file__)
    sys.exit(main())
