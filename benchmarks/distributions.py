"""Our policy distributions (hephaestus.core.networks) against distrax's, jitted, side by side in one process.

    python benchmarks/distributions.py                   # [4096, 30] masked categorical, [4096, 6] Gaussian
    python benchmarks/distributions.py --batch 2048 --actions 28 --repeats 200

For each distribution, one jitted function does sample + log_prob + entropy on a batch; the two implementations
are timed in alternating rounds (median over rounds), their results compared, and the ratio distrax / ours
printed (> 1: distrax is slower). Needs distrax, which the pipeline itself does not use (specs/pipeline.md,
"Policies"): `pip install distrax`.
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


def categorical_ours(key, logits, mask):
    action = nets.categorical_sample(key, logits, mask)
    return action, nets.categorical_log_prob(logits, mask, action), nets.categorical_entropy(logits, mask)


def categorical_distrax(key, logits, mask):
    import distrax

    dist = distrax.Categorical(logits=nets.masked_logits(logits, mask))
    action = dist.sample(seed=key)
    return action, dist.log_prob(action), dist.entropy()


def gaussian_ours(key, mean, log_std):
    action = nets.gaussian_sample(key, mean, log_std)
    return action, nets.gaussian_log_prob(mean, log_std, action), nets.gaussian_entropy(mean, log_std)


def gaussian_distrax(key, mean, log_std):
    import distrax

    dist = distrax.MultivariateNormalDiag(mean, jnp.broadcast_to(jnp.exp(log_std), mean.shape))
    action = dist.sample(seed=key)
    return action, dist.log_prob(action), dist.entropy()


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
    args = p.parse_args()
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
        print(f"{name}: ours {ours * 1e6:.1f} us, distrax {theirs * 1e6:.1f} us per sample+log_prob+entropy; "
              f"distrax / ours = {theirs / ours:.2f}; same results: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
