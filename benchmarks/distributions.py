"""The pipeline's policy distributions (hephaestus.core.networks: distrax's, on masked logits) against the same
distributions written in plain jax, jitted, side by side in one process.

    python benchmarks/distributions.py                   # [4096, 30] masked categorical, [4096, 6] Gaussian
    python benchmarks/distributions.py --batch 2048 --actions 28 --repeats 200
    python benchmarks/distributions.py --training        # CartPole 4 x 128 training chunks, both ways

For each distribution, one jitted function does sample + log_prob + entropy on a batch; the two implementations
are timed in alternating rounds (median over rounds), their results compared, and the ratio distrax / plain
printed (> 1: distrax is slower). --training compiles the CartPole 4 x 128 training chunk once with each
implementation in one process and times the two alternately (env steps per second).
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

from hephaestus.core import networks as nets  # noqa: E402


def plain_categorical_sample(key, logits, mask):
    return jax.random.categorical(key, nets.masked_logits(logits, mask), axis=-1)


def plain_categorical_log_prob(logits, mask, action):
    log_p = jax.nn.log_softmax(nets.masked_logits(logits, mask), axis=-1)
    return jnp.take_along_axis(log_p, action[..., None].astype(jnp.int32), axis=-1)[..., 0]


def plain_categorical_entropy(logits, mask):
    log_p = jax.nn.log_softmax(nets.masked_logits(logits, mask), axis=-1)
    return -jnp.sum(jnp.where(nets.effective_mask(mask), jnp.exp(log_p) * log_p, 0.0), axis=-1)


PLAIN = {"categorical_sample": plain_categorical_sample, "categorical_log_prob": plain_categorical_log_prob,
         "categorical_entropy": plain_categorical_entropy}


def categorical_ours(key, logits, mask):
    action = plain_categorical_sample(key, logits, mask)
    return action, plain_categorical_log_prob(logits, mask, action), plain_categorical_entropy(logits, mask)


def categorical_distrax(key, logits, mask):
    action = nets.categorical_sample(key, logits, mask)
    return action, nets.categorical_log_prob(logits, mask, action), nets.categorical_entropy(logits, mask)


def gaussian_ours(key, mean, log_std):
    action = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
    z = (action - mean) * jnp.exp(-log_std)
    log_prob = jnp.sum(-0.5 * z**2 - log_std - 0.5 * jnp.log(2 * jnp.pi), axis=-1)
    entropy = jnp.broadcast_to(jnp.sum(log_std + 0.5 * (1.0 + jnp.log(2 * jnp.pi))), mean.shape[:-1])
    return action, log_prob, entropy


def gaussian_distrax(key, mean, log_std):
    action = nets.gaussian_sample(key, mean, log_std)
    return action, nets.gaussian_log_prob(mean, log_std, action), nets.gaussian_entropy(mean, log_std)


def training_chunks(rounds: int, chunk: int = 20) -> None:
    """CartPole 4 x 128 training chunks compiled with the plain and the distrax categorical in one process,
    timed alternately (each run on a copy of the same state)."""
    from hephaestus.config.train_config import TrainConfig, resolve
    from hephaestus.envs.registry import make_training_env
    from hephaestus.core.ppo import make_train

    piped = {name: getattr(nets, name) for name in PLAIN}
    compiled = {}
    for label, fns in (("plain", PLAIN), ("distrax", piped)):
        for name, fn in fns.items():  # looked up when the chunk is traced
            setattr(nets, name, fn)
        config, _ = resolve(TrainConfig.from_flat(env="gymnax:CartPole-v1", num_envs=4, num_steps=128,
                                                  log_interval=chunk, total_timesteps=10**8))
        trainer = make_train(config, make_training_env(config.env))
        compiled[label] = (trainer.compile_chunk(trainer.runner_state, chunk), trainer.runner_state)
    for name, fn in piped.items():
        setattr(nets, name, fn)
    seconds = {label: [] for label in compiled}
    for _ in range(rounds):
        for label, (fn, state) in compiled.items():
            state = jax.tree.map(lambda x: x.copy() if hasattr(x, "copy") else x, state)  # the chunk donates it
            t0 = time.perf_counter()
            jax.block_until_ready(fn(state, jnp.int32(chunk)))
            seconds[label].append(time.perf_counter() - t0)
    steps = chunk * 4 * 128
    median = {label: statistics.median(s) for label, s in seconds.items()}
    for label in median:
        print(f"CartPole 4 x 128 training, {label}: {steps / median[label]:,.0f} env steps/s "
              f"(median of {rounds} alternating chunks of {chunk} updates)")
    print(f"distrax / plain throughput = {median['plain'] / median['distrax']:.2f}")


def time_pair(fns, args, repeats, rounds):
    """Median seconds per call of each jitted fn, timed in alternating rounds of `repeats` calls."""
    jitted = [jax.jit(fn) for fn in fns]
    outs = [jax.block_until_ready(f(*args)) for f in jitted]  # compile
    times = [[] for _ in fns]
    for _ in range(rounds):
        for f, t in zip(jitted, times):
            start = time.perf_counter()
            for _ in range(repeats):
                out = f(*args)
            jax.block_until_ready(out)
            t.append((time.perf_counter() - start) / repeats)
    return [statistics.median(t) for t in times], outs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--actions", type=int, default=30)
    p.add_argument("--action-dim", type=int, default=6)
    p.add_argument("--repeats", type=int, default=100)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--training", action="store_true", help="time CartPole 4 x 128 training chunks both ways")
    args = p.parse_args()
    if args.training:
        training_chunks(max(args.rounds, 8))
        return 0
    k_logits, k_mask, k_mean, k_sample = jax.random.split(jax.random.key(0), 4)
    logits = jax.random.normal(k_logits, (args.batch, args.actions))
    mask = jax.random.bernoulli(k_mask, 0.6, (args.batch, args.actions))
    mean = jax.random.normal(k_mean, (args.batch, args.action_dim))
    log_std = jnp.full((args.action_dim,), -0.5)
    print(f"backend {jax.default_backend()}; batch {args.batch}; median of {args.rounds} alternating rounds "
          f"of {args.repeats} calls")
    cases = [
        (f"masked categorical [{args.batch}, {args.actions}]", (categorical_ours, categorical_distrax),
         (k_sample, logits, mask)),
        (f"diagonal Gaussian [{args.batch}, {args.action_dim}]", (gaussian_ours, gaussian_distrax),
         (k_sample, mean, log_std)),
    ]
    for name, fns, fn_args in cases:
        (ours, theirs), (out_ours, out_theirs) = time_pair(fns, fn_args, args.repeats, args.rounds)
        same = all(bool(jnp.allclose(a, b, atol=1e-4)) for a, b in zip(out_ours, out_theirs))
        print(f"{name}: plain jax {ours * 1e6:.1f} us, distrax {theirs * 1e6:.1f} us per sample+log_prob+entropy; "
              f"distrax / plain = {theirs / ours:.2f}; same results: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
