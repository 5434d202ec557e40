#!/usr/bin/env python3
"""DeepSea (bsuite, gymnax) with a randomised action map: plain PPO vs PPO + DTC intrinsic reward.

For each size, each agent trains `--seeds` seeds (vmapped: one compiled program per size and agent) for a
fixed step budget. Prints, per size and agent, the fraction of seeds that ever reach the treasure and the
env steps until each first did; saves a PNG plot.

    python scripts/experiments/deepsea.py                       # sizes 8 12 16 20, 5 seeds
    python scripts/experiments/deepsea.py --sizes 8 --budget 20000 --seeds 2

The treasure is detected by a probe stage placed first after the rollout, so it sees the extrinsic reward
(the bottom-right transition pays +1; every other reward is <= 0).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from hephaestus import xla_flags  # noqa: E402 (no jax import)

xla_flags.configure()  # before jax starts: avoids a CPU deadlock of vmapped initialisers (xla_flags.py)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from gymnax.environments.bsuite.deep_sea import DeepSea  # noqa: E402

from hephaestus.config import DTC_STAGES, TrainConfig, resolve  # noqa: E402
from hephaestus.envs.adapters import adapt_gymnax  # noqa: E402
from hephaestus.ppo import make_train  # noqa: E402
from hephaestus.stages import Stage, register_stage  # noqa: E402


@register_stage("treasure_probe")
def treasure_probe(ctx):
    def apply(key, train_state, batch, state):
        return train_state, batch, state, {"probe/treasure": jnp.sum(batch["reward"] > 0.5).astype(jnp.float32)}

    return Stage(name="treasure_probe", apply=apply)


def make_config(size: int, agent: str, budget: int, args) -> TrainConfig:
    extra = ("treasure_probe",) + (DTC_STAGES if agent == "dtc" else ())
    config = TrainConfig(env=f"deepsea{size}", num_envs=args.num_envs, num_steps=args.num_steps,
                         total_timesteps=budget, lr=args.lr, ent_coef=args.ent_coef, hidden_dim=64, num_layers=2,
                         extra_stages=extra, dtc_intrinsic_coef=args.intrinsic_coef, dtc_seq_len=args.seq_len,
                         dtc_wm_steps=args.wm_steps, dtc_replay_capacity=args.replay_capacity,
                         dtc_frontier_window=args.replay_capacity // 4)
    config = config.replace(log_interval=config.num_updates)  # the whole run is one compiled chunk
    return resolve(config)[0]


def run(size: int, agent: str, args):
    env = DeepSea(size=size)
    params = env.default_params.replace(randomize_actions=True)
    adapted = adapt_gymnax(env, params, f"deepsea{size}")
    config = make_config(size, agent, args.budget, args)
    trainer = make_train(config, adapted)
    seeds = list(range(args.seeds))
    runners = jax.tree.map(lambda *xs: jnp.stack(xs), *[trainer.init_runner_state(s) for s in seeds])
    chunk = jax.jit(jax.vmap(lambda r, n: trainer.compiled_chunk(r, n), in_axes=(0, None)))
    t0 = time.perf_counter()
    compiled = chunk.lower(runners, jnp.int32(config.num_updates)).compile()
    compile_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, metrics = compiled(runners, jnp.int32(config.num_updates))
    hits = np.asarray(jax.device_get(metrics["probe/treasure"]))  # [seeds, updates]
    seconds = time.perf_counter() - t0
    reached = hits.sum(1) > 0
    first = np.where(reached, (hits > 0).argmax(1) + 1, -1) * config.batch_size  # env steps at the end of it
    returns = np.asarray(jax.device_get(metrics["mean_episode_return"]))
    share = float(np.mean(jax.device_get(metrics["dtc/intrinsic_share"]))) if "dtc/intrinsic_share" in metrics else 0.0
    return {"size": size, "agent": agent, "reached": reached, "first": first, "seconds": seconds, "compile": compile_seconds,
            "steps": config.num_updates * config.batch_size, "hits": hits, "returns": returns, "share": share,
            "batch": config.batch_size}


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r["size"] for r in results})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for agent, colour in (("ppo", "tab:blue"), ("dtc", "tab:orange")):
        rs = {r["size"]: r for r in results if r["agent"] == agent}
        if not rs:
            continue
        axes[0].plot(sizes, [rs[s]["reached"].mean() if s in rs else np.nan for s in sizes], "o-", color=colour,
                     label=agent)
        for s in sizes:
            if s in rs:
                r = rs[s]
                cum = np.cumsum(r["hits"], axis=1).mean(0)
                axes[1].plot(np.arange(1, cum.size + 1) * r["batch"], cum, color=colour,
                             alpha=0.4 + 0.6 * sizes.index(s) / max(len(sizes) - 1, 1),
                             label=f"{agent} size {s}")
    axes[0].set(xlabel="DeepSea size", ylabel="fraction of seeds reaching the treasure", ylim=(-0.05, 1.05))
    axes[1].set(xlabel="env steps", ylabel="treasures found (mean over seeds, cumulative)", yscale="symlog")
    axes[0].legend()
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[8, 12, 16, 20])
    p.add_argument("--agents", nargs="+", default=["ppo", "dtc"], choices=["ppo", "dtc"])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--budget", type=int, default=50_000, help="env steps per seed, every size (default %(default)s)")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--num-steps", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--intrinsic-coef", type=float, default=0.05)
    p.add_argument("--seq-len", type=int, default=8)
    p.add_argument("--wm-steps", type=int, default=1)
    p.add_argument("--replay-capacity", type=int, default=1024)
    p.add_argument("--plot", default="deepsea.png")
    args = p.parse_args()

    results = []
    print(f"{'size':>4} {'agent':>5} {'reached':>8} {'first reach (env steps, per seed)':<44} {'run s':>7} {'compile s':>9} {'int share':>9}")
    for size in args.sizes:
        for agent in args.agents:
            r = run(size, agent, args)
            results.append(r)
            firsts = " ".join(f"{f:>7}" if f >= 0 else "      -" for f in r["first"])
            print(f"{size:>4} {agent:>5} {r['reached'].sum():>3}/{len(r['reached']):<4} {firsts:<44} "
                  f"{r['seconds']:>7.1f} {r['compile']:>9.1f} {r['share']:>9.3f}", flush=True)
    print(f"budget: {results[0]['steps']:,} env steps per seed; first reach = env steps at the end of the update "
          "in which the treasure was first found; '-' = never")
    plot(results, args.plot)
    print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
