"""What HackMatrix's actor-critic costs per sample, by width: the figure that sets PPO's training speed on a CPU.

    python benchmarks/network_cost.py                                  # the ego encoder at 256/16, 128/16, 128/8
    python benchmarks/network_cost.py --sizes 256,16 64,8 --batch 4096 --encoder cells

At 2048 envs x 128 steps with 2 epochs, every env step costs one forward pass (the rollout) and two forward +
backward passes (the update) of the network, and on the 2-core CPU these are nearly all of a training update
(specs/hackmatrix.md, "A narrower ego student"). For each size (hidden width, cell embedding width) the script
times, at one minibatch's batch (8,192 = 262,144 / 32 minibatches), the jitted forward pass and the jitted
gradient of a loss on both heads (median of --repeats calls after a warm-up) and prints them with the estimate
per env step: (forward + epochs x forward-and-backward) / batch. The observations are random but placed like
HackMatrix's (the player's row and column in obs[0], obs[1]), so the ego encoder's window gather is exercised.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from hephaestus.config.train_config import TrainConfig, resolve, resolve_for_env  # noqa: E402
from hephaestus.envs.registry import make_env  # noqa: E402
from hephaestus.core.networks import make_network  # noqa: E402

ENV = "hackmatrix"


def random_observations(key, env_spec, batch):
    """Uniform features with a valid player row and column (obs[0], obs[1] = row / 5, col / 5, R96)."""
    obs_key, row_key, col_key = jax.random.split(key, 3)
    obs = jax.random.uniform(obs_key, (batch, env_spec.obs_dim))
    rows, cols = env_spec.obs_board[:2]
    obs = obs.at[:, 0].set(jax.random.randint(row_key, (batch,), 0, rows) / (rows - 1))
    return obs.at[:, 1].set(jax.random.randint(col_key, (batch,), 0, cols) / (cols - 1))


def median_ms(fn, args, repeats):
    jax.block_until_ready(fn(*args))  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def network_cost(env, hidden_dim, cell_dim, encoder, batch, repeats, key):
    # The network a training run builds (ppo.make_train's path): the config resolved for the env, then make_network.
    config = resolve(TrainConfig().replace(env=ENV, hidden_dim=hidden_dim, cell_dim=cell_dim, encoder=encoder))[0]
    net = make_network(env.spec, resolve_for_env(config, env.spec))
    init_key, obs_key = jax.random.split(key)
    obs = random_observations(obs_key, env.spec, batch)
    params = net.init(init_key, obs[:2])

    def loss(params, obs):  # both heads, so both first layers and the shared encoder get gradients
        logits, value = net.apply(params, obs)
        return jnp.sum(logits ** 2) + jnp.sum(value ** 2)

    forward = jax.jit(net.apply).lower(params, obs).compile()
    gradient = jax.jit(jax.grad(loss)).lower(params, obs).compile()
    n_params = sum(x.size for x in jax.tree_util.tree_leaves(params))
    return median_ms(forward, (params, obs), repeats), median_ms(gradient, (params, obs), repeats), n_params


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["256,16", "128,16", "128,8"],
                        help="HIDDEN,CELL_DIM pairs (default: 256,16 128,16 128,8)")
    parser.add_argument("--encoder", choices=["ego", "cells", "mlp"], default="ego")
    parser.add_argument("--batch", type=int, default=8192, help="samples per call (default: one minibatch, 8192)")
    parser.add_argument("--epochs", type=int, default=2, help="update epochs in the per-env-step estimate (default 2)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    try:
        sizes = [tuple(int(n) for n in size.split(",")) for size in args.sizes]
        if any(len(size) != 2 or min(size) < 1 for size in sizes):
            raise ValueError
    except ValueError:
        parser.error(f"--sizes takes HIDDEN,CELL_DIM pairs of positive integers, got {' '.join(args.sizes)}")
    print(f"{args.encoder} encoder, batch {args.batch}, {jax.devices()[0].platform}")
    env, base = make_env(ENV), None
    for hidden_dim, cell_dim in sizes:
        fwd, grad, n_params = network_cost(env, hidden_dim, cell_dim, args.encoder, args.batch, args.repeats,
                                           jax.random.PRNGKey(0))
        per_step_us = 1000 * (fwd + args.epochs * grad) / args.batch
        base = base or per_step_us
        print(f"hidden {hidden_dim:4d}, cell {cell_dim:3d}: {n_params:9,d} parameters | forward {fwd:7.1f} ms | "
              f"forward+backward {grad:7.1f} ms | per env step {per_step_us:6.1f} us ({base / per_step_us:.2f}x the "
              f"first size's speed)", flush=True)


if __name__ == "__main__":
    main()
